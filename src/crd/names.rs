//! [`Names`]: a list of names kept in one buffer; [`UnkeptNames`]: one checked and not kept.

use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of names (the users and groups a Site is shared with) stored in one buffer: a Site
/// may be shared with thousands of users, whose names are only ever read together (joined into
/// the site's environment). Decoding them costs no allocation per name, which the admission
/// webhook, decoding every reviewed Site, feels most. On the wire it is a JSON array of strings,
/// decoded and refused as `Vec<String>` is.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Names {
    /// The names, one after the other.
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
}

impl Names {
    /// The names, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.ends.len()).map(|i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.text[start..self.ends[i]]
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The names with `separator` between them.
    pub fn join(&self, separator: &str) -> String {
        let mut out =
            String::with_capacity(self.text.len() + separator.len() * self.len().saturating_sub(1));
        for (i, name) in self.iter().enumerate() {
            if i > 0 {
                out.push_str(separator);
            }
            out.push_str(name);
        }
        out
    }

    pub fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        let mut out = Names::default();
        for name in names {
            out.push(name.as_ref());
        }
        out
    }
}

impl From<Vec<String>> for Names {
    fn from(names: Vec<String>) -> Self {
        names.into_iter().collect()
    }
}

impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Names {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(NamesVisitor)
    }
}

struct NamesVisitor;

impl<'de> Visitor<'de> for NamesVisitor {
    type Value = Names;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
        let mut names = Names::default();
        if let Some(n) = seq.size_hint() {
            names.ends.reserve(n.min(4096));
        }
        while seq.next_element_seed(Append(&mut names))?.is_some() {}
        Ok(names)
    }
}

/// A list of names checked as [`Names`] is (an array of strings, refused with the same errors)
/// and not kept: the share lists of a Site under admission review, which no rule reads; a Site
/// shared with thousands of users then costs no copy of each name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnkeptNames;

impl Serialize for UnkeptNames {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(std::iter::empty::<&str>())
    }
}

/// The name of the newtype struct [`UnkeptNames`] deserializes as: a deserializer that knows it
/// (the admission review reader) checks the array of strings in one pass, as a `Vec<String>`
/// would be checked, and calls `visit_unit`; any other sees an ordinary newtype struct and is
/// asked for a sequence.
pub const UNKEPT_STRINGS: &str = "sites_operator::crd::UnkeptStrings";

impl<'de> Deserialize<'de> for UnkeptNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Checked;
        impl<'de> Visitor<'de> for Checked {
            type Value = UnkeptNames;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UnkeptNames, A::Error> {
                while seq.next_element_seed(Skip)?.is_some() {}
                Ok(UnkeptNames)
            }

            /// A deserializer that reads [`UNKEPT_STRINGS`] itself: the array was checked.
            fn visit_unit<E>(self) -> Result<UnkeptNames, E> {
                Ok(UnkeptNames)
            }

            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> Result<UnkeptNames, D::Error> {
                deserializer.deserialize_seq(self)
            }
        }
        deserializer.deserialize_newtype_struct(UNKEPT_STRINGS, Checked)
    }
}

/// A list of names of a [`Share`](super::Share): [`Names`], or [`UnkeptNames`].
pub trait NameList: Default {
    fn is_empty(&self) -> bool;
}

impl NameList for Names {
    fn is_empty(&self) -> bool {
        Names::is_empty(self)
    }
}

impl NameList for UnkeptNames {
    fn is_empty(&self) -> bool {
        true
    }
}

/// One name, appended to the buffer as it is read (no string of its own).
struct Append<'a>(&'a mut Names);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Append<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<(), E> {
        self.0.push(name);
        Ok(())
    }
}

/// One name, read and dropped.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Names, UnkeptNames};
    use serde_json::json;

    #[test]
    fn names_read_and_write_as_an_array_of_strings() {
        for names in [json!([]), json!(["a"]), json!(["jdoe", "", "a\"b", "é"])] {
            let decoded: Names = serde_json::from_value(names.clone()).expect("decodes");
            let as_vec: Vec<String> = serde_json::from_value(names.clone()).expect("decodes");
            assert_eq!(decoded.iter().collect::<Vec<_>>(), as_vec);
            assert_eq!(decoded.len(), as_vec.len());
            assert_eq!(serde_json::to_value(&decoded).expect("encodes"), names);
            assert_eq!(decoded, Names::from(as_vec.clone()));
            assert_eq!(decoded.join(","), as_vec.join(","));
            assert_eq!(format!("{decoded:?}"), format!("{as_vec:?}"));
            // From text too (names borrowed from the input, or unescaped).
            let text = names.to_string();
            let decoded: Names = serde_json::from_str(&text).expect("decodes");
            assert_eq!(decoded.iter().collect::<Vec<_>>(), as_vec);
        }
    }

    #[test]
    fn what_a_list_of_strings_refuses_names_refuse_with_the_same_message() {
        for bad in ["null", "\"jdoe\"", "[1]", "[\"a\", null]", "{}", "[\"a\""] {
            let strings = serde_json::from_str::<Vec<String>>(bad)
                .expect_err(bad)
                .to_string();
            let names = serde_json::from_str::<Names>(bad)
                .expect_err(bad)
                .to_string();
            assert_eq!(names, strings, "{bad}");
            let unkept = serde_json::from_str::<UnkeptNames>(bad)
                .expect_err(bad)
                .to_string();
            assert_eq!(unkept, strings, "unkept {bad}");
        }
    }

    #[test]
    fn unkept_names_are_checked_and_not_kept() {
        for text in ["[]", r#"["jdoe", "a\"b", "é"]"#] {
            let unkept: UnkeptNames = serde_json::from_str(text).expect("decodes");
            assert_eq!(serde_json::to_value(unkept).expect("encodes"), json!([]));
            assert!(super::NameList::is_empty(&unkept));
        }
    }
}
