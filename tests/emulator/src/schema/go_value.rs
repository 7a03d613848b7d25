//! Go value rendering for cause messages: `%q`, `%v` and `%#v` of unstructured values as
//! `field.Error.ErrorBody()` prints them, and Go's `strconv.Quote`.

use super::cause::MAX_DEPTH;
use crate::gofmt::{GoNum, go_float, go_num};
use serde_json::{Number, Value};
use std::fmt::Write as _;

/// `swag.IsFloat64AJSONInteger`.
pub(super) fn is_json_integer(f: f64) -> bool {
    f.is_finite() && f.abs() <= 9_007_199_254_740_991.0 && f.fract() == 0.0
}

/// The `BadValue` part of `field.Error.ErrorBody()`: strings `%q`, numbers and
/// bools `%v`, null as `"null"`, objects/arrays `%#v`
/// (`map[string]interface {}{"a":1}`, `[]interface {}{"x"}`).
pub(super) fn go_body(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_num_v(n),
        Value::String(s) => go_quote(s),
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            go_sharp(v, 0, &mut out);
            out
        }
    }
}

fn go_num_v(n: &Number) -> String {
    match go_num(n) {
        GoNum::Int(i) => i.to_string(),
        GoNum::Float(f) => go_float(f),
    }
}

/// `%#v` of an unstructured value, bounded in depth.
fn go_sharp(v: &Value, depth: usize, out: &mut String) {
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    match v {
        Value::Null => out.push_str("interface {}(nil)"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_num_v(n)),
        Value::String(s) => out.push_str(&go_quote(s)),
        Value::Array(a) => {
            out.push_str("[]interface {}{");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                go_sharp(x, depth + 1, out);
            }
            out.push('}');
        }
        Value::Object(m) => {
            out.push_str(&go_sharp_pairs(
                m.iter().map(|(k, x)| (k.as_str(), x)).collect(),
                depth,
            ));
        }
    }
}

/// `%#v` of a `map[string]interface{}` (keys sorted, as fmt prints maps).
pub(super) fn go_sharp_pairs(mut pairs: Vec<(&str, &Value)>, depth: usize) -> String {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("map[string]interface {}{");
    for (i, (k, x)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&go_quote(k));
        out.push(':');
        go_sharp(x, depth + 1, &mut out);
    }
    out.push('}');
    out
}

/// Go `strconv.Quote` (also what `%q` and `%#v` print for strings).
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_is_print(c) => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Approximation of Go's `unicode.IsPrint` (no general-category tables here):
/// controls, non-ASCII spaces/separators, common format characters, private-use
/// and noncharacters are not printable.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0xFFFE | 0xFFFF | 0xE000..=0xF8FF | 0xE0001
        | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF)
}
