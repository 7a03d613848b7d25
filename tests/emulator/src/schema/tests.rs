//! Unit tests of the schema operations: pruning, defaulting and validation against the API
//! server's observed results, the formats, Go regular expressions and Go value rendering.

use super::go_regex::compile_go_regex;
use super::go_value::{go_body, go_quote};
use super::validation::validate_with_limit;
use super::*;
use crate::gofmt::{go_float, go_json, go_json_float};
use serde_json::{Map, Value, json};

fn full(causes: &[Cause]) -> Vec<String> {
    causes.iter().map(Cause::to_string_full).collect()
}

/// Root schema with `spec` holding the given properties.
fn spec_schema(props: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": props}
        }
    })
}

fn with_spec(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Site", "metadata": {"name": "n"}, "spec": spec})
}

/// Object nested `depth` levels deep under key "n", built iteratively.
fn deep_object(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 0..depth {
        let mut m = Map::new();
        m.insert("n".to_string(), v);
        v = Value::Object(m);
    }
    v
}

/// Schema mirroring `deep_object`.
fn deep_schema(depth: usize) -> Value {
    let mut s = json!({"type": "object"});
    for _ in 0..depth {
        s = json!({"type": "object", "properties": {"n": s}});
    }
    s
}

fn site_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["name", "owner", "type", "configuration"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                    "owner": {"type": "string"},
                    "type": {"type": "string", "enum": ["static", "dynamic"]},
                    "configuration": {
                        "type": "object",
                        "required": ["space"],
                        "properties": {
                            "space": {"type": "string"},
                            "enabled": {"type": "boolean", "default": true},
                            "settings": {
                                "type": "object",
                                "default": {"replicas": 1},
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0, "default": 1}
                                }
                            },
                            "quota": {"x-kubernetes-int-or-string": true},
                            "routing": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                        }
                    }
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "observedGeneration": {"type": "integer", "format": "int64"},
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "required": ["type", "status"],
                            "properties": {
                                "type": {"type": "string"},
                                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                                "reason": {"type": "string"},
                                "message": {"type": "string"},
                                "lastTransitionTime": {"type": "string", "format": "date-time"}
                            }
                        }
                    }
                }
            }
        }
    })
}

#[test]
fn cause_to_string_full() {
    let c = Cause::required("spec.name".to_string());
    assert_eq!(c.to_string_full(), "spec.name: Required value");
    assert_eq!(c.reason, REASON_REQUIRED);
}

#[test]
fn prune_table() {
    struct Case {
        name: &'static str,
        schema: Value,
        input: Value,
        want: Value,
        paths: &'static [&'static str],
    }
    let cases = vec![
        Case {
            name: "unknown top-level and spec fields; root apiVersion/kind/metadata kept untouched",
            schema: spec_schema(json!({"a": {"type": "string"}})),
            input: json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "foo": 1},
                          "spec": {"a": "x", "b": 1}, "extra": true}),
            want: json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "foo": 1},
                         "spec": {"a": "x"}}),
            paths: &["extra", "spec.b"],
        },
        Case {
            name: "nested",
            schema: spec_schema(
                json!({"c": {"type": "object", "properties": {"d": {"type": "string"}}}}),
            ),
            input: with_spec(json!({"c": {"d": "x", "e": {"f": 1}}})),
            want: with_spec(json!({"c": {"d": "x"}})),
            paths: &["spec.c.e"],
        },
        Case {
            name: "inside arrays",
            schema: spec_schema(json!({"items": {"type": "array", "items": {
                "type": "object", "properties": {"name": {"type": "string"}}}}})),
            input: with_spec(json!({"items": [{"name": "a", "x": 1}, {"name": "b"}, {"y": 2}]})),
            want: with_spec(json!({"items": [{"name": "a"}, {"name": "b"}, {}]})),
            paths: &["spec.items[0].x", "spec.items[2].y"],
        },
        Case {
            name: "preserve-unknown-fields subtree kept, specified nested node still pruned",
            schema: spec_schema(
                json!({"routing": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"tls": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}}}}),
            ),
            input: with_spec(json!({"routing": {"anything": {"deep": [1, {"x": 1}]},
                                                "tls": {"bogus": 1, "enabled": true}}})),
            want: with_spec(json!({"routing": {"anything": {"deep": [1, {"x": 1}]},
                                               "tls": {"enabled": true}}})),
            paths: &["spec.routing.tls.bogus"],
        },
        Case {
            name: "preserve-unknown-fields array items are skip-pruned",
            schema: spec_schema(
                json!({"list": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                "items": {"type": "object", "properties": {"a": {"type": "object",
                    "properties": {"b": {"type": "string"}}}}}}}),
            ),
            input: with_spec(json!({"list": [{"a": {"b": "x", "c": 1}, "z": 2}]})),
            want: with_spec(json!({"list": [{"a": {"b": "x"}, "z": 2}]})),
            paths: &["spec.list[0].a.c"],
        },
        Case {
            name: "additionalProperties schema applies to every map value",
            schema: spec_schema(
                json!({"headers": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"value": {"type": "string"}}}}}),
            ),
            input: with_spec(
                json!({"headers": {"X-Bar": {"value": "b"}, "X-Foo": {"junk": 1, "value": "a"}}}),
            ),
            want: with_spec(json!({"headers": {"X-Bar": {"value": "b"}, "X-Foo": {"value": "a"}}})),
            paths: &["spec.headers.X-Foo.junk"],
        },
        Case {
            name: "additionalProperties false prunes unknown keys",
            schema: spec_schema(
                json!({"s": {"type": "object", "properties": {"a": {"type": "string"}},
                "additionalProperties": false}}),
            ),
            input: with_spec(json!({"s": {"a": "x", "b": 1}})),
            want: with_spec(json!({"s": {"a": "x"}})),
            paths: &["spec.s.b"],
        },
        Case {
            name: "object without specified fields loses its content",
            schema: spec_schema(json!({"cfg": {"type": "object"}})),
            input: with_spec(json!({"cfg": {"a": 1, "b": {"c": 2}}})),
            want: with_spec(json!({"cfg": {}})),
            paths: &["spec.cfg.a", "spec.cfg.b"],
        },
        Case {
            name: "int-or-string keeps its value",
            schema: spec_schema(json!({"q1": {"x-kubernetes-int-or-string": true},
                                       "q2": {"x-kubernetes-int-or-string": true}})),
            input: with_spec(json!({"q1": "10Gi", "q2": 5})),
            want: with_spec(json!({"q1": "10Gi", "q2": 5})),
            paths: &[],
        },
        Case {
            name: "embedded resource: apiVersion/kind kept, metadata coerced like ObjectMeta",
            schema: spec_schema(
                json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}),
            ),
            input: with_spec(json!({"template": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"annotations": {}, "bogus": 1, "creationTimestamp": null,
                             "labels": {"a": "b"}, "name": "p", "namespace": "ns"},
                "spec": {"other": 2, "replicas": 1},
                "status": {}}})),
            want: with_spec(json!({"template": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"labels": {"a": "b"}, "name": "p", "namespace": "ns"},
                "spec": {"replicas": 1}}})),
            paths: &[
                "spec.template.metadata.bogus",
                "spec.template.spec.other",
                "spec.template.status",
            ],
        },
        Case {
            name: "empty root schema keeps only apiVersion/kind/metadata",
            schema: json!({}),
            input: json!({"apiVersion": "v1", "kind": "K", "metadata": {"x": 1}, "spec": {"a": 1}}),
            want: json!({"apiVersion": "v1", "kind": "K", "metadata": {"x": 1}}),
            paths: &["spec"],
        },
    ];
    for c in cases {
        let mut obj = c.input.clone();
        let paths = prune(&mut obj, &c.schema);
        assert_eq!(obj, c.want, "{}: object", c.name);
        assert_eq!(paths, c.paths, "{}: paths", c.name);
    }
}

#[test]
fn defaults_table() {
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        (
            "absent property gets its default",
            json!({"name": {"type": "string"}, "replicas": {"type": "integer", "default": 1}}),
            json!({"name": "a"}),
            json!({"name": "a", "replicas": 1}),
        ),
        (
            "defaults nested under a defaulted {} parent apply",
            json!({"settings": {"type": "object", "default": {}, "properties": {
                "mode": {"type": "string", "default": "auto"},
                "replicas": {"type": "integer", "default": 3}}}}),
            json!({}),
            json!({"settings": {"mode": "auto", "replicas": 3}}),
        ),
        (
            "null of a non-nullable field with default is defaulted",
            json!({"replicas": {"type": "integer", "default": 1}}),
            json!({"replicas": null}),
            json!({"replicas": 1}),
        ),
        (
            "null of a nullable field with default stays null",
            json!({"replicas": {"type": "integer", "nullable": true, "default": 1}}),
            json!({"replicas": null}),
            json!({"replicas": null}),
        ),
        (
            "null of a non-nullable field without default is pruned",
            json!({"name": {"type": "string"}}),
            json!({"name": null}),
            json!({}),
        ),
        (
            "null of a nullable field without default stays",
            json!({"name": {"type": "string", "nullable": true}}),
            json!({"name": null}),
            json!({"name": null}),
        ),
        (
            "default: null is no default",
            json!({"name": {"type": "string", "default": null}}),
            json!({}),
            json!({}),
        ),
        (
            "defaults inside array items",
            json!({"ports": {"type": "array", "items": {"type": "object", "properties": {
                "port": {"type": "integer", "default": 80},
                "protocol": {"type": "string", "default": "TCP"}}}}}),
            json!({"ports": [{"port": 8080}, {}]}),
            json!({"ports": [{"port": 8080, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}),
        ),
        (
            "non-nullable null array item takes the items default",
            json!({"l": {"type": "array", "items": {"type": "string", "default": "x"}}}),
            json!({"l": ["a", null]}),
            json!({"l": ["a", "x"]}),
        ),
        (
            "defaults inside map values",
            json!({"m": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "weight": {"type": "integer", "default": 1}}}}}),
            json!({"m": {"a": {}, "b": {"weight": 5}}}),
            json!({"m": {"a": {"weight": 1}, "b": {"weight": 5}}}),
        ),
        (
            "non-nullable null map value takes the additionalProperties default, then nested defaults",
            json!({"m": {"type": "object", "additionalProperties": {"type": "object", "default": {"w": 1},
                "properties": {"w": {"type": "integer"}, "z": {"type": "integer", "default": 2}}}}}),
            json!({"m": {"a": null}}),
            json!({"m": {"a": {"w": 1, "z": 2}}}),
        ),
    ];
    for (name, props, spec, want) in cases {
        let schema = spec_schema(props);
        let mut obj = with_spec(spec);
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj, with_spec(want), "{name}");
    }
}

#[test]
fn defaults_are_deep_copies() {
    let schema = spec_schema(json!({"a": {"type": "object", "default": {"x": [1]},
                                           "properties": {"x": {"type": "array", "items": {"type": "integer"}}}},
                                    "b": {"type": "object", "default": {"x": [1]},
                                           "properties": {"x": {"type": "array", "items": {"type": "integer"}}}}}));
    let mut obj = with_spec(json!({}));
    apply_defaults(&mut obj, &schema);
    obj["spec"]["a"]["x"][0] = json!(2);
    assert_eq!(obj["spec"]["b"], json!({"x": [1]}));
    assert_eq!(
        schema["properties"]["spec"]["properties"]["a"]["default"],
        json!({"x": [1]})
    );
}

#[test]
fn validation_table() {
    let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
        (
            "type boolean",
            json!({"enabled": {"type": "boolean"}}),
            json!({"enabled": "string"}),
            vec![
                r#"spec.enabled: Invalid value: "string": spec.enabled in body must be of type boolean: "string""#,
            ],
        ),
        (
            "integer accepts 1.0",
            json!({"r": {"type": "integer"}}),
            json!({"r": 1.0}),
            vec![],
        ),
        (
            "integer rejects 1.5",
            json!({"r": {"type": "integer"}}),
            json!({"r": 1.5}),
            vec![
                r#"spec.r: Invalid value: "number": spec.r in body must be of type integer: "number""#,
            ],
        ),
        (
            "number accepts integer",
            json!({"r": {"type": "number"}}),
            json!({"r": 3}),
            vec![],
        ),
        (
            "object type mismatch",
            json!({"o": {"type": "object"}}),
            json!({"o": [1]}),
            vec![
                r#"spec.o: Invalid value: "array": spec.o in body must be of type object: "array""#,
            ],
        ),
        (
            "enum",
            json!({"type": {"type": "string", "enum": ["a", "b"]}}),
            json!({"type": "x"}),
            vec![r#"spec.type: Unsupported value: "x": supported values: "a", "b""#],
        ),
        (
            "numeric enum",
            json!({"level": {"type": "integer", "enum": [1, 2]}}),
            json!({"level": 3}),
            vec![r#"spec.level: Unsupported value: 3: supported values: "1", "2""#],
        ),
        (
            "numeric enum matches across int/float",
            json!({"level": {"type": "number", "enum": [1.5, 2]}}),
            json!({"level": 2.0}),
            vec![],
        ),
        (
            "object enum",
            json!({"o": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                     "enum": [{"a": 1}]}}),
            json!({"o": {"a": 2}}),
            vec![
                r#"spec.o: Unsupported value: map[string]interface {}{"a":2}: supported values: "{\"a\":1}""#,
            ],
        ),
        (
            "enum never matches null",
            json!({"x": {"type": "string", "nullable": true, "enum": ["a"]}}),
            json!({"x": null}),
            vec![r#"spec.x: Unsupported value: "null": supported values: "a""#],
        ),
        (
            "pattern",
            json!({"x": {"type": "string", "pattern": "^[0-9]+$"}}),
            json!({"x": "abc"}),
            vec![r#"spec.x: Invalid value: "abc": spec.x in body should match '^[0-9]+$'"#],
        ),
        (
            "pattern \\d is ASCII-only as in Go",
            json!({"x": {"type": "string", "pattern": "^\\d+$"}}),
            json!({"x": "\u{661}\u{662}"}),
            vec!["spec.x: Invalid value: \"\u{661}\u{662}\": spec.x in body should match '^\\d+$'"],
        ),
        (
            "pattern \\d accepts ASCII digits",
            json!({"x": {"type": "string", "pattern": "^\\d+$"}}),
            json!({"x": "123"}),
            vec![],
        ),
        (
            "minimum",
            json!({"replicas": {"type": "integer", "minimum": 0}}),
            json!({"replicas": -1}),
            vec![
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ],
        ),
        (
            "exclusiveMinimum",
            json!({"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": true}}),
            json!({"n": 0}),
            vec!["spec.n: Invalid value: 0: spec.n in body should be greater than 0"],
        ),
        (
            "maximum on a float",
            json!({"ratio": {"type": "number", "maximum": 10}}),
            json!({"ratio": 10.5}),
            vec![
                "spec.ratio: Invalid value: 10.5: spec.ratio in body should be less than or equal to 10",
            ],
        ),
        (
            "exclusiveMaximum",
            json!({"n": {"type": "integer", "maximum": 10, "exclusiveMaximum": true}}),
            json!({"n": 10}),
            vec!["spec.n: Invalid value: 10: spec.n in body should be less than 10"],
        ),
        (
            "multipleOf",
            json!({"n": {"type": "integer", "multipleOf": 3}}),
            json!({"n": 7}),
            vec!["spec.n: Invalid value: 7: spec.n in body should be a multiple of 3"],
        ),
        (
            "minLength",
            json!({"x": {"type": "string", "minLength": 3}}),
            json!({"x": "ab"}),
            vec![r#"spec.x: Invalid value: "ab": spec.x in body should be at least 3 chars long"#],
        ),
        (
            "maxLength",
            json!({"x": {"type": "string", "maxLength": 5}}),
            json!({"x": "abcdef"}),
            vec!["spec.x: Too long: may not be more than 5 bytes"],
        ),
        (
            "maxLength counts characters",
            json!({"x": {"type": "string", "maxLength": 5}}),
            json!({"x": "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"}),
            vec![],
        ),
        (
            "string checks stop at the first failure",
            json!({"x": {"type": "string", "maxLength": 2, "pattern": "^[0-9]+$"}}),
            json!({"x": "abc"}),
            vec!["spec.x: Too long: may not be more than 2 bytes"],
        ),
        (
            "minItems",
            json!({"l": {"type": "array", "minItems": 2, "items": {"type": "string"}}}),
            json!({"l": ["a"]}),
            vec!["spec.l: Invalid value: 1: spec.l in body should have at least 2 items"],
        ),
        (
            "maxItems",
            json!({"l": {"type": "array", "maxItems": 2}}),
            json!({"l": [1, 2, 3]}),
            vec!["spec.l: Too many: 3: must have at most 2 items"],
        ),
        (
            "minProperties",
            json!({"m": {"type": "object", "minProperties": 2,
                                       "additionalProperties": {"type": "string"}}}),
            json!({"m": {"a": "x"}}),
            vec!["spec.m: Invalid value: 1: spec.m in body should have at least 2 properties"],
        ),
        (
            "maxProperties stops the object's validation",
            json!({"m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "integer"}}}),
            json!({"m": {"a": "x", "b": "y"}}),
            vec!["spec.m: Too many: 2: must have at most 1 items"],
        ),
        (
            "uniqueItems",
            json!({"l": {"type": "array", "uniqueItems": true}}),
            json!({"l": [1, 2, 1]}),
            vec![r#"spec.l: Invalid value: "": spec.l in body shouldn't contain duplicates"#],
        ),
        (
            "uniqueItems: 1 and 1.0 differ as in Go",
            json!({"l": {"type": "array", "uniqueItems": true}}),
            json!({"l": [1, 1.0]}),
            vec![],
        ),
        (
            "format date",
            json!({"d": {"type": "string", "format": "date"}}),
            json!({"d": "2024-02-30"}),
            vec![
                r#"spec.d: Invalid value: "2024-02-30": spec.d in body must be of type date: "2024-02-30""#,
            ],
        ),
        (
            "format date leap day",
            json!({"d": {"type": "string", "format": "date"}}),
            json!({"d": "2024-02-29"}),
            vec![],
        ),
        (
            "format date-time",
            json!({"t": {"type": "string", "format": "date-time"}}),
            json!({"t": "2024-01-01 10:00"}),
            vec![
                r#"spec.t: Invalid value: "2024-01-01 10:00": spec.t in body must be of type date-time: "2024-01-01 10:00""#,
            ],
        ),
        (
            "format date-time valid",
            json!({"a": {"type": "string", "format": "date-time"},
                                          "b": {"type": "string", "format": "date-time"}}),
            json!({"a": "2024-01-01T10:00:00Z", "b": "2024-01-01T23:59:59.123+02:00"}),
            vec![],
        ),
        (
            "format uuid",
            json!({"u": {"type": "string", "format": "uuid"}}),
            json!({"u": "not-a-uuid"}),
            vec![
                r#"spec.u: Invalid value: "not-a-uuid": spec.u in body must be of type uuid: "not-a-uuid""#,
            ],
        ),
        (
            "format uuid valid",
            json!({"u": {"type": "string", "format": "uuid"}}),
            json!({"u": "123e4567-E89B-12d3-a456-426614174000"}),
            vec![],
        ),
        (
            "format byte",
            json!({"b": {"type": "string", "format": "byte"}}),
            json!({"b": "not base64!"}),
            vec![
                r#"spec.b: Invalid value: "not base64!": spec.b in body must be of type byte: "not base64!""#,
            ],
        ),
        (
            "format byte valid",
            json!({"b": {"type": "string", "format": "byte"}}),
            json!({"b": "aGVsbG8="}),
            vec![],
        ),
        (
            "format int32/int64 are stripped by the server",
            json!({"a": {"type": "integer", "format": "int32"}, "b": {"type": "integer", "format": "int64"}}),
            json!({"a": 99_999_999_999_i64, "b": 1}),
            vec![],
        ),
        (
            "int-or-string accepts integers and strings",
            json!({"a": {"x-kubernetes-int-or-string": true}, "b": {"x-kubernetes-int-or-string": true}}),
            json!({"a": 1, "b": "1Gi"}),
            vec![],
        ),
        (
            "int-or-string rejects booleans",
            json!({"q": {"x-kubernetes-int-or-string": true}}),
            json!({"q": true}),
            vec![
                r#"spec.q: Invalid value: "boolean": spec.q in body must be of type integer,string: "boolean""#,
            ],
        ),
        (
            "int-or-string with kubebuilder anyOf",
            json!({"q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}}),
            json!({"q": 1.5}),
            vec![
                r#"spec.q: Invalid value: "number": spec.q in body must be of type integer,string: "number""#,
                r#": Invalid value: "": spec.q must validate at least one schema (anyOf)"#,
                r#"spec.q: Invalid value: "number": spec.q in body must be of type integer: "number""#,
            ],
        ),
        (
            "nullable accepts null",
            json!({"x": {"type": "string", "nullable": true}}),
            json!({"x": null}),
            vec![],
        ),
        (
            "non-nullable rejects null",
            json!({"x": {"type": "string"}}),
            json!({"x": null}),
            vec![r#"spec.x: Invalid value: "null": spec.x in body must be of type string: "null""#],
        ),
        (
            "preserve-unknown-fields without type accepts anything",
            json!({"free": {"x-kubernetes-preserve-unknown-fields": true}}),
            json!({"free": [1, "a", {"b": true}]}),
            vec![],
        ),
        (
            "map values use kube-openapi dotted paths",
            json!({"headers": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}),
            json!({"headers": {"X-Foo": "toolong"}}),
            vec!["spec.headers.X-Foo: Too long: may not be more than 3 bytes"],
        ),
        (
            "array items and required children",
            json!({"items": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                      "properties": {"name": {"type": "string"}}}}}),
            json!({"items": [{"name": "a"}, {}, {"name": 1}]}),
            vec![
                "spec.items[1].name: Required value",
                r#"spec.items[2].name: Invalid value: "integer": spec.items[2].name in body must be of type string: "integer""#,
            ],
        ),
        (
            "forbidden property under additionalProperties: false",
            json!({"s": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}),
            json!({"s": {"a": "x", "b": 1}}),
            vec![r#"spec.s: Invalid value: "b": spec.s.b in body is a forbidden property"#],
        ),
        (
            "several errors in document order, required last",
            json!({"alpha": {"type": "integer", "minimum": 0}, "beta": {"type": "string", "enum": ["x"]},
                "gamma": {"type": "array", "maxItems": 1}, "name": {"type": "string"}}),
            json!({"alpha": -5, "beta": "y", "gamma": [1, 2]}),
            vec![
                "spec.alpha: Invalid value: -5: spec.alpha in body should be greater than or equal to 0",
                r#"spec.beta: Unsupported value: "y": supported values: "x""#,
                "spec.gamma: Too many: 2: must have at most 1 items",
            ],
        ),
        (
            "embedded resource needs apiVersion and kind",
            json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "x-kubernetes-preserve-unknown-fields": true}}),
            json!({"template": {"metadata": {}}}),
            vec![
                "spec.template.apiVersion: Required value",
                "spec.template.kind: Required value",
            ],
        ),
        (
            "list-type set duplicates",
            json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
            json!({"tags": ["a", "b", "a", "a", "b"]}),
            vec![
                r#"spec.tags[2]: Duplicate value: "a""#,
                r#"spec.tags[4]: Duplicate value: "b""#,
            ],
        ),
        (
            "list-type set under a map uses field.Path keys",
            json!({"groups": {"type": "object", "additionalProperties": {"type": "array",
             "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}),
            json!({"groups": {"admins": ["a", "a"]}}),
            vec![r#"spec.groups[admins][1]: Duplicate value: "a""#],
        ),
        (
            "list-type map duplicate key and missing key",
            json!({"conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                          "items": {"type": "object", "properties": {"type": {"type": "string"},
                                                                     "status": {"type": "string"}}}}}),
            json!({"conds": [{"status": "True", "type": "Ready"}, {"status": "False", "type": "Ready"},
                          {"status": "x"}]}),
            vec![
                "spec.conds[2].type: Required value",
                r#"spec.conds[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#,
            ],
        ),
        (
            "list-type map with two keys",
            json!({"ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "required": ["port", "protocol"],
                                    "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}}}}}),
            json!({"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"},
                          {"port": 80, "protocol": "TCP"}]}),
            vec![
                r#"spec.ports[2]: Duplicate value: map[string]interface {}{"port":80, "protocol":"TCP"}"#,
            ],
        ),
        (
            "list-type map with a non-object item",
            json!({"conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                          "items": {"type": "object", "properties": {"type": {"type": "string"}}}}}),
            json!({"conds": [{"type": "a"}, "x"]}),
            vec![
                r#"spec.conds[1]: Invalid value: "string": spec.conds[1] in body must be of type object: "string""#,
                r#"spec.conds[1]: Invalid value: "x": must be an object for an array of list-type map"#,
            ],
        ),
    ];
    for (name, props, spec, want) in cases {
        let causes = validate(&with_spec(spec), &spec_schema(props));
        assert_eq!(full(&causes), want, "{name}");
    }
}

#[test]
fn validation_reasons() {
    let schema = spec_schema(json!({
        "a": {"type": "boolean"}, "b": {"type": "string", "maxLength": 1},
        "c": {"type": "array", "maxItems": 0}, "d": {"type": "string", "enum": ["x"]},
        "e": {"type": "integer", "minimum": 5},
        "f": {"type": "array", "x-kubernetes-list-type": "set"}}));
    let causes = validate(
        &with_spec(json!({"a": 1, "b": "xx", "c": [1], "d": "y", "e": 1, "f": [1, 1]})),
        &schema,
    );
    let reasons: Vec<&str> = causes.iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        vec![
            REASON_TYPE_INVALID,
            REASON_TOO_LONG,
            REASON_TOO_MANY,
            REASON_NOT_SUPPORTED,
            REASON_INVALID,
            REASON_DUPLICATE
        ]
    );
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.a",
            "spec.b",
            "spec.c",
            "spec.d",
            "spec.e",
            "spec.f[1]"
        ]
    );
}

#[test]
fn required_at_root() {
    let schema =
        json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}});
    let causes = validate(&json!({"apiVersion": "v1", "kind": "K"}), &schema);
    assert_eq!(full(&causes), vec!["spec: Required value"]);
    assert_eq!(causes[0].reason, REASON_REQUIRED);
}

#[test]
fn bad_regex_is_a_cause_not_a_panic() {
    for pattern in ["(abc", "[", "a{2,1}", "\\", "a)"] {
        let schema = spec_schema(json!({"x": {"type": "string", "pattern": pattern}}));
        let causes = validate(&with_spec(json!({"x": "abc"})), &schema);
        assert_eq!(causes.len(), 1, "{pattern}");
        assert_eq!(causes[0].reason, REASON_INVALID);
        let prefix = format!(
            "Invalid value: \"abc\": spec.x in body should match '{pattern}, but pattern is invalid: error parsing regexp: "
        );
        assert!(
            causes[0].message.starts_with(&prefix),
            "{}",
            causes[0].message
        );
        assert!(causes[0].message.ends_with('\''));
    }
}

#[test]
fn go_regex_dialect() {
    let cases = [
        ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-site", true),
        ("^[\\w.-]+$", "a_b.c-d", true),
        ("^[\\w.-]+$", "\u{e9}", false),
        ("^[^\\s]+$", "a b", false),
        ("[[:alpha:]]+", "abc", true),
        ("^[]a]+$", "]a", true),
        ("^[a&&b]$", "&", true),
        ("^https?:\\/\\/", "https://x", true),
        ("\\bfoo\\b", "a foo b", true),
        (
            "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "10Gi",
            true,
        ),
    ];
    for (p, s, want) in cases {
        let re = compile_go_regex(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(re.is_match(s), want, "{p} on {s}");
    }
}

#[test]
fn deep_nesting_is_bounded() {
    let depth = 150;
    let schema = deep_schema(depth);
    let obj = deep_object(depth);
    let causes = validate(&obj, &schema);
    assert_eq!(causes.len(), 1);
    let field = vec!["n"; MAX_DEPTH + 1].join(".");
    assert_eq!(causes[0].field, field);
    assert_eq!(causes[0].reason, REASON_INVALID);
    assert!(
        causes[0]
            .message
            .contains("exceeds the maximum supported nesting depth of 100")
    );

    let mut pruned = obj.clone();
    assert!(prune(&mut pruned, &schema).is_empty());
    let mut defaulted = obj.clone();
    apply_defaults(&mut defaulted, &schema);
    assert_eq!(defaulted, obj);
}

/// Drops a value without recursion (serde_json's own Drop and Clone are
/// recursive and overflow on such fixtures).
fn dismantle(v: Value) {
    let mut stack = vec![v];
    while let Some(mut v) = stack.pop() {
        match &mut v {
            Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, c)| c)),
            Value::Array(a) => stack.append(a),
            _ => {}
        }
    }
}

#[test]
fn very_deep_values_do_not_overflow() {
    const DEPTH: usize = 100_000;
    let preserve = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});

    // enum failure renders the (deep) value with %#v, bounded.
    // Assertions come after `dismantle`: a failing assert would unwind and
    // drop the deep values recursively.
    let deep = deep_object(DEPTH);
    let schema =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "enum": [{}]});
    let enum_causes = validate(&deep, &schema);

    // null pruning walks schema-less data, bounded; pruning too.
    let mut deep = deep;
    apply_defaults(&mut deep, &preserve);
    let pruned = prune(&mut deep, &preserve);
    dismantle(deep);

    // uniqueItems / list-type set compare deep values, bounded; validation of
    // the items stops at MAX_DEPTH. (Built by hand: json! would serialize the
    // interpolated values recursively.)
    let mut spec = Map::new();
    spec.insert(
        "l".to_string(),
        Value::Array(vec![deep_object(DEPTH), deep_object(DEPTH)]),
    );
    let mut root = Map::new();
    root.insert("spec".to_string(), Value::Object(spec));
    let mut obj = Value::Object(root);
    let schema = spec_schema(json!({"l": {"type": "array", "uniqueItems": true,
        "x-kubernetes-list-type": "set", "items": {"type": "object", "properties": {"n": deep_schema(120)}}}}));
    let list_causes = validate(&obj, &schema);
    let _ = prune(&mut obj, &schema);
    apply_defaults(&mut obj, &schema);
    dismantle(obj);

    assert_eq!(enum_causes.len(), 1);
    assert_eq!(enum_causes[0].reason, REASON_NOT_SUPPORTED);
    assert!(enum_causes[0].message.contains("..."));
    assert!(pruned.is_empty());
    let reasons: Vec<&str> = list_causes.iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        vec![REASON_INVALID, REASON_INVALID, REASON_DUPLICATE]
    );
    assert!(
        list_causes[0]
            .message
            .contains("maximum supported nesting depth of 100")
    );
    assert!(list_causes[0].field.starts_with("spec.l[0].n.n."));
    assert_eq!(list_causes[2].field, "spec.l[1]");
}

#[test]
fn deep_default_is_refused() {
    let schema = spec_schema(json!({"a": {"type": "object", "default": deep_object(500)}}));
    let mut obj = with_spec(json!({}));
    apply_defaults(&mut obj, &schema);
    assert_eq!(obj, with_spec(json!({})));
}

#[test]
fn hostile_schemas_do_not_panic() {
    let obj = json!({
        "apiVersion": "v1", "kind": "K", "metadata": {"name": "n"},
        "spec": {"a": "x", "b": [1, 2, 2, null], "c": {"d": null, "e": 1.5},
                 "n": i64::MIN, "f": 18_446_744_073_709_551_615_u64}
    });
    let schemas = vec![
        json!(true),
        json!(null),
        json!("x"),
        json!([1, 2]),
        json!({"type": 5, "properties": "x", "required": "spec", "enum": "a", "items": true,
               "additionalProperties": 3, "nullable": "yes"}),
        json!({"properties": {"spec": 7}}),
        json!({"properties": {"spec": {"properties": {"a": {"type": "string", "pattern": "[",
               "minLength": "3", "maxLength": -1, "format": 7, "enum": []}}}}}),
        json!({"properties": {"spec": {"properties": {"n": {"type": "integer", "multipleOf": -1,
               "minimum": 1e300, "maximum": -1e300}, "f": {"type": "number", "multipleOf": 0}}}}}),
        json!({"properties": {"spec": {"properties": {"n": {"type": "integer", "multipleOf": 0.5}}}}}),
        json!({"properties": {"spec": {"properties": {"b": {"type": "array",
               "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": 5, "items": [1]}}}}}),
        json!({"properties": {"spec": {"properties": {"b": {"type": "array",
               "x-kubernetes-list-type": "map", "items": {"type": "object"}}}}}}),
        json!({"properties": {"spec": {"anyOf": "x", "allOf": [1, 2], "oneOf": [], "not": [],
               "properties": {"c": {"additionalProperties": {"default": {"z": 1}}}}}}}),
        json!({"properties": {"spec": {"x-kubernetes-embedded-resource": true,
               "properties": {"metadata": {"default": 5}}, "x-kubernetes-preserve-unknown-fields": 1}}}),
        json!({"properties": {"spec": {"type": "object", "format": "date", "minProperties": 1e30,
               "maxProperties": -3, "required": [1, null, "zz"]}}}),
    ];
    for schema in schemas {
        let mut o = obj.clone();
        let _ = prune(&mut o, &schema);
        apply_defaults(&mut o, &schema);
        let _ = validate(&o, &schema);
        let _ = validate(&obj, &schema);
    }
}

#[test]
fn validation_work_is_bounded() {
    let branches: Vec<Value> = (0..50)
        .map(|_| json!({"items": {"type": "string"}}))
        .collect();
    let schema = json!({"allOf": branches});
    let data = Value::Array((0..100).map(Value::from).collect());
    let causes = validate_with_limit(&data, &schema, 1000);
    let last = causes.last().expect("abort cause");
    assert_eq!(
        last.to_string_full(),
        r#": Invalid value: "array": validation aborted after 1000 schema evaluations"#
    );
    // Under the default limit the same input is fully validated.
    let causes = validate(&data, &schema);
    assert_eq!(causes.len(), 50 * 100 + 1);
}

#[test]
fn go_rendering() {
    assert_eq!(go_float(1e6), "1e+06");
    assert_eq!(go_float(123456.0), "123456");
    assert_eq!(go_float(1234567.0), "1.234567e+06");
    assert_eq!(go_float(0.0001), "0.0001");
    assert_eq!(go_float(0.00001), "1e-05");
    assert_eq!(go_float(-1.5), "-1.5");
    assert_eq!(go_float(10.0), "10");
    assert_eq!(go_json_float(1e21), "1e+21");
    assert_eq!(go_json_float(1e20), "100000000000000000000");
    assert_eq!(go_json_float(1e-7), "1e-7");
    assert_eq!(go_json_float(0.5), "0.5");
    assert_eq!(
        go_quote("a\"b\\\n\u{1}\u{7f}\u{e9}\u{200b}"),
        "\"a\\\"b\\\\\\n\\x01\\x7f\u{e9}\\u200b\""
    );
    assert_eq!(
        go_json(&json!({"b": [1, 2.5, "<x>"], "a": null})),
        r#"{"a":null,"b":[1,2.5,"\u003cx\u003e"]}"#
    );
    assert_eq!(
        go_body(&json!({"b": [1, null, true], "a": {"c": "d"}})),
        r#"map[string]interface {}{"a":map[string]interface {}{"c":"d"}, "b":[]interface {}{1, interface {}(nil), true}}"#
    );
    assert_eq!(go_body(&json!(null)), "\"null\"");
    assert_eq!(go_body(&json!(2.0)), "2");
}

#[test]
fn site_pipeline_valid() {
    let schema = site_schema();
    let mut obj = json!({
        "apiVersion": "example.com/v1",
        "kind": "Site",
        "metadata": {"name": "s1", "namespace": "default"},
        "spec": {
            "bogus": 1,
            "configuration": {
                "extra": true,
                "quota": "10Gi",
                "routing": {"anything": {"goes": [1, 2]}},
                "space": "main"
            },
            "name": "my-site",
            "owner": "team-a",
            "type": "static"
        },
        "status": {"conditions": [{"junk": 1, "status": "True", "type": "Ready"}]}
    });
    let pruned = prune(&mut obj, &schema);
    assert_eq!(
        pruned,
        vec![
            "spec.bogus",
            "spec.configuration.extra",
            "status.conditions[0].junk"
        ]
    );
    apply_defaults(&mut obj, &schema);
    assert_eq!(
        obj["spec"]["configuration"],
        json!({
            "enabled": true,
            "quota": "10Gi",
            "routing": {"anything": {"goes": [1, 2]}},
            "settings": {"replicas": 1},
            "space": "main"
        })
    );
    assert_eq!(validate(&obj, &schema), vec![]);
}

#[test]
fn site_pipeline_invalid() {
    let schema = site_schema();
    let mut obj = json!({
        "apiVersion": "example.com/v1",
        "kind": "Site",
        "metadata": {"name": "s1"},
        "spec": {
            "configuration": {
                "enabled": "yes",
                "quota": true,
                "settings": {"replicas": -1, "unknown": 2}
            },
            "name": "My_Site",
            "type": "bogus"
        },
        "status": {"conditions": [
            {"status": "True", "type": "Ready"},
            {"status": "Maybe", "type": "Ready"}
        ]}
    });
    assert_eq!(
        prune(&mut obj, &schema),
        vec!["spec.configuration.settings.unknown"]
    );
    apply_defaults(&mut obj, &schema);
    assert_eq!(
        obj["spec"]["configuration"]["settings"],
        json!({"replicas": -1})
    );
    let causes = validate(&obj, &schema);
    assert_eq!(
        full(&causes),
        vec![
            r#"spec.configuration.enabled: Invalid value: "string": spec.configuration.enabled in body must be of type boolean: "string""#,
            r#"spec.configuration.quota: Invalid value: "boolean": spec.configuration.quota in body must be of type integer,string: "boolean""#,
            "spec.configuration.settings.replicas: Invalid value: -1: spec.configuration.settings.replicas in body should be greater than or equal to 0",
            "spec.configuration.space: Required value",
            r#"spec.name: Invalid value: "My_Site": spec.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#,
            r#"spec.type: Unsupported value: "bogus": supported values: "static", "dynamic""#,
            "spec.owner: Required value",
            r#"status.conditions[1].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown""#,
            r#"status.conditions[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#,
        ]
    );
}

#[test]
fn site_defaults_null_settings() {
    let schema = site_schema();
    let mut obj = with_spec(
        json!({"configuration": {"enabled": null, "settings": null, "space": "s",
                                                      "quota": null}}),
    );
    apply_defaults(&mut obj, &schema);
    // non-nullable nulls: with default → defaulted; without default → removed.
    assert_eq!(
        obj["spec"]["configuration"],
        json!({"enabled": true, "settings": {"replicas": 1}, "space": "s"})
    );
}
