//! [`Names`]: a list of names kept in one buffer.

use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most applications a Site has (the schema's `maxItems`): one container each in one pod.
pub const MAX_APPLICATIONS: usize = 64;

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

    /// What `decode` gives with every list of names it decodes checked as usual (an array of
    /// strings, the same errors) but not kept: empty. For decoders whose readers never read the
    /// names (the admission webhook's rules), which then cost no copy of each name.
    pub fn skimmed<T>(decode: impl FnOnce() -> T) -> T {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                SKIM.set(self.0);
            }
        }
        let _restore = Restore(SKIM.replace(true));
        decode()
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

thread_local! {
    /// Within [`Names::skimmed`]: names are checked, not kept. serde gives a visitor no context
    /// of its own; a decoding runs on one thread from start to end.
    static SKIM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A Site's applications; within [`Names::skimmed`] at most [`MAX_APPLICATIONS`] (the
/// schema's `maxItems`): the webhook refuses a longer list before decoding it whole, where each
/// entry costs several hundred bytes.
pub(crate) fn applications<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Capped<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Capped<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let max = MAX_APPLICATIONS;
            let cap = SKIM.get();
            let mut out = Vec::new();
            while let Some(app) = seq.next_element()? {
                if cap && out.len() == max {
                    return Err(serde::de::Error::invalid_length(
                        max + 1,
                        &format!("at most {max} applications").as_str(),
                    ));
                }
                out.push(app);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Capped(std::marker::PhantomData))
}

/// Per-site routing settings (refused whatever they hold); within [`Names::skimmed`] only
/// whether they are there is kept: an object of any size costs nothing.
pub(crate) fn routing<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, D::Error> {
    if !SKIM.get() {
        return Option::deserialize(d);
    }
    struct Present;
    impl<'de> super::maps::Entries<'de> for Present {
        type Value = serde_json::Map<String, serde_json::Value>;

        fn read<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(serde_json::Map::new())
        }
    }
    super::maps::optional_map(d, Present, "a map")
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
        if SKIM.get() {
            while seq.next_element_seed(Skip)?.is_some() {}
            return Ok(Names::default());
        }
        let mut names = Names::default();
        if let Some(n) = seq.size_hint() {
            names.ends.reserve(n.min(4096));
        }
        while seq.next_element_seed(Append(&mut names))?.is_some() {}
        Ok(names)
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
    use super::Names;
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
            let skimmed = Names::skimmed(|| serde_json::from_str::<Names>(bad))
                .expect_err(bad)
                .to_string();
            assert_eq!(skimmed, strings, "skimmed {bad}");
        }
    }

    #[test]
    fn skimmed_names_are_checked_and_not_kept_within_the_call_only() {
        let text = r#"["jdoe", "a\"b", "é"]"#;
        let skimmed: Names = Names::skimmed(|| serde_json::from_str(text)).expect("decodes");
        assert!(skimmed.is_empty());
        // Outside the call, and after a call that panicked, names are kept again.
        let kept: Names = serde_json::from_str(text).expect("decodes");
        assert_eq!(kept.len(), 3);
        let panicked = std::panic::catch_unwind(|| Names::skimmed(|| panic!("decoder failed")));
        assert!(panicked.is_err());
        let kept: Names = serde_json::from_str(text).expect("decodes");
        assert_eq!(kept.iter().collect::<Vec<_>>(), ["jdoe", "a\"b", "é"]);
        // Nested calls restore the outer state.
        Names::skimmed(|| {
            Names::skimmed(|| ());
            let inner: Names = serde_json::from_str(text).expect("decodes");
            assert!(inner.is_empty());
        });
    }
}
