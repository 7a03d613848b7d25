//! The Site object of a review as the handlers read it: text borrowed from the body, only what
//! the rules read kept.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;
use std::borrow::Cow;

use super::{applied, reader};
use crate::crd::{Site, SiteRef, SiteSpec, SiteStatus, Str, Text};
use crate::validation::FieldError;

/// A Site as an admission request carries it, decoded straight from the request body (no
/// generic JSON tree): the webhook server's fast path. Its text is borrowed from the body
/// ([`Text`]): reviewing a Site copies none of its strings. `apiVersion` and `kind` are kept so
/// that an object of another kind is still refused. Only what the handlers read is kept: the
/// metadata's names and this operator's annotations ([`admission_meta`]), the spec without its
/// share lists and routing contents (a [`SiteSpec`] of [`Text`]: [`Str::REVIEW`]); the rest is
/// checked as the generic path checks it.
/// Metadata and spec are boxed: a request holds two objects and is moved several times on its
/// way to the handler.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteObject<'a> {
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<Text<'a>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Text<'a>>,
    #[serde(default, deserialize_with = "admission_meta")]
    pub metadata: Box<ObjectMeta>,
    #[serde(borrow)]
    pub spec: Box<SiteSpec<Text<'a>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SiteStatus>,
}

/// A Site the rules can read: a stored [`Site`], or a reviewed [`SiteObject`].
pub trait Reviewed: serde::Serialize {
    type Text: Str;
    fn parts(&self) -> SiteRef<'_, Self::Text>;
}

impl Reviewed for Site {
    type Text = String;

    fn parts(&self) -> SiteRef<'_> {
        Site::parts(self)
    }
}

impl<'a> Reviewed for SiteObject<'a> {
    type Text = Text<'a>;

    fn parts(&self) -> SiteRef<'_, Text<'a>> {
        SiteRef {
            metadata: &self.metadata,
            name: &self.spec.name,
            owner: &self.spec.owner,
            site_type: &self.spec.site_type,
            configuration: &self.spec.configuration,
        }
    }
}

/// The metadata the admission handlers read: names and this operator's own annotations. The
/// rest (managed fields, the `kubectl apply` annotation holding a copy of the whole object) is
/// skipped unread, without allocating.
fn admission_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<ObjectMeta>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        generate_name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        uid: Option<String>,
        #[serde(default, deserialize_with = "own_annotations")]
        annotations: Option<std::collections::BTreeMap<String, String>>,
    }
    let meta = Option::<Meta>::deserialize(d)?;
    Ok(Box::new(meta.map_or_else(ObjectMeta::default, |m| {
        ObjectMeta {
            name: m.name,
            generate_name: m.generate_name,
            namespace: m.namespace,
            uid: m.uid,
            annotations: m.annotations,
            ..ObjectMeta::default()
        }
    })))
}

/// A string value read without keeping it (anything else is an error, as for a kept one).
///
/// The value is read raw, which skips it without unescaping or copying it (the `kubectl apply`
/// annotation is a whole JSON document escaped inside a string: unescaping it was a large part
/// of the decoding cost): the [`reader`] checks it as a string ([`reader::RAW_STRING`]), and
/// serde_json lends it as a raw value, checked here. A value holding a `\u` escape is parsed
/// fully, so a lone surrogate is refused as the generic path refuses it. Only the reader and
/// serde_json decoding from text or bytes read raw values: [`SiteObject`] is decoded with them
/// (the server) or `serde_json::from_slice`, never from an I/O reader or a `Value`.
struct SkippedString {
    /// Where the value starts in the decoded text (its opening quote).
    at: *const u8,
}

impl<'de> Deserialize<'de> for SkippedString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Raw;
        impl<'de> serde::de::Visitor<'de> for Raw {
            type Value = SkippedString;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            /// The review reader: the string as written, already checked.
            fn visit_borrowed_str<E>(self, raw: &'de str) -> Result<SkippedString, E> {
                Ok(SkippedString { at: raw.as_ptr() })
            }

            /// serde_json, which lends the value raw.
            fn visit_newtype_struct<D2: serde::Deserializer<'de>>(
                self,
                d: D2,
            ) -> Result<SkippedString, D2::Error> {
                use serde::de::Error;
                let raw = <&'de serde_json::value::RawValue>::deserialize(d)?;
                let text = raw.get();
                if !text.starts_with('"') {
                    return Err(D2::Error::invalid_type(
                        serde::de::Unexpected::Other("a non-string value"),
                        &"a string",
                    ));
                }
                if text.contains("\\u") {
                    serde_json::from_str::<String>(text).map_err(D2::Error::custom)?;
                }
                Ok(SkippedString { at: text.as_ptr() })
            }
        }
        d.deserialize_newtype_struct(reader::RAW_STRING, Raw)
    }
}

/// The `sites.ecmwf.int/` annotations; other values (strings) are skipped. Where the value of
/// the `kubectl apply` annotation starts is reported to [`applied::met`] (the server may have
/// cut it out of the body: [`applied::Cut`]).
fn own_annotations<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::collections::BTreeMap<String, String>>, D::Error> {
    struct Own;
    impl<'de> crate::crd::maps::Entries<'de> for Own {
        type Value = std::collections::BTreeMap<String, String>;

        fn read<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = std::collections::BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key.starts_with("sites.ecmwf.int/") {
                    let value = map.next_value::<String>()?;
                    out.insert(key, value);
                } else {
                    let skipped = map.next_value::<SkippedString>()?;
                    if key == applied::ANNOTATION {
                        applied::met(skipped.at);
                    }
                }
            }
            Ok(out)
        }
    }
    crate::crd::maps::optional_map(d, Own, "a map of strings")
}

impl Resource for SiteObject<'_> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Site::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Site::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Site::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Site::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Refuses an object whose `apiVersion`/`kind` is not a Site's.
pub(crate) fn check_site_type(
    api_version: &str,
    kind: &str,
    field: &str,
) -> Result<(), FieldError> {
    if api_version == Site::api_version(&()) && kind == Site::kind(&()) {
        return Ok(());
    }
    Err(FieldError {
        field: field.into(),
        message: format!(
            "kind {kind:?} of apiVersion {api_version:?} is not a Site (sites.ecmwf.int/v1)"
        ),
    })
}
