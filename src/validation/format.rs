//! Format checks shared by the platform configuration validator and the admission rules:
//! Kubernetes names, host names, label keys, image references.
//!
//! Each check returns `Err(message)` with a message fit to follow a field path
//! (`routing.host: must be ...`), never the value's key itself.

/// The field path of a map entry: `prefix["key"]` (quoted, so keys with dots, slashes or
/// control characters stay readable and unambiguous).
pub fn map_field(prefix: &str, key: &str) -> String {
    format!("{prefix}[{key:?}]")
}

/// A DNS-1123 label: at most 63 lowercase alphanumerics or '-', alphanumeric at both ends.
pub fn dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 63 {
        return Err(format!(
            "must be at most 63 characters (is {})",
            value.len()
        ));
    }
    if !is_label_body(value) {
        return Err(
            "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1035 label of at most `max` characters: like a DNS-1123 label, but starting with a letter.
pub fn dns1035_label(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > max {
        return Err(format!(
            "must be at most {max} characters (is {})",
            value.len()
        ));
    }
    if !is_label_body(value) || !value.as_bytes()[0].is_ascii_lowercase() {
        return Err(
            "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters. This is the
/// format of most Kubernetes object names.
pub fn dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 253 {
        return Err(format!(
            "must be at most 253 characters (is {})",
            value.len()
        ));
    }
    if !value.split('.').all(|l| l.len() <= 63 && is_label_body(l)) {
        return Err(
            "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A public host name (as used in Ingress rules and HTTPRoute hostnames): a lowercase DNS name
/// without scheme, port or path.
pub fn host_name(value: &str) -> Result<(), String> {
    if value.contains("://") || value.contains('/') || value.contains(':') {
        return Err(format!(
            "{value:?} must be a host name without scheme, port or path (e.g. sites.example.org)"
        ));
    }
    if value.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!("{value:?} must be lowercase"));
    }
    dns1123_subdomain(value).map_err(|e| format!("{value:?} {e}"))
}

/// A label or annotation key: an optional DNS-1123 subdomain prefix and '/', then a name of at
/// most 63 characters of alphanumerics, '-', '_' and '.', alphanumeric at both ends.
pub fn qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        dns1123_subdomain(prefix).map_err(|e| format!("prefix {e}"))?;
    }
    let bytes = name.as_bytes();
    let ok = !name.is_empty()
        && name.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(
            "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A container image tag: at most 128 characters of `[A-Za-z0-9_.-]`, not starting with '.' or '-'.
pub fn image_tag(value: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let ok = !value.is_empty()
        && value.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !ok {
        return Err(format!(
            "{value:?} is not a valid image tag (at most 128 letters, digits, '_', '.' or '-', not starting with '.' or '-')"
        ));
    }
    Ok(())
}

/// Parts of a container image reference `[registry[:port]/]path[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference<'a> {
    /// Everything before the tag and digest.
    pub repository: &'a str,
    /// The tag, when present.
    pub tag: Option<&'a str>,
    /// The digest (`algorithm:hex`), when present.
    pub digest: Option<&'a str>,
}

/// Parses a container image reference following the distribution reference grammar.
pub fn image_reference(value: &str) -> Result<ImageReference<'_>, String> {
    let invalid = |why: &str| format!("{value:?} is not a valid image reference: {why}");
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 255 + 128 + 80 {
        return Err(invalid("too long"));
    }
    // Printable ASCII, the common case, has neither (no character-by-character decoding).
    if !value.bytes().all(|b| b.is_ascii_graphic())
        && value.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid("contains whitespace or control characters"));
    }
    let (rest, digest) = match value.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (value, None),
    };
    if let Some(d) = digest {
        let (alg, hex) = d
            .split_once(':')
            .ok_or_else(|| invalid("digest must be algorithm:hex"))?;
        let alg_ok = !alg.is_empty()
            && alg.bytes().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'+' | b'.' | b'_' | b'-')
            });
        let hex_ok = hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        if !alg_ok || !hex_ok {
            return Err(invalid(
                "digest must be algorithm:hex with at least 32 hex digits",
            ));
        }
    }
    // A tag is a ':' after the last '/', so a registry port is not mistaken for one.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (repository, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        image_tag(tag).map_err(|_| invalid("bad tag"))?;
    }
    image_repository(repository).map_err(|e| invalid(&e))?;
    Ok(ImageReference {
        repository,
        tag,
        digest,
    })
}

/// Checks an image repository (no tag, no digest): optional registry host[:port], then
/// '/'-separated lowercase path components.
pub fn image_repository(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("repository is empty".into());
    }
    if value.len() > 255 {
        return Err("repository is longer than 255 characters".into());
    }
    let mut parts = value.split('/');
    let first = parts.next().unwrap_or_default();
    // The first part is a registry when more follow and it looks like a host: has '.', ':' or
    // is localhost.
    let registry = value.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    if registry {
        let (host, port) = match first.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (first, None),
        };
        let host_ok = !host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        let port_ok = port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
        if !host_ok || !port_ok {
            return Err(format!("bad registry host {first:?}"));
        }
    }
    let mut path = (!registry).then_some(first).into_iter().chain(parts);
    match path.find(|part| !path_component(part.as_bytes())) {
        Some(part) => Err(format!(
            "path component {part:?} must be lowercase letters and digits separated by '.', '_', '__' or '-'"
        )),
        None => Ok(()),
    }
}

/// `path-component := [a-z0-9]+ (separator [a-z0-9]+)*` with `separator := [_.] | __ | [-]+`
/// (the distribution reference grammar).
fn path_component(part: &[u8]) -> bool {
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    loop {
        let run = part[i..].iter().take_while(|&&b| alphanumeric(b)).count();
        if run == 0 {
            return false;
        }
        i += run;
        let separator = match part.get(i) {
            None => return true,
            Some(b'.') => 1,
            Some(b'_') => 1 + usize::from(part.get(i + 1) == Some(&b'_')),
            Some(b'-') => part[i..].iter().take_while(|&&b| b == b'-').count(),
            Some(_) => return false,
        };
        i += separator;
    }
}

fn is_label_body(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        for ok in ["a", "site-1", "a1", &"a".repeat(63)] {
            assert!(dns1123_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(dns1123_label(bad).is_err(), "{bad}");
        }
        assert!(dns1035_label("site-1", 52).is_ok());
        assert!(dns1035_label("1site", 52).is_err());
        assert!(dns1035_label(&"a".repeat(53), 52).is_err());
        assert!(dns1123_subdomain("sites.example.org").is_ok());
        assert!(dns1123_subdomain("sites..example.org").is_err());
        assert!(dns1123_subdomain("-sites.org").is_err());
    }

    #[test]
    fn host_names() {
        assert!(host_name("sites.example.org").is_ok());
        for bad in [
            "https://sites.example.org",
            "sites.example.org:443",
            "sites.example.org/x",
            "Sites.org",
            "",
        ] {
            assert!(host_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        for ok in ["app", "nginx.org/lb-method", "a_b.c", "example.com/X-Y"] {
            assert!(qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/x",
            "a b",
            "-a",
            "Example.com/x",
            "x/",
            &"a".repeat(64),
        ] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_references() {
        let r = image_reference("registry.example.org:5000/sites/static:1.2.3").unwrap();
        assert_eq!(r.repository, "registry.example.org:5000/sites/static");
        assert_eq!(r.tag, Some("1.2.3"));
        let r = image_reference("localhost:5000/app").unwrap();
        assert_eq!((r.repository, r.tag), ("localhost:5000/app", None));
        let digest = format!("python@sha256:{}", "a".repeat(64));
        let r = image_reference(&digest).unwrap();
        assert_eq!(r.repository, "python");
        assert!(r.digest.is_some());
        for ok in [
            "nginx",
            "nginx:1.27",
            "ghcr.io/org/app-name_x:v1",
            "a/b/c",
            "a__b",
            "a--b",
            "a.b_c-d",
            "localhost/app",
            "0/1",
        ] {
            assert!(image_reference(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Nginx",
            "nginx:",
            "nginx:-x",
            "nginx latest",
            "nginx@sha256:xyz",
            "/nginx",
            "nginx/",
            "a..b",
            "a___b",
            "a.-b",
            "a_-b",
            "a-_b",
            "a-",
            "_a",
            "a//b",
            "bad host:1/x",
            "ex\u{0}ample",
        ] {
            assert!(image_reference(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn image_tags() {
        assert!(image_tag("1.2.3").is_ok());
        assert!(image_tag("v1_beta").is_ok());
        assert!(image_tag(".x").is_err());
        assert!(image_tag(&"1".repeat(129)).is_err());
    }
}
