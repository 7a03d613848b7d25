//! The review reader: serde's data model over a review body, for the JSON the API server writes,
//! without serde_json's cost per value.
//!
//! The Site webhooks decode most of a typical review into many short strings and small maps;
//! serde_json spends more time per value than per byte there. This reader finds the end of a
//! string 16 bytes at a time, hands strings without escapes to the visitor borrowed, and skips an
//! ignored string full of escapes (the `kubectl apply` annotation) with the 64-byte scan of
//! [`super::applied`].
//!
//! It reads a subset of JSON: integers within `i64`/`u64` (no fraction, no exponent, not `-0`),
//! nesting to [`MAX_DEPTH`] levels, objects where a struct is expected (serde_json also takes an
//! array there), strings where an enum is expected. Anything beyond that subset, and any error
//! (a malformed body, a missing or duplicate field), is [`Refused`], and the caller decodes the
//! body with serde_json instead, which gives the answer or names the problem. What the reader
//! accepts decodes to what serde_json gives: for the subset, each `deserialize_*` method calls
//! the visitor as serde_json's does, with the same values (tests compare the two on tables and
//! generated documents; the `admission_review` fuzz target compares them on arbitrary bodies).

use std::borrow::Cow;
use std::fmt;

use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::crd::UNKEPT_STRINGS;

/// The deepest nesting of arrays and objects the reader follows (serde_json's limit is 128).
pub const MAX_DEPTH: usize = 64;

/// The name of a newtype struct whose value is a string read raw: the reader checks the string
/// and hands the visitor its text as written, quotes included (`visit_borrowed_str`), without
/// decoding its escapes. Other deserializers see an ordinary newtype struct
/// (`visit_newtype_struct`).
pub const RAW_STRING: &str = "sites_operator::admission::reader::RawString";

/// The body is not read by the reader: it is outside the subset, or malformed, or not the type
/// asked for. The caller decodes it with serde_json.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not read by the review reader")
    }
}

impl std::error::Error for Refused {}

impl de::Error for Refused {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Refused
    }
}

/// Decodes `text` as a `T`, as `serde_json::from_str` would, or refuses it.
pub fn from_str<'de, T: de::Deserialize<'de>>(text: &'de str) -> Result<T, Refused> {
    let mut reader = Reader {
        text,
        at: 0,
        depth: 0,
    };
    let value = T::deserialize(&mut reader)?;
    reader.skip_whitespace();
    if reader.at == text.len() {
        Ok(value)
    } else {
        Err(Refused)
    }
}

/// The reader's place in the text. Every position it stops at is the start of the text, its
/// end, or next to an ASCII byte, so every slice it takes is on character boundaries.
struct Reader<'de> {
    text: &'de str,
    at: usize,
    /// Arrays and objects entered and not yet left.
    depth: usize,
}

enum Integer {
    Unsigned(u64),
    Signed(i64),
}

impl<'de> Reader<'de> {
    fn bytes(&self) -> &'de [u8] {
        self.text.as_bytes()
    }

    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace.
    fn peek(&mut self) -> Result<u8, Refused> {
        self.skip_whitespace();
        self.bytes().get(self.at).copied().ok_or(Refused)
    }

    fn literal(&mut self, literal: &[u8]) -> Result<(), Refused> {
        if self.bytes()[self.at..].starts_with(literal) {
            self.at += literal.len();
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn enter(&mut self) -> Result<(), Refused> {
        if self.depth == MAX_DEPTH {
            return Err(Refused);
        }
        self.depth += 1;
        self.at += 1;
        Ok(())
    }

    fn slice(&self, from: usize, to: usize) -> Result<&'de str, Refused> {
        self.text.get(from..to).ok_or(Refused)
    }

    /// Where the string whose opening quote is at `self.at` ends (past its closing quote) when
    /// it has no escape and no control character, the common case, which the callers take
    /// inline; `None` for any other string, read by the full walk.
    #[inline]
    fn plain_string_end(&self) -> Option<usize> {
        let from = self.at + 1;
        let end = from + special(self.bytes().get(from..)?)?;
        (self.bytes()[end] == b'"').then_some(end + 1)
    }

    /// The string whose opening quote is at `self.at`: borrowed when it has no escape.
    #[inline]
    fn string(&mut self) -> Result<Cow<'de, str>, Refused> {
        match self.plain_string_end() {
            Some(end) => {
                let text = self.slice(self.at + 1, end - 1)?;
                self.at = end;
                Ok(Cow::Borrowed(text))
            }
            None => self.escaped_string(),
        }
    }

    /// [`Reader::string`] past its common case.
    #[inline(never)]
    fn escaped_string(&mut self) -> Result<Cow<'de, str>, Refused> {
        let start = self.at + 1;
        let mut from = start;
        let mut decoded: Option<String> = None;
        loop {
            let end = from + special(&self.bytes()[from..]).ok_or(Refused)?;
            match self.bytes()[end] {
                b'"' => {
                    self.at = end + 1;
                    let rest = self.slice(from, end)?;
                    return Ok(match decoded {
                        None => Cow::Borrowed(rest),
                        Some(mut text) => {
                            text.push_str(rest);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    let text = decoded.get_or_insert_with(String::new);
                    text.push_str(self.slice(from, end)?);
                    from = self.escape(end + 1, text)?;
                }
                // A control character.
                _ => return Err(Refused),
            }
        }
    }

    /// Decodes the escape whose letter is at `at` into `out`; where the text goes on. A `\u`
    /// escape is a character outside the surrogates, or a leading surrogate followed by a
    /// trailing one (serde_json refuses a lone surrogate in a string it decodes).
    fn escape(&self, at: usize, out: &mut String) -> Result<usize, Refused> {
        let c = match self.bytes().get(at).ok_or(Refused)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex(at + 1)?;
                let (c, next) = match first {
                    0xD800..=0xDBFF => {
                        if self.bytes().get(at + 5..at + 7) != Some(b"\\u") {
                            return Err(Refused);
                        }
                        let second = self.hex(at + 7)?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(Refused);
                        }
                        let c = 0x1_0000
                            + ((u32::from(first) - 0xD800) << 10)
                            + (u32::from(second) - 0xDC00);
                        (c, at + 11)
                    }
                    0xDC00..=0xDFFF => return Err(Refused),
                    _ => (u32::from(first), at + 5),
                };
                out.push(char::from_u32(c).ok_or(Refused)?);
                return Ok(next);
            }
            _ => return Err(Refused),
        };
        out.push(c);
        Ok(at + 1)
    }

    /// The four hex digits at `at`.
    fn hex(&self, at: usize) -> Result<u16, Refused> {
        let digits = self.bytes().get(at..at + 4).ok_or(Refused)?;
        digits.iter().try_fold(0u16, |n, &b| {
            let d = (b as char).to_digit(16).ok_or(Refused)?;
            Ok(n << 4 | d as u16)
        })
    }

    /// Skips the string whose opening quote is at `self.at`, checked as serde_json checks a
    /// string it skips (a `\u` escape needs four hex digits, nothing more); whether it has a
    /// `\u` escape.
    #[inline]
    fn skip_string(&mut self) -> Result<bool, Refused> {
        match self.plain_string_end() {
            Some(end) => {
                self.at = end;
                Ok(false)
            }
            None => self.skip_escaped_string(),
        }
    }

    /// [`Reader::skip_string`] past its common case.
    #[inline(never)]
    fn skip_escaped_string(&mut self) -> Result<bool, Refused> {
        let mut from = self.at + 1;
        let mut unicode = false;
        let mut scanned = false;
        loop {
            let end = from + special(&self.bytes()[from..]).ok_or(Refused)?;
            match self.bytes()[end] {
                b'"' => {
                    self.at = end + 1;
                    return Ok(unicode);
                }
                b'\\' => {
                    // A string with escapes may be long and hold many (a document inside a
                    // string): the block scan reads the rest at once, unless it has a `\u`.
                    if !scanned {
                        scanned = true;
                        if let Some(len) = super::applied::string_len(&self.bytes()[end..]) {
                            self.at = end + len + 1;
                            return Ok(unicode);
                        }
                    }
                    from = match self.bytes().get(end + 1).ok_or(Refused)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => end + 2,
                        b'u' => {
                            self.hex(end + 2)?;
                            unicode = true;
                            end + 6
                        }
                        _ => return Err(Refused),
                    };
                }
                _ => return Err(Refused),
            }
        }
    }

    /// Skips the string that comes next, checked as a decoded string is (a `\u` escape is
    /// decoded, so that a lone surrogate is refused, as serde_json's caller refuses it); where
    /// it starts (its opening quote).
    fn checked_string(&mut self) -> Result<usize, Refused> {
        if self.peek()? != b'"' {
            return Err(Refused);
        }
        let start = self.at;
        if self.skip_string()? {
            self.at = start;
            self.string()?;
        }
        Ok(start)
    }

    /// Skips the array of strings at `self.at`, each checked as a decoded string is (the array
    /// of a [`UNKEPT_STRINGS`] newtype), in one loop with no visitor call per string: a Site
    /// may be shared with thousands of users.
    fn skip_strings(&mut self) -> Result<(), Refused> {
        if self.peek()? != b'[' {
            return Err(Refused);
        }
        self.enter()?;
        if self.peek()? == b']' {
            self.at += 1;
            self.depth -= 1;
            return Ok(());
        }
        if let Some(end) = plain_strings_end(&self.bytes()[self.at..]) {
            self.at += end + 1;
            self.depth -= 1;
            return Ok(());
        }
        self.skip_strings_one_by_one()
    }

    /// The rest of [`Reader::skip_strings`]'s list, whose first element is next, a string at a
    /// time.
    fn skip_strings_one_by_one(&mut self) -> Result<(), Refused> {
        loop {
            self.checked_string()?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Refused),
            }
        }
    }

    /// The integer at `self.at`, as serde_json reads it when it has no fraction or exponent and
    /// fits: non-negative as unsigned, negative as signed. serde_json reads `-0`, and integers
    /// beyond `i64`/`u64`, as floating point numbers: refused.
    fn integer(&mut self) -> Result<Integer, Refused> {
        let negative = self.bytes().get(self.at) == Some(&b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&b) = self.bytes().get(self.at)
            && b.is_ascii_digit()
        {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
                .ok_or(Refused)?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.bytes()[start] == b'0') {
            return Err(Refused);
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes().get(self.at) {
            return Err(Refused);
        }
        if !negative {
            return Ok(Integer::Unsigned(n));
        }
        if n == 0 || n > 1 << 63 {
            return Err(Refused);
        }
        Ok(Integer::Signed((n as i64).wrapping_neg()))
    }

    /// Skips one value.
    fn skip_value(&mut self) -> Result<(), Refused> {
        match self.peek()? {
            b'"' => {
                self.skip_string()?;
            }
            b'{' => {
                self.enter()?;
                let mut first = true;
                while self.next_item(&mut first, b'}')? {
                    self.skip_string()?;
                    self.colon()?;
                    self.skip_value()?;
                }
                self.depth -= 1;
            }
            b'[' => {
                self.enter()?;
                let mut first = true;
                while self.next_item(&mut first, b']')? {
                    self.skip_value()?;
                }
                self.depth -= 1;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => {
                self.integer()?;
            }
        }
        Ok(())
    }

    /// Reads the array or object that opens with `open` through `visit`, which must read every
    /// item: a visitor that stops early (serde_json then reports trailing items) is refused.
    fn items<T>(
        &mut self,
        open: u8,
        visit: impl FnOnce(&mut Items<'_, 'de>) -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        if self.peek()? != open {
            return Err(Refused);
        }
        self.enter()?;
        let mut items = Items {
            reader: self,
            first: true,
            done: false,
        };
        let value = visit(&mut items)?;
        if !items.done {
            return Err(Refused);
        }
        self.depth -= 1;
        Ok(value)
    }

    /// Whether the array or object that `close` ends has another item, past the separating
    /// comma (an object's key then at its opening quote); at the end, past `close`.
    fn next_item(&mut self, first: &mut bool, close: u8) -> Result<bool, Refused> {
        let next = self.peek()?;
        if next == close {
            self.at += 1;
            return Ok(false);
        }
        if !*first {
            if next != b',' {
                return Err(Refused);
            }
            self.at += 1;
        }
        *first = false;
        match (close, self.peek()?) {
            (b'}', b'"') => Ok(true),
            (b'}', _) => Err(Refused),
            // A trailing comma.
            (_, b']') => Err(Refused),
            _ => Ok(true),
        }
    }

    fn colon(&mut self) -> Result<(), Refused> {
        if self.peek()? == b':' {
            self.at += 1;
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn visit_string<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Refused> {
        match self.string()? {
            Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
            Cow::Owned(s) => visitor.visit_string(s),
        }
    }

    fn visit_integer<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Refused> {
        match self.integer()? {
            Integer::Unsigned(n) => visitor.visit_u64(n),
            Integer::Signed(n) => visitor.visit_i64(n),
        }
    }
}

/// Where the first quote, backslash or control character of `text` is.
#[inline]
fn special(text: &[u8]) -> Option<usize> {
    let is_special = |b: &u8| matches!(b, b'"' | b'\\' | 0..=0x1f);
    #[cfg(target_arch = "x86_64")]
    {
        use super::applied::{sse2_control, sse2_eq};
        use std::arch::x86_64::*;
        let mut at = 0;
        while at + 16 <= text.len() {
            // SAFETY: SSE2 is part of every x86_64 processor; the load reads the 16 bytes
            // `text[at..at + 16]`, unaligned loads being allowed.
            let mask = unsafe {
                let block = _mm_loadu_si128(text.as_ptr().add(at).cast());
                let quote_or_backslash = _mm_or_si128(sse2_eq(block, b'"'), sse2_eq(block, b'\\'));
                _mm_movemask_epi8(_mm_or_si128(quote_or_backslash, sse2_control(block))) as u32
            };
            if mask != 0 {
                return Some(at + mask.trailing_zeros() as usize);
            }
            at += 16;
        }
        text[at..].iter().position(is_special).map(|i| at + i)
    }
    #[cfg(not(target_arch = "x86_64"))]
    text.iter().position(is_special)
}

/// Where the list whose first element starts at `text[0]` ends (the index of its `]`), when it
/// is a list of strings as the API server writes one: compact, the strings without escapes or
/// control characters. `None` for anything else, valid or not, which the caller reads a string
/// at a time. A list of thousands of user names is read 64 bytes at a time, with no stop per
/// string.
///
/// Each block gives masks of its quotes, commas, `]` and forbidden bytes (backslashes, control
/// characters); the bytes inside strings follow from the quotes (a running parity, carried from
/// block to block). Outside the strings, up to the first `]`, there must be only commas, each
/// right after a string and right before the next, so the list is `"…","…",…,"…"]`.
fn plain_strings_end(text: &[u8]) -> Option<usize> {
    if text.first() != Some(&b'"') {
        return None;
    }
    /// Each bit set to the parity of the bits up to it: inside a string from its opening quote
    /// to just before its closing quote.
    fn running_parity(mut x: u64) -> u64 {
        for shift in [1, 2, 4, 8, 16, 32] {
            x ^= x << shift;
        }
        x
    }
    // What the previous block ended with, as a mask for this one: inside a string (every bit),
    // a closing quote or a comma (the bit of the byte after it). The first string comes as if
    // after a comma.
    let (mut inside_before, mut after_close_before, mut after_comma_before) = (0u64, 0u64, 1u64);
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let m = match rest.first_chunk::<64>() {
            Some(block) => ListMasks::of(block),
            None => {
                // Padding that is forbidden: a list not ended within the text is not taken.
                let mut block = [0u8; 64];
                block[..rest.len()].copy_from_slice(rest);
                ListMasks::of(&block)
            }
        };
        let inside = running_parity(m.quotes) ^ inside_before;
        let opening = m.quotes & inside;
        let closing = m.quotes & !inside;
        let outside = !inside & !m.quotes;
        let end = m.brackets & outside;
        // The bytes before the list's `]` (the whole block when it does not end here).
        let (list, end) = match end {
            0 => (u64::MAX, 0),
            _ => {
                let end = end & end.wrapping_neg();
                (end - 1, end)
            }
        };
        let commas = m.commas & outside & list;
        let after_close = closing << 1 | after_close_before;
        let after_comma = commas << 1 | after_comma_before;
        // After each closing quote a comma, or the end; after each comma an opening quote. From
        // the first string on, that leaves no room for anything else outside the strings.
        let taken = m.forbidden & list == 0
            && after_close & list & !commas == 0
            && after_comma & (list | end) & !opening == 0;
        if !taken {
            return None;
        }
        if end != 0 {
            return Some(at + end.trailing_zeros() as usize);
        }
        inside_before = (inside >> 63).wrapping_neg();
        after_close_before = closing >> 63;
        after_comma_before = commas >> 63;
        at += 64;
    }
    None
}

/// The bytes of a 64-byte block that [`plain_strings_end`] looks at, one bit per byte.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListMasks {
    quotes: u64,
    commas: u64,
    brackets: u64,
    /// Backslashes and control characters.
    forbidden: u64,
}

impl ListMasks {
    #[inline]
    fn of(block: &[u8; 64]) -> ListMasks {
        #[cfg(target_arch = "x86_64")]
        {
            use super::applied::{sse2_control, sse2_eq, sse2_masks};
            let [quotes, commas, brackets, forbidden] = sse2_masks(block, |v| {
                let backslash = sse2_eq(v, b'\\');
                [
                    sse2_eq(v, b'"'),
                    sse2_eq(v, b','),
                    sse2_eq(v, b']'),
                    // SAFETY: SSE2 is in the x86_64 baseline.
                    unsafe { std::arch::x86_64::_mm_or_si128(backslash, sse2_control(v)) },
                ]
            });
            ListMasks {
                quotes,
                commas,
                brackets,
                forbidden,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        ListMasks::portable(block)
    }

    /// A byte at a time: other processors, and the reference of the tests.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(block: &[u8; 64]) -> ListMasks {
        let [quotes, commas, brackets, forbidden] = super::applied::bytewise_masks(block, |b| {
            [
                b == b'"',
                b == b',',
                b == b']',
                matches!(b, b'\\' | 0..=0x1f),
            ]
        });
        ListMasks {
            quotes,
            commas,
            brackets,
            forbidden,
        }
    }
}

/// `deserialize_*` methods that read a number as [`Reader`]'s `deserialize_u64` does.
macro_rules! numbers_as_u64 {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
            self.deserialize_u64(visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = Refused;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek()? {
            b'"' => self.visit_string(visitor),
            b'{' => self.deserialize_map(visitor),
            b'[' => self.deserialize_seq(visitor),
            b't' | b'f' => self.deserialize_bool(visitor),
            b'n' => self.deserialize_unit(visitor),
            b'-' | b'0'..=b'9' => self.visit_integer(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek()? {
            b't' => {
                self.literal(b"true")?;
                visitor.visit_bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                visitor.visit_bool(false)
            }
            _ => Err(Refused),
        }
    }

    numbers_as_u64!(
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_f32 deserialize_f64
    );

    /// Every number type: serde_json reads the number as it is written, whatever type is asked.
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.visit_integer(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek()? {
            b'"' => self.visit_string(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            visitor.visit_unit()
        } else {
            Err(Refused)
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        if name == UNKEPT_STRINGS {
            self.skip_strings()?;
            return visitor.visit_unit();
        }
        if name != RAW_STRING {
            return visitor.visit_newtype_struct(self);
        }
        let start = self.checked_string()?;
        visitor.visit_borrowed_str(self.slice(start, self.at)?)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.items(b'[', |items| visitor.visit_seq(items))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.items(b'{', |items| visitor.visit_map(items))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        if self.peek()? != b'"' {
            return Err(Refused);
        }
        match self.string()? {
            Cow::Borrowed(s) => visitor.visit_enum(BorrowedStrDeserializer::new(s)),
            Cow::Owned(s) => visitor.visit_enum(StringDeserializer::new(s)),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.skip_value()?;
        visitor.visit_unit()
    }

    // Not in the types the reader decodes: left to serde_json.

    fn deserialize_i128<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused)
    }

    fn deserialize_u128<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused)
    }

    fn deserialize_char<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused)
    }
}

/// The entries of an object or the elements of an array, as serde_json's `MapAccess` and
/// `SeqAccess` read them.
struct Items<'r, 'de> {
    reader: &'r mut Reader<'de>,
    first: bool,
    /// The closing brace or bracket was read.
    done: bool,
}

impl<'de> Items<'_, 'de> {
    /// Moves past the separator to the next item of the array or object that `close` ends;
    /// false at the end.
    fn advance(&mut self, close: u8) -> Result<bool, Refused> {
        if self.done {
            return Err(Refused);
        }
        let more = self.reader.next_item(&mut self.first, close)?;
        self.done = !more;
        Ok(more)
    }
}

impl<'de> MapAccess<'de> for &mut Items<'_, 'de> {
    type Error = Refused;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Refused> {
        if !self.advance(b'}')? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refused> {
        self.reader.colon()?;
        seed.deserialize(&mut *self.reader)
    }
}

impl<'de> SeqAccess<'de> for &mut Items<'_, 'de> {
    type Error = Refused;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Refused> {
        if !self.advance(b']')? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    /// What the reader gives `text` as a `Value`; when it reads it, serde_json gives the same.
    fn read(text: &str) -> Result<Value, Refused> {
        let read = from_str::<Value>(text);
        if let Ok(value) = &read {
            assert_eq!(
                serde_json::from_str::<Value>(text).ok().as_ref(),
                Some(value),
                "{text:?}"
            );
        }
        if from_str::<IgnoredAny>(text).is_ok() {
            assert!(
                serde_json::from_str::<IgnoredAny>(text).is_ok(),
                "skipped: {text:?}"
            );
        }
        read
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn reads_the_subset_as_serde_json_does() {
        let long = format!("\"{}\\n{}\"", "a".repeat(40), "é".repeat(20));
        let accepted = [
            "{}",
            "[]",
            r#"{"a":1}"#,
            " \t\r\n{ \"a\" : [ 1 , -2 , true , false , null , \"x\" ] } \n",
            r#""plain""#,
            r#""esc \" \\ \/ \b \f \n \r \t end""#,
            r#""\u00e9\u0000\uFFFF\u0041""#,
            r#""\ud83d\ude00 \uD83D\uDE00""#,
            "0",
            "-1",
            "18446744073709551615",
            "-9223372036854775808",
            "\"é ü \u{7f} \u{2028}\"",
            &long,
            r#"{"a":{"b":{"c":[{"d":null}]}},"a":2}"#,
            &nested(MAX_DEPTH),
        ];
        for text in accepted {
            assert!(read(text).is_ok(), "{text:?}");
        }
        let refused = [
            // Beyond the subset (serde_json reads them).
            "1.5",
            "1e3",
            "1E3",
            "-0",
            "18446744073709551616",
            "-9223372036854775809",
            &nested(MAX_DEPTH + 1),
            // Lone surrogates in a decoded string.
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud800x""#,
            // Malformed.
            "",
            " ",
            "01",
            "-",
            "+1",
            ".5",
            r#""\x""#,
            r#""\u00g0""#,
            r#""\u00""#,
            "\"a\tb\"",
            "\"a\u{1f}b\"",
            "\"unterminated",
            r#""ends in a backslash\"#,
            "[1,]",
            "[,1]",
            "[1 2]",
            r#"{"a":1,}"#,
            "{,}",
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a" 1}"#,
            "{1:2}",
            r#"{"a":1 "b":2}"#,
            "tru",
            "nul",
            "falsey",
            "[",
            "{",
            "1 2",
            r#"{"a":1}x"#,
            "]",
        ];
        for text in refused {
            assert_eq!(read(text), Err(Refused), "{text:?}");
        }
    }

    #[test]
    fn skipped_values_are_checked_as_serde_json_checks_them() {
        // A skipped string needs four hex digits after `\u`, nothing more (as serde_json's skip).
        for (text, skipped) in [
            (r#""\ud800""#, true),
            (r#""\u12""#, false),
            (r#""a\"b\\""#, true),
            (r#"{"a":[1,{"b":"\n"}],"c":null}"#, true),
            ("\"a\u{0}\"", false),
            (r#"{"a":1,}"#, false),
            ("1.5", false),
            (&nested(MAX_DEPTH + 1), false),
        ] {
            assert_eq!(from_str::<IgnoredAny>(text).is_ok(), skipped, "{text:?}");
            read(text).ok();
        }
        // Long strings with escapes: the block scan, and the escape-by-escape walk after a `\u`.
        let document = serde_json::to_string(&serde_json::json!({"a": "b\"c", "d": [1, 2]}));
        let document = serde_json::to_string(&document.unwrap().repeat(20)).unwrap();
        assert!(from_str::<IgnoredAny>(&document).is_ok());
        let with_unicode = format!("{}\\u0026\\\"{}", &document[..100], &document[100..]);
        assert!(from_str::<IgnoredAny>(&with_unicode).is_ok());
        assert!(serde_json::from_str::<IgnoredAny>(&with_unicode).is_ok());
        let unclosed = &document[..document.len() - 1];
        assert!(from_str::<IgnoredAny>(unclosed).is_err());
    }

    #[test]
    fn unkept_string_lists_are_checked_as_serde_json_checks_them() {
        #[derive(Debug, Deserialize)]
        struct Lists {
            #[serde(default)]
            #[allow(dead_code)]
            users: crate::crd::UnkeptNames,
            #[serde(default)]
            after: u8,
        }
        for (text, ok) in [
            (r#"{"users":[],"after":1}"#, true),
            (r#"{"users":[ ] ,"after":1}"#, true),
            (r#"{"users":["a"],"after":1}"#, true),
            (
                r#"{"users":[ "a" , "b\"c" ,"\u00e9", "é" ] ,"after":1}"#,
                true,
            ),
            (r#"{"users":["\ud83d\ude00"],"after":1}"#, true),
            (r#"{"users":["\ud800"],"after":1}"#, false),
            (r#"{"users":["a\x"],"after":1}"#, false),
            ("{\"users\":[\"a\u{1}\"],\"after\":1}", false),
            (r#"{"users":[1],"after":1}"#, false),
            (r#"{"users":[null],"after":1}"#, false),
            (r#"{"users":[["a"]],"after":1}"#, false),
            (r#"{"users":null,"after":1}"#, false),
            (r#"{"users":"a","after":1}"#, false),
            (r#"{"users":{},"after":1}"#, false),
            (r#"{"users":["a",],"after":1}"#, false),
            (r#"{"users":[,"a"],"after":1}"#, false),
            (r#"{"users":["a" "b"],"after":1}"#, false),
            (r#"{"users":["a""#, false),
            (r#"{"users":["a"#, false),
            (r#"{"users":["a",""#, false),
            (r#"{"users":[ ,],"after":1}"#, false),
        ] {
            assert_eq!(serde_json::from_str::<Lists>(text).is_ok(), ok, "{text}");
            match from_str::<Lists>(text) {
                Ok(lists) => assert!(ok && lists.after == 1, "{text}"),
                Err(Refused) => assert!(!ok, "{text}"),
            }
        }
    }

    /// What the one-by-one loop makes of `list` (the text after a list's `[`): the index of
    /// its `]`, as [`plain_strings_end`] gives it.
    fn one_by_one(list: &str) -> Option<usize> {
        let text = format!("[{list}");
        let mut reader = Reader {
            text: &text,
            at: 1,
            depth: 1,
        };
        reader
            .skip_strings_one_by_one()
            .ok()
            .map(|()| reader.at - 2)
    }

    /// `n` strings of `len` characters and more, made of `fill`: `"…","…",…`.
    fn strings(n: usize, len: usize, fill: &str) -> String {
        (0..n)
            .map(|i| format!("\"{}\"", fill.repeat(len + i % 3)))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn list_masks_are_the_bytewise_ones() {
        for (b, block) in crate::admission::review::applied::tests::every_byte_value() {
            assert_eq!(ListMasks::of(&block), ListMasks::portable(&block), "{b:#x}");
        }
    }

    #[test]
    fn compact_plain_string_lists_are_read_by_blocks_as_one_by_one() {
        // Quotes, commas and the end at every place in and across 64-byte blocks, with
        // characters of one to four bytes and list syntax inside the strings.
        for fill in ["a", "é", "],[", "\u{1f600}", "\u{7f}"] {
            for n in 1..12 {
                for len in 0..70 {
                    let list = format!("{}]", strings(n, len, fill));
                    let end = Some(list.len() - 1);
                    assert_eq!(plain_strings_end(list.as_bytes()), end, "{list}");
                    assert_eq!(one_by_one(&list), end, "{list}");
                    assert!(serde_json::from_str::<Vec<String>>(&format!("[{list}")).is_ok());
                    let followed = format!("{list},\"next\":[1]}}");
                    assert_eq!(plain_strings_end(followed.as_bytes()), end, "{followed}");
                }
            }
        }
        // Valid lists that are not compact or have escapes, and invalid ones: never taken by
        // blocks (the loop reads or refuses them), wherever they are in a block.
        for defect in [
            r#" "a"]"#,
            r#""a" ]"#,
            r#""a", "b"]"#,
            r#""a"
]"#,
            r#""a\"b"]"#,
            r#""\u00e9"]"#,
            "\"a\u{1}\"]",
            "\"a\tb\"]",
            r#""a",]"#,
            r#""a",,"b"]"#,
            r#""a""b"]"#,
            r#""a"1]"#,
            r#""a",1]"#,
            r#""a",["b"]]"#,
            r#""a",null]"#,
            r#""a"}"#,
            r#""a","b"#,
            r#""a","b""#,
            r#""a","#,
        ] {
            for before in 0..20 {
                let list = match before {
                    0 => defect.to_string(),
                    _ => format!("{},{defect}", strings(before, 1, "a")),
                };
                assert_eq!(plain_strings_end(list.as_bytes()), None, "{list}");
                for len in [59, 60, 61, 62, 63] {
                    let list = format!("{},{defect}", strings(1, len, "a"));
                    assert_eq!(plain_strings_end(list.as_bytes()), None, "{list}");
                }
            }
        }
        assert_eq!(plain_strings_end(b"]"), None);
        assert_eq!(plain_strings_end(b""), None);
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Typed<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(default)]
        port: Option<i32>,
        #[serde(default)]
        small: u8,
        #[serde(default)]
        flag: bool,
        #[serde(default)]
        operation: Option<Operation>,
        #[serde(default)]
        list: Vec<String>,
        #[serde(default)]
        #[allow(dead_code)]
        ignored: IgnoredAny,
        #[serde(default, borrow)]
        raw: Option<Raw<'a>>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "UPPERCASE")]
    enum Operation {
        Create,
        Update,
    }

    /// A string read raw (as `SkippedString` reads the apply annotation).
    #[derive(Debug, PartialEq)]
    struct Raw<'a>(&'a str);

    impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Raw<'de>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a raw string")
                }
                fn visit_borrowed_str<E>(self, raw: &'de str) -> Result<Raw<'de>, E> {
                    Ok(Raw(raw))
                }
            }
            d.deserialize_newtype_struct(RAW_STRING, V)
        }
    }

    #[test]
    fn types_take_what_they_take_from_serde_json() {
        let typed = |text: &'static str| from_str::<Typed>(text);
        let ok = typed(
            r#"{"name":"a\"b","port":8080,"small":255,"flag":true,"operation":"UPDATE",
                "list":["x","y"],"ignored":{"deep":[1,"\ud800"]},"raw":"r\"aw\u0041","other":[]}"#,
        )
        .unwrap();
        assert_eq!(ok.name, "a\"b");
        assert!(matches!(ok.name, Cow::Owned(_)));
        assert_eq!(
            (ok.port, ok.small, ok.flag, ok.operation),
            (Some(8080), 255, true, Some(Operation::Update))
        );
        assert_eq!(ok.list, ["x", "y"]);
        assert_eq!(ok.raw, Some(Raw(r#""r\"aw\u0041""#)));
        let plain = typed(r#"{"name":"plain","port":null,"operation":"CREATE"}"#).unwrap();
        assert!(matches!(plain.name, Cow::Borrowed("plain")));
        assert_eq!(
            (plain.port, plain.operation),
            (None, Some(Operation::Create))
        );
        for bad in [
            r#"{"port":1}"#,
            r#"{"name":"a","name":"b"}"#,
            r#"{"name":1}"#,
            r#"{"name":null}"#,
            r#"{"name":"a","port":2147483648}"#,
            r#"{"name":"a","port":"1"}"#,
            r#"{"name":"a","port":1.0}"#,
            r#"{"name":"a","small":256}"#,
            r#"{"name":"a","small":-1}"#,
            r#"{"name":"a","flag":"true"}"#,
            r#"{"name":"a","flag":null}"#,
            r#"{"name":"a","operation":"MOVE"}"#,
            r#"{"name":"a","operation":{"CREATE":null}}"#,
            r#"{"name":"a","list":"x"}"#,
            r#"{"name":"a","list":[1]}"#,
            r#"{"name":"a","raw":1}"#,
            r#"{"name":"a","raw":"\ud800"}"#,
            // serde_json takes a struct as an array; the reader does not.
            r#"["a"]"#,
        ] {
            assert!(typed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finds_every_special_byte_where_a_scan_a_byte_at_a_time_does() {
        let reference = |text: &[u8]| {
            text.iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        };
        for b in 0..=255u8 {
            for len in [1, 15, 16, 17, 31, 32, 40] {
                for at in [0, len / 2, len - 1] {
                    let mut text = vec![b'a'; len];
                    text[at] = b;
                    assert_eq!(special(&text), reference(&text), "{b:#x} at {at} of {len}");
                }
            }
        }
    }

    /// JSON-like text made of pieces, valid or not.
    fn pieces() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just(","),
            Just(":"),
            Just(" "),
            Just("\"a\""),
            Just("\"k\":"),
            Just("\"\\u00e9\\\"\""),
            Just("\"\\ud83d\\ude00\""),
            Just("\"\\ud800\""),
            Just("\"\\x\""),
            Just("\"a\tb\""),
            Just("\""),
            Just("\\"),
            Just("0"),
            Just("-0"),
            Just("12"),
            Just("-7"),
            Just("01"),
            Just("1.5"),
            Just("1e2"),
            Just("99999999999999999999"),
            Just("true"),
            Just("false"),
            Just("null"),
            Just("nul"),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
    }

    /// Any JSON value with integer numbers, as serde_json writes it.
    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[a-z\"\\\\/\u{0}-\u{1f}\u{e9}\u{1f600}]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{0,6}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The inside of a list, valid or not, with pieces long enough to cross blocks.
    fn list_pieces() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just(",".to_string()),
            Just("]".to_string()),
            Just(" ".to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
            Just("\"a\"".to_string()),
            Just("\"a\tb\"".to_string()),
            Just("\"\\u00e9\"".to_string()),
            Just("\"é]\"".to_string()),
            Just("1".to_string()),
            Just("[".to_string()),
            "\"[a-z,\\]]{0,70}\"",
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    /// A compact list of plain strings (the inside, up to its `]`), and the same list with one
    /// of [`list_pieces`] put in at some byte.
    fn lists_and_changed_lists() -> impl Strategy<Value = (String, String)> {
        let names = proptest::collection::vec("[a-zé,\\]\\[]{0,40}", 1..16);
        (names, list_pieces(), any::<proptest::sample::Index>()).prop_map(|(names, piece, at)| {
            let list = format!("\"{}\"]", names.join("\",\""));
            let mut at = at.index(list.len() + 1);
            while !list.is_char_boundary(at) {
                at -= 1;
            }
            let changed = format!("{}{piece}{}", &list[..at], &list[at..]);
            (list, changed)
        })
    }

    proptest! {
        #[test]
        fn lists_read_by_blocks_are_lists_read_one_by_one(list in list_pieces()) {
            if let Some(end) = plain_strings_end(list.as_bytes()) {
                prop_assert_eq!(one_by_one(&list), Some(end), "{}", list);
            }
        }

        #[test]
        fn lists_changed_anywhere_are_read_by_blocks_as_one_by_one(
            (list, changed) in lists_and_changed_lists()
        ) {
            prop_assert_eq!(plain_strings_end(list.as_bytes()), Some(list.len() - 1), "{}", list);
            if let Some(end) = plain_strings_end(changed.as_bytes()) {
                prop_assert_eq!(one_by_one(&changed), Some(end), "{}", changed);
            }
        }

        #[test]
        fn what_it_reads_serde_json_reads_alike(text in pieces()) {
            let _ = read(&text);
        }

        #[test]
        fn reads_what_serde_json_writes(value in values()) {
            for text in [
                serde_json::to_string(&value).unwrap(),
                serde_json::to_string_pretty(&value).unwrap(),
            ] {
                let negative_zero = text.contains("-0");
                match read(&text) {
                    Ok(read) => prop_assert_eq!(read, value.clone()),
                    Err(_) => prop_assert!(negative_zero, "refused {}", text),
                }
            }
        }
    }
}
