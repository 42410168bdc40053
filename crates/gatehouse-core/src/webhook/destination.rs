//! Where a subscription may point (SPEC §10, §13): `https` only, no credentials, and no target
//! in an IANA special-purpose block, a metadata host or an internal name.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::ApiError;

/// Checks a subscription URL (SPEC §10, §13): `https` only, no credentials, and no target in an
/// IANA special-purpose block, a metadata host or an internal name (see [`target_refusal`]).
/// `allow_private` (local development and tests) lets `http` through and lifts the refusal of
/// loopback and private targets only ([`Block::Local`]), never of the rest; `listed` origins
/// (`PRIVATE_WEBHOOK_ORIGINS`, the test kit's sink) have the same exception, and only they.
pub fn check_url(raw: &str, allow_private: bool, listed: &[String]) -> Result<url::Url, ApiError> {
    target_refusal(raw, allow_private, listed)
        .map_err(|why| ApiError::unprocessable(format!("url {why}")).with_detail("field", "url"))
}

/// The rule of [`check_url`] as a pure verdict: the parsed URL, or why it is refused (completing
/// "url …"). Hostnames are not resolved (a Worker cannot, and Cloudflare's `fetch` does not reach
/// private networks): a name is refused only when it is a known internal or metadata name.
/// IPv4 in any spelling (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `%31…`) reaches this as an
/// address: the `url` crate parses hosts the WHATWG way. A host must be ASCII (an international
/// name in its `xn--` form): the worker carries no Unicode mapping tables, so full-width or other
/// non-ASCII spellings of a host are refused rather than mapped.
pub fn target_refusal(raw: &str, allow_private: bool, listed: &[String]) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|_| {
        if raw.is_ascii() {
            "is not an absolute URL"
        } else {
            "must have an ASCII host (an international name in its xn-- form)"
        }
        .to_owned()
    })?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err("must use https".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain credentials".into());
    }
    let block = match url.host() {
        None => return Err("has no host".into()),
        Some(url::Host::Domain(d)) => name_block(d),
        Some(url::Host::Ipv4(ip)) => v4_block(ip),
        Some(url::Host::Ipv6(ip)) => v6_block(ip),
    };
    let listed = listed.iter().any(|origin| *origin == url.origin().ascii_serialization());
    // The switch is named only where it would let the URL through.
    match (block, url.scheme()) {
        (Some(Special(what)), _) => Err(format!("must not point to {what}")),
        _ if allow_private || listed => Ok(url),
        (Some(Local(what)), _) => {
            Err(format!("must not point to {what} (only with {SWITCH}, for local development)"))
        }
        (None, "http") => Err(format!("must use https (http only with {SWITCH}, for local receivers)")),
        (None, _) => Ok(url),
    }
}

/// The setting that lets webhooks reach loopback and private receivers: a refusal it would lift
/// names it.
const SWITCH: &str = "ALLOW_PRIVATE_WEBHOOK_URLS=true";

/// Why a target is refused, and whether `ALLOW_PRIVATE_WEBHOOK_URLS` lifts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Loopback, RFC 1918 private, IPv6 unique-local, `localhost`: allowed with the switch.
    Local(&'static str),
    /// Every other special-purpose target: never a webhook target.
    Special(&'static str),
}

use Block::{Local, Special};

/// IPv4 special-purpose blocks (IANA registry, plus multicast and metadata), first match wins.
const V4_BLOCKS: &[(Ipv4Addr, u8, Block)] = &[
    (Ipv4Addr::new(127, 0, 0, 0), 8, Local("a loopback address (127.0.0.0/8)")),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Local("a private address (10.0.0.0/8)")),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Local("a private address (172.16.0.0/12)")),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Local("a private address (192.168.0.0/16)")),
    (Ipv4Addr::new(169, 254, 169, 254), 32, Special("a cloud metadata address (169.254.169.254)")),
    (Ipv4Addr::new(0, 0, 0, 0), 8, Special("a \"this network\" address (0.0.0.0/8)")),
    (Ipv4Addr::new(100, 64, 0, 0), 10, Special("a shared (CGNAT) address (100.64.0.0/10)")),
    (Ipv4Addr::new(169, 254, 0, 0), 16, Special("a link-local address (169.254.0.0/16)")),
    (Ipv4Addr::new(192, 0, 0, 0), 24, Special("an IETF protocol assignment (192.0.0.0/24)")),
    (Ipv4Addr::new(192, 0, 2, 0), 24, Special("a documentation address (192.0.2.0/24)")),
    (Ipv4Addr::new(192, 31, 196, 0), 24, Special("an AS112 address (192.31.196.0/24)")),
    (Ipv4Addr::new(192, 52, 193, 0), 24, Special("an AMT address (192.52.193.0/24)")),
    (Ipv4Addr::new(192, 88, 99, 0), 24, Special("a 6to4 relay anycast address (192.88.99.0/24)")),
    (Ipv4Addr::new(192, 175, 48, 0), 24, Special("an AS112 address (192.175.48.0/24)")),
    (Ipv4Addr::new(198, 18, 0, 0), 15, Special("a benchmarking address (198.18.0.0/15)")),
    (Ipv4Addr::new(198, 51, 100, 0), 24, Special("a documentation address (198.51.100.0/24)")),
    (Ipv4Addr::new(203, 0, 113, 0), 24, Special("a documentation address (203.0.113.0/24)")),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Special("a multicast address (224.0.0.0/4)")),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Special("the broadcast address (255.255.255.255)")),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Special("a reserved address (240.0.0.0/4)")),
];

/// IPv6 special-purpose blocks (IANA registry, plus site-local, multicast and metadata), first
/// match wins; anything outside global unicast `2000::/3` is refused after them.
const V6_BLOCKS: &[(Ipv6Addr, u8, Block)] = &[
    (Ipv6Addr::LOCALHOST, 128, Local("a loopback address (::1)")),
    (Ipv6Addr::UNSPECIFIED, 128, Special("the unspecified address (::)")),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96, Special("an IPv4-mapped address (::ffff:0:0/96)")),
    (Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96, Special("an IPv4-translated address (::ffff:0:0:0/96)")),
    (Ipv6Addr::UNSPECIFIED, 96, Special("an IPv4-compatible address (::/96)")),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, Special("a NAT64 address (64:ff9b::/96)")),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, Special("a local NAT64 address (64:ff9b:1::/48)")),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, Special("a discard-only address (100::/64)")),
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64, Special("a dummy-prefix address (100:0:0:1::/64)")),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, Special("a Teredo address (2001::/32)")),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, Special("an IETF protocol assignment (2001::/23)")),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, Special("a documentation address (2001:db8::/32)")),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, Special("a 6to4 address (2002::/16)")),
    (Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0), 48, Special("an AS112 address (2620:4f:8000::/48)")),
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, Special("a documentation address (3fff::/20)")),
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, Special("an SRv6 SID address (5f00::/16)")),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        128,
        Special("a cloud metadata address (fd00:ec2::254)"),
    ),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, Local("a unique-local address (fc00::/7)")),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, Special("a link-local address (fe80::/10)")),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, Special("a site-local address (fec0::/10)")),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Special("a multicast address (ff00::/8)")),
];

/// Hostnames of cloud metadata services (GCP, AWS, Tencent); 169.254.169.254 and friends are
/// refused as addresses.
const METADATA_NAMES: [&str; 6] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
];

/// Name suffixes that never resolve on the public internet (RFC 6761, 6762, 8375, ICANN's
/// `.internal`).
const INTERNAL_SUFFIXES: [&str; 6] = [".internal", ".local", ".home.arpa", ".test", ".invalid", ".localhost"];

fn v4_block(ip: Ipv4Addr) -> Option<Block> {
    let bits = ip.to_bits();
    let mask = |len: u8| u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    V4_BLOCKS.iter().find(|(net, len, _)| bits & mask(*len) == net.to_bits()).map(|b| b.2)
}

fn v6_block(ip: Ipv6Addr) -> Option<Block> {
    let bits = ip.to_bits();
    let mask = |len: u8| u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    let found = V6_BLOCKS.iter().find(|(net, len, _)| bits & mask(*len) == net.to_bits()).map(|b| b.2);
    let global_unicast = ip.segments()[0] & 0xe000 == 0x2000;
    found.or((!global_unicast).then_some(Special("a reserved address (outside 2000::/3)")))
}

/// A hostname (not an IP literal; the `url` crate lowercased it and applied IDNA).
fn name_block(domain: &str) -> Option<Block> {
    let d = domain.trim_end_matches('.');
    let dotted = format!(".{d}");
    if d == "localhost" || d.ends_with(".localhost") {
        Some(Local("a loopback name (localhost)"))
    } else if METADATA_NAMES.contains(&d) {
        Some(Special("a cloud metadata host"))
    } else if INTERNAL_SUFFIXES.iter().any(|s| dotted.ends_with(s)) {
        Some(Special("an internal name (.internal, .local, .home.arpa, .test, .invalid)"))
    } else if !d.contains('.') {
        Some(Special("a single-label (internal) name"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRIVATE_WEBHOOK_ORIGINS` (the test kit's sink): exactly the listed origins pass although
    /// they are loopback and http; the same host on another port, or another scheme, does not;
    /// a special address stays refused even when listed.
    #[test]
    fn listed_origins_and_only_they_pass_as_private_targets() {
        let listed = ["http://127.0.0.1:4000".to_owned(), "http://169.254.169.254".to_owned()];
        assert!(target_refusal("http://127.0.0.1:4000/webhooks?x=1", false, &listed).is_ok());
        for refused in [
            "http://127.0.0.1:4001/webhooks",
            "https://127.0.0.1:4000/",
            "http://localhost:4000/",
            "http://169.254.169.254/latest",
        ] {
            assert!(target_refusal(refused, false, &listed).is_err(), "{refused}");
        }
        let why = check_url("http://127.0.0.1:4001/", false, &listed).unwrap_err();
        assert!(why.message.contains("ALLOW_PRIVATE_WEBHOOK_URLS"), "{}", why.message);
    }

    /// What [`check_url`] must answer for a target, without and with `ALLOW_PRIVATE_WEBHOOK_URLS`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Want {
        /// Accepted either way.
        Public,
        /// Refused, but allowed with the switch (loopback, RFC 1918, ULA, `localhost`, `http`).
        Local,
        /// Refused either way.
        Never,
    }

    use Want::{Local as L, Never as N, Public as P};

    /// Every form of SPEC §10 and §13, with the words the refusal must carry ("" = not checked).
    const TARGETS: &[(&str, Want, &str)] = &[
        // Public targets.
        ("https://example.com/hook", P, ""),
        ("https://hooks.example.com/in?x=1", P, ""),
        ("https://example.com:8443/hook", P, ""),
        ("https://xn--bcher-kva.example/hook", P, ""), // an international name, written in ASCII
        ("https://[2606:4700::1111]/", P, ""),
        ("https://[2001:4860:4860::8888]/", P, ""),
        ("https://[2001:200::1]/", P, ""), // just past 2001::/23
        ("https://1.1.1.1/", P, ""),
        ("https://8.8.8.8:8443/x", P, ""),
        ("https://100.63.255.255/", P, ""), // just below 100.64/10
        ("https://100.128.0.1/", P, ""),    // just above it
        ("https://172.15.255.255/", P, ""),
        ("https://172.32.0.1/", P, ""),
        ("https://192.0.1.1/", P, ""),
        ("https://198.17.255.255/", P, ""),
        ("https://198.20.0.1/", P, ""),
        ("https://223.255.255.255/", P, ""),
        ("https://localhost.example.com/", P, ""),
        ("https://metadata.example.com/", P, ""),
        ("https://internal.example.com/", P, ""),
        // Loopback and private: the switch allows them.
        ("https://127.0.0.1/x", L, "loopback address (127.0.0.0/8)"),
        ("https://127.255.255.254/", L, "loopback"),
        ("https://10.1.2.3/x", L, "private address (10.0.0.0/8)"),
        ("https://172.16.0.1/x", L, "private address (172.16.0.0/12)"),
        ("https://172.31.255.255/", L, "172.16.0.0/12"),
        ("https://192.168.1.1/x", L, "private address (192.168.0.0/16)"),
        ("https://[::1]/", L, "loopback address (::1)"),
        ("https://[0:0:0:0:0:0:0:1]/", L, "loopback address (::1)"),
        ("https://[fd00::1]/", L, "unique-local address (fc00::/7)"),
        ("https://[fc00::1]/", L, "fc00::/7"),
        ("https://localhost/x", L, "loopback name"),
        ("https://LocalHost./x", L, "loopback name"),
        ("https://api.localhost/x", L, "loopback name"),
        ("https://ｌｏｃａｌｈｏｓｔ/", N, "ASCII host"), // full-width: refused, never mapped
        ("http://hooks.example.com/in", L, "must use https"),
        ("http://127.0.0.1:9000/hook", L, "loopback address (127.0.0.0/8)"),
        // http to what the switch never lifts: refused for that, without naming the switch.
        ("http://169.254.169.254/latest/meta-data/", N, "cloud metadata address"),
        ("http://[fe80::1]/", N, "fe80::/10"),
        ("http://u:p@127.0.0.1/", N, "credentials"),
        ("http://metadata.google.internal/", N, "cloud metadata host"),
        // IPv4 spelled otherwise: the url crate parses every spelling to the address.
        ("https://2130706433/", L, "127.0.0.0/8"),
        ("https://0177.0.0.1/", L, "127.0.0.0/8"),
        ("https://0x7f.1/", L, "127.0.0.0/8"),
        ("https://0x7F000001/", L, "127.0.0.0/8"),
        ("https://017700000001/", L, "127.0.0.0/8"),
        ("https://127.1/", L, "127.0.0.0/8"),
        ("https://127.0.1/", L, "127.0.0.0/8"),
        ("https://127.0.0.1./", L, "127.0.0.0/8"),
        ("https://%31%32%37.0.0.1/", L, "127.0.0.0/8"),
        ("https://１２７.０.０.１/", N, "ASCII host"),
        ("https://bücher.example/", N, "ASCII host"),
        ("https://012.0.0.1/", L, "10.0.0.0/8"),
        ("https://0xc0a80001/", L, "192.168.0.0/16"),
        ("https://2852039166/", N, "metadata address (169.254.169.254)"),
        ("https://0xa9.0xfe.0xa9.0xfe/", N, "metadata"),
        ("https://0251.0376.0251.0376/", N, "metadata"),
        ("https://0/", N, "0.0.0.0/8"),
        ("https://0x0/", N, "0.0.0.0/8"),
        ("https://3221225473/", N, "192.0.0.0/24"),
        ("https://3323068417/", N, "198.18.0.0/15"),
        ("https://0xc6.0x12.0.1/", N, "198.18.0.0/15"),
        // IPv4 special-purpose blocks the switch never lifts.
        ("https://0.0.0.0/", N, "\"this network\" address (0.0.0.0/8)"),
        ("https://0.1.2.3/", N, "0.0.0.0/8"),
        ("https://100.64.0.1/", N, "shared (CGNAT) address (100.64.0.0/10)"),
        ("https://100.127.255.255/", N, "100.64.0.0/10"),
        ("https://100.100.100.200/", N, "100.64.0.0/10"), // Alibaba Cloud metadata
        ("https://169.254.169.254/latest/meta-data", N, "cloud metadata address"),
        ("https://169.254.170.2/v2/credentials", N, "link-local address (169.254.0.0/16)"),
        ("https://169.254.0.1/", N, "169.254.0.0/16"),
        ("https://192.0.0.1/", N, "IETF protocol assignment (192.0.0.0/24)"),
        ("https://192.0.0.192/", N, "192.0.0.0/24"), // Oracle Cloud metadata
        ("https://192.0.0.170/", N, "192.0.0.0/24"),
        ("https://192.0.2.1/", N, "documentation address (192.0.2.0/24)"),
        ("https://192.31.196.1/", N, "AS112 address (192.31.196.0/24)"),
        ("https://192.52.193.1/", N, "AMT address (192.52.193.0/24)"),
        ("https://192.88.99.1/", N, "6to4 relay anycast address (192.88.99.0/24)"),
        ("https://192.175.48.1/", N, "AS112 address (192.175.48.0/24)"),
        ("https://198.18.0.1/", N, "benchmarking address (198.18.0.0/15)"),
        ("https://198.19.255.255/", N, "198.18.0.0/15"),
        ("https://198.51.100.7/", N, "documentation address (198.51.100.0/24)"),
        ("https://203.0.113.9/", N, "documentation address (203.0.113.0/24)"),
        ("https://224.0.0.1/", N, "multicast address (224.0.0.0/4)"),
        ("https://239.255.255.250/", N, "224.0.0.0/4"),
        ("https://240.0.0.1/", N, "reserved address (240.0.0.0/4)"),
        ("https://255.255.255.254/", N, "240.0.0.0/4"),
        ("https://255.255.255.255/", N, "broadcast address (255.255.255.255)"),
        // IPv6 special-purpose blocks, IPv4 embedded in IPv6 whatever the IPv4 address.
        ("https://[::]/", N, "unspecified address (::)"),
        ("https://[::127.0.0.1]/", N, "IPv4-compatible address (::/96)"),
        ("https://[::7f00:1]/", N, "::/96"),
        ("https://[::8.8.8.8]/", N, "::/96"),
        ("https://[::ffff:7f00:1]/", N, "IPv4-mapped address (::ffff:0:0/96)"),
        ("https://[::ffff:127.0.0.1]/", N, "::ffff:0:0/96"),
        ("https://[::ffff:8.8.8.8]/", N, "::ffff:0:0/96"),
        ("https://[::ffff:0:7f00:1]/", N, "IPv4-translated address (::ffff:0:0:0/96)"),
        ("https://[::ffff:0:808:808]/", N, "::ffff:0:0:0/96"),
        ("https://[64:ff9b::7f00:1]/", N, "NAT64 address (64:ff9b::/96)"),
        ("https://[64:ff9b::8.8.8.8]/", N, "64:ff9b::/96"),
        ("https://[64:ff9b:1::7f00:1]/", N, "local NAT64 address (64:ff9b:1::/48)"),
        ("https://[100::1]/", N, "discard-only address (100::/64)"),
        ("https://[100:0:0:1::1]/", N, "dummy-prefix address (100:0:0:1::/64)"),
        ("https://[2001::1]/", N, "Teredo address (2001::/32)"),
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", N, "2001::/32"),
        ("https://[2001:1::1]/", N, "IETF protocol assignment (2001::/23)"),
        ("https://[2001:2::1]/", N, "2001::/23"),
        ("https://[2001:1ff::1]/", N, "2001::/23"),
        ("https://[2001:db8::1]/", N, "documentation address (2001:db8::/32)"),
        ("https://[2002:7f00:1::]/", N, "6to4 address (2002::/16)"),
        ("https://[2002:808:808::1]/", N, "2002::/16"),
        ("https://[2620:4f:8000::1]/", N, "AS112 address (2620:4f:8000::/48)"),
        ("https://[3fff::1]/", N, "documentation address (3fff::/20)"),
        ("https://[5f00::1]/", N, "SRv6 SID address (5f00::/16)"),
        ("https://[fd00:ec2::254]/", N, "cloud metadata address (fd00:ec2::254)"),
        ("https://[fe80::1]/", N, "link-local address (fe80::/10)"),
        ("https://[febf::1]/", N, "fe80::/10"),
        ("https://[fec0::1]/", N, "site-local address (fec0::/10)"),
        ("https://[feff::1]/", N, "fec0::/10"),
        ("https://[ff02::1]/", N, "multicast address (ff00::/8)"),
        ("https://[ff05::1:3]/", N, "ff00::/8"),
        ("https://[1::1]/", N, "outside 2000::/3"),
        ("https://[4000::1]/", N, "outside 2000::/3"),
        ("https://[e000::1]/", N, "outside 2000::/3"),
        // Metadata and internal names (not resolved: known names only).
        ("https://metadata.google.internal/computeMetadata/v1/", N, "cloud metadata host"),
        ("https://METADATA.GOOGLE.INTERNAL./", N, "cloud metadata host"),
        ("https://metadata.goog/", N, "cloud metadata host"),
        ("https://metadata/", N, "cloud metadata host"),
        ("https://instance-data/", N, "cloud metadata host"),
        ("https://instance-data.ec2.internal/", N, "cloud metadata host"),
        ("https://metadata.tencentyun.com/", N, "cloud metadata host"),
        ("https://db.internal/", N, "internal name"),
        ("https://printer.local/", N, "internal name"),
        ("https://svc.cluster.local/", N, "internal name"),
        ("https://nas.home.arpa/", N, "internal name"),
        ("https://app.test/", N, "internal name"),
        ("https://x.invalid/", N, "internal name"),
        ("https://intranet/", N, "single-label"),
        // Not a usable URL at all.
        ("ftp://example.com", N, "must use https"),
        ("file:///etc/passwd", N, "must use https"),
        ("https://user:pw@example.com/", N, "credentials"),
        ("https://user@example.com/", N, "credentials"),
        ("not a url", N, "not an absolute URL"),
        ("https://[::1", N, "not an absolute URL"),
        ("https://1.2.3.4.5/", N, "not an absolute URL"),
        ("https://256.0.0.1/", N, "not an absolute URL"),
        ("https://0x100000000/", N, "not an absolute URL"),
        ("https://example.0x1/", N, "not an absolute URL"),
    ];

    #[test]
    fn every_special_purpose_target_is_refused_and_the_switch_lifts_only_loopback_and_private() {
        let mut wrong = Vec::new();
        for &(raw, want, words) in TARGETS {
            let strict = check_url(raw, false, &[]);
            let dev = check_url(raw, true, &[]);
            let got = match (&strict, &dev) {
                (Ok(_), Ok(_)) => P,
                (Err(_), Ok(_)) => L,
                (Err(_), Err(_)) => N,
                (Ok(_), Err(_)) => {
                    wrong.push(format!("{raw}: accepted strictly, refused with the switch"));
                    continue;
                }
            };
            if got != want {
                wrong.push(format!("{raw}: {got:?}, want {want:?} ({strict:?})"));
            }
            if let Err(e) = &strict {
                let shape = (e.code.status(), e.code.as_str(), e.details["field"].as_str());
                if shape != (422, "VALIDATION_ERROR", Some("url")) || !e.message.contains(words) {
                    wrong.push(format!("{raw}: {shape:?} {:?}, want the words {words:?}", e.message));
                }
                // A refusal the switch lifts names it; one it does not lift never does.
                if e.message.contains(SWITCH) != (want == L) {
                    wrong.push(format!("{raw}: {:?} names the switch wrongly", e.message));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} targets wrong:\n{}",
            wrong.len(),
            TARGETS.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn the_url_crate_parses_every_ipv4_spelling_to_the_address() {
        for (raw, host) in [
            ("https://2130706433/", "127.0.0.1"),
            ("https://0177.0.0.1/", "127.0.0.1"),
            ("https://0x7f.1/", "127.0.0.1"),
            ("https://127.1/", "127.0.0.1"),
            ("https://127.0.0.1./", "127.0.0.1"),
            ("https://%31%32%37.0.0.1/", "127.0.0.1"),
            ("https://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254"),
            ("https://[::127.0.0.1]/", "[::7f00:1]"),
            ("https://[::ffff:0:7f00:1]/", "[::ffff:0:7f00:1]"),
        ] {
            let url = url::Url::parse(raw).expect(raw);
            assert_eq!(url.host_str(), Some(host), "{raw}");
            if !host.starts_with('[') {
                assert!(matches!(url.host(), Some(url::Host::Ipv4(_))), "{raw} is an address, not a name");
            }
        }
    }
}
