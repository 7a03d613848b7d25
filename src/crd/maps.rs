//! Decoding an optional JSON object entry by entry, without a map type in between.

use std::fmt;

use serde::Deserializer;
use serde::de::{MapAccess, Visitor};

/// What to make of an object's entries.
pub(crate) trait Entries<'de> {
    type Value;
    fn read<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error>;
}

/// An optional object (absent or `null`: None) read by `entries`; anything else is refused as
/// `expecting`.
pub(crate) fn optional_map<'de, D, E>(
    d: D,
    entries: E,
    expecting: &'static str,
) -> Result<Option<E::Value>, D::Error>
where
    D: Deserializer<'de>,
    E: Entries<'de>,
{
    struct Optional<E>(E, &'static str);
    impl<'de, E: Entries<'de>> Visitor<'de> for Optional<E> {
        type Value = Option<E::Value>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.1)
        }

        fn visit_unit<Er>(self) -> Result<Self::Value, Er> {
            Ok(None)
        }

        fn visit_none<Er>(self) -> Result<Self::Value, Er> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            self.0.read(map).map(Some)
        }
    }
    d.deserialize_option(Optional(entries, expecting))
}
