//! Text of a Site as the admission webhook reads it: borrowed from the request body when the
//! JSON string has no escape, so reviewing a Site copies none of its strings (the parts of a
//! Site the rules read are [`SiteRef`](super::SiteRef), the same for a stored Site and a
//! reviewed one).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// A string of a Site under review: a slice of the request body, or (when the JSON string
/// holds escapes) its unescaped copy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'a, 'b: 'a> From<&'b str> for Text<'a> {
    fn from(s: &'b str) -> Self {
        Text(Cow::Borrowed(s))
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_string(Visitor)
    }
}

/// The text type of a Site: `String` (a stored [`Site`](super::Site)) or [`Text`] (a Site
/// under admission review). It also says how much of a Site is decoded ([`Str::REVIEW`]).
pub trait Str: std::ops::Deref<Target = str> + Ord + std::fmt::Debug {
    /// Whether a Site of this text is decoded for the admission rules, keeping only what they
    /// read: its lists of names are checked (arrays of strings, the same errors) but not kept,
    /// of a routing object only that it is there, and more applications than the schema's
    /// `maxItems` are refused as soon as they are met (the `decode_*` functions of `crd.rs`).
    /// A stored Site is decoded whole.
    const REVIEW: bool;
}

impl Str for String {
    const REVIEW: bool = false;
}

impl Str for Text<'_> {
    const REVIEW: bool = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_borrows_unescaped_strings_and_copies_escaped_ones() {
        let body = r#"["plain", "esc\"aped", "\u00e9t\u00e9"]"#;
        let texts: Vec<Text> = serde_json::from_str(body).expect("decodes");
        assert!(matches!(texts[0].0, Cow::Borrowed("plain")));
        assert!(matches!(&texts[1].0, Cow::Owned(s) if s == "esc\"aped"));
        assert_eq!(&*texts[2], "été");
        // Other values are refused as for a String.
        for bad in ["[5]", "[null]", "[{}]", r#"["\ud800"]"#] {
            assert!(serde_json::from_str::<Vec<Text>>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Vec<String>>(bad).is_err(), "{bad}");
        }
        // From a tree nothing can be lent: the text is copied.
        let copied = Text::deserialize(serde_json::json!("x")).expect("decodes");
        assert!(matches!(copied.0, Cow::Owned(_)));
        assert_eq!(
            serde_json::to_string(&texts[1]).expect("encodes"),
            r#""esc\"aped""#
        );
    }
}
