//! Reading records and values from JSON: one streaming reader that every
//! path goes through (the server's bodies and batches, the HTTP client's
//! answers), so each accepts the same forms and words the same errors.
//!
//! Batch bodies carry thousands of rows and list answers as many; reading
//! them without a JSON tree, and converting the common shapes (text,
//! integers, amounts, ISO dates) in place, is what keeps a remote call close
//! to an in-process one. A value in a form that is unusual for its field is
//! read as a tree and goes through [`parse_value`], the one place that
//! knows every accepted form.

use std::borrow::Cow;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value as J;

use crate::currency::Currency;
use crate::datetime::{parse_date, parse_datetime, two};
use crate::error::{Error, Result};
use crate::row::OwnedRow;
use crate::schema::{Column, Field, FieldKind, Table};
use crate::value::Value;

use super::base64::base64_decode;
use super::timelog::from_timelog;
use super::write::NON_FINITE;
use super::BLOB_MAGIC;

/// The value a field takes when an object written as a whole leaves it out:
/// NULL when nullable, else the zero of its kind.
pub fn zero_value(field: &Field) -> Value {
    if field.nullable {
        return Value::Null;
    }
    match field.kind {
        FieldKind::I32 | FieldKind::I64 | FieldKind::U32 | FieldKind::Reference(_) => Value::Int(0),
        FieldKind::F64 => Value::Real(0.0),
        FieldKind::Bool => Value::Bool(false),
        FieldKind::Currency => Value::Currency(Currency::ZERO),
        FieldKind::Text => Value::Text(String::new()),
        FieldKind::Json => Value::Text("null".into()),
        FieldKind::Blob => Value::Blob(Vec::new()),
        FieldKind::Date => Value::Date(NaiveDate::default()),
        FieldKind::DateTime => Value::DateTime(DateTime::UNIX_EPOCH),
    }
}

fn mismatch(
    table: &Table,
    field: &Field,
    expected: &'static str,
    found: &serde_json::Value,
) -> Error {
    let found = match found {
        serde_json::Value::Null => "null".to_owned(),
        serde_json::Value::Bool(_) => "a boolean".to_owned(),
        serde_json::Value::Number(n) => format!("the number {n}"),
        serde_json::Value::String(s) if s.chars().count() <= 40 => format!("the text {s:?}"),
        serde_json::Value::String(_) => "a long text".to_owned(),
        serde_json::Value::Array(_) => "an array".to_owned(),
        serde_json::Value::Object(_) => "an object".to_owned(),
    };
    Error::TypeMismatch {
        at: format!("{}.{}", table.name, field.name),
        expected,
        found,
    }
}

/// Converts the JSON value of `field` (of `table`) to the field's canonical
/// [`Value`], or says why it does not fit.
pub fn parse_value(table: &Table, field: &Field, v: &serde_json::Value) -> Result<Value> {
    use serde_json::Value as J;
    let bad = |expected| mismatch(table, field, expected, v);
    if v.is_null() {
        return if field.nullable {
            Ok(Value::Null)
        } else if field.kind == FieldKind::Json {
            // The document `null` itself: a JSON field holds any JSON value.
            Ok(Value::Text("null".into()))
        } else {
            Err(bad("a value (the field is not nullable)"))
        };
    }
    let unset = || zero_value(field);
    Ok(match field.kind {
        FieldKind::I64 | FieldKind::Reference(_) => {
            Value::Int(v.as_i64().ok_or_else(|| bad("an integer"))?)
        }
        FieldKind::I32 => Value::Int(
            v.as_i64()
                .filter(|i| i32::try_from(*i).is_ok())
                .ok_or_else(|| bad("a 32-bit integer"))?,
        ),
        FieldKind::U32 => Value::Int(
            v.as_i64()
                .filter(|i| u32::try_from(*i).is_ok())
                .ok_or_else(|| bad("an unsigned 32-bit integer"))?,
        ),
        FieldKind::F64 => Value::Real(match v {
            J::String(t) => NON_FINITE
                .iter()
                .find(|(name, _)| name == t)
                .map(|(_, x)| *x)
                .ok_or_else(|| bad("a number"))?,
            _ => v.as_f64().ok_or_else(|| bad("a number"))?,
        }),
        FieldKind::Bool => match v {
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) if n.as_i64() == Some(0) => Value::Bool(false),
            J::Number(n) if n.as_i64() == Some(1) => Value::Bool(true),
            _ => return Err(bad("a boolean")),
        },
        FieldKind::Currency => {
            let c = match v {
                J::Number(n) => match n.as_i64() {
                    Some(i) => Currency::from_int(i),
                    // Exact: more than four decimals is refused, not rounded.
                    None => n.to_string().parse::<Currency>().ok(),
                },
                J::String(s) => s.parse::<Currency>().ok(),
                _ => None,
            };
            Value::Currency(c.ok_or_else(|| bad("an amount with at most 4 decimals"))?)
        }
        FieldKind::Text => match v {
            J::String(s) => Value::Text(s.clone()),
            _ => return Err(bad("text")),
        },
        FieldKind::Json => Value::Text(v.to_string()),
        FieldKind::Blob => match v {
            J::String(s) => {
                let b64 = s.strip_prefix(BLOB_MAGIC).unwrap_or(s);
                Value::Blob(base64_decode(b64).ok_or_else(|| bad("Base64 blob"))?)
            }
            _ => return Err(bad("a Base64 blob")),
        },
        FieldKind::Date => match v {
            J::String(s) if s.is_empty() => unset(),
            J::String(s) => Value::Date(
                parse_date(s)
                    .or_else(|| parse_datetime(s).map(|t| t.date_naive()))
                    .ok_or_else(|| bad("a date YYYY-MM-DD"))?,
            ),
            _ => return Err(bad("a date YYYY-MM-DD")),
        },
        FieldKind::DateTime => match v {
            J::String(s) if s.is_empty() => unset(),
            J::String(s) => {
                Value::DateTime(parse_datetime(s).ok_or_else(|| bad("an ISO 8601 date-time"))?)
            }
            J::Number(n) => match n.as_i64() {
                Some(0) => unset(),
                Some(i) => {
                    Value::DateTime(from_timelog(i).ok_or_else(|| bad("a TimeLog integer"))?)
                }
                None => return Err(bad("a TimeLog integer")),
            },
            _ => return Err(bad("an ISO 8601 date-time")),
        },
    })
}

/// Reads an ID: a positive JSON integer, or a string of digits.
pub fn parse_id(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .filter(|id| *id > 0)
}

// ---------------------------------------------------------------- the reader

/// How deeply arrays and objects may nest (as serde_json allows).
const MAX_DEPTH: u32 = 128;

/// A strict JSON reader over one body, reading it in place: strings come
/// borrowed from the body unless they hold escapes, and a field's value is
/// converted to the field's kind as it is met.
pub struct Reader<'a> {
    s: &'a str,
    pos: usize,
    /// Where `s` starts in the whole body, for the positions errors give
    /// (a list read as it arrives is read from a window of it).
    base: usize,
    /// The last date-time read and its text: the rows of a batch share their
    /// automatic times, stamped once for all.
    last_datetime: Option<(&'a str, DateTime<Utc>)>,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `s`.
    pub fn new(s: &'a str) -> Self {
        Reader::at(s, 0)
    }

    /// A reader of `s`, which starts `base` bytes into the body.
    pub(super) fn at(s: &'a str, base: usize) -> Self {
        Reader {
            s,
            pos: 0,
            base,
            last_datetime: None,
        }
    }

    /// How far the reader is into `s`.
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    #[cold]
    #[inline(never)]
    /// A [`Error::BadInput`] saying `what` was expected where the reader stands.
    pub fn fail<T>(&self, what: &str) -> Result<T> {
        Err(Error::BadInput(format!(
            "{what} at byte {}",
            self.base + self.pos
        )))
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.s.len() - self.pos
    }

    fn ws(&mut self) {
        let b = self.bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.pos).copied()
    }

    /// Consumes `c` if it comes next.
    pub fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `c`, which must come next (after whitespace).
    pub fn expect(&mut self, c: u8) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            self.fail(&format!("expected '{}'", c as char))
        }
    }

    /// Opens an array; `false` when it is empty (and already closed).
    pub fn open_array(&mut self) -> Result<bool> {
        self.expect(b'[')?;
        Ok(!self.eat(b']'))
    }

    /// After an element: `true` on `,` (another one follows), `false` on the
    /// closing `close`.
    #[inline]
    pub fn more(&mut self, close: u8) -> Result<bool> {
        // Compact bodies have no whitespace between items: that case is
        // inlined into the loops over rows and values, the rest is not.
        match self.bytes().get(self.pos) {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(&c) if c == close => {
                self.pos += 1;
                Ok(false)
            }
            _ => self.more_spaced(close),
        }
    }

    #[inline(never)]
    fn more_spaced(&mut self, close: u8) -> Result<bool> {
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(false)
            }
            _ => self.fail(&format!("expected ',' or '{}'", close as char)),
        }
    }

    /// Only whitespace may follow the body's value.
    pub fn end(&mut self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => self.fail("trailing characters"),
        }
    }

    /// A key without quotes, as mORMot clients write the outer one:
    /// `{Sample:[…]}`.
    pub fn bare_key(&mut self) -> Option<&'a str> {
        self.ws();
        let start = self.pos;
        let n = self.bytes()[start..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        self.pos += n;
        (n > 0).then(|| &self.s[start..start + n])
    }

    /// Consumes the string `"text"` if it comes next, byte for byte. `text`
    /// must hold nothing a string escapes (as the text of a string borrowed
    /// from a body does), so that a match is that very string.
    pub fn eat_quoted(&mut self, text: &str) -> bool {
        self.ws();
        let b = &self.bytes()[self.pos..];
        let n = text.len();
        let hit =
            b.len() > n + 1 && b[0] == b'"' && b[n + 1] == b'"' && &b[1..=n] == text.as_bytes();
        if hit {
            self.pos += n + 2;
        }
        hit
    }

    /// A string with no escape in it, borrowed from the body; `None`, with
    /// nothing consumed, for anything else (which [`Reader::string`] reads).
    #[inline]
    pub fn plain_string(&mut self) -> Option<&'a str> {
        if self.bytes().get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let end = plain_end(self.bytes(), start).ok()?;
        self.pos = end + 1;
        Some(&self.s[start..end])
    }

    /// A string, borrowed from the body unless it holds escapes.
    pub fn string(&mut self) -> Result<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return self.fail("expected a string");
        }
        let start = self.pos + 1;
        match plain_end(self.bytes(), start) {
            Ok(end) => {
                self.pos = end + 1;
                Ok(Cow::Borrowed(&self.s[start..end]))
            }
            Err(i) => {
                self.pos = i;
                match self.bytes().get(i) {
                    Some(b'\\') => {
                        let mut out = String::with_capacity(i - start + 16);
                        out.push_str(&self.s[start..i]);
                        self.escaped(out).map(Cow::Owned)
                    }
                    Some(_) => self.fail("a control character in a string"),
                    None => self.fail("an unterminated string"),
                }
            }
        }
    }

    /// The rest of a string from an escape at `self.pos`.
    #[inline(never)]
    fn escaped(&mut self, mut out: String) -> Result<String> {
        let b = self.bytes();
        loop {
            let run = self.pos;
            while let Some(&c) = b.get(self.pos) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.s[run..self.pos]);
            match b.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let c = match b.get(self.pos + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 2;
                            out.push(self.unicode_escape()?);
                            continue;
                        }
                        _ => return self.fail("an invalid escape"),
                    };
                    out.push(c);
                    self.pos += 2;
                }
                Some(_) => return self.fail("a control character in a string"),
                None => return self.fail("an unterminated string"),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self
            .bytes()
            .get(self.pos..self.pos + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        match digits {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => self.fail("an invalid \\u escape"),
        }
    }

    /// The character of a `\u` escape whose four digits start at `self.pos`
    /// (a surrogate pair takes the following `\u` too).
    fn unicode_escape(&mut self) -> Result<char> {
        let hi = self.hex4()?;
        let code = match hi {
            0xD800..=0xDBFF => {
                if self.bytes().get(self.pos..self.pos + 2) != Some(b"\\u") {
                    return self.fail("a lone surrogate in a \\u escape");
                }
                self.pos += 2;
                let lo = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return self.fail("a lone surrogate in a \\u escape");
                }
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            }
            0xDC00..=0xDFFF => return self.fail("a lone surrogate in a \\u escape"),
            v => v,
        };
        match char::from_u32(code) {
            Some(c) => Ok(c),
            None => self.fail("an invalid \\u escape"),
        }
    }

    /// A number's text, checked against JSON's grammar.
    pub fn number(&mut self) -> Result<&'a str> {
        self.ws();
        let b = self.bytes();
        let start = self.pos;
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        let mut i = start;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return self.fail("an invalid number"),
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                self.pos = i;
                return self.fail("an invalid number");
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                self.pos = i;
                return self.fail("an invalid number");
            }
        }
        self.pos = i;
        Ok(&self.s[start..i])
    }

    fn literal(&mut self, word: &[u8]) -> Result<()> {
        if self.bytes()[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            self.fail("an invalid literal")
        }
    }

    /// `true` or `false`.
    pub fn boolean(&mut self) -> Result<bool> {
        match self.peek() {
            Some(b't') => self.literal(b"true").map(|()| true),
            Some(b'f') => self.literal(b"false").map(|()| false),
            _ => self.fail("expected a boolean"),
        }
    }

    /// A non-negative integer that fits in a `u64`.
    pub fn unsigned(&mut self) -> Result<u64> {
        let at = self.pos;
        match self.number()?.parse() {
            Ok(v) => Ok(v),
            Err(_) => {
                self.pos = at;
                self.fail("expected an unsigned integer")
            }
        }
    }

    /// Any value, checked, as its text.
    pub fn raw(&mut self) -> Result<&'a str> {
        self.ws();
        let start = self.pos;
        self.skip(0)?;
        Ok(&self.s[start..self.pos])
    }

    fn skip(&mut self, depth: u32) -> Result<()> {
        if depth > MAX_DEPTH {
            return self.fail("nesting too deep");
        }
        match self.peek() {
            Some(b'"') => {
                self.string()?;
            }
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
            }
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            Some(b'[') => {
                if self.open_array()? {
                    loop {
                        self.skip(depth + 1)?;
                        if !self.more(b']')? {
                            break;
                        }
                    }
                }
            }
            Some(b'{') => {
                self.pos += 1;
                if !self.eat(b'}') {
                    loop {
                        self.string()?;
                        self.expect(b':')?;
                        self.skip(depth + 1)?;
                        if !self.more(b'}')? {
                            break;
                        }
                    }
                }
            }
            _ => return self.fail("expected a value"),
        }
        Ok(())
    }

    /// Any value, as a JSON tree (for the uncommon forms).
    pub fn tree(&mut self) -> Result<J> {
        let raw = self.raw()?;
        serde_json::from_str(raw).map_err(|e| Error::BadInput(e.to_string()))
    }

    /// An ID: a positive integer, or a string of one (`None` for anything
    /// else, as [`parse_id`] reads it).
    pub fn id(&mut self) -> Result<Option<i64>> {
        let id = match self.peek() {
            Some(b'"') => self.string()?.parse::<i64>().ok(),
            Some(b'-' | b'0'..=b'9') => self.number()?.parse::<i64>().ok(),
            _ => {
                self.raw()?;
                None
            }
        };
        Ok(id.filter(|id| *id > 0))
    }

    /// A date-time's text; `in_body` is the same text when it is borrowed
    /// from the body, to be remembered.
    fn datetime(&mut self, s: &str, in_body: Option<&'a str>) -> Option<Value> {
        if let Some((text, t)) = self.last_datetime {
            if text == s {
                return Some(Value::DateTime(t));
            }
        }
        let t = parse_datetime(s)?;
        if let Some(text) = in_body {
            self.last_datetime = Some((text, t));
        }
        Some(Value::DateTime(t))
    }

    /// The shapes a batch row's values nearly always take, read in one pass
    /// without the general path's intermediate text: a plain number for an
    /// integer or an amount, a quoted `YYYY-MM-DD` date, the date-time read
    /// just before. `None`, with nothing consumed, leaves the value to
    /// [`Reader::field`], which reads every form and words the errors.
    #[inline]
    pub fn common(&mut self, kind: FieldKind) -> Option<Value> {
        let b = self.bytes();
        let at = self.pos;
        match kind {
            FieldKind::Currency => {
                let (c, end) = plain_amount(b, at)?;
                self.pos = end;
                Some(Value::Currency(c))
            }
            FieldKind::I64 | FieldKind::Reference(_) => {
                let end = plain_number_end(b, at)?;
                let v = number_value(kind, &self.s[at..end])?;
                self.pos = end;
                Some(v)
            }
            FieldKind::Date => {
                let q = b.get(at..at + 12)?;
                if q[0] != b'"' || q[5] != b'-' || q[8] != b'-' || q[11] != b'"' {
                    return None;
                }
                let year = two(q, 1)? * 100 + two(q, 3)?;
                let d = NaiveDate::from_ymd_opt(year as i32, two(q, 6)?, two(q, 9)?)?;
                self.pos = at + 12;
                Some(Value::Date(d))
            }
            FieldKind::DateTime => {
                let (text, t) = self.last_datetime?;
                self.eat_quoted(text).then_some(Value::DateTime(t))
            }
            _ => None,
        }
    }

    /// [`Reader::field`] into `slot`, whose text buffer a text field reuses:
    /// a list's rows read into one row spare an allocation a string.
    pub fn field_into(&mut self, table: &Table, idx: usize, slot: &mut Value) -> Result<()> {
        if let Value::Text(buf) = slot {
            if table.fields[idx].kind == FieldKind::Text && self.peek() == Some(b'"') {
                match self.string()? {
                    Cow::Borrowed(s) => {
                        buf.clear();
                        buf.push_str(s);
                    }
                    Cow::Owned(s) => *buf = s,
                }
                return Ok(());
            }
        }
        *slot = self.field(table, idx)?;
        Ok(())
    }

    /// The value of field `idx` of `table`, converted to the field's kind.
    pub fn field(&mut self, table: &Table, idx: usize) -> Result<Value> {
        let f = &table.fields[idx];
        if f.kind == FieldKind::DateTime {
            if let Some((text, t)) = self.last_datetime {
                if self.eat_quoted(text) {
                    return Ok(Value::DateTime(t));
                }
            }
        }
        if f.kind != FieldKind::Json {
            match self.peek() {
                Some(b'"') => {
                    let s = self.string()?;
                    let fast = match f.kind {
                        FieldKind::Text => return Ok(Value::Text(s.into_owned())),
                        FieldKind::Date if !s.is_empty() => parse_date(&s).map(Value::Date),
                        FieldKind::DateTime if !s.is_empty() => {
                            let in_body = match s {
                                Cow::Borrowed(b) => Some(b),
                                Cow::Owned(_) => None,
                            };
                            self.datetime(&s, in_body)
                        }
                        _ => None,
                    };
                    return match fast {
                        Some(v) => Ok(v),
                        None => parse_value(table, f, &J::String(s.into_owned())),
                    };
                }
                Some(b'-' | b'0'..=b'9') => {
                    let text = self.number()?;
                    if let Some(v) = number_value(f.kind, text) {
                        return Ok(v);
                    }
                    if f.kind == FieldKind::Currency {
                        // Read from the digits, exactly: beyond 15 digits a
                        // double would round the amount.
                        if let Ok(c) = text.parse::<Currency>() {
                            return Ok(Value::Currency(c));
                        }
                    }
                    let v: J =
                        serde_json::from_str(text).map_err(|e| Error::BadInput(e.to_string()))?;
                    if f.kind == FieldKind::Currency {
                        // Exact when the double is the nearest one to a
                        // 4-decimal amount; anything else goes the slow way,
                        // which refuses it.
                        if let Some(c) = v
                            .as_f64()
                            .filter(|_| v.is_f64())
                            .and_then(|x| Currency::from_f64(x).filter(|c| c.to_f64() == x))
                        {
                            return Ok(Value::Currency(c));
                        }
                    }
                    return parse_value(table, f, &v);
                }
                _ => {}
            }
        }
        let v = self.tree()?;
        parse_value(table, f, &v)
    }
}

/// The end of the number starting at `at` when it is plain JSON
/// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?`, no exponent) and a delimiter follows it;
/// `None` for anything else, which the general path reads or refuses.
fn plain_number_end(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at + usize::from(b.get(at) == Some(&b'-'));
    let int = i;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    if i == int || (b[int] == b'0' && i > int + 1) {
        return None;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let frac = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == frac {
            return None;
        }
    }
    is_delimiter(b.get(i)).then_some(i)
}

/// The common numbers, converted without going through a double: integers
/// for integer fields, and amounts with at most four decimals. `None` leaves
/// the number to the general rules.
fn number_value(kind: FieldKind, text: &str) -> Option<Value> {
    let b = text.as_bytes();
    // "-0" is a float to serde_json; leave it to the general path.
    if b.starts_with(b"-0") {
        return None;
    }
    match kind {
        FieldKind::I64 | FieldKind::Reference(_) => text.parse().ok().map(Value::Int),
        FieldKind::Currency => exact_currency(b).map(Value::Currency),
        _ => None,
    }
}

/// `-?digits(.digits)?` with at most four significant decimals and at most
/// 15 significant digits in all: the amounts a double holds exactly, read
/// straight from their digits. `None` as well for an amount beyond
/// [`Currency`]'s range, which the general path refuses.
fn exact_currency(b: &[u8]) -> Option<Currency> {
    match plain_amount(b, 0)? {
        (c, end) if end == b.len() => Some(c),
        _ => None,
    }
}

/// An amount starting at `at`, as [`exact_currency`] takes it and followed by
/// a delimiter (or the end), read in one pass; and where it ends. Batch rows
/// read amounts straight from the body with it.
fn plain_amount(b: &[u8], at: usize) -> Option<(Currency, usize)> {
    let neg = b.get(at) == Some(&b'-');
    let start = at + usize::from(neg);
    let mut i = start;
    let mut v: i64 = 0;
    while let Some(d) = b.get(i).map(|c| c.wrapping_sub(b'0')).filter(|d| *d < 10) {
        if i - start == 15 {
            return None;
        }
        v = v * 10 + i64::from(d);
        i += 1;
    }
    let int_len = i - start;
    if int_len == 0 || (b[start] == b'0' && int_len > 1) {
        return None;
    }
    // Decimals up to the last one that is not zero: trailing zeros are dropped.
    let mut decimals = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let first = i;
        let mut zeros = 0;
        while let Some(d) = b.get(i).map(|c| c.wrapping_sub(b'0')).filter(|d| *d < 10) {
            if d == 0 {
                zeros += 1;
            } else {
                decimals += zeros + 1;
                if decimals > 4 || int_len + decimals > 15 {
                    return None;
                }
                for _ in 0..zeros {
                    v *= 10;
                }
                v = v * 10 + i64::from(d);
                zeros = 0;
            }
            i += 1;
        }
        if i == first {
            return None;
        }
    }
    if !is_delimiter(b.get(i)) {
        return None;
    }
    Some((scaled_amount(v, decimals, neg)?, i))
}

/// Whether a JSON number can end before this byte (or at the end).
fn is_delimiter(c: Option<&u8>) -> bool {
    matches!(
        c,
        Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') | None
    )
}

/// `digits` (an amount with `decimals` significant decimals, at most 15
/// digits) in 1/10,000, `None` beyond the range of an `i64`.
fn scaled_amount(digits: i64, decimals: usize, neg: bool) -> Option<Currency> {
    const SCALE: [i64; 5] = [10_000, 1_000, 100, 10, 1];
    let v = digits.checked_mul(SCALE[decimals])?;
    Some(Currency::from_scaled(if neg { -v } else { v }))
}

/// The closing quote of a string whose text starts at `i`, when no escape or
/// control character comes first; else where the first one is (or the end of
/// the body). Looked at eight bytes at a time.
#[inline]
fn plain_end(b: &[u8], mut i: usize) -> std::result::Result<usize, usize> {
    loop {
        while let Some(chunk) = b.get(i..i + 8) {
            let found = super::write::needs_escape(u64::from_le_bytes(
                chunk.try_into().expect("eight bytes"),
            ));
            if found != 0 {
                i += found.trailing_zeros() as usize / 8;
                break;
            }
            i += 8;
        }
        match b.get(i) {
            Some(b'"') => return Ok(i),
            Some(b'\\' | 0..=0x1f) | None => return Err(i),
            Some(_) => i += 1,
        }
    }
}

// ---------------------------------------------------------------- records

/// Reads the members of a JSON object naming fields of `table`: an `ID` (or
/// `RowID`) member goes to `id`, each field's value to `field(reader, index)`.
/// `present` is cleared, then holds the fields named, in the order first met
/// (a list reuses one buffer for all its rows). A member that is not a
/// column of the table is an [`Error::UnknownField`].
pub fn read_members<'a>(
    r: &mut Reader<'a>,
    table: &'static Table,
    id: &mut i64,
    present: &mut Vec<usize>,
    mut field: impl FnMut(&mut Reader<'a>, usize) -> Result<()>,
) -> Result<()> {
    present.clear();
    if r.peek() != Some(b'{') {
        return r.fail("expected an object");
    }
    r.expect(b'{')?;
    if r.eat(b'}') {
        return Ok(());
    }
    loop {
        let name = r.string()?;
        r.expect(b':')?;
        match table.column(&name) {
            Some(Column::Id) => {
                *id = r.id()?.ok_or_else(|| {
                    Error::BadInput(format!("{}: ID must be a positive integer", table.name))
                })?;
            }
            Some(Column::Field(i)) => {
                field(r, i)?;
                if !present.contains(&i) {
                    present.push(i);
                }
            }
            None => {
                return Err(Error::UnknownField {
                    table: table.name,
                    field: name.into_owned(),
                })
            }
        }
        if !r.more(b'}')? {
            return Ok(());
        }
    }
}

/// The text of a body, which JSON requires to be UTF-8.
fn body_text(body: &[u8]) -> Result<&str> {
    std::str::from_utf8(body).map_err(|e| {
        Error::BadInput(format!(
            "the JSON is not UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })
}

/// Reads a row of `table` from a body holding one JSON object: fields it
/// leaves out keep their zero value (see [`zero_value`]), and the fields it
/// names are returned beside the row, in the order first met.
pub fn read_row(table: &'static Table, body: &[u8]) -> Result<(OwnedRow, Vec<usize>)> {
    let mut r = Reader::new(body_text(body)?);
    let mut row = OwnedRow::zero(table);
    let mut present = Vec::with_capacity(table.fields.len());
    read_members(&mut r, table, &mut row.id, &mut present, |r, i| {
        row.values[i] = r.field(table, i)?;
        Ok(())
    })?;
    r.end()?;
    Ok((row, present))
}

/// Parses a list in either form (expanded array of objects, or compact
/// `fieldCount`/`values`), each row holding the fields the list names and zero
/// values elsewhere. Rows without an `ID` column get ID 0.
pub fn parse_list(table: &'static Table, body: &[u8]) -> Result<Vec<OwnedRow>> {
    let mut r = Reader::new(body_text(body)?);
    let rows = match r.peek() {
        Some(b'[') => {
            let mut rows = Vec::new();
            let mut present = Vec::with_capacity(table.fields.len());
            let mut more = r.open_array()?;
            while more {
                let mut row = OwnedRow::zero(table);
                read_members(&mut r, table, &mut row.id, &mut present, |r, i| {
                    row.values[i] = r.field(table, i)?;
                    Ok(())
                })?;
                rows.push(row);
                more = r.more(b']')?;
            }
            rows
        }
        Some(b'{') => compact(&mut r, table)?,
        _ => return r.fail("a list is an array or a compact object"),
    };
    r.end()?;
    Ok(rows)
}

/// The compact form, `{"fieldCount":N,"values":[N column names, then the
/// cells row after row],"rowCount":M}`; its members may come in any order.
fn compact(r: &mut Reader<'_>, table: &'static Table) -> Result<Vec<OwnedRow>> {
    let mut n: Option<usize> = None;
    let mut rows = None;
    let mut values_later = None;
    r.expect(b'{')?;
    let mut more = !r.eat(b'}');
    while more {
        let name = r.string()?;
        r.expect(b':')?;
        match (&*name, n) {
            ("fieldCount", _) => {
                let count = usize::try_from(r.unsigned()?).unwrap_or(usize::MAX);
                if count == 0 {
                    return Err(Error::BadInput("a compact list of 0 fields".into()));
                }
                n = Some(count);
            }
            // The usual order: the cells are read where they stand.
            ("values", Some(n)) => rows = Some(compact_values(r, table, n)?),
            ("values", None) => values_later = Some(r.raw()?),
            _ => {
                r.raw()?;
            }
        }
        more = r.more(b'}')?;
    }
    let n = n.ok_or_else(|| Error::BadInput("a compact list without fieldCount".into()))?;
    match (rows, values_later) {
        (Some(rows), _) => Ok(rows),
        (None, Some(raw)) => compact_values(&mut Reader::new(raw), table, n),
        (None, None) => Err(Error::BadInput("a compact list without values".into())),
    }
}

/// The `values` array of a compact list of `n` columns.
fn compact_values(r: &mut Reader<'_>, table: &'static Table, n: usize) -> Result<Vec<OwnedRow>> {
    let short = || Error::BadInput("a compact list of the wrong length".into());
    let mut cols = Vec::with_capacity(n.min(table.fields.len() + 1));
    let mut more = r.open_array()?;
    while cols.len() < n {
        if !more {
            return Err(short());
        }
        let name = r.string()?;
        cols.push(table.column(&name).ok_or_else(|| Error::UnknownField {
            table: table.name,
            field: name.into_owned(),
        })?);
        more = r.more(b']')?;
    }
    let mut rows = Vec::new();
    while more {
        let mut row = OwnedRow::zero(table);
        for (k, c) in cols.iter().enumerate() {
            if k > 0 && !r.more(b']')? {
                return Err(short());
            }
            match c {
                Column::Id => {
                    row.id = r.id()?.ok_or_else(|| {
                        Error::BadInput("a row's ID is not a positive integer".into())
                    })?
                }
                Column::Field(i) => row.values[*i] = r.field(table, *i)?,
            }
        }
        rows.push(row);
        more = r.more(b']')?;
    }
    Ok(rows)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn exact_amounts_agree_with_doubles() {
        for s in [
            "0",
            "1",
            "0.5",
            "12.25",
            "-0.01",
            "1234567.8901",
            "99999999999.9999",
            "3.10",
            "7.00000",
        ] {
            let c = exact_currency(s.as_bytes()).unwrap();
            let f: f64 = s.parse().unwrap();
            assert_eq!(Some(c), Currency::from_f64(f), "{s}");
            assert_eq!(c.to_f64(), f, "{s}");
        }
        // Fifteen digits fit a double, but not every one of them an amount:
        // these once wrapped around in the multiplication to 1/10,000.
        for s in ["999999999999999", "-922337203685478"] {
            assert_eq!(exact_currency(s.as_bytes()), None, "{s}");
        }
        for s in ["1.23456", "1e3", "1234567890123456", ".5", "5.", "-"] {
            assert_eq!(exact_currency(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn common_shapes_agree_with_the_general_path() -> Result<()> {
        use crate::schema::Field;
        static T: Table = Table {
            name: "T",
            fields: &[
                Field::new("N", FieldKind::I64),
                Field::new("A", FieldKind::Currency),
                Field::new("D", FieldKind::Date),
                Field::new("T", FieldKind::DateTime),
            ],
        };
        let cases: [(usize, &[&str]); 4] = [
            (
                0,
                &[
                    "0",
                    "17",
                    "-5",
                    "9223372036854775807",
                    "9223372036854775808",
                    "1.5",
                    "1e3",
                    "01",
                    "-0",
                    "-",
                ],
            ),
            (
                1,
                &[
                    "0",
                    "12.25",
                    "-0.01",
                    "3.10",
                    "1.23456",
                    "1e3",
                    "-0.5",
                    "00.5",
                    "5.",
                    "99999999999.9999",
                    "7.00000",
                    "1.000001",
                    "922337203685477",
                    "922337203685478",
                    "999999999999999",
                    "-999999999999999",
                    "1234567890123456",
                ],
            ),
            (
                2,
                &[
                    r#""2024-02-29""#,
                    r#""2023-02-29""#,
                    r#""2024-13-01""#,
                    r#""0000-01-01""#,
                    r#""2024-1-01""#,
                    r#""""#,
                    r#""2024-02-29x""#,
                ],
            ),
            (3, &[r#""2024-01-02T03:04:05""#, r#""2024-01-02T03:04:06""#]),
        ];
        for (idx, texts) in cases {
            for text in texts {
                for tail in [",", "]", " ,", ""] {
                    let body = format!("{text}{tail}");
                    let mut fast = Reader::new(&body);
                    let mut slow = Reader::new(&body);
                    // The date-time case: the reader just met this one.
                    fast.last_datetime = Some(("2024-01-02T03:04:05", Utc::now()));
                    slow.last_datetime = fast.last_datetime;
                    let got = fast.common(T.fields[idx].kind);
                    let want = slow.field(&T, idx);
                    if let Some(v) = got {
                        assert_eq!(Some(&v), want.as_ref().ok(), "{body}");
                        assert_eq!(fast.pos, slow.pos, "{body}");
                    } else {
                        assert_eq!(fast.pos, 0, "{body}");
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn strings_numbers_and_nesting() {
        let mut r = Reader::new(r#" "a\"b\u00e9\ud83d\ude00" "plain" -12.5e3 [1,{"x":[]}] "#);
        assert_eq!(r.string().unwrap(), "a\"bé😀");
        assert!(matches!(r.string().unwrap(), Cow::Borrowed("plain")));
        assert_eq!(r.number().unwrap(), "-12.5e3");
        assert_eq!(r.raw().unwrap(), r#"[1,{"x":[]}]"#);
        r.end().unwrap();
        for bad in [
            r#""\ud800""#,
            r#""\x""#,
            "\"a\u{1}\"",
            r#""open"#,
            "01",
            "1.",
            "-",
            "1e",
            "[1,]",
            "{\"a\"}",
            "tru",
            "[1 2]",
        ] {
            let mut r = Reader::new(bad);
            assert!(r.raw().and_then(|_| r.end()).is_err(), "{bad}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(Reader::new(&deep).raw().is_err());
    }
}
