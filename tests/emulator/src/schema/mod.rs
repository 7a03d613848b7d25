//! Structural-schema operations on custom resources, modelled on what the real
//! kube-apiserver (v1.32, `k8s.io/apiextensions-apiserver` + `k8s.io/kube-openapi`)
//! does with a CRD version's `openAPIV3Schema`:
//!
//! * [`prune`]: structural pruning of unknown fields (`pkg/apiserver/schema/pruning`),
//!   plus the ObjectMeta coercion of embedded resources (`schema/objectmeta/coerce.go`).
//!   Returns the pruned paths as strict field validation reports them.
//! * [`apply_defaults`]: `PruneNonNullableNullsWithoutDefaults` followed by
//!   `Default` (`pkg/apiserver/schema/defaulting`).
//! * [`validate`]: the kube-openapi schema validator as mapped to `field.Error`s by
//!   `apiserver/validation.ValidateCustomResource`, then the embedded-resource
//!   TypeMeta checks (`schema/objectmeta/validation.go`) and the
//!   `x-kubernetes-list-type` set/map uniqueness checks (`schema/listtype`), in that
//!   order, like the custom resource strategy. Causes are rendered exactly like
//!   `field.Error.ErrorBody()`.
//!
//! Schemas are `serde_json::Value`s holding apiextensions.k8s.io/v1 JSONSchemaProps.
//! Nothing here panics on hostile input: keys with the wrong JSON type are
//! ignored, bad regular expressions become causes, and every recursion is bounded
//! by [`MAX_DEPTH`] (validation reports a cause where the bound is hit; pruning and
//! defaulting leave deeper subtrees untouched).
//!
//! Deliberate choices (upstream behaviour this module follows, sometimes against
//! intuition):
//! * Field paths of schema-validation causes are built like kube-openapi builds
//!   them: `spec.items[2].name`, and map (additionalProperties) keys with a dot:
//!   `spec.headers.X-Foo`. The list-type and embedded-resource causes use
//!   `field.Path`, whose `.Key(k)` prints `spec.headers[X-Foo]`. Pruned paths use
//!   the pruner's own dotted/indexed form (`spec.headers.X-Foo.bar`), sorted.
//! * Go map iteration is random upstream; here every traversal follows the
//!   document (object key) order, so results are stable.
//! * `maxLength`/`minLength` count Unicode code points (`utf8.RuneCount`), even
//!   though the 1.32 `Too long` wording says "bytes":
//!   `Too long: may not be more than 5 bytes`.
//! * `format: int32/int64/float/double` are stripped by apiextensions'
//!   `StripUnsupportedFormatsPostProcess`, so they validate nothing (as upstream).
//!
//! Layout: this module holds the entry points ([`prune`], [`apply_defaults`],
//! [`validate`]), the limits and the [`Cause`] type; one submodule per concern:
//! `access` (the schema view), `pruning`, `defaulting`, `validation`, `embedded`
//! (embedded-resource checks), `list_type` (set/map uniqueness), `formats`,
//! `go_regex` (Go pattern translation) and `go_value` (Go value rendering).

mod access;
mod defaulting;
mod embedded;
mod formats;
mod go_regex;
mod go_value;
mod list_type;
mod pruning;
#[cfg(test)]
mod tests;
mod validation;

pub use defaulting::apply_defaults;
pub use pruning::prune;
pub use validation::validate;

/// Maximum nesting depth (object/array levels, plus allOf/anyOf/oneOf/not levels
/// during validation) that is processed. Deeper data gets a `FieldValueInvalid`
/// cause from [`validate`] and is left untouched by [`prune`] and [`apply_defaults`].
pub const MAX_DEPTH: usize = 100;

/// Upper bound on (schema node, value) visits in one [`validate`] call. The work
/// is at most schema size × data size, so this only guards against hostile
/// combinations (e.g. thousands of allOf branches over a huge list); real objects
/// (≤ 1.5 MB) stay far below it.
const MAX_STEPS: usize = 10_000_000;

pub const REASON_REQUIRED: &str = "FieldValueRequired";
pub const REASON_INVALID: &str = "FieldValueInvalid";
pub const REASON_NOT_SUPPORTED: &str = "FieldValueNotSupported";
pub const REASON_TYPE_INVALID: &str = "FieldValueTypeInvalid";
pub const REASON_TOO_LONG: &str = "FieldValueTooLong";
pub const REASON_TOO_MANY: &str = "FieldValueTooMany";
pub const REASON_DUPLICATE: &str = "FieldValueDuplicate";
pub const REASON_FORBIDDEN: &str = "FieldValueForbidden";

/// One validation failure, shaped like a metav1.StatusCause.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// Field path as the API server prints it (see the module docs for the two
    /// upstream path styles).
    pub field: String,
    /// One of the `REASON_*` constants (metav1.CauseType strings).
    pub reason: &'static str,
    /// The detail exactly as `field.Error.ErrorBody()` renders it.
    pub message: String,
}

impl Cause {
    /// `<field>: <message>` as it appears in the Status message.
    pub fn to_string_full(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }

    fn new(field: String, reason: &'static str, message: String) -> Cause {
        Cause {
            field,
            reason,
            message,
        }
    }

    fn required(field: String) -> Cause {
        Cause::new(field, REASON_REQUIRED, "Required value".to_string())
    }

    fn invalid(field: String, value: &str, detail: &str) -> Cause {
        Cause::new(field, REASON_INVALID, body("Invalid value", value, detail))
    }

    fn duplicate(field: String, value: &str) -> Cause {
        Cause::new(field, REASON_DUPLICATE, body("Duplicate value", value, ""))
    }
}

/// `ErrorBody()` of a value-carrying error: `<Type>: <value>[: <detail>]`.
/// `value` must already be rendered with [`go_body`](go_value::go_body) /
/// [`go_quote`](go_value::go_quote).
fn body(kind: &str, value: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{kind}: {value}")
    } else {
        format!("{kind}: {value}: {detail}")
    }
}
