//! The values at field paths of a Site's JSON text, as hashes read in one pass (what ratcheting,
//! [`crate::rules::ratchet`], compares between the stored Site and its update): the paths are
//! those [`super::FieldError`]s name (`spec.configuration.applications[2].port`,
//! `spec.configuration.headers["X-Frame-Options"]`).

/// One step of a field path: a map key or a list index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    Key(String),
    Index(usize),
}

/// The steps of a field path (`spec.configuration.applications[2].port`,
/// `spec.configuration.headers["X-Frame-Options"]`), if it is well-formed. Map keys are in the
/// quoting of [`super::map_field`].
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            if let Some(quoted) = inner.strip_prefix('"') {
                let (key, after) = unquote(quoted)?;
                out.push(Step::Key(key));
                rest = after.strip_prefix(']')?;
            } else {
                let end = inner.find(']')?;
                out.push(Step::Index(inner[..end].parse::<usize>().ok()?));
                rest = &inner[end + 1..];
            }
        } else {
            let rest_after_dot = rest.strip_prefix('.').unwrap_or(rest);
            let end = rest_after_dot
                .find(['.', '['])
                .unwrap_or(rest_after_dot.len());
            out.push(Step::Key(rest_after_dot[..end].to_string()));
            rest = &rest_after_dot[end..];
        }
    }
    Some(out)
}

/// A hash of the value at each of `paths` in the JSON text `json` (absent: the path is
/// not well-formed or names nothing), read in one pass that builds none of the document: a
/// document of 200,000 keys costs its text, not a tree its size.
pub fn hashes_at(json: &[u8], paths: &[&str]) -> std::collections::HashMap<String, u64> {
    let mut trie = paths::Node::default();
    for path in paths {
        if let Some(steps) = steps(path) {
            trie.insert(&steps, path);
        }
    }
    let mut found = std::collections::HashMap::new();
    let mut de = serde_json::Deserializer::from_slice(json);
    let _ = serde::de::DeserializeSeed::deserialize(
        paths::Walk {
            node: Some(&trie),
            hashed: false,
            found: &mut found,
        },
        &mut de,
    );
    found
}

/// The walk of [`hashes_at`]: down the wanted paths, hashing the values at and below a
/// wanted path (a value's hash is made of its children's, so a wanted path inside another
/// is found too), every other value skipped unread.
mod paths {
    use std::collections::HashMap;
    use std::collections::hash_map::DefaultHasher;
    use std::fmt;
    use std::hash::{Hash, Hasher};

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use crate::validation::values::Step;

    /// The wanted paths, by step.
    #[derive(Default)]
    pub(super) struct Node {
        /// The path that ends here.
        end: Option<String>,
        next: HashMap<Step, Node>,
    }

    impl Node {
        pub(super) fn insert(&mut self, steps: &[Step], path: &str) {
            match steps.split_first() {
                None => self.end = Some(path.to_string()),
                Some((first, rest)) => self
                    .next
                    .entry(first.clone())
                    .or_default()
                    .insert(rest, path),
            }
        }
    }

    /// One value: its node in the wanted paths (None: none below it), and whether its
    /// hash is needed (it is a wanted value or inside one). Yields the hash (0 when not
    /// needed).
    pub(super) struct Walk<'a, 'f> {
        pub(super) node: Option<&'a Node>,
        pub(super) hashed: bool,
        pub(super) found: &'f mut HashMap<String, u64>,
    }

    impl<'a, 'f> Walk<'a, 'f> {
        fn child(&mut self, step: Step) -> Walk<'a, '_> {
            Walk {
                node: self.node.and_then(|n| n.next.get(&step)),
                hashed: self.hashed,
                found: self.found,
            }
        }

        fn leaf(self, value: impl Hash) -> u64 {
            let mut h = DefaultHasher::new();
            value.hash(&mut h);
            self.record(h.finish())
        }

        fn record(self, hash: u64) -> u64 {
            if let Some(path) = self.node.and_then(|n| n.end.as_ref()) {
                self.found.insert(path.clone(), hash);
            }
            hash
        }
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
        type Value = u64;

        fn deserialize<D: de::Deserializer<'de>>(mut self, d: D) -> Result<u64, D::Error> {
            self.hashed |= self.node.is_some_and(|n| n.end.is_some());
            if self.hashed || self.node.is_some() {
                d.deserialize_any(self)
            } else {
                <IgnoredAny as de::Deserialize>::deserialize(d).map(|_| 0)
            }
        }
    }

    impl<'de> Visitor<'de> for Walk<'_, '_> {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        // Tagged by type, so that `"1"` and `1` differ.
        fn visit_bool<E>(self, v: bool) -> Result<u64, E> {
            Ok(self.leaf((0u8, v)))
        }
        fn visit_i64<E>(self, v: i64) -> Result<u64, E> {
            Ok(self.leaf((1u8, v)))
        }
        fn visit_u64<E>(self, v: u64) -> Result<u64, E> {
            Ok(self.leaf((2u8, v)))
        }
        fn visit_f64<E>(self, v: f64) -> Result<u64, E> {
            Ok(self.leaf((3u8, v.to_bits())))
        }
        fn visit_str<E>(self, v: &str) -> Result<u64, E> {
            Ok(self.leaf((4u8, v)))
        }
        fn visit_unit<E>(self) -> Result<u64, E> {
            Ok(self.leaf(5u8))
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<u64, A::Error> {
            let mut h = DefaultHasher::new();
            6u8.hash(&mut h);
            let mut i = 0;
            while let Some(item) = seq.next_element_seed(self.child(Step::Index(i)))? {
                item.hash(&mut h);
                i += 1;
            }
            Ok(self.record(h.finish()))
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<u64, A::Error> {
            let mut h = DefaultHasher::new();
            7u8.hash(&mut h);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                let value = map.next_value_seed(self.child(Step::Key(key.to_string())))?;
                (key, value).hash(&mut h);
            }
            Ok(self.record(h.finish()))
        }
    }
}

/// Reads a string quoted by Rust's `{:?}` (the closing quote not yet read); returns the string
/// and what follows the closing quote.
fn unquote(quoted: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &quoted[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                'u' => {
                    // \u{XXXX}
                    let (_, open) = chars.next()?;
                    if open != '{' {
                        return None;
                    }
                    let mut hex = String::new();
                    for (_, h) in chars.by_ref() {
                        if h == '}' {
                            break;
                        }
                        hex.push(h);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::map_field;
    use serde_json::json;

    #[test]
    fn field_paths_name_their_value() {
        let doc = json!({"spec": {"name": "a", "configuration": {
            "applications": [{"name": "x"}, {"name": "y", "port": 9}],
            "headers": {"X-A": "1", "we\"ird\\key\n\u{1}": "2", "a.b[0]": "3"}
        }}});
        let weird = map_field("spec.configuration.headers", "we\"ird\\key\n\u{1}");
        let dotted = map_field("spec.configuration.headers", "a.b[0]");
        let cases: Vec<(&str, Option<serde_json::Value>)> = vec![
            ("spec.name", Some(json!("a"))),
            ("spec.configuration.applications[1].port", Some(json!(9))),
            (
                "spec.configuration.applications[1]",
                Some(json!({"name": "y", "port": 9})),
            ),
            ("spec.configuration.headers[\"X-A\"]", Some(json!("1"))),
            (weird.as_str(), Some(json!("2"))),
            (dotted.as_str(), Some(json!("3"))),
            ("spec.configuration.applications[2].port", None),
            ("spec.missing", None),
            ("spec.configuration.headers[\"X-A", None),
            ("spec.configuration.applications[x]", None),
        ];
        // Each path's value is hashed as the same value alone would be, and a path that
        // names nothing (or is not well-formed) has none.
        let text = serde_json::to_vec(&doc).unwrap();
        let paths: Vec<&str> = cases.iter().map(|(p, _)| *p).collect();
        let found = hashes_at(&text, &paths);
        for (path, want) in cases {
            let alone = want.map(|v| {
                let text = serde_json::to_vec(&json!({ "v": v })).unwrap();
                hashes_at(&text, &["v"])["v"]
            });
            assert_eq!(found.get(path).copied(), alone, "{path}");
        }
        assert_ne!(
            found["spec.name"], found["spec.configuration.applications[1].port"],
            "different values, different hashes"
        );
    }
}
