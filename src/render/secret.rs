//! The two Secrets of a site (LIFE-01 steps 1 and 2).
//!
//! - `<id>`: the site's generated tokens. Generation is random, so the tokens are an input: the
//!   reconciler passes [`SiteTokens::keep_or_generate`] the stored Secret and a generator, and
//!   every value already stored is kept.
//! - `<id>-oauth2`: the OAuth2 proxy cookie secret, derived (HMAC-SHA256) from the platform
//!   session key and the site id: the same inputs always give the same bytes, so every replica
//!   and every restart renders the same Secret.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use crate::Error;
use crate::crd::Site;
use crate::labels;

/// Key of the site API token in Secret `<id>`.
pub const API_TOKEN_KEY: &str = "api_token";
/// Key of the site secret key (sessions, signing) in Secret `<id>`.
pub const SECRET_KEY_KEY: &str = "secret_key";
/// Key of the cookie secret in Secret `<id>-oauth2`.
pub const COOKIE_SECRET_KEY: &str = "cookie_secret";

/// The generated values of Secret `<id>`.
#[derive(Clone, PartialEq, Eq)]
pub struct SiteTokens {
    pub api_token: String,
    pub secret_key: String,
}

impl std::fmt::Debug for SiteTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SiteTokens { .. }")
    }
}

impl SiteTokens {
    /// Keeps every token the stored Secret's data already has and generates only the missing
    /// ones (an empty value counts as missing).
    pub fn keep_or_generate(
        existing: Option<&BTreeMap<String, ByteString>>,
        mut generate: impl FnMut() -> String,
    ) -> SiteTokens {
        let stored = |key: &str| {
            existing
                .and_then(|d| d.get(key))
                .filter(|v| !v.0.is_empty())
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
        };
        SiteTokens {
            api_token: stored(API_TOKEN_KEY).unwrap_or_else(&mut generate),
            secret_key: stored(SECRET_KEY_KEY).unwrap_or_else(&mut generate),
        }
    }
}

fn opaque(site: &Site, name: &str, data: BTreeMap<String, ByteString>) -> Result<Secret, Error> {
    Ok(Secret {
        metadata: labels::object_meta(site, name)?,
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    })
}

/// Secret `<id>` holding the site's tokens.
pub fn site_secret(site: &Site, tokens: &SiteTokens) -> Result<Secret, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    opaque(
        site,
        id,
        BTreeMap::from([
            (
                API_TOKEN_KEY.into(),
                ByteString(tokens.api_token.clone().into_bytes()),
            ),
            (
                SECRET_KEY_KEY.into(),
                ByteString(tokens.secret_key.clone().into_bytes()),
            ),
        ]),
    )
}

/// The OAuth2 proxy cookie secret of a site: 32 hex characters (a 32-byte secret, as the proxy
/// requires) of HMAC-SHA256(session key, "oauth2-cookie-secret:" + id).
pub fn cookie_secret(session_key: &[u8], id: &str) -> Result<String, Error> {
    if session_key.is_empty() {
        return Err(Error::MissingConfig {
            key: "sitesConfig.session.secret_key",
        });
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, session_key);
    let tag = ring::hmac::sign(&key, format!("oauth2-cookie-secret:{id}").as_bytes());
    Ok(crate::digest::hex(&tag.as_ref()[..16]))
}

/// Secret `<id>-oauth2` holding the derived cookie secret.
pub fn oauth2_secret(site: &Site, session_key: &[u8]) -> Result<Secret, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let secret = cookie_secret(session_key, id)?;
    opaque(
        site,
        &labels::oauth2_secret_name(id),
        BTreeMap::from([(COOKIE_SECRET_KEY.into(), ByteString(secret.into_bytes()))]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_with(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn stored_tokens_are_kept_and_only_missing_ones_generated() {
        // (case, stored data, expected api_token, expected secret_key)
        let cases = [
            ("nothing stored", None, "gen-1", "gen-2"),
            (
                "both stored",
                Some(secret_with(&[("api_token", "a"), ("secret_key", "b")])),
                "a",
                "b",
            ),
            (
                "one stored",
                Some(secret_with(&[("secret_key", "b")])),
                "gen-1",
                "b",
            ),
            (
                "empty value regenerated",
                Some(secret_with(&[("api_token", ""), ("secret_key", "b")])),
                "gen-1",
                "b",
            ),
        ];
        for (case, stored, api, key) in cases {
            let mut n = 0;
            let data = stored.as_ref().and_then(|s: &Secret| s.data.as_ref());
            let tokens = SiteTokens::keep_or_generate(data, || {
                n += 1;
                format!("gen-{n}")
            });
            assert_eq!(
                (tokens.api_token.as_str(), tokens.secret_key.as_str()),
                (api, key),
                "{case}"
            );
        }
    }

    #[test]
    fn cookie_secret_is_derived_deterministically() {
        let a = cookie_secret(b"platform-key", "docs-handbook").unwrap();
        assert_eq!(a, cookie_secret(b"platform-key", "docs-handbook").unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(
            a,
            cookie_secret(b"platform-key", "docs-other").unwrap(),
            "per site"
        );
        assert_ne!(
            a,
            cookie_secret(b"rotated-key", "docs-handbook").unwrap(),
            "per key"
        );
        assert!(!a.contains("platform-key"));
        assert!(matches!(
            cookie_secret(b"", "x"),
            Err(Error::MissingConfig {
                key: "sitesConfig.session.secret_key"
            })
        ));
    }

    #[test]
    fn token_debug_output_hides_values() {
        let t = SiteTokens {
            api_token: "tok-123".into(),
            secret_key: "key-456".into(),
        };
        let shown = format!("{t:?}");
        assert!(
            !shown.contains("tok-123") && !shown.contains("key-456"),
            "{shown}"
        );
    }
}
