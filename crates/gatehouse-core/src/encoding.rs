//! Byte encodings the gateway shows: lowercase hex, base64 (standard, padded: Standard Webhooks)
//! and unpadded base64url (cursors), through the well-kept `hex` and `base64` crates (measured
//! 2–6× faster than the loops we had: docs/performance.md, "Kept libraries"), FNV-1a, and the
//! prefixed random object ids (`prj_…`, `key_…`).

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

const HEX: &[u8; 16] = b"0123456789abcdef";
const BASE32: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// As the gateway always decoded: the last character's unused bits are not checked.
const fn engine(alphabet: &alphabet::Alphabet, pad: bool) -> GeneralPurpose {
    let padding = if pad { DecodePaddingMode::RequireCanonical } else { DecodePaddingMode::RequireNone };
    GeneralPurpose::new(
        alphabet,
        GeneralPurposeConfig::new()
            .with_encode_padding(pad)
            .with_decode_padding_mode(padding)
            .with_decode_allow_trailing_bits(true),
    )
}
const BASE64: GeneralPurpose = engine(&alphabet::STANDARD, true);
const BASE64URL: GeneralPurpose = engine(&alphabet::URL_SAFE, false);

/// `s` as one path segment: unreserved characters (RFC 3986) as they are, every other byte of its
/// UTF-8 as `%XX`, so no `/` of the value can split it.
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize].to_ascii_uppercase() as char);
            out.push(HEX[(b & 15) as usize].to_ascii_uppercase() as char);
        }
    }
    out
}

/// FNV-1a (64 bits): a fast, stable spread of ids over shards (not a cryptographic hash). Ours:
/// one line, as fast as the `fnv` crate.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// Unpadded base64url (RFC 4648 §5), for cursors.
pub fn base64url(bytes: &[u8]) -> String {
    BASE64URL.encode(bytes)
}

pub fn from_base64url(s: &str) -> Option<Vec<u8>> {
    BASE64URL.decode(s).ok()
}

/// Standard padded base64 (RFC 4648 §4), as Standard Webhooks uses it.
pub fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

pub fn from_base64(s: &str) -> Option<Vec<u8>> {
    BASE64.decode(s).ok()
}

/// An object id: `kind_` followed by 26 Crockford-base32 characters of 16 random bytes (128 bits).
pub fn object_id(kind: &str, random: &[u8; 16]) -> String {
    let mut n = u128::from_be_bytes(*random);
    let mut tail = [0u8; 26];
    for slot in tail.iter_mut().rev() {
        *slot = BASE32[(n & 31) as usize];
        n >>= 5;
    }
    let mut id = String::with_capacity(kind.len() + 27);
    id.push_str(kind);
    id.push('_');
    id.push_str(std::str::from_utf8(&tail).expect("ascii"));
    id
}

/// A UUID version 4 (RFC 9562) in lowercase hyphenated form, from 16 random bytes.
pub fn uuid_v4(random: [u8; 16]) -> String {
    uuid::Builder::from_random_bytes(random).into_uuid().hyphenated().to_string()
}

/// A UUID version 7 (RFC 9562) in lowercase hyphenated form: `unix_ms` in its first 48 bits, so
/// ids sort by time and name their hour; the rest from `random` (version and variant bits set).
pub fn uuid_v7(unix_ms: i64, random: [u8; 10]) -> String {
    let ms = (unix_ms.max(0) as u64) & 0xFFFF_FFFF_FFFF;
    let mut rand = [0u8; 10];
    rand.copy_from_slice(&random);
    let counter_random = u16::from_be_bytes([rand[0], rand[1]]) & 0x0FFF;
    let tail = u64::from_be_bytes(rand[2..10].try_into().expect("8 bytes")) & 0x3FFF_FFFF_FFFF_FFFF;
    uuid::Uuid::from_fields(
        (ms >> 16) as u32,
        (ms & 0xFFFF) as u16,
        0x7000 | counter_random,
        &(tail | 0x8000_0000_0000_0000).to_be_bytes(),
    )
    .hyphenated()
    .to_string()
}

/// The Unix milliseconds a UUIDv7 carries; `None` when `id` is not a UUID of version 7.
pub fn uuid_v7_ms(id: &str) -> Option<i64> {
    let uuid = uuid::Uuid::try_parse(id).ok()?;
    if uuid.get_version_num() != 7 {
        return None;
    }
    let b = uuid.as_bytes();
    Some(b[..6].iter().fold(0i64, |ms, &byte| ms << 8 | i64::from(byte)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v7_carries_its_millisecond_and_sorts_by_it() {
        let ms = 1_796_000_000_123;
        let id = uuid_v7(ms, [0xff; 10]);
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "7");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(uuid_v7_ms(&id), Some(ms));
        assert!(uuid_v7(ms, [0xff; 10]) < uuid_v7(ms + 1, [0; 10]));
        assert_eq!(uuid_v7_ms(&uuid_v4([7; 16])), None);
        assert_eq!(uuid_v7_ms("not-a-uuid"), None);
    }

    #[test]
    fn hex_encodes_lowercase() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
    }

    #[test]
    fn base64url_round_trips_every_length() {
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 53 + 7) as u8).collect();
            let enc = base64url(&bytes);
            assert!(!enc.contains('='));
            assert_eq!(from_base64url(&enc).as_deref(), Some(&bytes[..]), "{enc}");
        }
        assert_eq!(base64url(b"hello?"), "aGVsbG8_");
        assert_eq!(from_base64url("a"), None);
        assert_eq!(from_base64url("a+b="), None);
    }

    #[test]
    fn standard_base64_pads_and_round_trips() {
        assert_eq!(base64(b"hello?>"), "aGVsbG8/Pg==");
        assert_eq!(base64(b""), "");
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 91 + 3) as u8).collect();
            assert_eq!(from_base64(&base64(&bytes)).as_deref(), Some(&bytes[..]));
        }
        assert_eq!(from_base64("aGVsbG8/Pg="), None);
        assert_eq!(from_base64("a==="), None);
        // As before the crate: the last character's unused bits are not checked.
        assert_eq!(from_base64("QR==").as_deref(), Some(&b"A"[..]));
        assert_eq!(from_base64url("QR").as_deref(), Some(&b"A"[..]));
    }

    #[test]
    fn object_ids_are_prefixed_fixed_length_and_distinct() {
        let a = object_id("key", &[0; 16]);
        let b = object_id("key", &[1; 16]);
        assert_eq!(a, "key_00000000000000000000000000");
        assert_eq!(b.len(), 30);
        assert_ne!(a, b);
    }

    #[test]
    fn uuid_v4_has_version_and_variant_bits() {
        let id = uuid_v4([0xff; 16]);
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn a_path_segment_never_holds_a_slash_or_a_bare_percent() {
        assert_eq!(path_segment("sess-1_a.b~"), "sess-1_a.b~");
        assert_eq!(path_segment("a/b%c d"), "a%2Fb%25c%20d");
        assert_eq!(path_segment(".."), "..");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
}
