//! The `kubectl apply` annotation, cut out of a review body before the Site is decoded.
//!
//! `kubectl.kubernetes.io/last-applied-configuration` holds a copy of the whole object as an
//! escaped JSON string. The handlers never read it, but a JSON decoder still walks it escape by
//! escape, one stop per escaped quote: for a Site shared with thousands of users that was the
//! larger part of the decoding time. [`Cut::of`] finds the annotation's values where the API
//! server writes them (compact JSON: `{"kubectl…":"` or `,"kubectl…":"`), checks that each is a
//! valid JSON string with a scan of 64 bytes at a time ([`string_len`]), and writes the body
//! again with those values empty. [`Cut::decode`] accepts what decodes from the cut body only if
//! every emptied value was met by the decoder as the annotation's value in the metadata of an
//! object (see [`met`]).
//!
//! Why the result is then the one the whole body gives: the two texts are the same up to the
//! first cut, so the decoder reaches it in the same state; there it read a value that starts at
//! the cut and that it skips unread (the annotation); in the original body the value starting
//! there is the string [`string_len`] checked, which the decoder would have accepted and skipped
//! the same way (it is valid, and has no `\u` escape, the only kind it would look into); after
//! that value both texts continue alike, up to the next cut. A body with a cut value anywhere
//! else (the same key in a user's map, say) is decoded whole.

use std::cell::RefCell;
use std::sync::LazyLock;

use memchr::memmem::Finder;

pub(in crate::admission) use crate::labels::LAST_APPLIED_ANNOTATION as ANNOTATION;

/// The annotation's key, with the quotes around it and the opening quote of its value, as the
/// API server writes it.
static FIND_KEY: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(&format!("\"{ANNOTATION}\":\"")).into_owned());

/// A review body with the values of the apply annotation emptied.
#[derive(Debug)]
pub(in crate::admission) struct Cut {
    text: String,
    /// Where the emptied values start in `text` (their opening quote).
    cuts: Vec<usize>,
}

impl Cut {
    /// `body` with the apply annotation's values emptied, or `None` when there is nothing to cut.
    pub(in crate::admission) fn of(body: &str) -> Option<Cut> {
        let bytes = body.as_bytes();
        let mut text = String::new();
        let mut cuts = Vec::new();
        // `body[copied..]` is still to be copied into `text`.
        let mut copied = 0;
        let mut from = 0;
        while let Some(found) = FIND_KEY.find(&bytes[from..]) {
            let at = from + found;
            let value = at + FIND_KEY.needle().len();
            // A quote after `{` or `,` opens a key: inside a string it would have been escaped,
            // and a closing quote cannot be followed by a letter. Each scan stops at the first
            // quote after it starts, before the next key: scans never overlap, and the cut costs
            // one pass over the body whatever it holds.
            let opens_key = at > 0 && matches!(bytes[at - 1], b'{' | b',');
            match string_len(&bytes[value..]).filter(|_| opens_key) {
                Some(len) => {
                    if len > 0 {
                        if text.is_empty() {
                            text.reserve(body.len());
                        }
                        text.push_str(&body[copied..value]);
                        cuts.push(text.len() - 1);
                        copied = value + len;
                    }
                    from = value + len + 1;
                }
                None => from = at + 1,
            }
        }
        if cuts.is_empty() {
            return None;
        }
        text.push_str(&body[copied..]);
        Some(Cut { text, cuts })
    }

    /// What `decode` gives for the cut body, if every cut was met as the apply annotation's
    /// value; `None` when the cut body does not decode or a cut was elsewhere.
    pub(in crate::admission) fn decode<'s, T>(
        &'s self,
        decode: impl FnOnce(&'s str) -> Result<T, String>,
    ) -> Option<T> {
        let recording = Recording::start();
        let decoded = decode(&self.text).ok()?;
        let mut met = recording.finish();
        // Sorted, so that a body made of many annotation keys costs no more than its length.
        met.sort_unstable();
        let base = self.text.as_ptr() as usize;
        self.cuts
            .iter()
            .all(|cut| met.binary_search(&(base + cut)).is_ok())
            .then_some(decoded)
    }

    #[cfg(test)]
    pub(in crate::admission) fn text(&self) -> &str {
        &self.text
    }
}

thread_local! {
    /// While a cut body is decoded: where the apply annotation's values met by the decoder
    /// start (addresses in the decoded text). serde gives a visitor no context of its own; the
    /// decoding runs on one thread, from start to end, within [`Cut::decode`].
    static MET: RefCell<Option<Vec<usize>>> = const { RefCell::new(None) };
}

/// Records that the decoder met the apply annotation's value starting at `value` (its opening
/// quote), when a cut body is being decoded.
pub(in crate::admission) fn met(value: *const u8) {
    MET.with_borrow_mut(|met| {
        if let Some(met) = met {
            met.push(value as usize);
        }
    });
}

/// Records [`met`] values until finished or dropped (also on a panic of the decoder).
struct Recording;

impl Recording {
    fn start() -> Recording {
        MET.with_borrow_mut(|met| *met = Some(Vec::new()));
        Recording
    }

    fn finish(self) -> Vec<usize> {
        MET.with_borrow_mut(Option::take).unwrap_or_default()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        MET.with_borrow_mut(|met| *met = None);
    }
}

/// The length of the JSON string content at the start of `text` (up to its closing quote), when
/// it is valid and has no `\u` escape; `None` otherwise (a control character, an unknown escape,
/// a `\u` escape, no closing quote).
///
/// 64 bytes at a time: masks of the backslashes, quotes and control characters of a block, the
/// escaped characters from the backslash runs (odd runs escape the next character) without a
/// branch per escape. With AVX2 where the processor has it (32 bytes per comparison), else SSE2.
pub(in crate::admission) fn string_len(text: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this processor has AVX2.
        return unsafe { string_len_avx2(text) };
    }
    scan(text, Masks::of)
}

/// [`string_len`] with the AVX2 masks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn string_len_avx2(text: &[u8]) -> Option<usize> {
    scan(text, |block| Masks::avx2(block))
}

/// [`string_len`] with `masks` computing a block's masks.
#[inline(always)]
fn scan(text: &[u8], masks: impl Fn(&[u8; 64]) -> Masks) -> Option<usize> {
    let mut escaped_in = 0u64;
    let mut blocks = text.chunks_exact(64);
    for (i, block) in blocks.by_ref().enumerate() {
        let block = block.try_into().expect("64 bytes");
        if let Some(end) = block_end(masks(block), &mut escaped_in)? {
            return Some(i * 64 + end);
        }
    }
    let rest = blocks.remainder();
    let mut block = [b' '; 64];
    block[..rest.len()].copy_from_slice(rest);
    // The padding has no quote: an end found is within the text.
    let end = block_end(masks(&block), &mut escaped_in)??;
    Some(text.len() - rest.len() + end)
}

/// Where the string ends in the block of masks `m` (`Some(None)`: not in this block), or `None`
/// if it is not valid up to there.
#[inline(always)]
fn block_end(m: Masks, escaped_in: &mut u64) -> Option<Option<usize>> {
    let escaped = escaped_chars(m.backslashes, escaped_in);
    let quotes = m.quotes & !escaped;
    // Everything before the closing quote, or the whole block.
    let within = if quotes == 0 {
        u64::MAX
    } else {
        (quotes & quotes.wrapping_neg()) - 1
    };
    if (m.control | (escaped & !m.known_escapes)) & within != 0 {
        return None;
    }
    Some((quotes != 0).then(|| quotes.trailing_zeros() as usize))
}

/// The bytes of a block that matter in a string, one bit per byte.
#[derive(Debug, Default, PartialEq, Eq)]
struct Masks {
    backslashes: u64,
    quotes: u64,
    /// Below U+0020: not allowed in a string.
    control: u64,
    /// What may follow a backslash (`u` aside).
    known_escapes: u64,
}

impl Masks {
    /// With SSE2, part of every x86_64 processor: 16 bytes per comparison.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn of(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is in the x86_64 baseline.
        let [backslashes, quotes, control, known_escapes] = sse2_masks(block, |v| unsafe {
            let backslash = sse2_eq(v, b'\\');
            let quote = sse2_eq(v, b'"');
            let known = _mm_or_si128(
                _mm_or_si128(
                    _mm_or_si128(quote, backslash),
                    _mm_or_si128(sse2_eq(v, b'/'), sse2_eq(v, b'b')),
                ),
                _mm_or_si128(
                    _mm_or_si128(sse2_eq(v, b'f'), sse2_eq(v, b'n')),
                    _mm_or_si128(sse2_eq(v, b'r'), sse2_eq(v, b't')),
                ),
            );
            [backslash, quote, sse2_control(v), known]
        });
        Masks {
            backslashes,
            quotes,
            control,
            known_escapes,
        }
    }

    /// With AVX2: 32 bytes per comparison, and the escape letters found by table lookups of
    /// each byte's two halves (`"` and `/` have high half 2, `\` 5, `b f n` 6, `r t` 7; a table
    /// per half gives a bit per high half, and a byte is an escape letter when they share one).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::*;
        #[rustfmt::skip]
        const BY_LOW_HALF: [i8; 16] = [
            0, 0, 0b1101, 0, 0b1000, 0, 0b0100, 0, 0, 0, 0, 0, 0b0010, 0, 0b0100, 0b0001,
        ];
        #[rustfmt::skip]
        const BY_HIGH_HALF: [i8; 16] = [
            0, 0, 0b0001, 0, 0, 0b0010, 0b0100, 0b1000, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        // SAFETY: each load reads 16 bytes of a 16-byte array.
        let (low, high) = unsafe {
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(BY_LOW_HALF.as_ptr().cast())),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(BY_HIGH_HALF.as_ptr().cast())),
            )
        };
        let mut m = Masks::default();
        let eq = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c as i8));
        let bits = |v: __m256i| u64::from(_mm256_movemask_epi8(v) as u32);
        let below_space = _mm256_set1_epi8(0x1f);
        let halves = _mm256_set1_epi8(0x0f);
        for k in 0..2 {
            // SAFETY: each load reads 32 bytes of `block`, unaligned loads being allowed.
            let v = unsafe { _mm256_loadu_si256(block.as_ptr().add(32 * k).cast()) };
            let control = _mm256_cmpeq_epi8(_mm256_max_epu8(v, below_space), below_space);
            // A byte from 0x80 has a high half without a bit: never an escape letter.
            let letter = _mm256_and_si256(
                _mm256_shuffle_epi8(low, _mm256_and_si256(v, halves)),
                _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16(v, 4), halves)),
            );
            let not_letter = _mm256_cmpeq_epi8(letter, _mm256_setzero_si256());
            let shift = 32 * k;
            m.backslashes |= bits(eq(v, b'\\')) << shift;
            m.quotes |= bits(eq(v, b'"')) << shift;
            m.control |= bits(control) << shift;
            m.known_escapes |= (!bits(not_letter) & 0xffff_ffff) << shift;
        }
        m
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn of(block: &[u8; 64]) -> Masks {
        Masks::portable(block)
    }

    /// A byte at a time: other processors, and the reference of the tests.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(block: &[u8; 64]) -> Masks {
        let [backslashes, quotes, control, known_escapes] = bytewise_masks(block, |b| {
            [
                b == b'\\',
                b == b'"',
                b < 0x20,
                matches!(b, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't'),
            ]
        });
        Masks {
            backslashes,
            quotes,
            control,
            known_escapes,
        }
    }
}

/// `N` masks of a 64-byte block, one bit per byte, a byte at a time: `classify` tells which of
/// the masks hold a byte.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn bytewise_masks<const N: usize>(
    block: &[u8; 64],
    classify: impl Fn(u8) -> [bool; N],
) -> [u64; N] {
    let mut masks = [0u64; N];
    for (i, &b) in block.iter().enumerate() {
        for (mask, holds) in masks.iter_mut().zip(classify(b)) {
            *mask |= u64::from(holds) << i;
        }
    }
    masks
}

/// `N` masks of a 64-byte block, one bit per byte: `classify` gives, for 16 bytes at a time,
/// `N` byte masks (a byte of ones where the mask holds the byte).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn sse2_masks<const N: usize>(
    block: &[u8; 64],
    classify: impl Fn(std::arch::x86_64::__m128i) -> [std::arch::x86_64::__m128i; N],
) -> [u64; N] {
    use std::arch::x86_64::*;
    let mut masks = [0u64; N];
    for k in 0..4 {
        // SAFETY: SSE2 is in the x86_64 baseline; the load reads 16 bytes of `block`, unaligned
        // loads being allowed.
        let bytes = classify(unsafe { _mm_loadu_si128(block.as_ptr().add(16 * k).cast()) });
        for (mask, bytes) in masks.iter_mut().zip(bytes) {
            // SAFETY: as above.
            *mask |= u64::from(unsafe { _mm_movemask_epi8(bytes) } as u16) << (16 * k);
        }
    }
    masks
}

/// The bytes of `v` equal to `c`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn sse2_eq(v: std::arch::x86_64::__m128i, c: u8) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is in the x86_64 baseline.
    unsafe { _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8)) }
}

/// The bytes of `v` below U+0020 (unsigned `b <= 0x1f`: the larger of `b` and 0x1f is 0x1f).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn sse2_control(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is in the x86_64 baseline.
    unsafe {
        let limit = _mm_set1_epi8(0x1f);
        _mm_cmpeq_epi8(_mm_max_epu8(v, limit), limit)
    }
}

/// The characters escaped by `backslashes` (the one after each odd run of backslashes),
/// `escaped_in` telling whether the block's first character is escaped by the previous block,
/// and set for the next one.
fn escaped_chars(backslashes: u64, escaped_in: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash escaped by the previous block starts no run.
    let backslashes = backslashes & !*escaped_in;
    let follows_backslash = (backslashes << 1) | *escaped_in;
    // Runs starting on odd bits; adding the backslashes carries each run start to its end.
    let odd_starts = backslashes & !EVEN & !follows_backslash;
    let (even_starts_ends, carried) = odd_starts.overflowing_add(backslashes);
    *escaped_in = u64::from(carried);
    // Run ends of runs that started on an even bit; the character after an odd run is on the
    // other parity than its start.
    let invert = even_starts_ends << 1;
    (EVEN ^ invert) & follows_backslash
}

#[cfg(test)]
pub(in crate::admission) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What [`string_len`] computes, a character at a time.
    fn reference(text: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < text.len() {
            match text[i] {
                b'"' => return Some(i),
                b'\\' => match text.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    _ => return None,
                },
                b if b < 0x20 => return None,
                _ => i += 1,
            }
        }
        None
    }

    #[test]
    fn string_lengths() {
        // `string_len` takes its AVX2 path only where the processor has AVX2.
        #[cfg(target_arch = "x86_64")]
        let _ = crate::testing::avx2("string_lengths");
        let cases: &[(&str, Option<usize>)] = &[
            (r#"""#, Some(0)),
            (r#"abc"rest"#, Some(3)),
            (r#"a\"b"c"#, Some(4)),
            (r#"a\\"b"#, Some(3)),
            (r#"a\\\"b"c"#, Some(6)),
            (r#"\/\b\f\n\r\t""#, Some(12)),
            ("é\"", Some(2)),
            (r#"a\u0041""#, None),
            (r#"a\x""#, None),
            ("a\tb\"", None),
            ("a\u{1f}\"", None),
            ("no end", None),
            (r#"ends in a backslash\"#, None),
            ("", None),
        ];
        for (text, len) in cases {
            assert_eq!(string_len(text.as_bytes()), *len, "{text:?}");
            assert_eq!(baseline(text.as_bytes()), *len, "{text:?}");
            assert_eq!(reference(text.as_bytes()), *len, "{text:?}");
        }
        // Runs of backslashes across block boundaries.
        for at in 58..70 {
            for run in 1..6 {
                let text = format!("{}{}\"x\"", "a".repeat(at), "\\".repeat(run));
                let expected = reference(text.as_bytes());
                assert_eq!(string_len(text.as_bytes()), expected, "{at} {run}");
                assert_eq!(baseline(text.as_bytes()), expected, "{at} {run}");
            }
        }
    }

    /// [`string_len`] without AVX2 (the masks of [`Masks::of`]).
    fn baseline(text: &[u8]) -> Option<usize> {
        scan(text, Masks::of)
    }

    /// Blocks of every byte value: alone, and beside each other value (lookups work on halves).
    pub(in crate::admission) fn every_byte_value() -> impl Iterator<Item = (u8, [u8; 64])> {
        (0..=255u8).flat_map(|b| {
            let mut block = [b; 64];
            for (i, other) in (0..=255u8).step_by(4).enumerate() {
                block[i] = other;
            }
            [(b, [b; 64]), (b, block)]
        })
    }

    #[test]
    fn every_byte_value_is_classified_as_the_bytewise_masks_do() {
        for (b, block) in every_byte_value() {
            assert_eq!(Masks::of(&block), Masks::portable(&block), "{b:#x}");
            #[cfg(target_arch = "x86_64")]
            if crate::testing::avx2("every_byte_value_is_classified_as_the_bytewise_masks_do") {
                // SAFETY: this processor has AVX2.
                assert_eq!(
                    unsafe { Masks::avx2(&block) },
                    Masks::portable(&block),
                    "{b:#x}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn the_vector_masks_are_the_bytewise_ones(block in proptest::collection::vec(any::<u8>(), 64)) {
            let block: [u8; 64] = block.try_into().unwrap();
            prop_assert_eq!(Masks::of(&block), Masks::portable(&block));
            #[cfg(target_arch = "x86_64")]
            if crate::testing::avx2("the_vector_masks_are_the_bytewise_ones") {
                // SAFETY: this processor has AVX2.
                prop_assert_eq!(unsafe { Masks::avx2(&block) }, Masks::portable(&block));
            }
        }

        #[test]
        fn string_len_agrees_with_a_scan_a_character_at_a_time(
            text in proptest::collection::vec(
                prop_oneof![
                    8 => Just(b'a'),
                    4 => Just(b'\\'),
                    1 => Just(b'"'),
                    1 => Just(b'n'),
                    1 => Just(b'u'),
                    1 => Just(0x1f_u8),
                ],
                0..300,
            )
        ) {
            prop_assert_eq!(string_len(&text), reference(&text));
            prop_assert_eq!(baseline(&text), reference(&text));
        }
    }

    fn body(annotations: &str) -> String {
        format!(r#"{{"metadata":{{"annotations":{{{annotations}}}}},"spec":{{}}}}"#)
    }

    #[test]
    fn the_apply_annotation_is_emptied_where_the_api_server_writes_it() {
        let applied = r#""{\"kind\":\"Site\",\"spec\":{\"a\":\"\\\\\"}}""#;
        let cases: &[(&str, Option<&str>)] = &[
            // First, or after other annotations.
            (
                &format!(r#""{ANNOTATION}":{applied},"sites.ecmwf.int/x":"y""#),
                Some(&format!(r#""{ANNOTATION}":"","sites.ecmwf.int/x":"y""#)),
            ),
            (
                &format!(r#""a":"b","{ANNOTATION}":{applied}"#),
                Some(&format!(r#""a":"b","{ANNOTATION}":"""#)),
            ),
            // Already empty, spaced out, not a string, a \u escape, a control character: left
            // alone.
            (&format!(r#""{ANNOTATION}":"""#), None),
            (&format!(r#""{ANNOTATION}": {applied}"#), None),
            (&format!(r#""{ANNOTATION}":null"#), None),
            (&format!(r#""{ANNOTATION}":"\u0041""#), None),
            (&format!("\"{ANNOTATION}\":\"a\tb\""), None),
        ];
        for (annotations, cut) in cases {
            let got = Cut::of(&body(annotations));
            assert_eq!(
                got.as_ref().map(Cut::text),
                cut.map(body).as_deref(),
                "{annotations}"
            );
        }
        // The key inside a string (escaped) is not cut; two objects are both cut.
        let inner = format!(r#""x":"\"{ANNOTATION}\":\"v\"""#);
        assert!(Cut::of(&body(&inner)).is_none());
        let two = format!(
            r#"[{},{}]"#,
            body(&format!(r#""{ANNOTATION}":"a""#)),
            body(&format!(r#""{ANNOTATION}":"b""#))
        );
        let cut = Cut::of(&two).expect("cut");
        assert_eq!(cut.cuts.len(), 2);
        assert_eq!(
            cut.text().matches(&format!(r#""{ANNOTATION}":"""#)).count(),
            2
        );
        for &at in &cut.cuts {
            assert_eq!(&cut.text()[at..at + 2], r#""""#);
        }
    }

    #[test]
    fn a_cut_body_decodes_only_when_every_cut_was_met() {
        let cut = Cut::of(&body(&format!(r#""{ANNOTATION}":"a""#))).expect("cut");
        let at = cut.cuts[0];
        let seen = cut.decode(|text| {
            met(text[at..].as_ptr());
            Ok(())
        });
        assert_eq!(seen, Some(()));
        assert_eq!(cut.decode(|_| Ok(())), None, "not met");
        // Many cuts, met in any order; one of them missing is refused.
        let many = vec![format!(r#""{ANNOTATION}":"a""#); 1000].join(",");
        let cut = Cut::of(&body(&many)).expect("cut");
        assert_eq!(cut.cuts.len(), 1000);
        let meet = |skip: Option<usize>| {
            cut.decode(|text| {
                for (i, &at) in cut.cuts.iter().enumerate().rev() {
                    if Some(i) != skip {
                        met(text[at..].as_ptr());
                    }
                }
                Ok(())
            })
        };
        assert_eq!(meet(None), Some(()));
        assert_eq!(meet(Some(500)), None);
        assert_eq!(cut.decode(|_| Err::<(), _>("bad".to_string())), None);
        // Outside a decoding, nothing is recorded.
        met(at as *const u8);
        assert!(MET.with_borrow(Option::is_none));
    }
}
