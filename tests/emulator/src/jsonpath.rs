//! The Kubernetes JSONPath dialect (`k8s.io/client-go/util/jsonpath`) as used by
//! CRD `additionalPrinterColumns[].jsonPath`, plus the CRD table convertor's
//! cell conversion (`apiextensions-apiserver/.../tableconvertor/tableconvertor.go`).
//!
//! Supported: `.field`, `.field\.with\.dots` (escaped dots), `['key']`, `.*`,
//! `[*]`, `[n]`, `[-n]`, `[a:b:step]`, unions `[0,2]` / `['a','b']`,
//! recursive descent `..field`, filters `[?(@.x == "y")]` with `==`, `!=`, `<`,
//! `>`, `<=`, `>=` against single/double-quoted strings, numbers, `true`/`false`
//! or other `@` paths, existence filters `[?(@.x)]`, and the no-op `@`/`$`.
//! The whole expression may be wrapped in one `{...}` action.
//!
//! Deliberate differences from upstream (all only make more paths work):
//! * `['a.b/c']` selects the single key `a.b/c` (upstream re-parses the key as
//!   `.a.b/c`, splitting it at the dots).
//! * Evaluation never fails: where upstream aborts the whole evaluation with an
//!   error (index out of range, indexing/filtering a non-array, comparing
//!   values of different kinds, filter operand with several values), this
//!   implementation just selects nothing for that value/element. An integer
//!   compared with a float is compared numerically (upstream: error).
//! * Strings are not iterated character by character by `.*` / `..`.
//! * Map members are visited in the `serde_json::Map` iteration order
//!   (upstream: random Go map order).
//! * The `range`/`end` keywords, text outside the `{...}` action, several
//!   actions and the `=~` operator are not supported (parse error).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// A parsed JSONPath expression.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// Map member lookup.
    Field(String),
    /// `.*`: all map values / array elements.
    Wildcard,
    /// `..`: the value and all its container descendants, pre-order.
    Recursive,
    /// `[i]`, `[a:b:c]`, `[*]`.
    Slice([SliceParam; 3]),
    /// `[x,y]`.
    Union(Vec<Vec<Step>>),
    /// `[?(...)]`.
    Filter(Box<Filter>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct SliceParam {
    value: i64,
    known: bool,
    derived: bool,
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    left: Operand,
    /// `None` = existence filter.
    op: Option<CmpOp>,
    right: Operand,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Clone, Debug, PartialEq)]
enum Operand {
    Path(Vec<Step>),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// Raw parser output (mirrors the upstream node kinds).
#[derive(Clone, Debug, PartialEq)]
enum Node {
    Step(Step),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Identifier(String),
}

impl JsonPath {
    /// Parses a path, with or without the surrounding `{}`.
    pub fn parse(expr: &str) -> Result<JsonPath, String> {
        let nodes = if expr.starts_with('{') {
            parse_template(expr)?
        } else {
            parse_template(&format!("{{{expr}}}"))?
        };
        Ok(JsonPath {
            steps: nodes_to_steps(nodes)?,
        })
    }

    /// All values the path selects, in document order. Missing fields select
    /// nothing.
    pub fn eval<'a>(&self, v: &'a Value) -> Vec<&'a Value> {
        eval_steps(&self.steps, vec![v])
    }
}

// ---------------------------------------------------------------------------
// Parser (port of util/jsonpath/parser.go).

fn nodes_to_steps(nodes: Vec<Node>) -> Result<Vec<Step>, String> {
    nodes
        .into_iter()
        .map(|n| match n {
            Node::Step(s) => Ok(s),
            Node::Identifier(name) => Err(format!("unrecognized identifier {name}")),
            Node::Text(t) => Err(format!(
                "unexpected literal {t:?}: literals are only supported in filters"
            )),
            Node::Int(i) => Err(format!(
                "unexpected literal {i}: literals are only supported in filters"
            )),
            Node::Float(f) => Err(format!(
                "unexpected literal {f}: literals are only supported in filters"
            )),
            Node::Bool(b) => Err(format!(
                "unexpected literal {b}: literals are only supported in filters"
            )),
        })
        .collect()
}

/// Parses `{action}`; nothing may precede or follow the single action.
fn parse_template(text: &str) -> Result<Vec<Node>, String> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
    };
    if p.peek() != Some('{') {
        return Err(format!("expected '{{' at the start of {text:?}"));
    }
    p.pos += 1;
    let nodes = p.parse_inside_action()?;
    if p.pos < p.chars.len() {
        let rest: String = p.chars[p.pos..].iter().collect();
        return Err(format!(
            "unexpected text {rest:?} after the action: only a single {{...}} action is supported"
        ));
    }
    Ok(nodes)
}

/// `parseAction`: parses `text` as the body of an action.
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    parse_template(&format!("{{{text}}}"))
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

fn is_terminator(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.chars.get(self.pos + i) == Some(&c))
    }

    fn slice(&self, from: usize, to: usize) -> String {
        self.chars
            .get(from..to)
            .map(|cs| cs.iter().collect())
            .unwrap_or_default()
    }

    /// Parses until the closing `}` (consumed).
    fn parse_inside_action(&mut self) -> Result<Vec<Node>, String> {
        let mut nodes: Vec<Node> = Vec::new();
        loop {
            if self.starts_with("}") {
                self.pos += 1;
                return Ok(nodes);
            }
            if self.starts_with("[?(") {
                self.pos += 3;
                nodes.push(self.parse_filter()?);
                continue;
            }
            if self.starts_with("..") {
                if matches!(nodes.last(), Some(Node::Step(Step::Recursive))) {
                    return Err("invalid multiple recursive descent".to_string());
                }
                self.pos += 2;
                nodes.push(Node::Step(Step::Recursive));
                if self.peek().is_some_and(is_alphanumeric) {
                    nodes.push(self.parse_field());
                }
                continue;
            }
            let Some(c) = self.peek() else {
                return Err("unclosed action".to_string());
            };
            self.pos += 1;
            match c {
                '\r' | '\n' => return Err("unclosed action".to_string()),
                ' ' | '@' | '$' => {}
                '[' => nodes.push(self.parse_array()?),
                '"' | '\'' => nodes.push(self.parse_quote(c)?),
                '.' => nodes.push(self.parse_field()),
                '+' | '-' => {
                    self.pos -= 1;
                    nodes.push(self.parse_number()?);
                }
                c if c.is_ascii_digit() => {
                    self.pos -= 1;
                    nodes.push(self.parse_number()?);
                }
                c if is_alphanumeric(c) => {
                    self.pos -= 1;
                    nodes.push(self.parse_identifier());
                }
                c => {
                    return Err(format!(
                        "unrecognized character in action: U+{:04X} '{c}'",
                        u32::from(c)
                    ));
                }
            }
        }
    }

    /// After the `.`: reads up to the next unescaped terminator; backslashes
    /// are removed from the name.
    fn parse_field(&mut self) -> Node {
        let start = self.pos;
        loop {
            let c = self.peek();
            if c == Some('\\') {
                self.pos = (self.pos + 2).min(self.chars.len());
            } else if is_terminator(c) {
                break;
            } else {
                self.pos += 1;
            }
        }
        let raw = self.slice(start, self.pos);
        if raw == "*" {
            Node::Step(Step::Wildcard)
        } else {
            Node::Step(Step::Field(raw.replace('\\', "")))
        }
    }

    fn parse_identifier(&mut self) -> Node {
        let start = self.pos;
        while !is_terminator(self.peek()) {
            self.pos += 1;
        }
        let value = self.slice(start, self.pos);
        match value.as_str() {
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            _ => Node::Identifier(value),
        }
    }

    fn parse_number(&mut self) -> Result<Node, String> {
        let start = self.pos;
        if matches!(self.peek(), Some('+' | '-')) {
            self.pos += 1;
        }
        while self.peek().is_some_and(|c| c == '.' || c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text = self.slice(start, self.pos);
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Node::Int(i));
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Node::Float(f)),
            _ => Err(format!("cannot parse number {text}")),
        }
    }

    /// `pos` is just after the opening quote.
    fn parse_quote(&mut self, quote: char) -> Result<Node, String> {
        let start = self.pos - 1;
        let mut escaped = false;
        loop {
            let Some(c) = self.peek() else {
                return Err("unterminated quoted string".to_string());
            };
            self.pos += 1;
            if c == '\n' {
                return Err("unterminated quoted string".to_string());
            }
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == quote {
                break;
            }
        }
        let raw = self.slice(start, self.pos);
        unquote_extend(&raw)
            .map(Node::Text)
            .map_err(|e| format!("unquote string {raw} error {e}"))
    }

    /// `pos` is just after `[`.
    fn parse_array(&mut self) -> Result<Node, String> {
        let start = self.pos;
        let mut quote: Option<char> = None;
        loop {
            let Some(c) = self.peek() else {
                return Err("unterminated array".to_string());
            };
            self.pos += 1;
            match (quote, c) {
                (_, '\n') => return Err("unterminated array".to_string()),
                (None, ']') => break,
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                _ => {}
            }
        }
        let mut text = self.slice(start, self.pos - 1);
        if text == "*" {
            text = ":".to_string();
        }

        let parts = split_outside_quotes(&text, ',');
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                let nodes = parse_action(&format!("[{}]", part.trim_matches(' ')))?;
                union.push(nodes_to_steps(nodes)?);
            }
            return Ok(Node::Step(Step::Union(union)));
        }

        // Dict key: `^'([^']*)'$`, taken literally as one key.
        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            let inner = &text[1..text.len() - 1];
            if !inner.contains('\'') {
                return Ok(Node::Step(Step::Field(inner.to_string())));
            }
        }

        parse_slice(&text).map(|p| Node::Step(Step::Slice(p)))
    }

    /// `pos` is just after `[?(`.
    fn parse_filter(&mut self) -> Result<Node, String> {
        let start = self.pos;
        let mut quote: Option<char> = None;
        let mut escaped = false;
        loop {
            let Some(c) = self.peek() else {
                return Err("unterminated filter".to_string());
            };
            self.pos += 1;
            if c == '\n' {
                return Err("unterminated filter".to_string());
            }
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    '"' | '\'' => quote = Some(c),
                    ')' => break,
                    _ => {}
                },
            }
        }
        let text = self.slice(start, self.pos - 1);
        if self.peek() != Some(']') {
            return Err("unclosed array expect ]".to_string());
        }
        self.pos += 1;
        Ok(Node::Step(Step::Filter(Box::new(parse_filter_text(
            &text,
        )?))))
    }
}

fn split_outside_quotes(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == sep => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            None => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `^(-?\d*)(:-?\d*)?(:-?\d*)?$` plus the upstream parameter defaults.
fn parse_slice(text: &str) -> Result<[SliceParam; 3], String> {
    let groups: Vec<&str> = text.split(':').collect();
    let well_formed = groups.len() <= 3
        && groups.iter().all(|g| {
            let digits = g.strip_prefix('-').unwrap_or(g);
            digits.chars().all(|c| c.is_ascii_digit())
        });
    if !well_formed {
        return Err(format!("invalid array index {text}"));
    }
    let unknown = SliceParam {
        value: 0,
        known: false,
        derived: false,
    };
    let mut params = [unknown; 3];
    for i in 0..3 {
        // Group 0 is the bare number; groups 1 and 2 are present only if the
        // corresponding ':' was written.
        let group = groups.get(i).copied();
        let present = match i {
            0 => group.is_some_and(|g| !g.is_empty()),
            _ => group.is_some(),
        };
        if present {
            let g = group.unwrap_or_default();
            if i > 0 && g.is_empty() {
                params[i].known = false;
            } else {
                params[i].known = true;
                params[i].value = g
                    .parse::<i64>()
                    .map_err(|_| format!("array index {g} is not a number"))?;
            }
        } else if i == 1 {
            params[1] = SliceParam {
                value: params[0].value.saturating_add(1),
                known: true,
                derived: true,
            };
        }
    }
    Ok(params)
}

fn parse_filter_text(text: &str) -> Result<Filter, String> {
    // `^([^!<>=]+)([!<>=]+)(.+?)$`
    let is_op_char = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let split = text.find(is_op_char).filter(|&i| i > 0).and_then(|i| {
        let rest = &text[i..];
        let op_len = rest.find(|c: char| !is_op_char(c)).unwrap_or(rest.len());
        let right = &rest[op_len..];
        (!right.is_empty()).then(|| (&text[..i], &rest[..op_len], right))
    });
    let Some((left, op, right)) = split else {
        return Ok(Filter {
            left: parse_operand(text)?,
            op: None,
            right: Operand::Path(Vec::new()),
        });
    };
    let op = match op {
        "==" => CmpOp::Eq,
        "!=" => CmpOp::Ne,
        "<" => CmpOp::Lt,
        ">" => CmpOp::Gt,
        "<=" => CmpOp::Le,
        ">=" => CmpOp::Ge,
        other => return Err(format!("unrecognized filter operator {other}")),
    };
    Ok(Filter {
        left: parse_operand(left)?,
        op: Some(op),
        right: parse_operand(right)?,
    })
}

fn parse_operand(text: &str) -> Result<Operand, String> {
    let nodes = parse_action(text)?;
    if let [single] = nodes.as_slice() {
        match single {
            Node::Text(s) => return Ok(Operand::Str(s.clone())),
            Node::Int(i) => return Ok(Operand::Int(*i)),
            Node::Float(f) => return Ok(Operand::Float(*f)),
            Node::Bool(b) => return Ok(Operand::Bool(*b)),
            Node::Step(_) | Node::Identifier(_) => {}
        }
    }
    nodes_to_steps(nodes)
        .map(Operand::Path)
        .map_err(|e| format!("invalid filter operand {text:?}: {e}"))
}

/// `UnquoteExtend`: Go `strconv.Unquote` that also accepts multi-character
/// single-quoted strings. `s` includes the quotes.
fn unquote_extend(s: &str) -> Result<String, String> {
    let chars: Vec<char> = s.chars().collect();
    let (Some(&quote), Some(&last)) = (chars.first(), chars.last()) else {
        return Err("invalid syntax".to_string());
    };
    if chars.len() < 2 || quote != last || (quote != '"' && quote != '\'') {
        return Err("invalid syntax".to_string());
    }
    let body = &chars[1..chars.len() - 1];
    let mut out = String::new();
    let mut i = 0;
    let syntax = || "invalid syntax".to_string();
    while i < body.len() {
        let c = body[i];
        i += 1;
        if c == quote {
            return Err(syntax());
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = body.get(i) else {
            return Err(syntax());
        };
        i += 1;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = body.get(i..i + n).ok_or_else(syntax)?.iter().collect();
                if !hex.chars().all(|h| h.is_ascii_hexdigit()) {
                    return Err(syntax());
                }
                i += n;
                let v = u32::from_str_radix(&hex, 16).map_err(|_| syntax())?;
                if e == 'x' {
                    // Go produces a raw byte here; only ASCII is representable.
                    let ch = char::from_u32(v)
                        .filter(char::is_ascii)
                        .ok_or_else(syntax)?;
                    out.push(ch);
                } else {
                    out.push(char::from_u32(v).ok_or_else(syntax)?);
                }
            }
            '0'..='7' => {
                let oct: String = body.get(i - 1..i + 2).ok_or_else(syntax)?.iter().collect();
                i += 2;
                let v = u32::from_str_radix(&oct, 8).map_err(|_| syntax())?;
                let ch = char::from_u32(v)
                    .filter(char::is_ascii)
                    .ok_or_else(syntax)?;
                out.push(ch);
            }
            _ => return Err(syntax()),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Evaluation.

fn eval_steps<'a>(steps: &[Step], input: Vec<&'a Value>) -> Vec<&'a Value> {
    let mut cur = input;
    for step in steps {
        if cur.is_empty() {
            break;
        }
        cur = eval_step(step, cur);
    }
    cur
}

fn eval_step<'a>(step: &Step, input: Vec<&'a Value>) -> Vec<&'a Value> {
    let mut out = Vec::new();
    match step {
        Step::Field(name) => {
            for v in input {
                if let Some(x) = v.as_object().and_then(|m| m.get(name)) {
                    out.push(x);
                }
            }
        }
        Step::Wildcard => {
            for v in input {
                match v {
                    Value::Object(m) => out.extend(m.values()),
                    Value::Array(a) => out.extend(a.iter()),
                    _ => {}
                }
            }
        }
        Step::Recursive => {
            for v in input {
                collect_recursive(v, &mut out);
            }
        }
        Step::Slice(params) => {
            for v in input {
                if let Value::Array(a) = v {
                    slice_array(a, params, &mut out);
                }
            }
        }
        Step::Union(paths) => {
            for path in paths {
                out.extend(eval_steps(path, input.clone()));
            }
        }
        Step::Filter(f) => {
            for v in input {
                if let Value::Array(a) = v {
                    out.extend(a.iter().filter(|el| filter_matches(f, el)));
                }
            }
        }
    }
    out
}

fn collect_recursive<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    let children: Vec<&'a Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    };
    if children.is_empty() {
        return;
    }
    out.push(v);
    for c in children {
        collect_recursive(c, out);
    }
}

fn slice_array<'a>(a: &'a [Value], params: &[SliceParam; 3], out: &mut Vec<&'a Value>) {
    let len = i64::try_from(a.len()).unwrap_or(i64::MAX);
    let mut start = if params[0].known { params[0].value } else { 0 };
    if start < 0 {
        start = start.saturating_add(len);
    }
    let mut end = if params[1].known {
        params[1].value
    } else {
        len
    };
    if end < 0 || (end == 0 && params[1].derived) {
        end = end.saturating_add(len);
    }
    if start == end || start < 0 || start >= len || end < 0 || end > len || start > end {
        return;
    }
    let step = if params[2].known { params[2].value } else { 1 };
    let (Ok(start), Ok(end), Ok(step)) = (
        usize::try_from(start),
        usize::try_from(end),
        usize::try_from(step),
    ) else {
        return;
    };
    if step == 0 {
        return;
    }
    if let Some(items) = a.get(start..end) {
        out.extend(items.iter().step_by(step));
    }
}

/// A comparable scalar.
#[derive(Clone, Copy, Debug)]
enum Scalar<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

fn scalar_of(v: &Value) -> Option<Scalar<'_>> {
    match v {
        Value::String(s) => Some(Scalar::Str(s)),
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Some(Scalar::Int(i)),
            None => n.as_f64().map(Scalar::Float),
        },
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// The values an operand yields for one filtered element (`None` entries are
/// non-scalar values).
fn operand_values<'a>(op: &'a Operand, el: &'a Value) -> Vec<Option<Scalar<'a>>> {
    match op {
        Operand::Path(steps) => eval_steps(steps, vec![el])
            .into_iter()
            .map(scalar_of)
            .collect(),
        Operand::Str(s) => vec![Some(Scalar::Str(s))],
        Operand::Int(i) => vec![Some(Scalar::Int(*i))],
        Operand::Float(f) => vec![Some(Scalar::Float(*f))],
        Operand::Bool(b) => vec![Some(Scalar::Bool(*b))],
    }
}

fn filter_matches(f: &Filter, el: &Value) -> bool {
    let lefts = operand_values(&f.left, el);
    let Some(op) = f.op else {
        return !lefts.is_empty();
    };
    let rights = operand_values(&f.right, el);
    let ([Some(l)], [Some(r)]) = (lefts.as_slice(), rights.as_slice()) else {
        return false;
    };
    compare(*l, op, *r)
}

fn compare(l: Scalar<'_>, op: CmpOp, r: Scalar<'_>) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (l, r) {
        (Scalar::Str(a), Scalar::Str(b)) => Some(a.cmp(b)),
        (Scalar::Int(a), Scalar::Int(b)) => Some(a.cmp(&b)),
        (Scalar::Int(a), Scalar::Float(b)) => (a as f64).partial_cmp(&b),
        (Scalar::Float(a), Scalar::Int(b)) => a.partial_cmp(&(b as f64)),
        (Scalar::Float(a), Scalar::Float(b)) => a.partial_cmp(&b),
        (Scalar::Bool(a), Scalar::Bool(b)) => {
            // Booleans only support (in)equality, as in Go's template funcs.
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            };
        }
        _ => None,
    };
    let Some(ord) = ord else {
        return false;
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    }
}

// ---------------------------------------------------------------------------
// Table cells.

/// Turns the values selected by a printer column's JSONPath into the table
/// cell, as `tableconvertor.go` does (with the current time for `date`).
///
/// Upstream behaviour, followed here:
/// * no value → `null`; otherwise only the **first** selected value is used
///   (upstream: `results[0][0]`; further values are ignored, not joined);
/// * `string`: the value printed like `JSONPath.PrintResults` — strings raw,
///   numbers/bools with Go `%v` formatting (`1.5`, `1e+06`), objects/arrays as
///   compact Go JSON (sorted keys, `<>&` escaped), `null` as `<no value>`;
/// * `integer`: integer → itself, float → truncated toward zero, else `null`;
/// * `number`: any number as a float, else `null`;
/// * `boolean`: a bool, else `null`;
/// * `date`: a string is parsed as RFC 3339 and rendered as a human-readable
///   age (`5m`, `3d4h`, …; `<invalid>` if unparsable, `<unknown>` for the
///   empty/zero time), as `metatable.ConvertToHumanReadableDateType`; non
///   strings → `null`;
/// * any other column type → `null`.
pub fn printer_cell(values: &[&Value], column_type: &str) -> Value {
    printer_cell_at(values, column_type, SystemTime::now())
}

/// [`printer_cell`] with an explicit "now" for `date` columns.
pub fn printer_cell_at(values: &[&Value], column_type: &str, now: SystemTime) -> Value {
    let Some(&value) = values.first() else {
        return Value::Null;
    };
    if column_type == "string" {
        return Value::String(print_result(value));
    }
    match (column_type, value) {
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            // `int64(float64)`; `as` truncates toward zero and saturates.
            None => n.as_f64().map_or(Value::Null, |f| Value::from(f as i64)),
        },
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => Value::String(human_readable_date(s, now)),
        _ => Value::Null,
    }
}

/// `JSONPath.PrintResults` for one value.
fn print_result(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => crate::gofmt::go_float(f),
            (None, None) => n.to_string(),
        },
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            out.push_str(&crate::gofmt::go_json(v));
            out
        }
    }
}

/// `metav1.Time.UnmarshalQueryParameter` + `ConvertToHumanReadableDateType`.
fn human_readable_date(s: &str, now: SystemTime) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".to_string();
    }
    let Some(t) = parse_rfc3339_nanos(s) else {
        return "<invalid>".to_string();
    };
    // The zero time.Time (0001-01-01T00:00:00Z).
    if t == -62_135_596_800i128 * 1_000_000_000 {
        return "<unknown>".to_string();
    }
    let now_nanos: i128 = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_nanos()).unwrap_or(i128::MAX),
    };
    // time.Since saturates to the Duration (int64 nanoseconds) range.
    let d = now_nanos.saturating_sub(t);
    let d = i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX });
    human_duration(d)
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
fn human_duration(nanos: i64) -> String {
    const SEC: i64 = 1_000_000_000;
    let seconds = nanos / SEC;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / (60 * SEC);
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / (3600 * SEC);
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        format!("{hours}h{m}m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        format!("{}d{h}h", hours / 24)
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        format!("{}y{dy}d", hours / 24 / 365)
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to Unix nanoseconds.
fn parse_rfc3339_nanos(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let lit = |at: usize, c: u8| b.get(at) == Some(&c);
    if !(lit(4, b'-') && lit(7, b'-') && lit(10, b'T') && lit(13, b':') && lit(16, b':')) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut pos = 19;
    let mut nanos: i64 = 0;
    if lit(pos, b'.') || lit(pos, b',') {
        pos += 1;
        let start = pos;
        while b.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        if pos == start {
            return None;
        }
        let digits = std::str::from_utf8(b.get(start..pos)?).ok()?;
        let mut frac: String = digits.chars().take(9).collect();
        while frac.len() < 9 {
            frac.push('0');
        }
        nanos = frac.parse().ok()?;
    }
    let offset_secs: i64 = match b.get(pos) {
        Some(b'Z') if pos + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if pos + 6 == b.len() && lit(pos + 3, b':') => {
            let (oh, om) = (num(pos + 1, 2)?, num(pos + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn doc() -> Value {
        json!({
            "apiVersion": "v1",
            "metadata": {
                "name": "web",
                "labels": {"app.kubernetes.io/name": "web", "tier": "fe"},
            },
            "spec": {
                "replicas": 3,
                "ratio": 0.5,
                "paused": false,
                "containers": [
                    {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "side:2"},
                ],
            },
            "status": {
                "conditions": [
                    {"type": "Available", "status": "True", "priority": 1},
                    {"type": "Progressing", "status": "False", "priority": 2},
                    {"type": "Ready", "status": "True", "priority": 3},
                    {"type": "Available", "status": "Unknown", "priority": 4.5},
                ],
                "items": [10, 20, 30, 40, 50],
                "empty": [],
                "nothing": null,
            },
        })
    }

    fn eval(expr: &str) -> Vec<Value> {
        let doc = doc();
        let p = JsonPath::parse(expr).unwrap_or_else(|e| panic!("parse {expr:?}: {e}"));
        p.eval(&doc).into_iter().cloned().collect()
    }

    #[test]
    fn eval_table() {
        let cases: Vec<(&str, Value)> = vec![
            (".metadata.name", json!(["web"])),
            ("{.metadata.name}", json!(["web"])),
            ("{ .metadata.name }", json!(["web"])),
            ("$.metadata.name", json!(["web"])),
            ("{@.metadata.name}", json!(["web"])),
            (".spec.replicas", json!([3])),
            (".missing", json!([])),
            (".missing.deeper[0]", json!([])),
            (".metadata.name.deeper", json!([])),
            (".status.nothing", json!([null])),
            (".status.nothing.x", json!([])),
            (".metadata.labels['app.kubernetes.io/name']", json!(["web"])),
            (
                ".metadata.labels.app\\.kubernetes\\.io/name",
                json!(["web"]),
            ),
            (".metadata['labels']['tier']", json!(["fe"])),
            (".metadata.labels['missing']", json!([])),
            (".status.items[0]", json!([10])),
            (".status.items[4]", json!([50])),
            (".status.items[5]", json!([])),
            (".status.items[-1]", json!([50])),
            (".status.items[-5]", json!([10])),
            (".status.items[-6]", json!([])),
            (".status.items[1:3]", json!([20, 30])),
            (".status.items[:2]", json!([10, 20])),
            (".status.items[3:]", json!([40, 50])),
            (".status.items[::2]", json!([10, 30, 50])),
            (".status.items[1:4:2]", json!([20, 40])),
            (".status.items[1:9]", json!([])),
            (".status.items[2:2]", json!([])),
            (".status.items[3:1]", json!([])),
            (".status.items[::0]", json!([])),
            (".status.items[-2:]", json!([40, 50])),
            (".status.items[0,2]", json!([10, 30])),
            (".status.items[*]", json!([10, 20, 30, 40, 50])),
            (".status.items.*", json!([10, 20, 30, 40, 50])),
            (".status.empty[*]", json!([])),
            (".status.empty[0]", json!([])),
            (".status.empty[-1]", json!([])),
            (".metadata.labels.*", json!(["web", "fe"])),
            (".metadata.labels[*]", json!([])),
            (".metadata.name[0]", json!([])),
            (
                ".metadata.labels['tier','app.kubernetes.io/name']",
                json!(["fe", "web"]),
            ),
            (".spec.containers[*].name", json!(["app", "sidecar"])),
            (".spec.containers[*].ports[*].containerPort", json!([80])),
            (".spec.containers[1].image", json!(["side:2"])),
            ("..containerPort", json!([80])),
            ("..name", json!(["web", "app", "sidecar"])),
            (".spec..name", json!(["app", "sidecar"])),
            ("...image", json!(["app:1", "side:2"])),
            ("..ports[0].containerPort", json!([80])),
            (
                ".status.conditions[?(@.type==\"Available\")].status",
                json!(["True", "Unknown"]),
            ),
            (
                ".status.conditions[?(@.type == 'Ready')].status",
                json!(["True"]),
            ),
            (".status.conditions[?(@.type==\"Gone\")].status", json!([])),
            (
                ".status.conditions[?(@.type!=\"Available\")].type",
                json!(["Progressing", "Ready"]),
            ),
            (
                ".status.conditions[?(@.priority>2)].type",
                json!(["Ready", "Available"]),
            ),
            (
                ".status.conditions[?(@.priority>=2)].priority",
                json!([2, 3, 4.5]),
            ),
            (
                ".status.conditions[?(@.priority<2)].type",
                json!(["Available"]),
            ),
            (
                ".status.conditions[?(@.priority<=2.0)].priority",
                json!([1, 2]),
            ),
            (
                ".status.conditions[?(@.priority==4.5)].status",
                json!(["Unknown"]),
            ),
            (
                ".status.conditions[?(@.priority>-1)].priority",
                json!([1, 2, 3, 4.5]),
            ),
            (
                ".status.conditions[?(@.type<\"B\")].type",
                json!(["Available", "Available"]),
            ),
            // Kind mismatch never matches.
            (".status.conditions[?(@.type>1)].type", json!([])),
            (
                ".status.conditions[?(@.priority)].priority",
                json!([1, 2, 3, 4.5]),
            ),
            (".status.conditions[?(@.nope)].type", json!([])),
            (".spec.containers[?(@.ports)].name", json!(["app"])),
            (
                ".spec.containers[?(@.ports[0].containerPort==80)].name",
                json!(["app"]),
            ),
            (".status.items[?(@>25)]", json!([30, 40, 50])),
            (".status.items[?(@ == 20)]", json!([20])),
            // Filters apply to arrays only.
            (".metadata.labels[?(@.x)]", json!([])),
            ("{}", json!([doc()])),
        ];
        for (expr, want) in cases {
            let got = Value::Array(eval(expr));
            assert_eq!(got, want, "{expr}");
        }
    }

    #[test]
    fn filters_on_bools_and_paths() {
        let v = json!({"list": [
            {"a": true, "x": 1, "y": 1},
            {"a": false, "x": 1, "y": 2},
            {"a": "true", "x": 2, "y": 2},
        ]});
        let run = |expr: &str| -> Vec<Value> {
            JsonPath::parse(expr)
                .unwrap_or_else(|e| panic!("{expr}: {e}"))
                .eval(&v)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(run(".list[?(@.a==true)].y"), vec![json!(1)]);
        assert_eq!(run(".list[?(@.a!=true)].y"), vec![json!(2)]);
        assert_eq!(run(".list[?(@.a==\"true\")].x"), vec![json!(2)]);
        assert_eq!(run(".list[?(@.a<true)].y"), Vec::<Value>::new());
        assert_eq!(
            run(".list[?(@.x==@.y)].a"),
            vec![json!(true), json!("true")]
        );
        assert_eq!(run(".list[?(@.y>@.x)].a"), vec![json!(false)]);
        // A quoted ')' does not end the filter.
        let w = json!({"l": [{"n": "a)b"}, {"n": "c"}]});
        let p = JsonPath::parse(".l[?(@.n==\"a)b\")].n").expect("parse");
        assert_eq!(p.eval(&w), vec![&json!("a)b")]);
        let p = JsonPath::parse(".l[?(@.n=='a\\'b')].n").expect("parse");
        assert!(p.eval(&w).is_empty());
    }

    #[test]
    fn quoting_and_escapes() {
        let v = json!({"m": {"a.b": 1, "a": {"b": 2}, "with space": 3, "x]y": 4, "q\"": 5}});
        let run = |expr: &str| -> Vec<Value> {
            JsonPath::parse(expr)
                .unwrap_or_else(|e| panic!("{expr}: {e}"))
                .eval(&v)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(run(".m['a.b']"), vec![json!(1)]);
        assert_eq!(run(".m.a\\.b"), vec![json!(1)]);
        assert_eq!(run(".m.a.b"), vec![json!(2)]);
        assert_eq!(run(".m['with space']"), vec![json!(3)]);
        assert_eq!(run(".m['x]y']"), vec![json!(4)]);
        assert_eq!(run(".m['q\"']"), vec![json!(5)]);
        assert_eq!(run("{.m['a.b']}"), vec![json!(1)]);
        assert_eq!(unquote_extend("'a\\'b'").as_deref(), Ok("a'b"));
        assert_eq!(
            unquote_extend("\"a\\tb\\u00e9\\x41\\101\"").as_deref(),
            Ok("a\tbéAA")
        );
        assert!(unquote_extend("\"a\\'b\"").is_err());
        assert!(unquote_extend("'a\\qb'").is_err());
    }

    #[test]
    fn parse_structure() {
        let p = JsonPath::parse(".a[?(@.b == 'x')].c").expect("parse");
        assert_eq!(
            p.steps,
            vec![
                Step::Field("a".into()),
                Step::Filter(Box::new(Filter {
                    left: Operand::Path(vec![Step::Field("b".into())]),
                    op: Some(CmpOp::Eq),
                    right: Operand::Str("x".into()),
                })),
                Step::Field("c".into()),
            ]
        );
        assert_eq!(JsonPath::parse("{.a.b}"), JsonPath::parse(".a.b"));
        let p = JsonPath::parse(".a[?(@.n >= -1.5)]").expect("parse");
        assert!(matches!(
            &p.steps[1],
            Step::Filter(f) if f.right == Operand::Float(-1.5) && f.op == Some(CmpOp::Ge)
        ));
    }

    #[test]
    fn parse_errors() {
        let cases: &[(&str, &str)] = &[
            (".items[0", "unterminated array"),
            (".items[", "unterminated array"),
            ("{.items", "unclosed action"),
            (".items[?(@.a==1]", "unterminated filter"),
            (".items[?(@.a==1)", "unclosed array expect ]"),
            (".items[?(@.a=1)]", "unrecognized filter operator ="),
            (".items[?(@.a=~'x')]", "unrecognized filter operator ="),
            (".items[?(@.a===1)]", "unrecognized filter operator ==="),
            (".items[?(@.a==foo)]", "unrecognized identifier foo"),
            (
                ".items[?(!@.a)]",
                "unrecognized character in action: U+0021 '!'",
            ),
            (".items[?(@.a=='x)]", "unterminated filter"),
            (".items[a]", "invalid array index a"),
            (".items[\"a\"]", "invalid array index \"a\""),
            (".items[1:2:3:4]", "invalid array index 1:2:3:4"),
            (".items[-]", "array index - is not a number"),
            (".items[99999999999999999999]", "is not a number"),
            ("..a..b", ""),
            ("....a", "invalid multiple recursive descent"),
            (".a}.b", "only a single"),
            ("{.a}{.b}", "only a single"),
            ("{.a} x", "only a single"),
            ("spec.name", "unrecognized identifier spec"),
            (".a \"lit\"", "only supported in filters"),
            (".a 5", "only supported in filters"),
            ("#a", "unrecognized character in action: U+0023 '#'"),
            (".a\n", "unclosed action"),
            (".a['x\n']", "unterminated array"),
            (".a[?(@.b=='x\\qy')]", "unquote string"),
            (".a[?(@.b==1.2.3)]", "cannot parse number 1.2.3"),
        ];
        for (expr, want) in cases {
            match JsonPath::parse(expr) {
                Ok(p) if want.is_empty() => {
                    // `..a..b` is valid (two separate descents).
                    assert_eq!(p.steps.len(), 4, "{expr}");
                }
                Ok(p) => panic!("{expr:?} parsed unexpectedly: {p:?}"),
                Err(e) => assert!(e.contains(want), "{expr:?}: got {e:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        let v = doc();
        let inputs = [
            "",
            "{",
            "}",
            "{}",
            "[",
            "]",
            "[?(",
            "[?()]",
            "[?(@)]",
            ".",
            "..",
            "...",
            "\\",
            ".\\",
            "['",
            "[']",
            "['']",
            "[,]",
            "[:]",
            "[::]",
            "[0,]",
            "$",
            "@",
            "é",
            ".é",
            "[?(@.a<)]",
            "[?(<1)]",
            "[?(@.a<'é')]",
            "'",
            "\"",
            "-",
            "+",
            "1e5",
            "[9223372036854775807]",
            "[-9223372036854775808]",
            "[-9223372036854775808:9223372036854775807:9223372036854775807]",
            "..[*]",
            "..*",
            ".*.*",
            "[?(@.x=='\\u{zz}')]",
        ];
        for i in inputs {
            if let Ok(p) = JsonPath::parse(i) {
                let _ = p.eval(&v);
            }
        }
        let p = JsonPath::parse("[9223372036854775807]").expect("parse");
        assert!(p.eval(&json!([1, 2])).is_empty());
        let p = JsonPath::parse("[-9223372036854775808:]").expect("parse");
        assert!(p.eval(&json!([1, 2])).is_empty());
    }

    fn now() -> SystemTime {
        // 2023-11-14T22:13:20Z
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn printer_cell_table() {
        let obj = json!({"m": {"b": "<&>", "a": [1, 2.5, 1e21, 1e-7, null, true]}});
        let cases: Vec<(Vec<Value>, &str, Value)> = vec![
            (vec![], "string", Value::Null),
            (vec![], "integer", Value::Null),
            (vec![json!("x")], "string", json!("x")),
            (vec![json!("x"), json!("y")], "string", json!("x")),
            (vec![json!(5)], "string", json!("5")),
            (vec![json!(-5)], "string", json!("-5")),
            (vec![json!(1.5)], "string", json!("1.5")),
            (vec![json!(1_000_000.0)], "string", json!("1e+06")),
            (vec![json!(123_456.0)], "string", json!("123456")),
            (vec![json!(0.0001)], "string", json!("0.0001")),
            (vec![json!(0.00001)], "string", json!("1e-05")),
            (vec![json!(true)], "string", json!("true")),
            (vec![json!(null)], "string", json!("<no value>")),
            (vec![json!([1, "a"])], "string", json!("[1,\"a\"]")),
            (
                vec![obj["m"].clone()],
                "string",
                json!("{\"a\":[1,2.5,1e+21,1e-7,null,true],\"b\":\"\\u003c\\u0026\\u003e\"}"),
            ),
            (vec![json!(3)], "integer", json!(3)),
            (vec![json!(3), json!(4)], "integer", json!(3)),
            (vec![json!(3.7)], "integer", json!(3)),
            (vec![json!(-3.7)], "integer", json!(-3)),
            (vec![json!("3")], "integer", Value::Null),
            (vec![json!(null)], "integer", Value::Null),
            (vec![json!(3)], "number", json!(3.0)),
            (vec![json!(2.5)], "number", json!(2.5)),
            (vec![json!("2.5")], "number", Value::Null),
            (vec![json!(true)], "boolean", json!(true)),
            (vec![json!(false)], "boolean", json!(false)),
            (vec![json!("true")], "boolean", Value::Null),
            (vec![json!(1)], "boolean", Value::Null),
            (vec![json!("2023-11-14T22:08:20Z")], "date", json!("5m")),
            (vec![json!("2023-11-14T22:13:00Z")], "date", json!("20s")),
            (vec![json!("2023-11-14T22:13:19.5Z")], "date", json!("0s")),
            (
                vec![json!("2023-11-14T23:13:20+01:00")],
                "date",
                json!("0s"),
            ),
            (
                vec![json!("2023-11-14T17:06:20-05:00")],
                "date",
                json!("7m"),
            ),
            (vec![json!("2023-11-14T22:13:21Z")], "date", json!("0s")),
            (
                vec![json!("2023-11-14T22:13:25Z")],
                "date",
                json!("<invalid>"),
            ),
            (vec![json!("2023-11-14T21:05:20Z")], "date", json!("68m")),
            (vec![json!("2023-11-14T18:03:20Z")], "date", json!("4h10m")),
            (vec![json!("2023-11-13T22:13:20Z")], "date", json!("24h")),
            (vec![json!("2023-11-10T20:13:20Z")], "date", json!("4d2h")),
            (vec![json!("2023-01-01T00:00:00Z")], "date", json!("317d")),
            (vec![json!("2021-11-14T22:13:20Z")], "date", json!("2y")),
            (vec![json!("2020-11-14T22:13:20Z")], "date", json!("3y")),
            (vec![json!("2020-11-13T22:13:20Z")], "date", json!("3y1d")),
            (vec![json!("2000-01-01T00:00:00Z")], "date", json!("23y")),
            (
                vec![json!("0001-01-01T00:00:00Z")],
                "date",
                json!("<unknown>"),
            ),
            (vec![json!("")], "date", json!("<unknown>")),
            (vec![json!("yesterday")], "date", json!("<invalid>")),
            (
                vec![json!("2023-02-29T00:00:00Z")],
                "date",
                json!("<invalid>"),
            ),
            (
                vec![json!("2023-11-14 22:13:20Z")],
                "date",
                json!("<invalid>"),
            ),
            (vec![json!(5)], "date", Value::Null),
            (vec![json!("x")], "custom", Value::Null),
        ];
        for (vals, ty, want) in cases {
            let refs: Vec<&Value> = vals.iter().collect();
            assert_eq!(printer_cell_at(&refs, ty, now()), want, "{vals:?} as {ty}");
        }
        assert_eq!(printer_cell(&[&json!(7)], "integer"), json!(7));
    }

    #[test]
    fn printer_cell_with_jsonpath() {
        let d = doc();
        let cell = |expr: &str, ty: &str| {
            let p = JsonPath::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            printer_cell_at(&p.eval(&d), ty, now())
        };
        assert_eq!(cell(".spec.replicas", "integer"), json!(3));
        assert_eq!(cell(".spec.ratio", "number"), json!(0.5));
        assert_eq!(cell(".spec.paused", "boolean"), json!(false));
        assert_eq!(
            cell(".status.conditions[?(@.type=='Ready')].status", "string"),
            json!("True")
        );
        assert_eq!(cell(".spec.containers[*].name", "string"), json!("app"));
        assert_eq!(cell(".missing", "string"), Value::Null);
    }
}
