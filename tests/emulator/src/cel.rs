//! The subset of CEL that admission `matchConditions` may use in the emulator:
//! `has(path)`, `==`, `!=`, `&&`, `||`, `!`, parentheses, string/number/bool/null literals, and
//! paths (`object.metadata.name`, `request.namespace`, `object.data['config.yaml']`). Any other
//! construct is an evaluation error, which the caller treats per the webhook's failurePolicy.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
    Not,
    And,
    Or,
    Eq,
    Ne,
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '(' => {
                out.push(Tok::LParen);
                i += 1
            }
            ')' => {
                out.push(Tok::RParen);
                i += 1
            }
            '[' => {
                out.push(Tok::LBracket);
                i += 1
            }
            ']' => {
                out.push(Tok::RBracket);
                i += 1
            }
            '.' => {
                out.push(Tok::Dot);
                i += 1
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::Ne);
                i += 2
            }
            '!' => {
                out.push(Tok::Not);
                i += 1
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::Eq);
                i += 2
            }
            '&' if chars.get(i + 1) == Some(&'&') => {
                out.push(Tok::And);
                i += 2
            }
            '|' if chars.get(i + 1) == Some(&'|') => {
                out.push(Tok::Or);
                i += 2
            }
            '\'' | '"' => {
                let quote = c;
                let mut j = i + 1;
                let mut text = String::new();
                while j < chars.len() && chars[j] != quote {
                    if chars[j] == '\\' && j + 1 < chars.len() {
                        j += 1;
                    }
                    text.push(chars[j]);
                    j += 1;
                }
                if j >= chars.len() {
                    return Err("unterminated string literal".into());
                }
                out.push(Tok::Str(text));
                i = j + 1;
            }
            c if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                    j += 1;
                }
                let text: String = chars[i..j].iter().collect();
                out.push(Tok::Num(
                    text.parse().map_err(|_| format!("bad number {text}"))?,
                ));
                i = j;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                out.push(Tok::Ident(chars[i..j].iter().collect()));
                i = j;
            }
            other => {
                return Err(format!(
                    "unsupported character {other:?} in the emulator's CEL subset"
                ));
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    vars: &'a Value,
}

#[derive(Debug)]
enum Val {
    Json(Value),
    Missing(String),
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn expect(&mut self, t: Tok) -> Result<(), String> {
        match self.next() {
            Some(x) if x == t => Ok(()),
            other => Err(format!("expected {t:?}, found {other:?}")),
        }
    }
    fn bool_of(v: Val) -> Result<bool, String> {
        match v {
            Val::Json(Value::Bool(b)) => Ok(b),
            Val::Json(other) => Err(format!("no such overload: expected bool, found {other}")),
            Val::Missing(k) => Err(format!("no such key: {k}")),
        }
    }
    fn or(&mut self) -> Result<Val, String> {
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.next();
            let l = Self::bool_of(left)?;
            let r = Self::bool_of(self.and()?)?;
            left = Val::Json(Value::Bool(l || r));
        }
        Ok(left)
    }
    fn and(&mut self) -> Result<Val, String> {
        let mut left = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.next();
            let l = Self::bool_of(left)?;
            let r = Self::bool_of(self.unary()?)?;
            left = Val::Json(Value::Bool(l && r));
        }
        Ok(left)
    }
    fn unary(&mut self) -> Result<Val, String> {
        if self.peek() == Some(&Tok::Not) {
            self.next();
            let v = Self::bool_of(self.unary()?)?;
            return Ok(Val::Json(Value::Bool(!v)));
        }
        self.cmp()
    }
    fn cmp(&mut self) -> Result<Val, String> {
        let left = self.primary()?;
        match self.peek() {
            Some(Tok::Eq) | Some(Tok::Ne) => {
                let negate = self.next() == Some(Tok::Ne);
                let right = self.primary()?;
                let (l, r) = match (left, right) {
                    (Val::Json(l), Val::Json(r)) => (l, r),
                    (Val::Missing(k), _) | (_, Val::Missing(k)) => {
                        return Err(format!("no such key: {k}"));
                    }
                };
                let equal = match (&l, &r) {
                    (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
                    _ => l == r,
                };
                Ok(Val::Json(Value::Bool(equal != negate)))
            }
            _ => Ok(left),
        }
    }
    fn path(&mut self, root: String) -> Result<Val, String> {
        let mut cur = match self.vars.get(&root) {
            Some(v) => Val::Json(v.clone()),
            None => return Err(format!("undeclared reference to '{root}'")),
        };
        loop {
            let key = match self.peek() {
                Some(Tok::Dot) => {
                    self.next();
                    match self.next() {
                        Some(Tok::Ident(k)) => k,
                        other => return Err(format!("expected a field name, found {other:?}")),
                    }
                }
                Some(Tok::LBracket) => {
                    self.next();
                    let k = match self.next() {
                        Some(Tok::Str(k)) => k,
                        other => return Err(format!("expected a string index, found {other:?}")),
                    };
                    self.expect(Tok::RBracket)?;
                    k
                }
                _ => return Ok(cur),
            };
            cur = match cur {
                Val::Json(Value::Object(m)) => match m.get(&key) {
                    Some(v) => Val::Json(v.clone()),
                    None => Val::Missing(key),
                },
                Val::Json(Value::Null) => Val::Missing(key),
                Val::Json(other) => return Err(format!("no such key: {key} (on {other})")),
                Val::Missing(k) => return Err(format!("no such key: {k}")),
            };
        }
    }
    fn primary(&mut self) -> Result<Val, String> {
        match self.next() {
            Some(Tok::LParen) => {
                let v = self.or()?;
                self.expect(Tok::RParen)?;
                Ok(v)
            }
            Some(Tok::Str(s)) => Ok(Val::Json(Value::String(s))),
            Some(Tok::Num(n)) => Ok(Val::Json(serde_json::json!(n))),
            Some(Tok::Ident(id)) => match id.as_str() {
                "true" => Ok(Val::Json(Value::Bool(true))),
                "false" => Ok(Val::Json(Value::Bool(false))),
                "null" => Ok(Val::Json(Value::Null)),
                "has" => {
                    self.expect(Tok::LParen)?;
                    let root = match self.next() {
                        Some(Tok::Ident(r)) => r,
                        other => {
                            return Err(format!("has() needs a field selection, found {other:?}"));
                        }
                    };
                    let v = self.path(root)?;
                    self.expect(Tok::RParen)?;
                    Ok(Val::Json(Value::Bool(
                        matches!(v, Val::Json(ref j) if !j.is_null()),
                    )))
                }
                _ => self.path(id),
            },
            other => Err(format!("unexpected token {other:?}")),
        }
    }
}

/// Evaluates `expr` against `vars` (`object`, `oldObject`, `request`); must yield a bool.
pub fn eval(expr: &str, vars: &Value) -> Result<bool, String> {
    let toks = lex(expr)?;
    let mut p = Parser { toks, pos: 0, vars };
    let v = p.or()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected trailing input in {expr:?}"));
    }
    Parser::bool_of(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_the_supported_subset() {
        let vars = json!({
            "object": {"metadata": {"name": "sites-config", "labels": {"a": "b"}}, "data": {"config.yaml": "x"}},
            "oldObject": null,
            "request": {"namespace": "sites", "operation": "CREATE"}
        });
        let cases = [
            ("object.metadata.name == 'sites-config'", true),
            ("object.metadata.name != \"sites-config\"", false),
            (
                "has(object.data) && object.data['config.yaml'] == 'x'",
                true,
            ),
            ("has(object.metadata.annotations)", false),
            ("has(oldObject.metadata)", false),
            (
                "request.operation == 'CREATE' || request.operation == 'UPDATE'",
                true,
            ),
            ("!(request.namespace == 'other')", true),
            ("true && (false || true)", true),
        ];
        for (expr, want) in cases {
            assert_eq!(eval(expr, &vars), Ok(want), "{expr}");
        }
    }

    #[test]
    fn unsupported_or_failing_expressions_are_errors() {
        let vars = json!({"object": {"metadata": {}}, "request": {}});
        for expr in [
            "object.metadata.name == 'x'",
            "object.metadata.name.startsWith('x')",
            "size(object) > 1",
            "object.metadata",
            "unknownVar == 1",
            "'unterminated",
        ] {
            assert!(eval(expr, &vars).is_err(), "{expr}");
        }
    }
}
