//! Decoding of Kubernetes protobuf request bodies (`Content-Type:
//! application/vnd.kubernetes.protobuf`) into the JSON the same object would have.
//!
//! kubectl's typed commands (`kubectl create namespace|configmap|secret|serviceaccount|...`)
//! send protobuf; the emulator stores JSON. The body is the magic `k8s\0` followed by a
//! `runtime.Unknown` envelope whose `raw` bytes hold the object's own message, which is decoded
//! by one schema-driven decoder for every kind of the served built-in groups: field numbers,
//! types and names come from the upstream `generated.proto` files, in `protobuf_schema.txt`.
//!
//! JSON output follows Go's `encoding/json` for the same object, except that empty values are
//! left out (go-to-protobuf always writes empty strings, zero integers and empty sub-messages,
//! so a field's presence on the wire says nothing); an owner reference keeps its required
//! identity fields. Pointer booleans (`immutable`, `automountServiceAccountToken`, `controller`,
//! ...) are kept whenever they were sent. A message field sent twice merges as protobuf merges.
//! `managedFields`, `selfLink` and every field the schema does not know are skipped by wire
//! type. Malformed input of any kind yields `Err`, never a panic.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

type Object = Map<String, Value>;

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\x00";

/// How deeply messages (and skipped groups) may nest; the kinds decoded here need 5.
const MAX_DEPTH: usize = 16;

/// The largest field number protobuf allows.
const MAX_FIELD: u64 = (1 << 29) - 1;

/// The protobuf message schemas of the served built-in kinds (see the file's header).
const SCHEMA_TEXT: &str = include_str!("protobuf_schema.txt");

/// Decodes a Kubernetes protobuf request body into the JSON object (with apiVersion and kind
/// set from the envelope). Err(message) for malformed input or for kinds this module does not
/// decode; the message for an unsupported kind names it, e.g.
/// `the emulator decodes protobuf only for the kinds of the served built-in groups; send
/// example.org/v1/Widget as JSON`.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err("protobuf body does not start with the magic prefix k8s\\0".to_owned());
    };
    let envelope =
        Envelope::parse(envelope).map_err(|e| format!("invalid protobuf envelope: {e}"))?;
    let (api_version, kind) = (envelope.api_version, envelope.kind);
    if kind.is_empty() {
        return Err("protobuf envelope names no kind".to_owned());
    }
    if !envelope.content_encoding.is_empty() {
        return Err(format!(
            "unsupported protobuf contentEncoding {:?} for {api_version}/{kind}",
            envelope.content_encoding
        ));
    }
    let message = message_of(&api_version, &kind);
    if !schema().contains_key(&message) {
        return Err(format!(
            "the emulator decodes protobuf only for the kinds of the served built-in groups; send {api_version}/{kind} as JSON"
        ));
    }
    let mut object = match generic(&message, Msg::new(envelope.raw, 1), "")
        .map_err(|e| format!("invalid protobuf {kind}: {e}"))?
    {
        Value::Object(o) => o,
        _ => Object::new(),
    };
    object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Object::new()));
    object.insert("apiVersion".to_owned(), Value::String(api_version));
    object.insert("kind".to_owned(), Value::String(kind));
    Ok(Value::Object(object))
}

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

/// One field's value as read off the wire.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32,
}

impl<'a> Wire<'a> {
    fn describe(self) -> &'static str {
        match self {
            Wire::Varint(_) => "varint (0)",
            Wire::Fixed64 => "64-bit (1)",
            Wire::Bytes(_) => "length-delimited (2)",
            Wire::Fixed32 => "32-bit (5)",
        }
    }

    fn wrong(self, field: &str, expected: &str) -> String {
        format!(
            "{field}: wrong wire type {}, expected {expected}",
            self.describe()
        )
    }

    fn bytes(self, field: &str) -> Result<&'a [u8], String> {
        match self {
            Wire::Bytes(b) => Ok(b),
            other => Err(other.wrong(field, "length-delimited (2)")),
        }
    }

    fn string(self, field: &str) -> Result<String, String> {
        let bytes = self.bytes(field)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|e| format!("{field}: invalid UTF-8 in string: {e}"))
    }

    fn varint(self, field: &str) -> Result<u64, String> {
        match self {
            Wire::Varint(v) => Ok(v),
            other => Err(other.wrong(field, "varint (0)")),
        }
    }

    fn bool(self, field: &str) -> Result<bool, String> {
        self.varint(field).map(|v| v != 0)
    }

    fn int64(self, field: &str) -> Result<i64, String> {
        // Protobuf int64 is the two's-complement bit pattern in a varint.
        self.varint(field)
            .map(|v| i64::from_ne_bytes(v.to_ne_bytes()))
    }
}

/// A cursor over one protobuf message.
struct Msg<'a> {
    buf: &'a [u8],
    pos: usize,
    /// How many messages enclose this one.
    depth: usize,
}

impl<'a> Msg<'a> {
    fn new(buf: &'a [u8], depth: usize) -> Self {
        Msg { buf, pos: 0, depth }
    }

    /// A sub-message of this one, refused past the nesting limit.
    fn nested(&self, buf: &'a [u8]) -> Result<Msg<'a>, String> {
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        Ok(Msg::new(buf, depth))
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, len: u64, what: &str) -> Result<&'a [u8], String> {
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or_else(|| {
                let left = self.remaining();
                format!("{what} of {len} bytes runs past the end of the message ({left} left)")
            })?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for i in 0..10u32 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err("truncated varint".to_owned());
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err("varint overflows 64 bits".to_owned());
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint overflows 64 bits".to_owned())
    }

    /// Reads a field key: (field number, wire type).
    fn key(&mut self) -> Result<(u32, u64), String> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > MAX_FIELD {
            return Err(format!("invalid field number {number}"));
        }
        let number = u32::try_from(number).map_err(|_| format!("invalid field number {number}"))?;
        Ok((number, key & 7))
    }

    /// The next field, or None at the end of the message. Groups (wire types 3 and 4, which
    /// Kubernetes never uses) are skipped as unknown fields.
    fn next_field(&mut self) -> Result<Option<(u32, Wire<'a>)>, String> {
        loop {
            if self.pos >= self.buf.len() {
                return Ok(None);
            }
            let (number, wire) = self.key()?;
            let value = match wire {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8, "64-bit field")?;
                    Wire::Fixed64
                }
                2 => {
                    let len = self.varint()?;
                    Wire::Bytes(self.take(len, "length-delimited field")?)
                }
                3 => {
                    self.skip_group(number)?;
                    continue;
                }
                4 => return Err(format!("end-group for field {number} without a start")),
                5 => {
                    self.take(4, "32-bit field")?;
                    Wire::Fixed32
                }
                other => return Err(format!("invalid wire type {other} for field {number}")),
            };
            return Ok(Some((number, value)));
        }
    }

    /// Skips a group whose start-group key (for field `start`) was just read.
    fn skip_group(&mut self, start: u32) -> Result<(), String> {
        let mut open = vec![start];
        while let Some(&innermost) = open.last() {
            if self.depth + open.len() > MAX_DEPTH {
                return Err(too_deep());
            }
            if self.pos >= self.buf.len() {
                return Err(format!("group for field {innermost} is not closed"));
            }
            let (number, wire) = self.key()?;
            match wire {
                0 => {
                    self.varint()?;
                }
                1 => {
                    self.take(8, "64-bit field")?;
                }
                2 => {
                    let len = self.varint()?;
                    self.take(len, "length-delimited field")?;
                }
                3 => open.push(number),
                4 if number == innermost => {
                    open.pop();
                }
                4 => {
                    return Err(format!(
                        "end-group for field {number} inside the group for field {innermost}"
                    ));
                }
                5 => {
                    self.take(4, "32-bit field")?;
                }
                other => return Err(format!("invalid wire type {other} for field {number}")),
            }
        }
        Ok(())
    }
}

fn too_deep() -> String {
    format!("protobuf nesting deeper than {MAX_DEPTH} levels")
}

// ---------------------------------------------------------------------------------------------
// JSON building helpers
// ---------------------------------------------------------------------------------------------

fn push(out: &mut Object, key: &str, value: Value) {
    match out.get_mut(key) {
        Some(Value::Array(items)) => items.push(value),
        _ => {
            out.insert(key.to_owned(), Value::Array(vec![value]));
        }
    }
}

fn set(out: &mut Object, key: &str, value: Value) {
    out.insert(key.to_owned(), value);
}

/// Protobuf's merge of a message into one decoded before: lists append, objects (maps and
/// messages) merge, anything else is replaced.
fn merge_message(seen: &mut Object, more: Object) {
    for (key, value) in more {
        match (seen.get_mut(&key), value) {
            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
            (Some(Value::Object(a)), Value::Object(b)) => merge_message(a, b),
            (_, value) => {
                seen.insert(key, value);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// runtime.Unknown (k8s.io/apimachinery/pkg/runtime/generated.proto)
// ---------------------------------------------------------------------------------------------

/// `runtime.Unknown {1: TypeMeta typeMeta, 2: bytes raw, 3: string contentEncoding,
/// 4: string contentType}` with `runtime.TypeMeta {1: apiVersion, 2: kind}`.
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Envelope<'a> {
    fn parse(buf: &'a [u8]) -> Result<Self, String> {
        let mut msg = Msg::new(buf, 0);
        let mut envelope = Envelope {
            api_version: String::new(),
            kind: String::new(),
            raw: &[],
            content_encoding: String::new(),
        };
        while let Some((number, wire)) = msg.next_field()? {
            match number {
                1 => {
                    let mut type_meta = msg.nested(wire.bytes("typeMeta")?)?;
                    while let Some((number, wire)) = type_meta
                        .next_field()
                        .map_err(|e| format!("typeMeta: {e}"))?
                    {
                        match number {
                            1 => envelope.api_version = wire.string("typeMeta: apiVersion")?,
                            2 => envelope.kind = wire.string("typeMeta: kind")?,
                            _ => {}
                        }
                    }
                }
                2 => envelope.raw = wire.bytes("raw")?,
                3 => envelope.content_encoding = wire.string("contentEncoding")?,
                4 => {
                    wire.string("contentType")?;
                }
                _ => {}
            }
        }
        Ok(envelope)
    }
}

// ---------------------------------------------------------------------------------------------
// meta/v1 (k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto)
// ---------------------------------------------------------------------------------------------

/// Time {1 int64 seconds, 2 int32 nanos}, rendered as RFC 3339 in whole seconds (Go drops the
/// nanoseconds when decoding and marshals `Time` to JSON in seconds). None for the zero time,
/// which Go sends as an empty message.
fn timestamp(mut msg: Msg<'_>) -> Result<Option<String>, String> {
    let mut seconds = 0i64;
    while let Some((number, wire)) = msg.next_field()? {
        match number {
            1 => seconds = wire.int64("seconds")?,
            2 => {
                wire.varint("nanos")?;
            }
            _ => {}
        }
    }
    if seconds == 0 {
        return Ok(None);
    }
    rfc3339(seconds).map(Some)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (years 0000 to 9999, the range Go's
/// `time.Time` marshals to JSON).
fn rfc3339(seconds: i64) -> Result<String, String> {
    const MIN: i64 = -62_167_219_200; // 0000-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    if !(MIN..=MAX).contains(&seconds) {
        return Err(format!(
            "timestamp {seconds} is outside the years 0000 to 9999"
        ));
    }
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Ok(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    ))
}

// ---------------------------------------------------------------------------------------------
// Schema-driven decoding (the messages of protobuf_schema.txt)
// ---------------------------------------------------------------------------------------------

/// A field's type as the schema names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    String,
    Signed,
    Unsigned,
    Bool,
    Bytes,
    Double,
    Float,
    Message,
    Map,
}

#[derive(Debug)]
struct FieldDef {
    name: String,
    ty: Ty,
    repeated: bool,
    message: String,
}

type Schema = std::collections::HashMap<String, std::collections::HashMap<u32, FieldDef>>;

fn schema() -> &'static Schema {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut out = Schema::new();
        let mut current: Option<String> = None;
        for line in SCHEMA_TEXT.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(name) = line
                .strip_prefix("message ")
                .or_else(|| line.strip_prefix("entry "))
            {
                out.entry(name.to_owned()).or_default();
                current = Some(name.to_owned());
                continue;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            let (Some(msg), [num, name, ty, label, message]) = (&current, parts.as_slice()) else {
                continue;
            };
            let ty = match *ty {
                "string" => Ty::String,
                "int32" | "int64" | "sint32" | "sint64" | "enum" | "sfixed32" | "sfixed64" => {
                    Ty::Signed
                }
                "uint32" | "uint64" | "fixed32" | "fixed64" => Ty::Unsigned,
                "bool" => Ty::Bool,
                "bytes" => Ty::Bytes,
                "double" => Ty::Double,
                "float" => Ty::Float,
                "map" => Ty::Map,
                _ => Ty::Message,
            };
            let Ok(num) = num.parse() else { continue };
            if let Some(fields) = out.get_mut(msg) {
                fields.insert(
                    num,
                    FieldDef {
                        name: (*name).to_owned(),
                        ty,
                        repeated: *label == "repeated",
                        message: (*message).to_owned(),
                    },
                );
            }
        }
        out
    })
}

/// The protobuf message of a kind: `apps/v1` `Deployment` is `.k8s.io.api.apps.v1.Deployment`,
/// core `v1` kinds are in `.k8s.io.api.core.v1`.
fn message_of(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let package = if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    };
    format!(".k8s.io.api.{package}.{version}.{kind}")
}

/// Pointer booleans: kept when sent as false (other booleans are Go values whose false is
/// omitted from JSON).
const POINTER_BOOLS: &[&str] = &[
    "allocateLoadBalancerNodePorts",
    "allowPrivilegeEscalation",
    "automountServiceAccountToken",
    "blockOwnerDeletion",
    "controller",
    "enableServiceLinks",
    "hostUsers",
    "immutable",
    "manualSelector",
    "optional",
    "privileged",
    "readOnlyRootFilesystem",
    "runAsNonRoot",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "suspend",
];

/// Pointer numbers whose zero is meaningful (kept when sent).
const POINTER_ZEROS: &[&str] = &[
    "replicas",
    "backoffLimit",
    "parallelism",
    "completions",
    "ttlSecondsAfterFinished",
    "successfulJobsHistoryLimit",
    "failedJobsHistoryLimit",
    "terminationGracePeriodSeconds",
    "startingDeadlineSeconds",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
    "priority",
    "value",
];

/// Message fields of embedded Go structs, whose members JSON writes inline in the parent.
const INLINE: &[&str] = &[
    "ephemeralContainerCommon",
    "handler",
    "ingressRuleValue",
    "persistentVolumeSource",
    "volumeSource",
];

/// Pointer messages whose empty value means "set" (`emptyDir: {}`).
const EMPTY_MEANINGFUL: &[&str] = &["emptyDir"];

fn scalar(def: &FieldDef, wire: Wire<'_>) -> Result<Value, String> {
    let name = def.name.as_str();
    Ok(match def.ty {
        Ty::String => Value::String(wire.string(name)?),
        Ty::Bool => Value::Bool(wire.bool(name)?),
        Ty::Signed => Value::from(wire.int64(name)?),
        Ty::Unsigned => Value::from(wire.varint(name)?),
        Ty::Bytes => Value::String(BASE64.encode(wire.bytes(name)?)),
        Ty::Double | Ty::Float => {
            return Err(format!("{name}: floating-point fields are not decoded"));
        }
        Ty::Message | Ty::Map => return Err(format!("{name}: not a scalar")),
    })
}

/// Decodes message `name` into the JSON Go would write for it; `field` is the name of the
/// field holding it (for the pruning rules).
/// The message of every object's metadata.
const OBJECT_META: &str = ".k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const OWNER_REFERENCE: &str = ".k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference";

fn generic(name: &str, mut msg: Msg<'_>, field: &str) -> Result<Value, String> {
    match name {
        ".k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            let (mut ty, mut int, mut s) = (0u64, 0i64, String::new());
            while let Some((number, wire)) = msg.next_field()? {
                match number {
                    1 => ty = wire.varint("type")?,
                    2 => int = wire.int64("intVal")?,
                    3 => s = wire.string("strVal")?,
                    _ => {}
                }
            }
            return Ok(if ty == 1 {
                Value::String(s)
            } else {
                Value::from(int)
            });
        }
        ".k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            let mut s = String::new();
            while let Some((number, wire)) = msg.next_field()? {
                if number == 1 {
                    s = wire.string("string")?;
                }
            }
            return Ok(Value::String(s));
        }
        ".k8s.io.apimachinery.pkg.apis.meta.v1.Time"
        | ".k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            return Ok(timestamp(msg)?.map_or(Value::Null, Value::String));
        }
        ".k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let mut ns = 0i64;
            while let Some((number, wire)) = msg.next_field()? {
                if number == 1 {
                    ns = wire.int64("duration")?;
                }
            }
            return Ok(Value::String(go_duration(ns)));
        }
        ".k8s.io.apimachinery.pkg.runtime.RawExtension"
        | ".k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            let mut raw: &[u8] = &[];
            while let Some((number, wire)) = msg.next_field()? {
                if number == 1 {
                    raw = wire.bytes("raw")?;
                }
            }
            if raw.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(raw).map_err(|e| format!("{field}: invalid JSON: {e}"));
        }
        _ => {}
    }
    let fields = schema()
        .get(name)
        .ok_or_else(|| format!("no schema for message {name}"))?;
    let mut out = Object::new();
    while let Some((number, wire)) = msg.next_field()? {
        let Some(def) = fields.get(&number) else {
            continue;
        };
        let key = def.name.as_str();
        // What the API server takes from no request body: the removed `selfLink`; and the
        // request's `managedFields`, which the emulator records itself.
        if name == OBJECT_META && matches!(key, "selfLink" | "managedFields") {
            continue;
        }
        match def.ty {
            Ty::Map => {
                let entry = msg.nested(wire.bytes(key)?)?;
                let (k, v) = generic_entry(&def.message, entry, key)?;
                let map = out
                    .entry(key.to_owned())
                    .or_insert_with(|| Value::Object(Object::new()));
                if let Value::Object(m) = map {
                    m.insert(k, v);
                }
            }
            Ty::Message => {
                let v = generic(&def.message, msg.nested(wire.bytes(key)?)?, key)
                    .map_err(|e| format!("{key}: {e}"))?;
                // A message field seen twice merges into the first (protobuf's merge):
                // repeated fields append, maps and nested messages merge, scalars are replaced.
                if !def.repeated
                    && !INLINE.contains(&key)
                    && let (Some(Value::Object(seen)), Value::Object(more)) = (out.get_mut(key), &v)
                {
                    merge_message(seen, more.clone());
                    continue;
                }
                if INLINE.contains(&key) {
                    // A Go struct embedded with `json:",inline"`: its members are the parent's.
                    if let Value::Object(members) = v {
                        out.extend(members);
                    }
                    continue;
                }
                if def.repeated {
                    push(&mut out, key, v);
                } else {
                    set(&mut out, key, v);
                }
            }
            _ if def.repeated => {
                // Packed numbers come as one length-delimited field.
                if let (Wire::Bytes(b), Ty::Signed | Ty::Unsigned | Ty::Bool) = (wire, def.ty) {
                    let mut packed = msg.nested(b)?;
                    while packed.remaining() > 0 {
                        let v = packed.varint()?;
                        push(&mut out, key, scalar(def, Wire::Varint(v))?);
                    }
                } else {
                    push(&mut out, key, scalar(def, wire)?);
                }
            }
            _ => set(&mut out, key, scalar(def, wire)?),
        }
    }
    // An owner reference's identity fields are required (no `omitempty`): kept even empty, so
    // that validation names them.
    let required = |key: &str| {
        name == OWNER_REFERENCE && matches!(key, "apiVersion" | "kind" | "name" | "uid")
    };
    if name == OWNER_REFERENCE {
        for key in ["apiVersion", "kind", "name", "uid"] {
            out.entry(key)
                .or_insert_with(|| Value::String(String::new()));
        }
    }
    out.retain(|key, value| match value {
        Value::String(s) => !s.is_empty() || required(key),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty() || EMPTY_MEANINGFUL.contains(&key.as_str()),
        Value::Number(n) => n.as_f64() != Some(0.0) || POINTER_ZEROS.contains(&key.as_str()),
        Value::Bool(b) => *b || POINTER_BOOLS.contains(&key.as_str()),
        Value::Null => false,
    });
    Ok(Value::Object(out))
}

/// One map entry (1 key, 2 value) of map field `field`.
fn generic_entry(entry: &str, mut msg: Msg<'_>, field: &str) -> Result<(String, Value), String> {
    let defs = schema()
        .get(entry)
        .ok_or_else(|| format!("no schema for map entry {entry}"))?;
    let (mut key, mut value) = (String::new(), Value::Null);
    while let Some((number, wire)) = msg.next_field()? {
        match (number, defs.get(&number)) {
            (1, _) => key = wire.string(&format!("{field}: key"))?,
            (2, Some(def)) if def.ty == Ty::Message => {
                value = generic(&def.message, msg.nested(wire.bytes(field)?)?, field)?;
            }
            (2, Some(def)) => value = scalar(def, wire)?,
            _ => {}
        }
    }
    if value.is_null()
        && let Some(def) = defs.get(&2)
    {
        value = match def.ty {
            Ty::String | Ty::Bytes => Value::String(String::new()),
            _ => Value::Null,
        };
    }
    Ok((key, value))
}

/// A duration as Go's `time.Duration.String` writes it (`1h2m3s`, `1.5s`, `0s`).
fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let ns = ns.unsigned_abs();
    let (h, m) = (ns / 3_600_000_000_000, ns / 60_000_000_000 % 60);
    let s = (ns % 60_000_000_000) as f64 / 1e9;
    let mut out = String::from(sign);
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{s}s"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal protobuf encoder for building test bodies.
    #[derive(Clone, Default)]
    struct Enc(Vec<u8>);

    impl Enc {
        fn new() -> Self {
            Enc::default()
        }

        fn raw_varint(mut self, mut v: u64) -> Self {
            while v >= 0x80 {
                self.0.push((v as u8 & 0x7f) | 0x80);
                v >>= 7;
            }
            self.0.push(v as u8);
            self
        }

        fn key(self, field: u32, wire: u8) -> Self {
            self.raw_varint((u64::from(field) << 3) | u64::from(wire))
        }

        fn varint(self, field: u32, v: u64) -> Self {
            self.key(field, 0).raw_varint(v)
        }

        fn bytes(self, field: u32, b: &[u8]) -> Self {
            let mut e = self.key(field, 2).raw_varint(b.len() as u64);
            e.0.extend_from_slice(b);
            e
        }

        fn str(self, field: u32, s: &str) -> Self {
            self.bytes(field, s.as_bytes())
        }

        fn msg(self, field: u32, m: Enc) -> Self {
            self.bytes(field, &m.0)
        }

        fn fixed64(self, field: u32, v: u64) -> Self {
            let mut e = self.key(field, 1);
            e.0.extend_from_slice(&v.to_le_bytes());
            e
        }

        fn fixed32(self, field: u32, v: u32) -> Self {
            let mut e = self.key(field, 5);
            e.0.extend_from_slice(&v.to_le_bytes());
            e
        }

        /// A map entry {1: key, 2: value}.
        fn entry(self, field: u32, k: &str, v: &[u8]) -> Self {
            self.msg(field, Enc::new().str(1, k).bytes(2, v))
        }

        fn raw(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
    }

    /// `k8s\0` + runtime.Unknown, written the way Go writes it (empty strings included).
    fn body(api_version: &str, kind: &str, object: Enc) -> Vec<u8> {
        let unknown = Enc::new()
            .msg(1, Enc::new().str(1, api_version).str(2, kind))
            .msg(2, object)
            .str(3, "")
            .str(4, "");
        [MAGIC, &unknown.0].concat()
    }

    #[test]
    fn other_kinds_decode_by_schema_with_inline_members_and_pointer_zeros() {
        let pod_spec = Enc::new()
            .msg(
                1,
                Enc::new()
                    .str(1, "scratch")
                    .msg(2, Enc::new().msg(2, Enc::new())),
            )
            .msg(2, Enc::new().str(1, "c").str(2, "nginx"));
        let deployment = Enc::new().msg(1, Enc::new().str(1, "app")).msg(
            2,
            Enc::new().varint(1, 0).msg(3, Enc::new().msg(2, pod_spec)),
        );
        let v = decode(&body("apps/v1", "Deployment", deployment)).unwrap();
        assert_eq!(v["apiVersion"], "apps/v1");
        assert_eq!(v["metadata"]["name"], "app");
        assert_eq!(v["spec"]["replicas"], 0, "a sent zero replicas is kept");
        let spec = &v["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["image"], "nginx");
        assert_eq!(
            spec["volumes"][0],
            serde_json::json!({"name": "scratch", "emptyDir": {}}),
            "VolumeSource is inline, an empty emptyDir is kept"
        );
    }

    /// ObjectMeta as go-to-protobuf writes it for a fresh object: every non-pointer field,
    /// empty or zero, plus an empty creationTimestamp.
    fn go_meta(name: &str, namespace: &str) -> Enc {
        Enc::new()
            .str(1, name)
            .str(2, "")
            .str(3, namespace)
            .str(4, "")
            .str(5, "")
            .str(6, "")
            .varint(7, 0)
            .msg(8, Enc::new())
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
            .collect()
    }

    /// Bodies captured from kubectl v1.32.4 (`kubectl create ...` against a recording server).
    const KUBECTL_NAMESPACE: &str = "6b3873000a0f0a02763112094e616d657370616365121f0a170a0764656d6f2d6e7312001a0022002a0032003800420012001a020a001a002200";
    const KUBECTL_CONFIGMAP: &str = "6b3873000a0f0a0276311209436f6e6669674d6170122f0a1a0a03636d3112001a0764656d6f2d6e7322002a0032003800420012060a016112016212090a05656d70747912001a002200";
    const KUBECTL_SECRET: &str = "6b3873000a0c0a027631120653656372657412320a190a02733112001a0764656d6f2d6e7322002a00320038004200120d0a027077120768756e746572321a064f70617175651a002200";
    const KUBECTL_SERVICEACCOUNT: &str = "6b3873000a140a027631120e536572766963654163636f756e74121c0a1a0a0373613112001a0764656d6f2d6e7322002a003200380042001a002200";
    const KUBECTL_CONFIGMAP_BINARY: &str = "6b3873000a0f0a0276311209436f6e6669674d617012290a1a0a03636d3212001a0764656d6f2d6e7322002a003200380042001a0b0a0362696e12047800ff791a002200";

    /// Every kind of unknown field: varint, 64-bit, length-delimited, 32-bit and a group.
    fn unknown_fields(e: Enc) -> Enc {
        e.varint(90, 12345)
            .fixed64(91, u64::MAX)
            .bytes(92, &[0xff, 0x00, 0x80])
            .fixed32(93, 7)
            .key(94, 3)
            .varint(1, 1)
            .str(2, "in a group")
            .key(95, 3)
            .key(95, 4)
            .key(94, 4)
    }

    #[test]
    fn decodes_objects() {
        let full_meta = Enc::new()
            .str(1, "web")
            .str(2, "web-")
            .str(3, "prod")
            .str(4, "/api/v1/ignored-selflink")
            .str(5, "0b7c5a3e-uid")
            .str(6, "42")
            .varint(7, 3)
            .msg(8, Enc::new().varint(1, 1_714_979_289).varint(2, 500))
            .entry(11, "app", b"web")
            .entry(11, "tier", b"front")
            .entry(12, "note", b"")
            .msg(
                13,
                Enc::new()
                    .str(5, "apps/v1")
                    .str(1, "Deployment")
                    .str(3, "web")
                    .str(4, "owner-uid")
                    .varint(6, 1)
                    .varint(7, 1),
            )
            .msg(
                13,
                Enc::new()
                    .str(5, "v1")
                    .str(1, "ConfigMap")
                    .str(3, "cfg")
                    .str(4, "cfg-uid")
                    .varint(6, 0),
            )
            .str(14, "example.com/cleanup")
            .str(14, "kubernetes")
            .msg(17, Enc::new().str(1, "kubectl").str(2, "Update"));
        let cases: Vec<(&str, Vec<u8>, Value)> = vec![
            (
                "namespace with labels",
                body(
                    "v1",
                    "Namespace",
                    Enc::new()
                        .msg(
                            1,
                            go_meta("team-a", "")
                                .entry(11, "team", b"a")
                                .entry(11, "env", b"dev"),
                        )
                        .msg(2, Enc::new().str(1, "kubernetes"))
                        .msg(3, Enc::new().str(1, "")),
                ),
                json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "team-a", "labels": {"team": "a", "env": "dev"}},
                    "spec": {"finalizers": ["kubernetes"]},
                }),
            ),
            (
                "namespace status with a condition",
                body(
                    "v1",
                    "Namespace",
                    Enc::new().msg(1, go_meta("ns", "")).msg(
                        3,
                        Enc::new().str(1, "Terminating").msg(
                            2,
                            Enc::new()
                                .str(1, "NamespaceDeletionContentFailure")
                                .str(2, "False")
                                .msg(4, Enc::new().varint(1, 951_868_799))
                                .str(5, "ContentDeleted")
                                .str(6, ""),
                        ),
                    ),
                ),
                json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"},
                    "status": {"phase": "Terminating", "conditions": [{
                        "type": "NamespaceDeletionContentFailure", "status": "False",
                        "lastTransitionTime": "2000-02-29T23:59:59Z", "reason": "ContentDeleted",
                    }]},
                }),
            ),
            (
                "configmap with data and binaryData",
                body(
                    "v1",
                    "ConfigMap",
                    Enc::new()
                        .msg(1, go_meta("cfg", "prod"))
                        .entry(2, "a", b"b")
                        .entry(2, "empty", b"")
                        .entry(3, "bin", &[0x00, 0xff, 0x10])
                        .varint(4, 1),
                ),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cfg", "namespace": "prod"},
                    "data": {"a": "b", "empty": ""},
                    "binaryData": {"bin": "AP8Q"},
                    "immutable": true,
                }),
            ),
            (
                "secret with data, type and stringData",
                body(
                    "v1",
                    "Secret",
                    Enc::new()
                        .msg(1, go_meta("creds", "prod"))
                        .entry(2, "password", b"hunter2")
                        .str(3, "kubernetes.io/basic-auth")
                        .entry(4, "username", b"admin")
                        .varint(5, 0),
                ),
                json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": "prod"},
                    "data": {"password": "aHVudGVyMg=="},
                    "type": "kubernetes.io/basic-auth",
                    "stringData": {"username": "admin"},
                    "immutable": false,
                }),
            ),
            (
                "secret with no data and empty type",
                body(
                    "v1",
                    "Secret",
                    Enc::new().msg(1, go_meta("empty", "prod")).str(3, ""),
                ),
                json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "empty", "namespace": "prod"},
                }),
            ),
            (
                "serviceaccount",
                body(
                    "v1",
                    "ServiceAccount",
                    Enc::new()
                        .msg(1, go_meta("builder", "ci"))
                        .msg(
                            2,
                            Enc::new()
                                .str(1, "Secret")
                                .str(2, "ci")
                                .str(3, "builder-token")
                                .str(4, "")
                                .str(5, "v1")
                                .str(6, "")
                                .str(7, ""),
                        )
                        .msg(3, Enc::new().str(1, "registry"))
                        .msg(3, Enc::new().str(1, "mirror"))
                        .varint(4, 0),
                ),
                json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "builder", "namespace": "ci"},
                    "secrets": [{"kind": "Secret", "namespace": "ci", "name": "builder-token",
                                 "apiVersion": "v1"}],
                    "imagePullSecrets": [{"name": "registry"}, {"name": "mirror"}],
                    "automountServiceAccountToken": false,
                }),
            ),
            (
                "every decoded ObjectMeta field",
                body("v1", "ConfigMap", Enc::new().msg(1, full_meta)),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {
                        "name": "web", "generateName": "web-", "namespace": "prod",
                        "uid": "0b7c5a3e-uid", "resourceVersion": "42", "generation": 3,
                        "creationTimestamp": "2024-05-06T07:08:09Z",
                        "labels": {"app": "web", "tier": "front"},
                        "annotations": {"note": ""},
                        "ownerReferences": [
                            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                             "uid": "owner-uid", "controller": true, "blockOwnerDeletion": true},
                            {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg",
                             "uid": "cfg-uid", "controller": false},
                        ],
                        "finalizers": ["example.com/cleanup", "kubernetes"],
                    },
                }),
            ),
            (
                "zero values are omitted; a zero-seconds time is absent",
                body(
                    "v1",
                    "ConfigMap",
                    Enc::new().msg(
                        1,
                        go_meta("x", "")
                            .msg(8, Enc::new().varint(1, 0).varint(2, 0))
                            .msg(13, Enc::new()),
                    ),
                ),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "x", "ownerReferences": [
                        {"apiVersion": "", "kind": "", "name": "", "uid": ""},
                    ]},
                }),
            ),
            (
                "repeated metadata merges; duplicate map keys: last wins",
                body(
                    "v1",
                    "ConfigMap",
                    Enc::new()
                        .msg(1, Enc::new().str(1, "a").entry(11, "k", b"1"))
                        .entry(2, "k", b"first")
                        .msg(1, Enc::new().str(3, "ns").entry(11, "j", b"2"))
                        .entry(2, "k", b"second"),
                ),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a", "namespace": "ns", "labels": {"k": "1", "j": "2"}},
                    "data": {"k": "second"},
                }),
            ),
            (
                "an empty object still has metadata",
                body("v1", "ServiceAccount", Enc::new()),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {}}),
            ),
            (
                "unknown fields of every wire type are skipped",
                {
                    let meta = unknown_fields(go_meta("u", "ns"))
                        .msg(
                            17,
                            Enc::new().str(1, "kubectl").msg(7, Enc::new().raw(b"{}")),
                        )
                        .msg(11, unknown_fields(Enc::new().str(1, "l")).str(2, "v"));
                    let object = unknown_fields(Enc::new()).msg(1, meta).entry(2, "a", b"b");
                    let unknown = unknown_fields(Enc::new())
                        .msg(
                            1,
                            unknown_fields(Enc::new().str(1, "v1").str(2, "ConfigMap")),
                        )
                        .msg(2, object);
                    [MAGIC, &unknown.0].concat()
                },
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "u", "namespace": "ns", "labels": {"l": "v"}},
                    "data": {"a": "b"},
                }),
            ),
            (
                "kubectl create namespace",
                hex(KUBECTL_NAMESPACE),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo-ns"}}),
            ),
            (
                "kubectl create configmap --from-literal",
                hex(KUBECTL_CONFIGMAP),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm1", "namespace": "demo-ns"},
                    "data": {"a": "b", "empty": ""},
                }),
            ),
            (
                "kubectl create configmap --from-file (binary)",
                hex(KUBECTL_CONFIGMAP_BINARY),
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm2", "namespace": "demo-ns"},
                    "binaryData": {"bin": "eAD/eQ=="},
                }),
            ),
            (
                "kubectl create secret generic",
                hex(KUBECTL_SECRET),
                json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "s1", "namespace": "demo-ns"},
                    "data": {"pw": "aHVudGVyMg=="},
                    "type": "Opaque",
                }),
            ),
            (
                "kubectl create serviceaccount",
                hex(KUBECTL_SERVICEACCOUNT),
                json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "sa1", "namespace": "demo-ns"},
                }),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(decode(&body), Ok(want), "case {name:?}");
        }
    }

    #[test]
    fn rejects_malformed_and_unsupported_bodies() {
        let cm = |object: Enc| body("v1", "ConfigMap", object);
        let nested_groups = |depth: usize| {
            let mut e = Enc::new();
            for _ in 0..depth {
                e = e.key(5, 3);
            }
            for _ in 0..depth {
                e = e.key(5, 4);
            }
            e
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty body", vec![], "magic prefix"),
            (
                "JSON instead of protobuf",
                br#"{"kind":"ConfigMap"}"#.to_vec(),
                "magic prefix",
            ),
            ("short magic", b"k8s".to_vec(), "magic prefix"),
            (
                "truncated key varint",
                [MAGIC, &[0x80]].concat(),
                "truncated varint",
            ),
            (
                "truncated value varint",
                cm(Enc::new().msg(1, Enc::new().raw(&[0x38, 0x80]))),
                "invalid protobuf ConfigMap: metadata: truncated varint",
            ),
            (
                "varint longer than 64 bits",
                cm(Enc::new().raw(&[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
                ])),
                "varint overflows 64 bits",
            ),
            (
                "length past end in the envelope",
                [MAGIC, &[0x12, 0x05, 0x01]].concat(),
                "runs past the end",
            ),
            (
                "length past end in metadata",
                cm(Enc::new().raw(&[0x0a, 0x32, 0x0a, 0x01])),
                "runs past the end",
            ),
            (
                "huge length",
                cm(Enc::new().raw(&[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f])),
                "runs past the end",
            ),
            (
                "truncated fixed64",
                cm(Enc::new().raw(&[0x09, 1, 2, 3])),
                "64-bit field of 8 bytes runs past the end",
            ),
            (
                "truncated fixed32",
                cm(Enc::new().raw(&[0x0d, 1])),
                "32-bit field of 4 bytes runs past the end",
            ),
            (
                "wrong wire type for metadata.name",
                cm(Enc::new().msg(1, Enc::new().varint(1, 5))),
                "metadata: name: wrong wire type varint (0), expected length-delimited (2)",
            ),
            (
                "wrong wire type for immutable",
                cm(Enc::new().str(4, "true")),
                "immutable: wrong wire type length-delimited (2), expected varint (0)",
            ),
            (
                "wrong wire type for metadata",
                cm(Enc::new().fixed32(1, 0)),
                "metadata: wrong wire type 32-bit (5)",
            ),
            (
                "wrong wire type for generation",
                cm(Enc::new().msg(1, Enc::new().fixed64(7, 1))),
                "generation: wrong wire type 64-bit (1)",
            ),
            (
                "wrong wire type for typeMeta.kind",
                [MAGIC, &Enc::new().msg(1, Enc::new().varint(2, 1)).0].concat(),
                "typeMeta: kind: wrong wire type",
            ),
            (
                "invalid UTF-8 in a string",
                cm(Enc::new().msg(1, Enc::new().bytes(1, &[b'a', 0xff, 0xfe]))),
                "metadata: name: invalid UTF-8",
            ),
            (
                "invalid UTF-8 in a map key",
                cm(Enc::new().msg(2, Enc::new().bytes(1, &[0xc3]).str(2, "v"))),
                "data: key: invalid UTF-8",
            ),
            (
                "invalid UTF-8 in the kind",
                [
                    MAGIC,
                    &Enc::new()
                        .msg(1, Enc::new().str(1, "v1").bytes(2, &[0xff]))
                        .0,
                ]
                .concat(),
                "invalid UTF-8",
            ),
            (
                "unsupported kind",
                body("example.org/v1", "Widget", Enc::new()),
                "the emulator decodes protobuf only for the kinds of the served built-in groups; send example.org/v1/Widget as JSON",
            ),
            (
                "supported kind in another group",
                body("apps/v1", "ConfigMap", Enc::new()),
                "send apps/v1/ConfigMap as JSON",
            ),
            ("no kind", body("v1", "", Enc::new()), "names no kind"),
            ("empty envelope", MAGIC.to_vec(), "names no kind"),
            (
                "compressed raw",
                {
                    let unknown = Enc::new()
                        .msg(1, Enc::new().str(1, "v1").str(2, "Secret"))
                        .bytes(2, &[1, 2, 3])
                        .str(3, "gzip");
                    [MAGIC, &unknown.0].concat()
                },
                "unsupported protobuf contentEncoding \"gzip\"",
            ),
            (
                "nesting depth limit",
                cm(Enc::new().msg(1, nested_groups(40))),
                "nesting deeper than 16 levels",
            ),
            (
                "unclosed group",
                cm(Enc::new().key(5, 3).varint(1, 1)),
                "group for field 5 is not closed",
            ),
            (
                "mismatched end group",
                cm(Enc::new().key(5, 3).key(6, 4)),
                "end-group for field 6 inside the group for field 5",
            ),
            (
                "end group without start",
                cm(Enc::new().key(5, 4)),
                "end-group for field 5 without a start",
            ),
            (
                "wire type 6",
                cm(Enc::new().key(5, 6)),
                "invalid wire type 6",
            ),
            (
                "wire type 7 in a group",
                cm(Enc::new().key(5, 3).key(6, 7)),
                "invalid wire type 7",
            ),
            (
                "field number 0",
                cm(Enc::new().raw(&[0x02, 0x00])),
                "invalid field number 0",
            ),
            (
                "timestamp out of range",
                cm(Enc::new().msg(1, Enc::new().msg(8, Enc::new().varint(1, u64::MAX / 2)))),
                "creationTimestamp: timestamp 9223372036854775807 is outside",
            ),
            (
                "error in an owner reference",
                cm(Enc::new().msg(1, Enc::new().msg(13, Enc::new().str(6, "yes")))),
                "metadata: ownerReferences: controller: wrong wire type",
            ),
        ];
        for (name, body, want) in cases {
            match decode(&body) {
                Ok(v) => panic!("case {name:?}: decoded to {v}, want an error with {want:?}"),
                Err(e) => assert!(
                    e.contains(want),
                    "case {name:?}: error {e:?} lacks {want:?}"
                ),
            }
        }
    }

    #[test]
    fn nesting_within_the_limit_is_fine() {
        // metadata sits at depth 2; groups may open up to MAX_DEPTH in total.
        let mut groups = Enc::new();
        for _ in 0..(MAX_DEPTH - 2) {
            groups = groups.key(5, 3);
        }
        for _ in 0..(MAX_DEPTH - 2) {
            groups = groups.key(5, 4);
        }
        let b = body("v1", "ConfigMap", Enc::new().msg(1, groups.str(1, "deep")));
        assert_eq!(
            decode(&b),
            Ok(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"}}))
        );
    }

    #[test]
    fn renders_rfc3339() {
        let cases = [
            (1, "1970-01-01T00:00:01Z"),
            (-1, "1969-12-31T23:59:59Z"),
            (951_868_799, "2000-02-29T23:59:59Z"),
            (951_868_800, "2000-03-01T00:00:00Z"),
            (1_714_979_289, "2024-05-06T07:08:09Z"),
            (-62_135_596_800, "0001-01-01T00:00:00Z"),
            (-62_167_219_200, "0000-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ];
        for (seconds, want) in cases {
            assert_eq!(rfc3339(seconds).as_deref(), Ok(want), "seconds {seconds}");
        }
        for seconds in [-62_167_219_201, 253_402_300_800, i64::MIN, i64::MAX] {
            assert!(rfc3339(seconds).is_err(), "seconds {seconds}");
        }
    }

    #[test]
    fn never_panics_on_damaged_bodies() {
        let fixtures = [
            hex(KUBECTL_NAMESPACE),
            hex(KUBECTL_CONFIGMAP),
            hex(KUBECTL_SECRET),
            hex(KUBECTL_SERVICEACCOUNT),
            hex(KUBECTL_CONFIGMAP_BINARY),
        ];
        for fixture in &fixtures {
            for len in 0..fixture.len() {
                let _ = decode(&fixture[..len]);
            }
            for i in 0..fixture.len() {
                for flip in [0x01, 0x07, 0x80, 0xff] {
                    let mut damaged = fixture.clone();
                    damaged[i] ^= flip;
                    let _ = decode(&damaged);
                }
            }
        }
        // Random tails after the magic prefix (xorshift, fixed seed).
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 48) as usize;
            let mut b = MAGIC.to_vec();
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b.push(state as u8);
            }
            let _ = decode(&b);
        }
    }
}
