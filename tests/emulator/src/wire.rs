//! JSON as the API server writes it: Go encodes structs in field order, so every object starts
//! with `kind`, `apiVersion`, `metadata` (TypeMeta, ObjectMeta), and a watch event with `type`
//! then `object`. The emulator handles objects as `serde_json` maps (sorted keys); this writer
//! puts those members first at the object positions (the response itself, list `items`, a watch
//! event's `object`, a Table row's `object`) and keeps the sorted order for the rest. The store
//! keeps each object as this writer's text ([`object_to_string`]), which GET, list and watch
//! answers splice in unchanged.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// Serializes a response value with the API server's member order, ended by a newline as Go's
/// `json.Encoder` ends every value the API server's JSON serializer writes
/// (apimachinery `runtime/serializer/json` `doEncode`).
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&Object(v)).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The compact JSON of an object at an object position (as [`to_vec`] writes a response object,
/// without the newline): the form the store keeps ([`crate::store::Stored`]).
pub fn object_to_string(v: &Value) -> String {
    serde_json::to_string(&Object(v)).unwrap_or_default()
}

/// A watch event line: `{"type": .., "object": ..}`, the object's fields in object order (as
/// [`to_vec`] writes an event built as a value).
pub fn event_to_vec(kind: &str, object: &Value) -> Vec<u8> {
    struct Event<'a>(&'a str, &'a Value);
    impl Serialize for Event<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut out = s.serialize_map(Some(2))?;
            out.serialize_entry("type", self.0)?;
            out.serialize_entry("object", &Object(self.1))?;
            out.end()
        }
    }
    serde_json::to_vec(&Event(kind, object)).unwrap_or_default()
}

/// A value at an object position.
struct Object<'a>(&'a Value);
/// An array of objects (`items`).
struct Objects<'a>(&'a [Value]);
/// Table rows, whose `object` is an object position.
struct Rows<'a>(&'a [Value]);

const FIRST: [&str; 3] = ["kind", "apiVersion", "metadata"];

impl Serialize for Object<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(m) = self.0 else {
            return self.0.serialize(s);
        };
        let mut out = s.serialize_map(Some(m.len()))?;
        // A watch event: type, then object.
        let event = !m.contains_key("kind") && m.contains_key("object") && m.contains_key("type");
        if event {
            out.serialize_entry("type", &m["type"])?;
        }
        for k in FIRST {
            if let Some(v) = m.get(k) {
                out.serialize_entry(k, v)?;
            }
        }
        let table = m.get("kind").and_then(Value::as_str) == Some("Table");
        // A Status: its members in the order of the API server's `metav1.Status`.
        let status = m.get("kind").and_then(Value::as_str) == Some("Status");
        if status {
            for k in STATUS {
                match (k, m.get(k)) {
                    ("details", Some(d)) => out.serialize_entry(k, &Ordered(d, DETAILS))?,
                    (_, Some(v)) => out.serialize_entry(k, v)?,
                    (_, None) => {}
                }
            }
        }
        for (k, v) in m {
            if FIRST.contains(&k.as_str())
                || (event && k == "type")
                || (status && STATUS.contains(&k.as_str()))
            {
                continue;
            }
            match (k.as_str(), v) {
                ("items", Value::Array(items)) => out.serialize_entry(k, &Objects(items))?,
                ("object", _) => out.serialize_entry(k, &Object(v))?,
                ("rows", Value::Array(rows)) if table => out.serialize_entry(k, &Rows(rows))?,
                _ => out.serialize_entry(k, v)?,
            }
        }
        out.end()
    }
}

/// `metav1.Status` after its type and object meta, `StatusDetails` and `StatusCause`, in Go's
/// field order.
const STATUS: [&str; 5] = ["status", "message", "reason", "details", "code"];
const DETAILS: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];
const CAUSE: &[&str] = &["reason", "message", "field"];

/// An object with the members `order` names first, in that order, then the others; the
/// `causes` of a StatusDetails in [`CAUSE`] order.
struct Ordered<'a>(&'a Value, &'static [&'static str]);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(m) = self.0 else {
            return self.0.serialize(s);
        };
        let mut out = s.serialize_map(Some(m.len()))?;
        let mut entry = |k: &str, v: &Value| match (k, v) {
            ("causes", Value::Array(causes)) if self.1 == DETAILS => {
                let causes: Vec<Ordered> = causes.iter().map(|c| Ordered(c, CAUSE)).collect();
                out.serialize_entry(k, &causes)
            }
            _ => out.serialize_entry(k, v),
        };
        for &k in self.1 {
            if let Some(v) = m.get(k) {
                entry(k, v)?;
            }
        }
        for (k, v) in m {
            if !self.1.contains(&k.as_str()) {
                entry(k, v)?;
            }
        }
        out.end()
    }
}

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for v in self.0 {
            seq.serialize_element(&Object(v))?;
        }
        seq.end()
    }
}

impl Serialize for Rows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for row in self.0 {
            match row {
                Value::Object(m) => seq.serialize_element(&Row(m))?,
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

struct Row<'a>(&'a serde_json::Map<String, Value>);

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            if k == "object" {
                out.serialize_entry(k, &Object(v))?;
            } else {
                out.serialize_entry(k, v)?;
            }
        }
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_is_written_as_the_event_value_would_be() {
        let object = json!({"apiVersion": "v1", "data": {"a": "b"}, "kind": "ConfigMap", "metadata": {"name": "x"}});
        let text = String::from_utf8(event_to_vec("MODIFIED", &object)).unwrap();
        assert_eq!(
            text,
            r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"},"data":{"a":"b"}}}"#
        );
        let event = json!({"type": "MODIFIED", "object": object});
        assert_eq!(format!("{text}\n").as_bytes(), to_vec(&event));
    }

    #[test]
    fn type_meta_then_metadata_first() {
        let v = json!({"apiVersion": "v1", "data": {"a": "b"}, "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"x\"},\"data\":{\"a\":\"b\"}}\n"
        );
        let list =
            json!({"apiVersion": "v1", "items": [v], "kind": "ConfigMapList", "metadata": {}});
        assert!(
            String::from_utf8(to_vec(&list))
                .unwrap()
                .starts_with(r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"kind":"ConfigMap""#)
        );
        let ev = json!({"object": {"apiVersion": "v1", "kind": "Secret", "type": "Opaque"}, "type": "ADDED"});
        assert_eq!(
            String::from_utf8(to_vec(&ev)).unwrap(),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"type\":\"Opaque\"}}\n"
        );
    }
}
