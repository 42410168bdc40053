//! The normalized form of a JSON body that "the same request" compares (SPEC §5, §19): object
//! keys sorted, no insignificant whitespace, strings written one way (`"\u0041"` is `"A"`), and
//! numbers exact — a number is never read into a `f64`, so `18446744073709551617` and
//! `18446744073709551616`, or `0.1000000000000000000001` and `0.1`, stay different. An object
//! with the same key twice is refused: no reader could tell which value was meant.
//!
//! Where `serde_json::Value` read a body exactly (every string, every integer of 64 bits, every
//! decimal a `f64` holds exactly as written), the form is byte for byte what `Value::to_string`
//! wrote, so the fingerprint of a claim taken before this form existed still matches. Any other
//! number is written as its exact decimal value, `[-]digits[e±exp]` with no trailing zeros in
//! the digits: every form denotes its number exactly, so two different numbers never share one.

use std::fmt;

/// serde_json's nesting limit: a deeper body is refused, not walked.
const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Not JSON: what was expected.
    Syntax(&'static str),
    /// An object names this key twice.
    DuplicateKey(String),
    TooDeep,
    /// An exponent beyond any value a reader could hold.
    NumberOutOfRange,
}

/// Why a body has no normalized form, and where (1-based line and column, as serde says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problem: Problem,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Syntax(what) => write!(f, "{what}")?,
            Problem::DuplicateKey(key) => {
                write!(f, "duplicate key {}", serde_json::Value::from(key.as_str()))?
            }
            Problem::TooDeep => write!(f, "nested more than {MAX_DEPTH} levels deep")?,
            Problem::NumberOutOfRange => write!(f, "number out of range")?,
        }
        write!(f, " at line {} column {}", self.line, self.column)
    }
}

/// The normalized form of the JSON text `text`, or why it has none.
pub fn canonical(text: &[u8]) -> Result<String, Refusal> {
    read(text, true)
}

/// Why `text` has no normalized form, if it has none (what [`canonical`] refuses, without writing
/// the form).
pub fn check(text: &[u8]) -> Result<(), Refusal> {
    read(text, false).map(drop)
}

fn read(text: &[u8], write: bool) -> Result<String, Refusal> {
    let mut reader = Reader { text, at: 0, depth: 0, write };
    let mut out = String::with_capacity(if write { text.len() } else { 0 });
    reader.skip_whitespace();
    reader.value(&mut out)?;
    reader.skip_whitespace();
    if reader.at < text.len() {
        return Err(reader.refuse(Problem::Syntax("trailing characters")));
    }
    Ok(out)
}

struct Reader<'t> {
    text: &'t [u8],
    at: usize,
    depth: usize,
    /// Whether the form is written, or only the text checked.
    write: bool,
}

impl Reader<'_> {
    fn refuse(&self, problem: Problem) -> Refusal {
        self.refuse_at(problem, self.at)
    }

    fn refuse_at(&self, problem: Problem, at: usize) -> Refusal {
        let before = &self.text[..at.min(self.text.len())];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        Refusal { problem, line, column: at - line_start + 1 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), Refusal> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.refuse(Problem::Syntax(what)))
        }
    }

    fn value(&mut self, out: &mut String) -> Result<(), Refusal> {
        match self.peek() {
            Some(b'{') => self.nested(|r| r.object(out)),
            Some(b'[') => self.nested(|r| r.array(out)),
            Some(b'"') => {
                let s = self.string()?;
                if self.write {
                    push_string(out, &s);
                }
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number(out),
            Some(b't') => self.literal("true", out),
            Some(b'f') => self.literal("false", out),
            Some(b'n') => self.literal("null", out),
            Some(_) => Err(self.refuse(Problem::Syntax("expected value"))),
            None => Err(self.refuse(Problem::Syntax("EOF while parsing a value"))),
        }
    }

    fn nested(&mut self, read: impl FnOnce(&mut Self) -> Result<(), Refusal>) -> Result<(), Refusal> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.refuse(Problem::TooDeep));
        }
        read(self)?;
        self.depth -= 1;
        Ok(())
    }

    fn literal(&mut self, word: &'static str, out: &mut String) -> Result<(), Refusal> {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            out.push_str(word);
            Ok(())
        } else {
            Err(self.refuse(Problem::Syntax("expected value")))
        }
    }

    fn object(&mut self, out: &mut String) -> Result<(), Refusal> {
        self.at += 1;
        let mut members: Vec<(String, String, usize)> = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            out.push_str("{}");
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            let key_at = self.at;
            if self.peek() != Some(b'"') {
                return Err(self.refuse(Problem::Syntax("key must be a string")));
            }
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':', "expected `:`")?;
            self.skip_whitespace();
            let mut value = String::new();
            self.value(&mut value)?;
            members.push((key, value, key_at));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                Some(_) => return Err(self.refuse(Problem::Syntax("expected `,` or `}`"))),
                None => return Err(self.refuse(Problem::Syntax("EOF while parsing an object"))),
            }
        }
        // Byte order of UTF-8 is code point order: the order of `Value`'s `BTreeMap`. The sort is
        // stable, so of two equal keys the later one (the one to report) comes second.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            let (key, _, at) = &pair[1];
            return Err(self.refuse_at(Problem::DuplicateKey(key.clone()), *at));
        }
        if !self.write {
            return Ok(());
        }
        out.push('{');
        for (i, (key, value, _)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_string(out, key);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Ok(())
    }

    fn array(&mut self, out: &mut String) -> Result<(), Refusal> {
        self.at += 1;
        out.push('[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            out.push(']');
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            self.value(out)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    out.push(',');
                }
                Some(b']') => {
                    self.at += 1;
                    out.push(']');
                    return Ok(());
                }
                Some(_) => return Err(self.refuse(Problem::Syntax("expected `,` or `]`"))),
                None => return Err(self.refuse(Problem::Syntax("EOF while parsing a list"))),
            }
        }
    }

    /// A string token, decoded by serde_json itself (escapes, surrogate pairs, control characters
    /// and UTF-8 checked exactly as every typed input reads them) unless it is plain: no escape,
    /// no control character, valid UTF-8 — then it is what it says.
    fn string(&mut self) -> Result<String, Refusal> {
        let start = self.at;
        let mut plain = true;
        self.at += 1;
        loop {
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\') => {
                    plain = false;
                    self.at += 2;
                }
                Some(b) => {
                    plain &= b >= 0x20;
                    self.at += 1;
                }
                None => return Err(self.refuse(Problem::Syntax("EOF while parsing a string"))),
            }
        }
        self.at += 1;
        let token = &self.text[start..self.at];
        if plain {
            if let Ok(text) = std::str::from_utf8(&token[1..token.len() - 1]) {
                return Ok(text.to_owned());
            }
        }
        serde_json::from_slice(token).map_err(|_| self.refuse_at(Problem::Syntax("invalid string"), start))
    }

    fn number(&mut self, out: &mut String) -> Result<(), Refusal> {
        let start = self.at;
        let digits = |r: &mut Self| {
            let from = r.at;
            while matches!(r.peek(), Some(b'0'..=b'9')) {
                r.at += 1;
            }
            r.at - from
        };
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.refuse(Problem::Syntax("invalid number"))),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.refuse(Problem::Syntax("invalid number")));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.refuse(Problem::Syntax("invalid number")));
            }
        }
        let literal = std::str::from_utf8(&self.text[start..self.at]).expect("ASCII");
        let exact = Decimal::of(literal).ok_or_else(|| self.refuse_at(Problem::NumberOutOfRange, start))?;
        if !self.write {
            return Ok(());
        }
        match what_value_wrote(literal) {
            Some(written) if Decimal::of(&written).as_ref() == Some(&exact) => out.push_str(&written),
            _ => exact.write(out),
        }
        Ok(())
    }
}

/// What `Value::to_string` wrote for a number before numbers were kept as written
/// (`arbitrary_precision`): an integer literal as its `u64` or `i64` when it fits, anything else
/// (and `-0`) as the nearest `f64`. The caller keeps it only where it says the same number.
fn what_value_wrote(literal: &str) -> Option<String> {
    if !literal.contains(['.', 'e', 'E']) && literal != "-0" {
        if let Some(n) = literal.parse::<u64>().ok().map(|n| n.to_string()) {
            return Some(n);
        }
        if let Some(n) = literal.parse::<i64>().ok().map(|n| n.to_string()) {
            return Some(n);
        }
    }
    serde_json::Number::from_f64(literal.parse().ok()?).map(|n| n.to_string())
}

/// A string as `Value::to_string` writes it.
fn push_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a string serialises"));
}

/// A number's exact value: `digits × 10^exponent`, the digits without leading or trailing zeros
/// (none at all for zero, whose sign is dropped).
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

/// Exponents are kept within this bound (far beyond any number a reader holds, far from overflow).
const EXPONENT_BOUND: i64 = 1 << 40;

impl Decimal {
    /// The value of a JSON number literal; `None` when its exponent is out of all range.
    fn of(literal: &str) -> Option<Decimal> {
        let (negative, unsigned) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(i) => (&unsigned[..i], &unsigned[i + 1..]),
            None => (unsigned, "0"),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all: String = whole.chars().chain(fraction.chars()).collect();
        let significant = all.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if trimmed.is_empty() {
            return Some(Decimal { negative: false, digits: String::new(), exponent: 0 });
        }
        let (exp_negative, exp_digits) = match exponent.as_bytes()[0] {
            b'-' => (true, &exponent[1..]),
            b'+' => (false, &exponent[1..]),
            _ => (false, exponent),
        };
        let exp_digits = exp_digits.trim_start_matches('0');
        if exp_digits.len() > 12 {
            return None;
        }
        let written: i64 = if exp_digits.is_empty() { 0 } else { exp_digits.parse().ok()? };
        let written = if exp_negative { -written } else { written };
        let exponent = written - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64;
        if exponent.abs() > EXPONENT_BOUND {
            return None;
        }
        Some(Decimal { negative, digits: trimmed.to_owned(), exponent })
    }

    fn write(&self, out: &mut String) {
        if self.digits.is_empty() {
            out.push('0');
            return;
        }
        if self.negative {
            out.push('-');
        }
        out.push_str(&self.digits);
        if self.exponent != 0 {
            out.push('e');
            out.push_str(&self.exponent.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(text: &str) -> String {
        canonical(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// Wherever `Value` read a body exactly, the form is what `Value::to_string` wrote (so claims
    /// taken before it still match): over generated bodies of strings with escapes, integers of
    /// 64 bits and decimals.
    #[test]
    fn the_form_is_what_value_wrote_wherever_value_read_the_body_exactly() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        // Each atom as sent and as `Value` wrote it before numbers were kept as written (pinned
        // from serde_json 1.0.154 without `arbitrary_precision`).
        let atoms = [
            ("0", "0"),
            ("-0", "-0.0"),
            ("1", "1"),
            ("-1", "-1"),
            ("1.0", "1.0"),
            ("1.5", "1.5"),
            ("0.1", "0.1"),
            ("-2.5e-3", "-0.0025"),
            ("1e21", "1e+21"),
            ("1E+2", "100.0"),
            ("123456789.25", "123456789.25"),
            ("1e-7", "1e-7"),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("9007199254740992.0", "9007199254740992.0"),
            ("3.14159", "3.14159"),
            ("true", "true"),
            ("false", "false"),
            ("null", "null"),
            (r#""a""#, r#""a""#),
            (r#""\u0041\n\t\"\\\/""#, r#""\u0041\n\t\"\\\/""#),
            (r#""é😀\ud83d\ude00""#, r#""é😀\ud83d\ude00""#),
            (r#""\u001f\u007f""#, r#""\u001f\u007f""#),
            ("[]", "[]"),
            ("{}", "{}"),
        ];
        let keys =
            [r#""a""#, r#""b""#, r#""\u00e9""#, r#""é2""#, r#""""#, r#""Z""#, r#""😀""#, r#""\uFFFF""#];
        for _ in 0..3_000 {
            // The body as sent, and as `Value` wrote it back then (numbers in their pinned forms).
            let (mut text, mut before) = (String::new(), String::new());
            let mut push = |(sent, written): (&str, &str)| {
                text.push_str(sent);
                before.push_str(if written.is_empty() { sent } else { written });
            };
            let mut used = std::collections::BTreeSet::new();
            push(("{ ", ""));
            for i in 0..next(5) {
                let key = keys[next(keys.len() as u64) as usize];
                let decoded: String = serde_json::from_str(key).unwrap();
                if !used.insert(decoded) {
                    continue;
                }
                if i > 0 {
                    push((" ,\n", ""));
                }
                push((key, ""));
                push((" : ", ""));
                match next(3) {
                    0 => push(atoms[next(atoms.len() as u64) as usize]),
                    1 => {
                        push(("[ ", ""));
                        for j in 0..next(4) {
                            if j > 0 {
                                push((" , ", ""));
                            }
                            push(atoms[next(atoms.len() as u64) as usize]);
                        }
                        push((" ]", ""));
                    }
                    _ => {
                        push((r#"{"x":"#, ""));
                        push(atoms[next(atoms.len() as u64) as usize]);
                        push((" }", ""));
                    }
                }
            }
            push((" }", ""));
            let value: serde_json::Value = serde_json::from_str(&before).unwrap();
            assert_eq!(form(&text), value.to_string(), "{text}");
        }
    }

    #[test]
    fn key_order_whitespace_and_escapes_do_not_matter() {
        assert_eq!(
            form(r#"{"b":1,"a":{"y":"\u0041","x":[1,2]}}"#),
            form("{ \"a\" : {\"x\":[1, 2], \"y\":\"A\"},\n \"b\":1 }")
        );
        assert_eq!(form(r#""\u00e9\/""#), form(r#""é/""#));
        assert_eq!(form(r#"{"\u0061":true}"#), r#"{"a":true}"#);
    }

    #[test]
    fn numbers_compare_exactly_as_written() {
        let different = [
            ("18446744073709551616", "18446744073709551617"),
            ("-9223372036854775809", "-9223372036854775810"),
            ("0.1000000000000000000001", "0.1"),
            ("9007199254740993", "9007199254740992"),
            ("9007199254740993.0", "9007199254740992.0"),
            ("1e400", "1e401"),
            ("123456789012345678901234567890", "123456789012345678901234567891"),
        ];
        for (a, b) in different {
            assert_ne!(form(a), form(b), "{a} vs {b}");
            assert_ne!(form(&format!("{{\"n\":{a}}}")), form(&format!("{{\"n\":{b}}}")), "{a} vs {b}");
        }
        // A number is its value: the same value written another way may be the same.
        assert_eq!(form("1.0"), form("10e-1"));
        assert_eq!(form("18446744073709551616"), form("1.8446744073709551616e19"));
        assert_eq!(form("18446744073709551617"), "18446744073709551617");
        assert_eq!(form("0.1000000000000000000001"), "1000000000000000000001e-22");
        assert_eq!(form("-12.3400e-1000"), "-1234e-1002");
        assert_eq!(form("0e99999999999999999999"), "0.0");
    }

    #[test]
    fn a_key_twice_in_an_object_is_refused_where_it_is() {
        let e = canonical(b"{\"a\":1,\n  \"b\":{\"c\":1,\"\\u0063\":2}}").unwrap_err();
        assert_eq!(e.problem, Problem::DuplicateKey("c".into()));
        assert_eq!((e.line, e.column), (2, 14));
        assert_eq!(e.to_string(), "duplicate key \"c\" at line 2 column 14");
        assert!(canonical(br#"[{"a":1},{"a":1}]"#).is_ok());
        assert!(matches!(canonical(br#"{"a":1,"a":1}"#).unwrap_err().problem, Problem::DuplicateKey(_)));
    }

    #[test]
    fn check_refuses_what_canonical_refuses() {
        for text in
            ["{\"a\":1,\"a\":2}", "[1,]", "1e99999999999999999", "{\"a\":[{\"b\":1,\"b\":1}]}", "\"\\ud800\""]
        {
            assert_eq!(check(text.as_bytes()), canonical(text.as_bytes()).map(drop), "{text}");
        }
        assert!(check(br#"{"a":[1,2.5e3,{"b":"\u0041"}]}"#).is_ok());
    }

    #[test]
    fn whatever_serde_refuses_is_refused() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"a\nb\"",
            "{a:1}",
            "nul",
            "[1] 2",
            "NaN",
            "\"abc",
            "{\"a\" 1}",
            "1e99999999999999999",
        ] {
            assert!(canonical(bad.as_bytes()).is_err(), "{bad:?}");
            if !bad.starts_with("1e9") {
                assert!(serde_json::from_str::<serde_json::Value>(bad).is_err(), "{bad:?}");
            }
        }
        assert!(canonical(b"\"\xff\"").is_err());
        let deep = "[".repeat(129) + &"]".repeat(129);
        assert_eq!(canonical(deep.as_bytes()).unwrap_err().problem, Problem::TooDeep);
        let fine = "[".repeat(128) + &"]".repeat(128);
        assert!(canonical(fine.as_bytes()).is_ok());
    }
}
