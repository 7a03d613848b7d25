//! Kubernetes resource quantities (`10Gi`, `500m`, `1.5e3`): parsing and comparison.
//!
//! Follows the grammar of `k8s.io/apimachinery/pkg/api/resource.Quantity`:
//! `<sign>? <digits>[.<digits>] <suffix>`, where the suffix is a binary SI suffix (`Ki` .. `Ei`),
//! a decimal SI suffix (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent
//! (`e3`, `E-2`). Values are held exactly, in nano-units, which covers the whole range Kubernetes
//! accepts (magnitudes up to 2^63-1, precision down to 1n).
//!
//! A crate of its own so that the operator (`sites_operator::quantity`) and the API emulator
//! compare quantities the same way.

use std::fmt;

/// A parsed quantity, exact to the nano-unit (values below 1n round up, as Kubernetes does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParsedQuantity {
    nanos: i128,
}

/// Why a string is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("is empty")]
    Empty,
    #[error(
        "{0:?} is not a quantity (expected a number with an optional suffix, e.g. 10Gi or 500m)"
    )]
    Syntax(String),
    #[error("{0:?} is too large (the limit is 2^63-1)")]
    TooLarge(String),
}

const NANO: i128 = 1_000_000_000;
const MAX_UNITS: i128 = i64::MAX as i128;

impl ParsedQuantity {
    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// Whether the value is below zero.
    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// Whether the value is zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }
}

impl fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.nanos / NANO;
        let frac = (self.nanos % NANO).abs();
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let sign = if self.nanos < 0 && whole == 0 {
                "-"
            } else {
                ""
            };
            let digits = format!("{frac:09}");
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

/// Parses a Kubernetes quantity string.
pub fn parse(input: &str) -> Result<ParsedQuantity, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(input.to_string());
    let too_large = || QuantityError::TooLarge(input.to_string());

    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split the number from the suffix: digits and at most one '.'.
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(syntax());
    }
    if frac_part.contains('.') {
        return Err(syntax());
    }

    // Mantissa digits (the integer and fractional digits, read in place), without leading zeros,
    // and the decimal exponent they imply. Both parts hold only ASCII digits.
    let digits = || int_part.bytes().chain(frac_part.bytes());
    let total = int_part.len() + frac_part.len();
    let leading = digits().take_while(|&b| b == b'0').count();
    let mut exp10: i64 = -(frac_part.len() as i64);
    // Trailing zeros of the mantissa move into the exponent, so long zero runs cannot overflow.
    let trailing = if leading == total {
        0
    } else {
        digits().rev().take_while(|&b| b == b'0').count()
    };
    exp10 += trailing as i64;
    let significant = total - leading - trailing;
    if significant > 38 {
        return Err(too_large());
    }
    let mut mantissa: i128 = digits()
        .skip(leading)
        .take(significant)
        .fold(0, |m, b| m * 10 + i128::from(b - b'0'));

    let mut binary_shift: u32 = 0;
    match suffix {
        "" => {}
        "Ki" => binary_shift = 10,
        "Mi" => binary_shift = 20,
        "Gi" => binary_shift = 30,
        "Ti" => binary_shift = 40,
        "Pi" => binary_shift = 50,
        "Ei" => binary_shift = 60,
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        other if other.starts_with(['e', 'E']) => {
            let exp = &other[1..];
            let body = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) || body.len() > 6 {
                return Err(syntax());
            }
            exp10 += exp.parse::<i64>().map_err(|_| syntax())?;
        }
        _ => return Err(syntax()),
    }

    if mantissa == 0 {
        return Ok(ParsedQuantity { nanos: 0 });
    }
    mantissa = mantissa.checked_shl(binary_shift).ok_or_else(too_large)?;
    if mantissa.leading_zeros() < 2 {
        return Err(too_large());
    }
    // Scale to nano-units: nanos = mantissa * 10^(exp10 + 9), rounding up below 1n.
    let scale = exp10 + 9;
    let nanos = if scale >= 0 {
        if scale > 38 {
            return Err(too_large());
        }
        mantissa
            .checked_mul(10i128.pow(scale as u32))
            .ok_or_else(too_large)?
    } else {
        let divisor_exp = (-scale) as u32;
        if divisor_exp > 38 {
            1
        } else {
            let divisor = 10i128.pow(divisor_exp);
            (mantissa + divisor - 1) / divisor
        }
    };
    if nanos > MAX_UNITS * NANO {
        return Err(too_large());
    }
    Ok(ParsedQuantity {
        nanos: if negative { -nanos } else { nanos },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> i128 {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).nanos()
    }

    #[test]
    fn parses_every_suffix_family() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("1", NANO),
            ("+1", NANO),
            ("-1", -NANO),
            ("1.5", 1_500_000_000),
            (".5", 500_000_000),
            ("5.", 5 * NANO),
            ("500m", 500_000_000),
            ("1n", 1),
            ("1u", 1_000),
            ("1k", 1_000 * NANO),
            ("1M", 1_000_000 * NANO),
            ("1G", 1_000_000_000 * NANO),
            ("1T", 1_000_000_000_000 * NANO),
            ("1P", 1_000_000_000_000_000 * NANO),
            ("1E", 1_000_000_000_000_000_000 * NANO),
            ("1Ki", 1024 * NANO),
            ("1Mi", (1 << 20) * NANO),
            ("1.5Gi", 1_610_612_736 * NANO),
            ("1Ti", (1 << 40) * NANO),
            ("1Pi", (1 << 50) * NANO),
            ("1Ei", (1 << 60) * NANO),
            ("1e3", 1_000 * NANO),
            ("1E3", 1_000 * NANO),
            ("1e-3", 1_000_000),
            ("12e+2", 1_200 * NANO),
            ("0.1n", 1), // rounds up
            ("9223372036854775807000m", 9_223_372_036_854_775_807 * NANO),
            // Zero runs around the digits: leading ones dropped, trailing ones moved to the
            // exponent (a long run does not overflow the mantissa).
            ("000", 0),
            ("0.000", 0),
            ("00100", 100 * NANO),
            ("100.000", 100 * NANO),
            ("0.00100", 1_000_000),
            ("1000000000000000000000000000000000000000e-39", NANO),
            (
                "0.0000000000000000000000000000000000000000010e40",
                10_000_000,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(n(s), *want, "{s}");
        }
    }

    #[test]
    fn rejects_malformed_quantities() {
        for s in [
            "",
            " ",
            "abc",
            "1.2.3",
            "Gi",
            "1GB",
            "1gi",
            "1 Gi",
            "--1",
            "1e",
            "1e+",
            "1Ki1",
            ".",
            "1e1000000000",
            "0x10",
        ] {
            assert!(parse(s).is_err(), "{s:?} should not parse");
        }
        assert_eq!(parse(""), Err(QuantityError::Empty));
    }

    #[test]
    fn rejects_values_beyond_the_kubernetes_range() {
        assert!(matches!(parse("8Ei"), Err(QuantityError::TooLarge(_))));
        assert!(matches!(parse("1e19"), Err(QuantityError::TooLarge(_))));
        assert!(parse("7Ei").is_ok());
        assert!(parse("9223372036854775807").is_ok());
        assert!(parse("9223372036854775808").is_err());
        // At most 38 significant digits, whatever the exponent.
        let digits = "12345678901234567890123456789012345678";
        assert!(parse(&format!("{digits}e-30")).is_ok());
        assert!(matches!(
            parse(&format!("{digits}9e-30")),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn compares_across_suffixes() {
        assert!(parse("1Gi").unwrap() > parse("1G").unwrap());
        assert!(parse("1024Mi").unwrap() == parse("1Gi").unwrap());
        assert!(parse("500m").unwrap() < parse("1").unwrap());
        assert!(parse("0.5").unwrap() == parse("500m").unwrap());
        assert!(parse("-1").unwrap().is_negative());
        assert!(parse("0Gi").unwrap().is_zero());
    }

    #[test]
    fn displays_in_units() {
        assert_eq!(parse("1.5").unwrap().to_string(), "1.5");
        assert_eq!(parse("1Ki").unwrap().to_string(), "1024");
        assert_eq!(parse("-500m").unwrap().to_string(), "-0.5");
    }
}
