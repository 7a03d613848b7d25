//! Schema access: [`Sch`], a read-only view of a JSONSchemaProps node that is tolerant of
//! wrong JSON types (a key holding the wrong type reads as absent), the additionalProperties
//! forms, and the formats apiextensions keeps (`SUPPORTED_FORMATS`).

use serde_json::{Map, Value};
use std::sync::LazyLock;

static EMPTY_SCHEMA: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// A JSONSchemaProps node. A non-object schema value behaves like `{}`.
#[derive(Clone, Copy)]
pub(super) struct Sch<'a>(pub(super) &'a Map<String, Value>);

#[derive(Clone, Copy)]
pub(super) enum Addl<'a> {
    Absent,
    Allows(bool),
    Schema(Sch<'a>),
}

/// Formats kept by apiextensions' `StripUnsupportedFormatsPostProcess`
/// (names normalized by removing `-`, as go-openapi's registry does).
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

impl<'a> Sch<'a> {
    pub(super) fn of(v: &'a Value) -> Sch<'a> {
        match v {
            Value::Object(m) => Sch(m),
            _ => Sch(&EMPTY_SCHEMA),
        }
    }

    pub(super) fn get(self, k: &str) -> Option<&'a Value> {
        self.0.get(k)
    }

    pub(super) fn flag(self, k: &str) -> bool {
        matches!(self.get(k), Some(Value::Bool(true)))
    }

    pub(super) fn string(self, k: &str) -> Option<&'a str> {
        self.get(k).and_then(Value::as_str)
    }

    /// An integral JSON number (as an int64 field of JSONSchemaProps would hold).
    pub(super) fn int(self, k: &str) -> Option<i64> {
        match self.get(k)? {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            }),
            _ => None,
        }
    }

    pub(super) fn num(self, k: &str) -> Option<f64> {
        match self.get(k)? {
            Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    pub(super) fn nullable(self) -> bool {
        self.flag("nullable")
    }

    pub(super) fn preserve_unknown(self) -> bool {
        self.flag("x-kubernetes-preserve-unknown-fields")
    }

    pub(super) fn embedded(self) -> bool {
        self.flag("x-kubernetes-embedded-resource")
    }

    pub(super) fn property(self, k: &str) -> Option<Sch<'a>> {
        match self.get("properties")? {
            Value::Object(props) => props.get(k).map(Sch::of),
            _ => None,
        }
    }

    pub(super) fn properties(self) -> impl Iterator<Item = (&'a String, Sch<'a>)> {
        let props = match self.get("properties") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        };
        props
            .into_iter()
            .flat_map(|p| p.iter().map(|(k, v)| (k, Sch::of(v))))
    }

    pub(super) fn additional(self) -> Addl<'a> {
        match self.get("additionalProperties") {
            Some(Value::Bool(b)) => Addl::Allows(*b),
            Some(Value::Object(m)) => Addl::Schema(Sch(m)),
            _ => Addl::Absent,
        }
    }

    pub(super) fn additional_schema(self) -> Option<Sch<'a>> {
        match self.additional() {
            Addl::Schema(s) => Some(s),
            _ => None,
        }
    }

    /// Schema of a map field: the property, else the additionalProperties schema.
    pub(super) fn field_schema(self, k: &str) -> Option<Sch<'a>> {
        self.property(k).or_else(|| self.additional_schema())
    }

    pub(super) fn items(self) -> Option<Sch<'a>> {
        match self.get("items")? {
            Value::Object(m) => Some(Sch(m)),
            _ => None,
        }
    }

    /// The default value; `default: null` counts as no default (as upstream).
    pub(super) fn default_value(self) -> Option<&'a Value> {
        self.get("default").filter(|v| !v.is_null())
    }

    pub(super) fn required(self) -> Vec<&'a str> {
        self.string_list("required")
    }

    pub(super) fn list_map_keys(self) -> Vec<&'a str> {
        self.string_list("x-kubernetes-list-map-keys")
    }

    fn string_list(self, k: &str) -> Vec<&'a str> {
        match self.get(k) {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// kube-openapi `Type`: `x-kubernetes-int-or-string` becomes `[integer, string]`.
    pub(super) fn types(self) -> Vec<&'a str> {
        if self.flag("x-kubernetes-int-or-string") {
            return vec!["integer", "string"];
        }
        match self.string("type") {
            Some(t) if !t.is_empty() => vec![t],
            _ => Vec::new(),
        }
    }

    /// The format after `StripUnsupportedFormatsPostProcess` (unsupported → "").
    pub(super) fn format(self) -> &'a str {
        match self.string("format") {
            Some(f) if SUPPORTED_FORMATS.contains(&f.replace('-', "").as_str()) => f,
            _ => "",
        }
    }
}

pub(super) fn is_meta_field(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind" | "metadata")
}
