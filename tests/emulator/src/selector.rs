//! Kubernetes label selectors and field selectors.
//!
//! [`LabelSelector`] follows `k8s.io/apimachinery/pkg/labels` (the `selector.go`
//! lexer/parser, `NewRequirement` validation and `Requirement.Matches`) and
//! `metav1.LabelSelectorAsSelector` for the structured API form.
//! [`FieldSelector`] follows `k8s.io/apimachinery/pkg/fields` (`ParseSelector`,
//! `splitTerms`, `splitTerm`, `UnescapeValue`).
//!
//! Error messages mirror the upstream wording closely (field paths are
//! rendered the way `field.Error` does, minus an empty leading path).

use std::collections::BTreeMap;

use serde_json::Value;

/// Maximum length of a label value and of the name part of a label key.
const MAX_NAME_LEN: usize = 63;
/// Maximum length of the DNS subdomain prefix of a label key.
const MAX_PREFIX_LEN: usize = 253;

const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
(e.g. 'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric \
characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
'MyValue',  or 'my_value',  or '12345', regex used for validation is \
'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// A label selector operator (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`
    NotIn,
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v`
    NotEquals,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>5` (`gt`)
    GreaterThan,
    /// `k<5` (`lt`)
    LessThan,
}

/// One requirement of a label selector; all requirements are ANDed.
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values (sorted and de-duplicated, like the upstream `sets.String`).
    pub values: Vec<String>,
}

impl Requirement {
    /// Validating constructor, mirroring `labels.NewRequirement`.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, String> {
        let mut errs: Vec<String> = Vec::new();
        let key_errs = qualified_name_errors(key);
        if !key_errs.is_empty() {
            errs.push(invalid("key", key, &key_errs.join("; ")));
        }
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(invalid(
                            &format!("values[{i}]"),
                            v,
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let verrs = label_value_errors(v);
            if !verrs.is_empty() {
                errs.push(invalid(
                    &format!("values[{i}][{key}]"),
                    v,
                    &verrs.join("; "),
                ));
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(errs));
        }
        let mut values = values;
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// `Requirement.Matches`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let has_value = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                labels.get(&self.key).is_some_and(|v| has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => {
                labels.get(&self.key).is_none_or(|v| !has_value(v))
            }
            Operator::Exists => labels.contains_key(&self.key),
            Operator::DoesNotExist => !labels.contains_key(&self.key),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(actual)) = labels.get(&self.key).map(|v| v.parse::<i64>()) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

/// A parsed label selector (AND of requirements, sorted by key).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter (`labels.Parse`).
    ///
    /// Grammar: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
    /// `!k`, `k>5`, `k<5`, comma-separated (AND). The empty string selects
    /// everything. As upstream, `k in ()` is accepted and means `k in ("")`,
    /// and `k=` / `k!=` compare against the empty value.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let tokens = lex(s);
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Builds from a `metav1.LabelSelector` JSON object (`null` or `{}` selects
    /// everything). Validation errors name the offending field, following
    /// `ValidateLabelSelector` wording.
    pub fn from_api(v: &Value) -> Result<LabelSelector, String> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::default()),
            Value::Object(o) => o,
            other => {
                return Err(format!(
                    "Invalid value: {}: label selector must be an object",
                    compact(other)
                ));
            }
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, val) in labels {
                    let Value::String(val) = val else {
                        return Err(format!(
                            "matchLabels[{k}]: Invalid value: {}: must be a string",
                            compact(val)
                        ));
                    };
                    let kerrs = qualified_name_errors(k);
                    if !kerrs.is_empty() {
                        return Err(invalid("matchLabels", k, &kerrs.join("; ")));
                    }
                    let verrs = label_value_errors(val);
                    if !verrs.is_empty() {
                        return Err(invalid("matchLabels", val, &verrs.join("; ")));
                    }
                    requirements.push(Requirement {
                        key: k.clone(),
                        operator: Operator::Equals,
                        values: vec![val.clone()],
                    });
                }
            }
            Some(other) => {
                return Err(format!(
                    "matchLabels: Invalid value: {}: must be an object",
                    compact(other)
                ));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, expr) in exprs.iter().enumerate() {
                    requirements.push(expression_from_api(i, expr)?);
                }
            }
            Some(other) => {
                return Err(format!(
                    "matchExpressions: Invalid value: {}: must be an array",
                    compact(other)
                ));
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Matches against a labels map (all requirements must match).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches against `metadata.labels` of a JSON object (missing labels =
    /// empty map; non-string label values are ignored).
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let mut labels = BTreeMap::new();
        if let Some(Value::Object(m)) = obj.get("metadata").and_then(|m| m.get("labels")) {
            for (k, v) in m {
                if let Value::String(s) = v {
                    labels.insert(k.clone(), s.clone());
                }
            }
        }
        self.matches(&labels)
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

fn expression_from_api(i: usize, expr: &Value) -> Result<Requirement, String> {
    let path = format!("matchExpressions[{i}]");
    let Value::Object(expr) = expr else {
        return Err(format!(
            "{path}: Invalid value: {}: must be an object",
            compact(expr)
        ));
    };
    let key = match expr.get("key") {
        Some(Value::String(k)) => k.as_str(),
        None | Some(Value::Null) => "",
        Some(other) => {
            return Err(format!(
                "{path}.key: Invalid value: {}: must be a string",
                compact(other)
            ));
        }
    };
    let op = match expr.get("operator") {
        Some(Value::String(op)) => op.as_str(),
        None | Some(Value::Null) => "",
        Some(other) => {
            return Err(format!(
                "{path}.operator: Invalid value: {}: must be a string",
                compact(other)
            ));
        }
    };
    let mut values = Vec::new();
    match expr.get("values") {
        None | Some(Value::Null) => {}
        Some(Value::Array(vs)) => {
            for (j, v) in vs.iter().enumerate() {
                let Value::String(s) = v else {
                    return Err(format!(
                        "{path}.values[{j}]: Invalid value: {}: must be a string",
                        compact(v)
                    ));
                };
                values.push(s.clone());
            }
        }
        Some(other) => {
            return Err(format!(
                "{path}.values: Invalid value: {}: must be an array",
                compact(other)
            ));
        }
    }
    let operator = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        _ => {
            return Err(format!(
                "{path}.operator: Unsupported value: {}: supported values: \"DoesNotExist\", \
                 \"Exists\", \"In\", \"NotIn\"",
                go_quote(op)
            ));
        }
    };
    let mut errs = Vec::new();
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => errs.push(format!(
            "{path}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        )),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(format!(
            "{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or \
             'DoesNotExist'"
        )),
        _ => {}
    }
    let kerrs = qualified_name_errors(key);
    if !kerrs.is_empty() {
        errs.push(invalid(&format!("{path}.key"), key, &kerrs.join("; ")));
    }
    for (j, v) in values.iter().enumerate() {
        let verrs = label_value_errors(v);
        if !verrs.is_empty() {
            errs.push(invalid(
                &format!("{path}.values[{j}]"),
                v,
                &verrs.join("; "),
            ));
        }
    }
    if !errs.is_empty() {
        return Err(aggregate(errs));
    }
    values.sort();
    values.dedup();
    Ok(Requirement {
        key: key.to_string(),
        operator,
        values,
    })
}

// ---------------------------------------------------------------------------
// Label selector lexer and parser (port of labels/selector.go).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

fn string_to_token(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_label_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_special_symbol(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = s.chars().collect();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < chars.len() && is_label_whitespace(chars[pos]) {
            pos += 1;
        }
        if pos >= chars.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special_symbol(chars[pos]) {
            // Longest match among the operator spellings (scanSpecialSymbol).
            let mut buf = String::new();
            let mut last: Option<(Tok, String, usize)> = None;
            let mut p = pos;
            while p < chars.len() && is_special_symbol(chars[p]) {
                buf.push(chars[p]);
                p += 1;
                if let Some(t) = string_to_token(&buf) {
                    last = Some((t, buf.clone(), p));
                } else if last.is_some() {
                    break;
                }
            }
            match last {
                Some((t, lit, end)) => {
                    out.push((t, lit));
                    pos = end;
                }
                None => {
                    // Unreachable in practice: every single symbol is a token.
                    out.push((Tok::Identifier, buf));
                    pos = p;
                }
            }
        } else {
            let start = pos;
            while pos < chars.len()
                && !is_special_symbol(chars[pos])
                && !is_label_whitespace(chars[pos])
            {
                pos += 1;
            }
            let word: String = chars[start..pos].iter().collect();
            let tok = match word.as_str() {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Identifier,
            };
            out.push((tok, word));
        }
    }
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn item(&self, pos: usize, ctx: Ctx) -> (Tok, String) {
        let (tok, lit) = self
            .tokens
            .get(pos)
            .cloned()
            .unwrap_or((Tok::End, String::new()));
        let tok = match (ctx, tok) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Identifier,
            (_, t) => t,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.item(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let it = self.item(self.pos, ctx);
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        it
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let mut values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        // Upstream collects values in a sorted set before validating them.
        values.sort();
        values.dedup();
        Requirement::new(&key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = qualified_name_errors(&lit);
        if !errs.is_empty() {
            return Err(invalid("", &lit, &errs.join("; ")));
        }
        let (t, _) = self.lookahead(Ctx::Values);
        if (t == Tok::End || t == Tok::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    s.push(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        s.push(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::End || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

// ---------------------------------------------------------------------------
// Validation helpers (k8s.io/apimachinery/pkg/util/validation).

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    is_alnum(first)
        && is_alnum(last)
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (label.chars().next(), label.chars().last()) {
            (Some(f), Some(l)) => {
                lower_alnum(f)
                    && lower_alnum(l)
                    && label.chars().all(|c| lower_alnum(c) || c == '-')
            }
            _ => false,
        }
    })
}

/// `validation.IsQualifiedName`: returns the list of problems (empty = valid).
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > MAX_PREFIX_LEN {
                    errs.push(format!(
                        "prefix part must be no more than {MAX_PREFIX_LEN} characters"
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {DNS1123_SUBDOMAIN_ERR}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {QUALIFIED_NAME_ERR} with an optional DNS subdomain prefix \
                 and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > MAX_NAME_LEN {
        errs.push(format!(
            "name part must be no more than {MAX_NAME_LEN} characters"
        ));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {QUALIFIED_NAME_ERR}"));
    }
    errs
}

/// `validation.IsValidLabelValue`: returns the list of problems (empty = valid).
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > MAX_NAME_LEN {
        errs.push(format!("must be no more than {MAX_NAME_LEN} characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(LABEL_VALUE_ERR.to_string());
    }
    errs
}

/// Go `%q` quoting (close enough for error messages).
fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn compact(v: &Value) -> String {
    v.to_string()
}

/// `field.Invalid(path, value, detail).Error()`.
fn invalid(path: &str, value: &str, detail: &str) -> String {
    if path.is_empty() {
        format!("Invalid value: {}: {detail}", go_quote(value))
    } else {
        format!("{path}: Invalid value: {}: {detail}", go_quote(value))
    }
}

fn invalid_list(path: &str, values: &[String], detail: &str) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!(
        "{path}: Invalid value: []string{{{}}}: {detail}",
        quoted.join(", ")
    )
}

/// `utilerrors.NewAggregate(errs).Error()`.
fn aggregate(errs: Vec<String>) -> String {
    if errs.len() == 1 {
        errs.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", errs.join(", "))
    }
}

// ---------------------------------------------------------------------------
// Field selectors.

/// One `field=value` / `field!=value` term.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldRequirement {
    /// The field path, e.g. `metadata.name` (not trimmed, as upstream).
    pub field: String,
    /// The unescaped value.
    pub value: String,
    /// True for `!=`.
    pub negated: bool,
}

/// A parsed field selector (AND of terms).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter (`fields.ParseSelector`).
    ///
    /// Terms are split on unescaped commas; each term is split at the first
    /// `!=`, `==` or `=`; values are unescaped (`\\`, `\,`, `\=`); unescaped
    /// `,`/`=` inside a value or unknown escapes are errors. Empty terms are
    /// skipped. No whitespace trimming is done, as upstream.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let value = unescape_value(rhs)?;
            requirements.push(FieldRequirement {
                field: lhs.to_string(),
                value,
                negated: op == "!=",
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// The field names used, in (sorted) term order.
    pub fn fields(&self) -> Vec<&str> {
        self.requirements.iter().map(|r| r.field.as_str()).collect()
    }

    /// Matches using `get(field)`; an absent field compares as `""`.
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = get(&r.field).unwrap_or_default();
            (actual == r.value) != r.negated
        })
    }

    /// True when there are no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed terms.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }
}

/// `fields.EscapeValue`: escapes `\`, `,` and `=`.
pub fn escape_field_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if matches!(c, '\\' | ',' | '=') {
                out.push(c);
            } else {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go formats the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                ));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// A `metav1.LabelSelector` rendered as the API server's selector string.
pub fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    if let Some(exprs) = sel["matchExpressions"].as_array() {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            let mut values: Vec<String> = e["values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            values.sort();
            values.dedup();
            let s = match e["operator"].as_str().unwrap_or_default() {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.clone(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            };
            reqs.push((key, s));
        }
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type MatchCase<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_matching_table() {
        let cases: &[MatchCase] = &[
            ("", &[], true),
            ("", &[("a", "b")], true),
            ("   ", &[("a", "b")], true),
            ("a=b", &[("a", "b")], true),
            ("a=b", &[("a", "c")], false),
            ("a=b", &[], false),
            ("a==b", &[("a", "b")], true),
            ("a==b", &[("a", "c")], false),
            ("a!=b", &[("a", "b")], false),
            ("a!=b", &[("a", "c")], true),
            ("a!=b", &[], true),
            ("a=", &[("a", "")], true),
            ("a=", &[("a", "x")], false),
            ("a!=", &[("a", "")], false),
            ("a in (b,c)", &[("a", "c")], true),
            ("a in (b,c)", &[("a", "d")], false),
            ("a in (b,c)", &[], false),
            ("a notin (b,c)", &[("a", "c")], false),
            ("a notin (b,c)", &[("a", "d")], true),
            ("a notin (b,c)", &[], true),
            ("a in ()", &[("a", "")], true),
            ("a in ()", &[("a", "x")], false),
            ("a in (,x)", &[("a", "")], true),
            ("a in (in, notin)", &[("a", "notin")], true),
            ("a", &[("a", "")], true),
            ("a", &[("b", "")], false),
            ("!a", &[("b", "")], true),
            ("!a", &[("a", "x")], false),
            ("a>5", &[("a", "6")], true),
            ("a>5", &[("a", "5")], false),
            ("a>5", &[("a", "x")], false),
            ("a>5", &[], false),
            ("a<5", &[("a", "-3")], true),
            ("a<5", &[("a", "5")], false),
            ("a=b,c=d", &[("a", "b"), ("c", "d")], true),
            ("a=b,c=d", &[("a", "b"), ("c", "e")], false),
            (" a = b , c ", &[("a", "b"), ("c", "")], true),
            ("\ta\t==\tb\n", &[("a", "b")], true),
            ("a,!b", &[("a", "1")], true),
            ("a,!b", &[("a", "1"), ("b", "2")], false),
            (
                "x in (foo,,baz),y,z notin ()",
                &[("x", ""), ("y", "1")],
                true,
            ),
            ("example.com/app=web", &[("example.com/app", "web")], true),
            ("in=notin", &[("in", "notin")], true),
            ("a=b_c-d.e", &[("a", "b_c-d.e")], true),
        ];
        for (sel, ls, want) in cases {
            let parsed =
                LabelSelector::parse(sel).unwrap_or_else(|e| panic!("parse {sel:?} failed: {e}"));
            assert_eq!(
                parsed.matches(&labels(ls)),
                *want,
                "selector {sel:?} on {ls:?}"
            );
        }
    }

    #[test]
    fn label_selector_parse_errors() {
        let cases: &[(&str, &str)] = &[
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
            ("in (", "found '(', expected: in, notin"),
            ("k in (", "found '', expected: ',', ')' or identifier"),
            ("k in (a", "found '', expected: ',' or ')'"),
            ("k in a", "found 'a' expected: '('"),
            (
                "=v",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            ("a=b,", "found '', expected: identifier after ','"),
            ("a=b,,c", "found ',', expected: identifier after ','"),
            ("a b", "found 'b', expected: in, notin"),
            ("!", "found '', expected: identifier"),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            ("a=(", "found '(', expected: identifier"),
            ("a*b=c", "Invalid value: \"a*b\""),
            ("-a=b", "Invalid value: \"-a\""),
            ("/a", "prefix part must be non-empty"),
            ("a/b/c", "a qualified name must consist"),
            (
                "Example.com/a",
                "prefix part a lowercase RFC 1123 subdomain",
            ),
            ("a>b", "the value must be an integer"),
            ("a<1.5", "the value must be an integer"),
            // Negative numbers are not valid label values, as upstream.
            ("a>-2", "values[0][a]: Invalid value: \"-2\""),
            ("a=b*", "values[0][a]: Invalid value: \"b*\""),
            ("a in (x,-y)", "values[0][a]: Invalid value: \"-y\""),
        ];
        for (sel, want) in cases {
            match LabelSelector::parse(sel) {
                Ok(s) => panic!("{sel:?} parsed unexpectedly: {s:?}"),
                Err(e) => assert!(e.contains(want), "{sel:?}: got {e:?}, want {want:?}"),
            }
        }
        let long_value = format!("a={}", "v".repeat(64));
        let e = LabelSelector::parse(&long_value).expect_err("too long value");
        assert!(e.contains("must be no more than 63 characters"), "{e}");
        let long_key = format!("{}=v", "k".repeat(64));
        let e = LabelSelector::parse(&long_key).expect_err("too long key");
        assert!(
            e.contains("name part must be no more than 63 characters"),
            "{e}"
        );
        assert!(e.starts_with("unable to parse requirement: "), "{e}");
        let ok = format!("a={}", "v".repeat(63));
        assert!(LabelSelector::parse(&ok).is_ok());
        // Non-ASCII input must not panic.
        assert!(LabelSelector::parse("ä=ö").is_err());
        assert!(LabelSelector::parse("a=ö,(").is_err());
    }

    #[test]
    fn label_selector_parse_structure() {
        let s = LabelSelector::parse("b in (y,x,x), a").expect("parse");
        assert_eq!(
            s.requirements(),
            &[
                Requirement {
                    key: "a".into(),
                    operator: Operator::Exists,
                    values: vec![],
                },
                Requirement {
                    key: "b".into(),
                    operator: Operator::In,
                    values: vec!["x".into(), "y".into()],
                },
            ]
        );
        assert!(LabelSelector::parse("").expect("empty").is_empty());
        assert!(!s.is_empty());
        assert_eq!(
            LabelSelector::parse("a=b,c").expect("p"),
            LabelSelector::parse("c, a = b").expect("p")
        );
    }

    #[test]
    fn label_selector_matches_object() {
        let s = LabelSelector::parse("app=web,!canary").expect("parse");
        let obj = json!({"metadata": {"labels": {"app": "web", "n": 5}}});
        assert!(s.matches_object(&obj));
        let obj = json!({"metadata": {"labels": {"app": "web", "canary": "true"}}});
        assert!(!s.matches_object(&obj));
        assert!(!s.matches_object(&json!({"metadata": {}})));
        assert!(!s.matches_object(&json!("not an object")));
        let notin = LabelSelector::parse("n notin (5)").expect("parse");
        // Non-string label values are ignored, i.e. treated as absent.
        assert!(notin.matches_object(&json!({"metadata": {"labels": {"n": 5}}})));
        assert!(LabelSelector::default().matches_object(&json!(null)));
    }

    #[test]
    fn label_selector_from_api_table() {
        let sel = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ]
        });
        let s = LabelSelector::from_api(&sel).expect("from_api");
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("app", "web"), ("tier", "fe"), ("team", "x")], true),
            (
                &[
                    ("app", "web"),
                    ("tier", "be"),
                    ("team", "x"),
                    ("env", "dev"),
                ],
                true,
            ),
            (
                &[
                    ("app", "web"),
                    ("tier", "be"),
                    ("team", "x"),
                    ("env", "prod"),
                ],
                false,
            ),
            (&[("app", "web"), ("tier", "zz"), ("team", "x")], false),
            (&[("app", "web"), ("tier", "fe")], false),
            (
                &[
                    ("app", "web"),
                    ("tier", "fe"),
                    ("team", "x"),
                    ("legacy", ""),
                ],
                false,
            ),
            (&[("app", "api"), ("tier", "fe"), ("team", "x")], false),
        ];
        for (ls, want) in cases {
            assert_eq!(s.matches(&labels(ls)), *want, "{ls:?}");
        }
        for empty in [
            json!(null),
            json!({}),
            json!({"matchLabels": {}, "matchExpressions": []}),
        ] {
            let s = LabelSelector::from_api(&empty).expect("empty");
            assert!(s.is_empty());
            assert!(s.matches(&labels(&[("x", "y")])));
        }
    }

    #[test]
    fn label_selector_from_api_errors() {
        let cases: &[(Value, &str)] = &[
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]}),
                "matchExpressions[0].operator: Unsupported value: \"Foo\"",
            ),
            (
                json!({"matchExpressions": [{"key": "a"}]}),
                "matchExpressions[0].operator: Unsupported value: \"\"",
            ),
            (
                json!({"matchExpressions": [
                    {"key": "a", "operator": "Exists"},
                    {"key": "b", "operator": "In", "values": []}
                ]}),
                "matchExpressions[1].values: Required value",
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "NotIn"}]}),
                "matchExpressions[0].values: Required value",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "matchExpressions[0].values: Forbidden",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]}),
                "matchExpressions[0].values: Forbidden",
            ),
            (
                json!({"matchExpressions": [{"key": "a b", "operator": "Exists"}]}),
                "matchExpressions[0].key: Invalid value: \"a b\"",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["-x"]}]}),
                "matchExpressions[0].values[0]: Invalid value: \"-x\"",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}),
                "matchExpressions[0].values[0]",
            ),
            (
                json!({"matchExpressions": {}}),
                "matchExpressions: Invalid value",
            ),
            (
                json!({"matchExpressions": ["x"]}),
                "matchExpressions[0]: Invalid value",
            ),
            (json!({"matchLabels": {"a": 1}}), "matchLabels[a]"),
            (
                json!({"matchLabels": {"-a": "b"}}),
                "matchLabels: Invalid value: \"-a\"",
            ),
            (
                json!({"matchLabels": {"a": "b c"}}),
                "matchLabels: Invalid value: \"b c\"",
            ),
            (json!({"matchLabels": []}), "matchLabels: Invalid value"),
            (json!("a=b"), "must be an object"),
        ];
        for (v, want) in cases {
            match LabelSelector::from_api(v) {
                Ok(s) => panic!("{v} accepted: {s:?}"),
                Err(e) => assert!(e.contains(want), "{v}: got {e:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn field_selector_table() {
        let get = |f: &str| match f {
            "metadata.name" => Some("foo".to_string()),
            "metadata.namespace" => Some("default".to_string()),
            "spec.weird" => Some("a,b=c\\d".to_string()),
            _ => None,
        };
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("metadata.name=foo", true),
            ("metadata.name==foo", true),
            ("metadata.name=bar", false),
            ("metadata.name!=bar", true),
            ("metadata.name!=foo", false),
            ("metadata.name=foo,metadata.namespace=default", true),
            ("metadata.name=foo,metadata.namespace!=default", false),
            ("metadata.name=foo,", true),
            ("status.phase=", true),
            ("status.phase!=", false),
            ("status.phase!=Running", true),
            ("status.phase=Running", false),
            ("spec.weird=a\\,b\\=c\\\\d", true),
            ("spec.weird!=a\\,b\\=c\\\\d", false),
        ];
        for (sel, want) in cases {
            let s =
                FieldSelector::parse(sel).unwrap_or_else(|e| panic!("parse {sel:?} failed: {e}"));
            assert_eq!(s.matches(&get), *want, "{sel:?}");
        }
    }

    #[test]
    fn field_selector_structure_and_escape() {
        let s = FieldSelector::parse("spec.nodeName=n1,metadata.name!=x\\,y").expect("parse");
        assert_eq!(s.fields(), vec!["metadata.name", "spec.nodeName"]);
        assert_eq!(
            s.requirements()[0],
            FieldRequirement {
                field: "metadata.name".into(),
                value: "x,y".into(),
                negated: true,
            }
        );
        assert!(FieldSelector::parse("").expect("empty").is_empty());
        assert!(!s.is_empty());
        // Whitespace is not trimmed (as upstream).
        let s = FieldSelector::parse("a=b, c=d").expect("parse");
        assert_eq!(s.fields(), vec![" c", "a"]);
        // `a==b` splits at the first operator occurrence.
        let s = FieldSelector::parse("a==b").expect("parse");
        assert_eq!(s.requirements()[0].value, "b");
        let raw = "x,y=z\\w";
        let escaped = escape_field_value(raw);
        assert_eq!(escaped, "x\\,y\\=z\\\\w");
        let s = FieldSelector::parse(&format!("f={escaped}")).expect("parse");
        assert_eq!(s.requirements()[0].value, raw);
    }

    #[test]
    fn field_selector_errors() {
        let cases: &[(&str, &str)] = &[
            ("foo", "invalid selector: 'foo'; can't understand 'foo'"),
            ("a=b,foo", "can't understand 'foo'"),
            ("a=b=c", "unescaped character in value: 61"),
            ("a!==b", "unescaped character in value: 61"),
            ("a=b\\x", "invalid escape sequence: \\x"),
            ("a=b\\", "invalid escape sequence: \\"),
        ];
        for (sel, want) in cases {
            match FieldSelector::parse(sel) {
                Ok(s) => panic!("{sel:?} parsed unexpectedly: {s:?}"),
                Err(e) => assert!(e.contains(want), "{sel:?}: got {e:?}, want {want:?}"),
            }
        }
        assert!(FieldSelector::parse("ä=\\ö").is_err());
    }
}
