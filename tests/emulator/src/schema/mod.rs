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
mod cause;
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

pub use cause::{
    Cause, MAX_DEPTH, REASON_DUPLICATE, REASON_FORBIDDEN, REASON_INVALID, REASON_NOT_SUPPORTED,
    REASON_REQUIRED, REASON_TOO_LONG, REASON_TOO_MANY, REASON_TYPE_INVALID,
};
pub use defaulting::apply_defaults;
pub use pruning::prune;
pub use validation::validate;
