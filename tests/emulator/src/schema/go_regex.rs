//! Go (RE2) regular expressions for `pattern`: translated to the regex crate's syntax with
//! Go's semantics (ASCII-only Perl classes and word boundaries, Rust-only class-set operators
//! escaped).

use regex::{Regex, RegexBuilder};

/// Compiles a Go (RE2) pattern with the regex crate. Perl classes and word
/// boundaries are made ASCII-only (as in Go), and characters that are class-set
/// operators only in Rust are escaped inside brackets.
pub(super) fn compile_go_regex(p: &str) -> Result<Regex, String> {
    RegexBuilder::new(&translate_go_regex(p))
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid pattern")
                .trim();
            let reason = last.strip_prefix("error: ").unwrap_or(last);
            format!("error parsing regexp: {reason}: `{p}`")
        })
}

fn translate_go_regex(p: &str) -> String {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut class_start = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let Some(&n) = chars.get(i + 1) else {
                out.push('\\');
                break;
            };
            let rep = if in_class {
                match n {
                    'd' => Some("0-9"),
                    'D' => Some("[:^digit:]"),
                    'w' => Some("0-9A-Za-z_"),
                    'W' => Some("[:^word:]"),
                    's' => Some("\\t\\n\\f\\r "),
                    'S' => Some("[:^space:]"),
                    _ => None,
                }
            } else {
                match n {
                    'd' => Some("[0-9]"),
                    'D' => Some("[^0-9]"),
                    'w' => Some("[0-9A-Za-z_]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    's' => Some("[\\t\\n\\f\\r ]"),
                    'S' => Some("[^\\t\\n\\f\\r ]"),
                    'b' => Some("(?-u:\\b)"),
                    'B' => Some("(?-u:\\B)"),
                    _ => None,
                }
            };
            match rep {
                Some(r) => out.push_str(r),
                None => {
                    out.push('\\');
                    out.push(n);
                }
            }
            class_start = false;
            i += 2;
            continue;
        }
        if in_class {
            if c == ']' && !class_start {
                in_class = false;
                out.push(']');
            } else if c == '[' && chars.get(i + 1) == Some(&':') {
                // POSIX class [:name:] — copy through ":]".
                let close = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == ':' && chars[j + 1] == ']');
                match close {
                    Some(j) => {
                        out.extend(&chars[i..j + 2]);
                        i = j + 2;
                        class_start = false;
                        continue;
                    }
                    None => out.push_str("\\["),
                }
            } else if c == '[' || c == '&' || c == '~' || (c == '-' && i > 0 && chars[i - 1] == '-')
            {
                out.push('\\');
                out.push(c);
            } else {
                out.push(c);
            }
            class_start = false;
        } else if c == '[' {
            in_class = true;
            class_start = true;
            out.push('[');
            if chars.get(i + 1) == Some(&'^') {
                out.push('^');
                i += 1;
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}
