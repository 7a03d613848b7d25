//! The AdmissionReview on the wire, in one place: the envelope read once from the body, a Site
//! review decoded typed and borrowed ([`SiteBody`]: the [`reader`] for the common shape, the
//! [`applied`] annotation's cut, serde as the fallback, object by object for what the typed
//! path refuses), the configuration review reduced to the ConfigMap's name and text, the
//! generic decoder kept as the tests' reference, and the answer's encoding. The server
//! (`server.rs`) only reads bodies, applies limits and calls these; the handlers (`mod.rs`)
//! never see bytes.

pub mod applied;
pub mod object;
pub mod reader;

use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::{DynamicObject, TypeMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::validation::FieldError;
use object::SiteObject;

/// The AdmissionReview envelope. kube's `AdmissionReview` flattens its type fields, which makes
/// serde buffer the whole document before decoding it; this one reads the body once.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound = "K: Resource + DeserializeOwned")]
struct Envelope<K: Resource> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    request: Option<AdmissionRequest<K>>,
}

/// The AdmissionReview envelope as the handlers read it, its objects decoded as `O`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionReviewOf<O> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default = "Option::default")]
    request: Option<AdmissionRequestOf<O>>,
}

/// The fields of an AdmissionRequest the handlers read. `resource` and `userInfo`, which the
/// API requires, must be there but are skipped unread, as are the optional fields the handlers
/// never read (`requestKind`, `requestResource`, `options`): nothing is allocated for them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionRequestOf<O> {
    uid: String,
    kind: kube::core::GroupVersionKind,
    #[allow(dead_code)]
    resource: serde::de::IgnoredAny,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: kube::core::admission::Operation,
    #[allow(dead_code)]
    user_info: serde::de::IgnoredAny,
    #[serde(default = "Option::default")]
    object: Option<O>,
    #[serde(default = "Option::default")]
    old_object: Option<O>,
    #[serde(default)]
    dry_run: bool,
}

/// The envelope of a Site review, its objects decoded as Sites.
type SiteEnvelope<'a> = AdmissionReviewOf<SiteObject<'a>>;

impl<O> AdmissionReviewOf<O> {
    /// The request of a review, unless the review is not an `admission.k8s.io/v1` one or has no
    /// request.
    fn request(self) -> Result<(TypeMeta, AdmissionRequestOf<O>), String> {
        let types = envelope_types(self.api_version, self.kind)?;
        let request = self
            .request
            .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
        Ok((types, request))
    }
}

impl<O> AdmissionRequestOf<O> {
    /// The request with its objects as `f` makes them (`None` for an object `f` refuses).
    fn into_admission<K: Resource>(
        self,
        types: TypeMeta,
        mut f: impl FnMut(O) -> Option<K>,
    ) -> AdmissionRequest<K> {
        AdmissionRequest {
            types,
            uid: self.uid,
            kind: self.kind,
            resource: kube::core::GroupVersionResource::gvr("", "", ""),
            sub_resource: self.sub_resource,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: Default::default(),
            object: self.object.and_then(&mut f),
            old_object: self.old_object.and_then(&mut f),
            dry_run: self.dry_run,
            options: None,
        }
    }
}

/// The body of an AdmissionReview of a Site, for the Site handlers' path: [`SiteBody::decode`]
/// decodes it like [`decode_as`] for [`SiteObject`], without decoding what the handlers never
/// read, and with the Site's text borrowed from the body.
///
/// The [`super::reader`] reads the body first. A body it refuses is decoded with serde_json,
/// the values of the `kubectl apply` annotation cut out of it first when they are where the API
/// server writes them (see [`super::applied`]): what is left decodes several times faster, to
/// the same request.
#[derive(Debug)]
pub struct SiteBody<'b> {
    text: &'b str,
    /// The cut body, made when serde_json decodes.
    cut: std::cell::OnceCell<Option<applied::Cut>>,
}

impl<'b> SiteBody<'b> {
    /// The body, unless it is not UTF-8 text (the reason, as for a decoding error).
    pub fn new(body: &'b [u8]) -> Result<SiteBody<'b>, String> {
        Ok(SiteBody {
            text: utf8(body)?,
            cut: std::cell::OnceCell::new(),
        })
    }

    /// The review's request, its Site's text borrowed from the body.
    pub fn decode(&self) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
        match self.read() {
            Some(req) => req,
            None => self.decode_with_serde_json(),
        }
    }

    /// What the review reader gives, `None` when it refuses the body.
    pub fn read(&self) -> Option<Result<AdmissionRequest<SiteObject<'_>>, String>> {
        reader::from_str(self.text).ok().map(site_request)
    }

    /// [`SiteBody::decode`] without the review reader: serde_json's decoding.
    pub fn decode_with_serde_json(&self) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
        if let Some(cut) = self.cut.get_or_init(|| applied::Cut::of(self.text))
            && let Some(req) = cut.decode(decode_site_text)
        {
            return Ok(req);
        }
        decode_site_text(self.text)
    }

    /// The request as the Site handlers take it: [`SiteBody::decode`], or for a body it
    /// refuses, [`SiteBody::decode_each`].
    pub fn decode_all(
        &self,
    ) -> Result<(AdmissionRequest<SiteObject<'_>>, Option<FieldError>), String> {
        match self.decode() {
            Ok(req) => Ok((req, None)),
            Err(_) => self.decode_each(),
        }
    }

    /// The request with the objects that decode as Sites, and for the object (not the stored
    /// one) that does not, why: for a body [`SiteBody::decode`] refuses. The objects are first
    /// taken as raw text, so an object that is no Site is never decoded whole.
    pub fn decode_each(
        &self,
    ) -> Result<(AdmissionRequest<SiteObject<'_>>, Option<FieldError>), String> {
        let review: AdmissionReviewOf<RawObject> = serde_json::from_str(self.text)
            .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
        let (types, mut r) = review.request()?;
        let object = r.object.take().map(|raw| site_object(raw.0, "object"));
        // A stored object that no longer decodes only loses the comparisons with it.
        let mut req = r.into_admission(types, |raw| site_object(raw.0, "oldObject").ok());
        let refused = match object {
            Some(Ok(site)) => {
                req.object = Some(site);
                None
            }
            Some(Err(violation)) => Some(violation),
            None => None,
        };
        Ok((req, refused))
    }
}

/// The text of a JSON object, borrowed from the body: an object as the API server sends it,
/// before its fields are decoded. Anything but an object is refused, as in a typed decoding.
struct RawObject<'a>(&'a serde_json::value::RawValue);

impl<'de: 'a, 'a> Deserialize<'de> for RawObject<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Unexpected};
        let raw = <&'de serde_json::value::RawValue>::deserialize(d)?;
        let unexpected = match raw.get().as_bytes().first() {
            // As deep as serde_json decodes: deeper is refused as decoding it would be.
            Some(b'{') if nesting(raw.get()) > 127 => {
                return Err(D::Error::custom("recursion limit exceeded"));
            }
            Some(b'{') => return Ok(RawObject(raw)),
            Some(b'[') => Unexpected::Seq,
            Some(b'"') => Unexpected::Other("a string"),
            Some(b't' | b'f') => Unexpected::Other("a boolean"),
            Some(b'n') => Unexpected::Unit,
            _ => Unexpected::Other("a number"),
        };
        Err(D::Error::invalid_type(unexpected, &"an object"))
    }
}

/// How deeply arrays and objects nest in a JSON text (one that serde_json read).
fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in json.as_bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A Site from the raw text of an object, or the violation naming why it is none: its kind, or
/// what does not decode.
fn site_object<'a>(
    raw: &'a serde_json::value::RawValue,
    field: &str,
) -> Result<SiteObject<'a>, FieldError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Types<'a> {
        #[serde(default, borrow)]
        api_version: Option<std::borrow::Cow<'a, str>>,
        #[serde(default, borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let violation = |message: String| FieldError {
        field: field.into(),
        message,
    };
    let types: Types = serde_json::from_str(raw.get())
        .map_err(|e| violation(format!("not a valid Site: {}", without_position(&e))))?;
    if let (Some(api_version), Some(kind)) = (&types.api_version, &types.kind) {
        object::check_site_type(api_version, kind, field)?;
    }
    serde_json::from_str::<SiteObject>(raw.get())
        .map_err(|e| violation(format!("not a valid Site: {}", without_position(&e))))
}

/// A decoding error's message without its position (which counts in the object, not the body).
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&position) {
        Some(m) => m.to_string(),
        None => message,
    }
}

pub(super) fn decode_site_text(text: &str) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
    let review: SiteEnvelope = serde_json::from_str(text)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    site_request(review)
}

/// The request of a decoded Site review, unless the review is not an `admission.k8s.io/v1` one
/// or has no request.
fn site_request(review: SiteEnvelope<'_>) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
    let (types, r) = review.request()?;
    Ok(r.into_admission(types, Some))
}

/// The body as text. JSON is UTF-8 (RFC 8259); checking the whole body at once (with SIMD) is
/// much faster than serde_json's check of each string as it decodes from bytes. The standard
/// library's check names where a body that is not UTF-8 goes wrong.
fn utf8(body: &[u8]) -> Result<&str, String> {
    simdutf8::basic::from_utf8(body).or_else(|_| {
        std::str::from_utf8(body)
            .map_err(|e| format!("the body is not an AdmissionReview: not UTF-8 text: {e}"))
    })
}

/// The envelope's type fields, when they name an `admission.k8s.io/v1` AdmissionReview.
fn envelope_types(api_version: Option<String>, kind: Option<String>) -> Result<TypeMeta, String> {
    let kind = kind.unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(format!("kind {kind:?} is not AdmissionReview"));
    }
    let api_version = api_version.unwrap_or_default();
    if api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "apiVersion {api_version:?} is not supported: use admission.k8s.io/v1"
        ));
    }
    Ok(TypeMeta { api_version, kind })
}

/// Decodes an `admission.k8s.io/v1` AdmissionReview request with its objects as generic JSON
/// trees: the reference the tests and the fuzz target compare the server's decoding with. The
/// server never decodes this way: a tree takes up to a hundred times the body's bytes.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    decode_as(body)
}

/// [`decode`] with the objects decoded as `K`.
pub fn decode_as<K: Resource + DeserializeOwned>(
    body: &[u8],
) -> Result<AdmissionRequest<K>, String> {
    let review: Envelope<K> = serde_json::from_str(utf8(body)?)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    let types = envelope_types(review.api_version, review.kind)?;
    let mut req = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
    req.types = types;
    Ok(req)
}

/// A ConfigMap as the configuration webhook reads it: its name and `data["config.yaml"]`
/// (borrowed from the body when it has no escapes); the other entries are checked to be there
/// and skipped unread.
#[derive(Deserialize)]
struct ConfigObject<'a> {
    #[serde(default)]
    metadata: Option<ConfigMeta>,
    #[serde(default, borrow, deserialize_with = "config_text")]
    data: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ConfigMeta {
    #[serde(default)]
    name: Option<String>,
}

/// The `config.yaml` entry of a ConfigMap's data, when it is a string.
fn config_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::borrow::Cow<'de, str>>, D::Error> {
    struct Data;
    impl<'de> crate::crd::maps::Entries<'de> for Data {
        type Value = Option<std::borrow::Cow<'de, str>>;

        fn read<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut text = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == crate::config::CONFIGMAP_KEY {
                    // A value that is no string counts as absent, as in the generic decoding.
                    let raw = map.next_value::<&'de serde_json::value::RawValue>()?;
                    text = serde_json::from_str::<std::borrow::Cow<'de, str>>(raw.get()).ok();
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(text)
        }
    }
    Ok(crate::crd::maps::optional_map(d, Data, "a map")?.flatten())
}

/// A configuration review as the configuration webhook reads it: the request, and of its
/// ConfigMap only the name and the `config.yaml` text.
pub struct ConfigReview<'b> {
    pub request: AdmissionRequest<DynamicObject>,
    object: Option<ConfigObject<'b>>,
}

impl<'b> ConfigReview<'b> {
    /// The ConfigMap's name.
    pub fn name(&self) -> Option<&str> {
        self.object
            .as_ref()
            .and_then(|o| o.metadata.as_ref()?.name.as_deref())
    }

    /// Its `config.yaml`.
    pub fn text(&self) -> Option<&str> {
        self.object.as_ref().and_then(|o| o.data.as_deref())
    }
}

/// Decodes a configuration review, keeping of the object only what [`ConfigReview`] gives.
pub fn decode_config(body: &[u8]) -> Result<ConfigReview<'_>, String> {
    let text = utf8(body)?;
    let not_a_review = |e| format!("the body is not an AdmissionReview: {e}");
    let review: AdmissionReviewOf<RawObject> = serde_json::from_str(text).map_err(not_a_review)?;
    let (types, mut r) = review.request()?;
    let object = r.object.take();
    let object = object
        .map(|raw| serde_json::from_str::<ConfigObject>(raw.0.get()))
        .transpose()
        .map_err(not_a_review)?;
    Ok(ConfigReview {
        request: r.into_admission(types, |_| None),
        object,
    })
}

/// Encodes a response as an `admission.k8s.io/v1` AdmissionReview, with the patch as a base64
/// string (the canonical encoding of Kubernetes' `[]byte` fields).
pub fn encode(response: &AdmissionResponse) -> serde_json::Result<Vec<u8>> {
    use base64::Engine as _;
    if response.allowed
        && response.patch.is_none()
        && response.warnings.as_ref().is_none_or(Vec::is_empty)
        && response.audit_annotations.is_empty()
    {
        // The most common answer, written directly (no copy of the response, no empty status).
        let mut out = Vec::with_capacity(96 + response.uid.len());
        out.extend_from_slice(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
        );
        serde_json::to_writer(&mut out, &response.uid)?;
        out.extend_from_slice(br#","allowed":true}}"#);
        return Ok(out);
    }
    if response.patch.is_none() {
        return serde_json::to_vec(&response.clone().into_review());
    }
    let mut review = serde_json::to_value(response.clone().into_review())?;
    if let Some(patch) = response.patch.as_ref() {
        review["response"]["patch"] = base64::engine::general_purpose::STANDARD
            .encode(patch)
            .into();
    }
    serde_json::to_vec(&review)
}
