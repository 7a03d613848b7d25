//! String formats: the subset of go-openapi's strfmt registry that CRDs keep (uuid, base64,
//! date, date-time, hostname, ipv4/ipv6, cidr, ...), checked as upstream checks them.

use regex::Regex;
use std::sync::LazyLock;

fn lazy_rx(p: &str) -> Option<Regex> {
    Regex::new(p).ok()
}

static RX_UUID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static RX_UUID3: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static RX_UUID4: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static RX_UUID5: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static RX_BASE64: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
});
static RX_TIME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});
static RX_HEXCOLOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| lazy_rx(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RX_HOSTNAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z0-9\p{S}\p{L}])(-?[a-zA-Z0-9\p{S}\p{L}]){1,62})$",
    )
});

fn rx_match(rx: &LazyLock<Option<Regex>>, s: &str) -> bool {
    rx.as_ref().is_some_and(|r| r.is_match(s))
}

/// Validates `s` against a (normalized, supported) format. Formats this
/// emulator does not check (uri, email, mac, isbn*, creditcard, ssn, rgbcolor,
/// bsonobjectid, duration, password) accept everything.
pub(super) fn format_ok(normalized: &str, s: &str) -> bool {
    match normalized {
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        "uuid" => rx_match(&RX_UUID, s),
        "uuid3" => rx_match(&RX_UUID3, s),
        "uuid4" => rx_match(&RX_UUID4, s),
        "uuid5" => rx_match(&RX_UUID5, s),
        "byte" => rx_match(&RX_BASE64, s),
        "hexcolor" => rx_match(&RX_HEXCOLOR, s),
        "hostname" => {
            rx_match(&RX_HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
        }
        "ipv4" => s.parse::<std::net::IpAddr>().is_ok() && s.contains('.'),
        "ipv6" => s.parse::<std::net::IpAddr>().is_ok() && s.contains(':'),
        "cidr" => is_cidr(s),
        _ => true,
    }
}

/// `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &b[r];
        if part.iter().all(u8::is_ascii_digit) {
            Some(
                part.iter()
                    .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0')),
            )
        } else {
            None
        }
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    if !(1..=12).contains(&m) {
        return false;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(rx) = RX_TIME.as_ref() else {
        return false;
    };
    let Some(c) = rx.captures(parts[1]) else {
        return false;
    };
    let g = |i: usize| c.get(i).map_or("", |m| m.as_str());
    g(1) <= "23" && g(2) <= "59" && g(3) <= "59"
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|c| c.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|n| n <= max)
}
