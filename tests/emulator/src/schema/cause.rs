//! What every part of the schema walkers shares: the limits and one validation failure
//! ([`Cause`]) with the API server's reasons and wording.

pub use crate::gofmt::MAX_DEPTH;

/// Upper bound on (schema node, value) visits in one [`validate`] call. The work
/// is at most schema size × data size, so this only guards against hostile
/// combinations (e.g. thousands of allOf branches over a huge list); real objects
/// (≤ 1.5 MB) stay far below it.
pub(super) const MAX_STEPS: usize = 10_000_000;

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

    pub(super) fn new(field: String, reason: &'static str, message: String) -> Cause {
        Cause {
            field,
            reason,
            message,
        }
    }

    pub(super) fn required(field: String) -> Cause {
        Cause::new(field, REASON_REQUIRED, "Required value".to_string())
    }

    pub(super) fn invalid(field: String, value: &str, detail: &str) -> Cause {
        Cause::new(field, REASON_INVALID, body("Invalid value", value, detail))
    }

    pub(super) fn duplicate(field: String, value: &str) -> Cause {
        Cause::new(field, REASON_DUPLICATE, body("Duplicate value", value, ""))
    }
}

/// `ErrorBody()` of a value-carrying error: `<Type>: <value>[: <detail>]`.
/// `value` must already be rendered with [`go_body`](go_value::go_body) /
/// [`go_quote`](go_value::go_quote).
pub(super) fn body(kind: &str, value: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{kind}: {value}")
    } else {
        format!("{kind}: {value}: {detail}")
    }
}
