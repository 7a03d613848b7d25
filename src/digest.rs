//! Hex text, SHA-256 digests, short hashes and random bytes: the desired hash of an object, the
//! qualifying-properties hash, the drift fingerprints, derived secrets and tokens all write bytes
//! the same way.

/// `bytes` as lower-case hex digits.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// A value that is only compared for equality (label values, hashes), as a number.
pub fn hashed(value: &(impl std::hash::Hash + ?Sized)) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// `N` bytes from the system's random source (None: the source failed, which waiting does not
/// repair).
pub fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).ok()?;
    Some(bytes)
}

/// The SHA-256 of `text`.
pub fn sha256(text: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, text);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The SHA-256 of a JSON value's text (serde_json maps are ordered by key, so the text, and the
/// hash, are stable) as hex digits.
pub fn json_sha256_hex(value: &serde_json::Value) -> String {
    hex(&sha256(value.to_string().as_bytes()))
}

/// The first 64 bits of [`json_sha256_hex`]'s digest, as a number (where only equality matters).
pub fn json_sha256_u64(value: &serde_json::Value) -> u64 {
    let digest = sha256(value.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_digests_as_the_usual_tools_print_them() {
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        // `printf '{"a":1}' | sha256sum`
        let value = serde_json::json!({"a": 1});
        assert_eq!(
            json_sha256_hex(&value),
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
        assert_eq!(json_sha256_u64(&value), 0x015a_bd7f_5cc5_7a2d);
    }
}
