//! How a Site's fields that no admission rule reads are decoded: whole for a stored Site, and
//! checked but not kept for a Site under review (`Str::REVIEW`): the text type decides, so one
//! set of types serves both decoders. Each is named in a `deserialize_with` of `crd.rs`.

use serde::Deserialize;

use super::maps;
use super::text::Str;

/// A list of at most `MAX` entries under review (the schema's `maxItems`): the webhook refuses
/// a longer list before decoding it whole, where each entry may cost several hundred bytes. A
/// stored Site's list is decoded whatever its length.
pub(super) fn capped<'de, D, T, S, const MAX: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
    S: Str,
{
    struct Capped<T, S, const MAX: usize>(std::marker::PhantomData<(T, S)>);
    impl<'de, T: Deserialize<'de>, S: Str, const MAX: usize> serde::de::Visitor<'de>
        for Capped<T, S, MAX>
    {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = seq.next_element()? {
                if S::REVIEW && out.len() == MAX {
                    return Err(serde::de::Error::invalid_length(
                        MAX + 1,
                        &format!("at most {MAX} entries").as_str(),
                    ));
                }
                out.push(entry);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Capped::<T, S, MAX>(std::marker::PhantomData))
}

/// An object refused whatever it holds (per-site routing settings): under review only whether
/// it is there is kept, so an object of any size costs nothing.
pub(super) fn presence<'de, D: serde::Deserializer<'de>, S: Str>(
    d: D,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, D::Error> {
    if !S::REVIEW {
        return Option::deserialize(d);
    }
    struct Present;
    impl<'de> maps::Entries<'de> for Present {
        type Value = serde_json::Map<String, serde_json::Value>;

        fn read<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(serde_json::Map::new())
        }
    }
    maps::optional_map(d, Present, "a map")
}

/// A value no rule reads: under review it is decoded as `Checked` (which checks its shape and
/// keeps nothing, as a Share of `UnkeptNames`) and kept as `T::default()`.
pub(super) fn not_kept<'de, D, S, Checked, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    S: Str,
    Checked: Deserialize<'de>,
    T: Deserialize<'de> + Default,
{
    if !S::REVIEW {
        return Option::deserialize(d);
    }
    Ok(Option::<Checked>::deserialize(d)?.map(|_| T::default()))
}
