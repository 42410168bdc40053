//! Wall-clock arithmetic on Unix milliseconds: RFC 3339 rendering (SPEC §3: responses use RFC 3339
//! UTC) without a calendar crate.

/// `2026-11-29T08:48:32.123Z` for a Unix time in milliseconds. Digits written directly: `format!`
/// took three times as long, on every answer's timestamps (docs/performance.md, "Kept libraries").
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = String::with_capacity(24);
    if !(0..=9999).contains(&y) {
        // Outside four digits (never a time the gateway keeps): as `format!` writes it.
        out.push_str(&format!("{y:04}"));
    } else {
        digits_into(&mut out, y as u32, 4);
    }
    for (sep, value, width) in [
        ('-', m, 2),
        ('-', d, 2),
        ('T', (sod / 3600) as u32, 2),
        (':', (sod % 3600 / 60) as u32, 2),
        (':', (sod % 60) as u32, 2),
        ('.', ms.rem_euclid(1000) as u32, 3),
    ] {
        out.push(sep);
        digits_into(&mut out, value, width);
    }
    out.push('Z');
    out
}

/// `value`'s last `width` decimal digits, zero-padded.
fn digits_into(out: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        out.push(char::from(b'0' + (value / 10u32.pow(place) % 10) as u8));
    }
}

/// Year, month, day of a count of days since 1970-01-01 (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a civil date (inverse of [`civil_from_days`]).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Why a date or time input was refused: not in the expected form (a 400), or in the form but
/// naming no real instant (`2026-02-31`, `2026-13-01`, `24:00:00`, a `+25:00` offset; a 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeError {
    Malformed,
    Nonexistent,
}

/// Whether `y` is a Gregorian leap year.
pub fn is_leap_year(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// The number of days of month `m` (1–12) of year `y`.
pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap_year(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The digits of `s[r]` as a number, or `Malformed` when they are not all ASCII digits.
fn digits(s: &str, r: std::ops::Range<usize>) -> Result<i64, TimeError> {
    let t = s.get(r).ok_or(TimeError::Malformed)?;
    if t.is_empty() || !t.bytes().all(|c| c.is_ascii_digit()) {
        return Err(TimeError::Malformed);
    }
    t.parse().map_err(|_| TimeError::Malformed)
}

/// Days since 1970-01-01 of the `YYYY-MM-DD` that starts `s` (which must be at least 10 bytes).
fn full_date(s: &str) -> Result<i64, TimeError> {
    let b = s.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(TimeError::Malformed);
    }
    let (y, m, d) = (digits(s, 0..4)?, digits(s, 5..7)?, digits(s, 8..10)?);
    if !(1..=12).contains(&m) || d < 1 || d > i64::from(days_in_month(y, m as u32)) {
        return Err(TimeError::Nonexistent);
    }
    Ok(days_from_civil(y, m as u32, d as u32))
}

/// Unix ms of an RFC 3339 timestamp (`2026-11-29T08:48:32Z`, fractional seconds and a `±hh:mm`
/// offset allowed; a space or `t` for `T`, `z` for `Z`). The date must exist (month lengths and
/// leap years), hours are 00–23, minutes and seconds 00–59 (no leap second: Unix time has none),
/// offsets at most ±23:59.
pub fn parse_rfc3339_checked(s: &str) -> Result<i64, TimeError> {
    let b = s.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return Err(TimeError::Malformed);
    }
    // The form is checked whole before the values, so a malformed input is never called nonexistent.
    let (h, mi, sec) = (digits(s, 11..13)?, digits(s, 14..16)?, digits(s, 17..19)?);
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err(TimeError::Malformed);
        }
        let frac = &s[start..i.min(start + 3)];
        millis = digits(frac, 0..frac.len())? * 10_i64.pow(3 - frac.len() as u32);
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && matches!(tz.as_bytes()[0], b'+' | b'-') && tz.as_bytes()[3] == b':' => {
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            let (oh, om) = (digits(tz, 1..3)?, digits(tz, 4..6)?);
            if oh > 23 || om > 59 {
                full_date(s)?;
                return Err(TimeError::Nonexistent);
            }
            sign * (oh * 60 + om)
        }
        _ => return Err(TimeError::Malformed),
    };
    let days = full_date(s)?;
    if h > 23 || mi > 59 || sec > 59 {
        return Err(TimeError::Nonexistent);
    }
    Ok(((days * 86_400 + h * 3600 + mi * 60 + sec) - offset_min * 60) * 1000 + millis)
}

/// [`parse_rfc3339_checked`] without the reason.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    parse_rfc3339_checked(s).ok()
}

/// Unix ms of 00:00 UTC of a `YYYY-MM-DD` date that exists.
pub fn parse_date(date: &str) -> Result<i64, TimeError> {
    if date.len() != 10 {
        return Err(TimeError::Malformed);
    }
    Ok(full_date(date)? * 86_400_000)
}

/// [`parse_date`] without the reason.
pub fn date_start(date: &str) -> Option<i64> {
    parse_date(date).ok()
}

/// `YYYY-MM-DD` of a Unix time in ms (UTC).
pub fn utc_date(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339_with_fractions_and_offsets() {
        assert_eq!(parse_rfc3339("2026-11-29T08:48:32.123Z"), Some(1_795_942_112_123));
        assert_eq!(parse_rfc3339("2026-11-29T08:48:32Z"), Some(1_795_942_112_000));
        assert_eq!(parse_rfc3339("2026-11-29T09:48:32.1+01:00"), Some(1_795_942_112_100));
        assert_eq!(parse_rfc3339("2026-11-29 08:48:32.123456z"), Some(1_795_942_112_123));
        for bad in [
            "",
            "2026-11-29",
            "2026-13-29T08:48:32Z",
            "2026-11-29T08:48:32",
            "2026-11-29T08:48:32.Z",
            "x026-11-29T08:48:32Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for ms in [0, 951_782_400_000, 1_795_942_112_123] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(utc_date(1_795_942_112_123), "2026-11-29");
        assert_eq!(date_start("2026-11-29").map(utc_date).as_deref(), Some("2026-11-29"));
        assert_eq!(date_start("2026-11-29").unwrap() % 86_400_000, 0);
        assert_eq!(date_start("2026-13-01"), None);
        assert_eq!(date_start("bad"), None);
    }

    #[test]
    fn dates_must_exist() {
        use TimeError::{Malformed, Nonexistent};
        assert_eq!(parse_date("2028-02-29"), Ok(date_start("2028-02-28").unwrap() + 86_400_000));
        assert!(parse_date("2000-02-29").is_ok(), "divisible by 400: leap");
        assert!(parse_date("2026-12-31").is_ok() && parse_date("2026-04-30").is_ok());
        for nonexistent in
            ["2026-02-31", "2026-13-01", "2027-02-29", "1900-02-29", "2026-04-31", "2026-00-10", "2026-01-00"]
        {
            assert_eq!(parse_date(nonexistent), Err(Nonexistent), "{nonexistent}");
            let instant = format!("{nonexistent}T00:00:00Z");
            assert_eq!(parse_rfc3339_checked(&instant), Err(Nonexistent), "{instant}");
        }
        for malformed in ["", "2026-2-01", "2026/02/01", "2026-02-1x", "+026-02-01", "2026-02-01T"] {
            assert_eq!(parse_date(malformed), Err(Malformed), "{malformed}");
        }
        assert_eq!(parse_rfc3339_checked("2028-02-29T23:59:59.999Z"), Ok(1_835_481_599_999));
        for nonexistent in [
            "2026-11-29T24:00:00Z",
            "2026-11-29T23:60:00Z",
            "2026-11-29T23:59:60Z",
            "2026-11-29T08:00:00+24:00",
            "2026-11-29T08:00:00-01:60",
        ] {
            assert_eq!(parse_rfc3339_checked(nonexistent), Err(Nonexistent), "{nonexistent}");
        }
        for malformed in [
            "2026-02-31",
            "2026-02-31T00:00:00",
            "2026-02-31T0a:00:00Z",
            "2026-11-29T08:00:00+1:00",
            "2026-13",
        ] {
            assert_eq!(parse_rfc3339_checked(malformed), Err(Malformed), "{malformed}");
        }
    }

    #[test]
    fn month_lengths_follow_the_gregorian_calendar() {
        // Against the day arithmetic: the day after the last of each month is the 1st of the next.
        for y in [1900, 1999, 2000, 2024, 2026, 2027, 2028, 2100, 2400] {
            for m in 1..=12 {
                let last = days_from_civil(y, m, days_in_month(y, m));
                let (ny, nm, nd) = civil_from_days(last + 1);
                assert_eq!((nd, nm), (1, m % 12 + 1), "{y}-{m}");
                assert_eq!(ny, if m == 12 { y + 1 } else { y });
            }
        }
    }

    #[test]
    fn renders_rfc3339_utc_with_millis() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // As `format!` wrote it, before and after 1970 and past the year 9999.
        for ms in [
            -1i64,
            -86_400_001,
            -62_167_219_200_000,
            253_402_300_799_999,
            253_402_300_800_000,
            1_795_942_112_123,
        ] {
            let secs = ms.div_euclid(1000);
            let (sod, millis) = (secs.rem_euclid(86_400), ms.rem_euclid(1000));
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let old = format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
                sod / 3600,
                sod % 3600 / 60,
                sod % 60
            );
            assert_eq!(rfc3339(ms), old, "{ms}");
        }
        assert_eq!(rfc3339(1_795_942_112_123), "2026-11-29T08:48:32.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn civil_days_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
