//! How Go formats values, where the API server's messages and table cells show Go's output:
//! `%v` of floats, `encoding/json` of unstructured values (sorted keys, HTML-safe escaping),
//! and how apimachinery decodes JSON numbers. Shared by the schema and JSONPath modules.

use std::fmt::Write as _;

/// Maximum nesting depth the schema walkers and the Go formatting here process (object/array levels, plus allOf/anyOf/oneOf/not levels
/// during validation) that is processed. Deeper data gets a `FieldValueInvalid`
/// cause from [`validate`] and is left untouched by [`prune`] and [`apply_defaults`].
pub const MAX_DEPTH: usize = 100;

use serde_json::{Number, Value};

#[derive(Clone, Copy, Debug)]
pub(crate) enum GoNum {
    Int(i64),
    Float(f64),
}

/// How `k8s.io/apimachinery/pkg/util/json` decodes a JSON number: int64 when it
/// parses as one, float64 otherwise.
pub(crate) fn go_num(n: &Number) -> GoNum {
    match n.as_i64() {
        Some(i) => GoNum::Int(i),
        None => GoNum::Float(n.as_f64().unwrap_or(0.0)),
    }
}

/// `encoding/json.Marshal` of an unstructured value (sorted keys, HTML-safe
/// escaping, Go float formatting), bounded in depth.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    go_json_into(v, 0, &mut out);
    out
}

pub(crate) fn go_json_pairs(mut pairs: Vec<(&str, &Value)>, depth: usize) -> String {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (k, x)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        go_json_string(k, &mut out);
        out.push(':');
        go_json_into(x, depth + 1, &mut out);
    }
    out.push('}');
    out
}

pub(crate) fn go_json_into(v: &Value, depth: usize, out: &mut String) {
    if depth > MAX_DEPTH {
        out.push_str("null");
        return;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match go_num(n) {
            GoNum::Int(i) => out.push_str(&i.to_string()),
            GoNum::Float(f) => out.push_str(&go_json_float(f)),
        },
        Value::String(s) => go_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(x, depth + 1, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str(&go_json_pairs(
                m.iter().map(|(k, x)| (k.as_str(), x)).collect(),
                depth,
            ));
        }
    }
}

pub(crate) fn go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Shortest round-trip decimal digits of |f| and the decimal exponent of the
/// first digit (f = 0.d1d2… × 10^(exp+1)).
pub(crate) fn shortest_digits(f: f64) -> (String, i32) {
    let s = format!("{:e}", f.abs());
    let (mant, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    (digits, exp.parse().unwrap_or(0))
}

pub(crate) fn fmt_e(neg: bool, digits: &str, exp: i32, min_exp_digits: usize) -> String {
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let mut it = digits.chars();
    out.push(it.next().unwrap_or('0'));
    let rest: String = it.collect();
    if !rest.is_empty() {
        out.push('.');
        out.push_str(&rest);
    }
    out.push('e');
    out.push(if exp < 0 { '-' } else { '+' });
    let _ = write!(
        out,
        "{:0width$}",
        exp.unsigned_abs(),
        width = min_exp_digits
    );
    out
}

pub(crate) fn fmt_f(neg: bool, digits: &str, exp: i32) -> String {
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let dp = exp + 1; // position of the decimal point within digits
    let nd = digits.len() as i32;
    if dp <= 0 {
        out.push_str("0.");
        for _ in 0..(-dp) {
            out.push('0');
        }
        out.push_str(digits);
    } else if dp >= nd {
        out.push_str(digits);
        for _ in 0..(dp - nd) {
            out.push('0');
        }
    } else {
        let (a, b) = digits.split_at(dp as usize);
        out.push_str(a);
        out.push('.');
        out.push_str(b);
    }
    out
}

/// Go `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): exponent form
/// when the exponent is < -4 or >= 6 — 1e+06, 1.5, 0.0001, 1e-05.
pub(crate) fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".to_string()
        } else if f > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (digits, exp) = shortest_digits(f);
    let neg = f < 0.0;
    if !(-4..6).contains(&exp) {
        fmt_e(neg, &digits, exp, 2)
    } else {
        fmt_f(neg, &digits, exp)
    }
}

/// `encoding/json` float64: plain decimal unless |f| < 1e-6 or >= 1e21.
pub(crate) fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (digits, exp) = shortest_digits(f);
    let neg = f < 0.0;
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        fmt_e(neg, &digits, exp, 1)
    } else {
        fmt_f(neg, &digits, exp)
    }
}
