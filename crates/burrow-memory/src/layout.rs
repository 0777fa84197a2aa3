//! The row encoding: one byte string per row (kept in a shared chunk, see
//! `arena`), values read in place.
//!
//! ```text
//! [null bitmap: ceil(n/8) bytes, bit i set = field i is NULL]
//! [fixed part: each fixed-width field in field order, little-endian]
//! [var table: for each text/blob field in field order, u32 end offset into the var data]
//! [var data: the text/blob bytes, concatenated]
//! ```
//!
//! Widths: `i64`/reference/currency 8, `i32`/`u32` 4, `f64` 8 (IEEE bits), bool 1,
//! date 4 (`i32` days from 0001-01-01 CE, day 1 = that date), date-time 12
//! (`i64` Unix seconds, `u32` nanoseconds). A NULL fixed field keeps its bytes,
//! zeroed. The same bytes are the rows of the binary file (docs/memory-format.md),
//! so saving a table copies them and loading one validates them.

use std::borrow::Cow;

use burrow_core::chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use burrow_core::datetime::{parse_date, parse_datetime};
use burrow_core::{Currency, Error, FieldKind, Result, Row, ValueRef};

/// How one field is stored in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    I64,
    I32,
    U32,
    F64,
    Bool,
    Currency,
    Date,
    DateTime,
    Text,
    Blob,
}

impl Enc {
    /// The encoding of a field kind, or `None` for a kind this engine does not know.
    pub fn of(kind: FieldKind) -> Option<Enc> {
        Some(match kind {
            FieldKind::I32 => Enc::I32,
            FieldKind::U32 => Enc::U32,
            FieldKind::I64 | FieldKind::Reference(_) => Enc::I64,
            FieldKind::F64 => Enc::F64,
            FieldKind::Bool => Enc::Bool,
            FieldKind::Currency => Enc::Currency,
            FieldKind::Text | FieldKind::Json => Enc::Text,
            FieldKind::Blob => Enc::Blob,
            FieldKind::Date => Enc::Date,
            FieldKind::DateTime => Enc::DateTime,
            _ => return None,
        })
    }

    /// Bytes in the fixed part; 0 for the variable-length encodings.
    pub fn width(self) -> usize {
        match self {
            Enc::I64 | Enc::F64 | Enc::Currency => 8,
            Enc::I32 | Enc::U32 | Enc::Date => 4,
            Enc::Bool => 1,
            Enc::DateTime => 12,
            Enc::Text | Enc::Blob => 0,
        }
    }

    fn is_var(self) -> bool {
        matches!(self, Enc::Text | Enc::Blob)
    }
}

/// One field of a layout.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The field's name (for messages and the file).
    pub name: String,
    /// The field's kind as declared (or as read from a file).
    pub kind: FieldKind,
    /// The reference target, for a reference read from a file.
    pub target: Option<String>,
    pub enc: Enc,
    pub nullable: bool,
    /// Offset in the row for a fixed field; index in the var table for a var one.
    at: usize,
}

/// Where each field of a table lives in its rows.
#[derive(Debug, Clone)]
pub struct Layout {
    pub table: String,
    pub slots: Vec<Slot>,
    null_bytes: usize,
    /// Start of the var table.
    var_table: usize,
    /// Start of the var data: the length of a row without text or blob.
    pub var_base: usize,
}

/// A field as a layout is built from it.
pub struct SlotSpec {
    pub name: String,
    pub kind: FieldKind,
    pub target: Option<String>,
    pub nullable: bool,
}

impl Layout {
    /// The layout of these fields, in this order.
    pub fn new(table: &str, specs: Vec<SlotSpec>) -> Result<Layout> {
        let n = specs.len();
        let null_bytes = n.div_ceil(8);
        let mut at = null_bytes;
        let mut nvar = 0;
        let mut slots = Vec::with_capacity(n);
        for s in specs {
            let enc = Enc::of(s.kind).ok_or_else(|| {
                Error::Unsupported(format!(
                    "field {table}.{} of kind {} is unsupported by the memory engine",
                    s.name,
                    s.kind.name()
                ))
            })?;
            let pos = if enc.is_var() {
                nvar += 1;
                nvar - 1
            } else {
                at += enc.width();
                at - enc.width()
            };
            slots.push(Slot {
                name: s.name,
                kind: s.kind,
                target: s.target,
                enc,
                nullable: s.nullable,
                at: pos,
            });
        }
        Ok(Layout {
            table: table.to_owned(),
            slots,
            null_bytes,
            var_table: at,
            var_base: at + 4 * nvar,
        })
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether field `i` of `row` is NULL.
    #[inline]
    pub fn is_null(&self, row: &[u8], i: usize) -> bool {
        row[i >> 3] & (1 << (i & 7)) != 0
    }

    /// The stored bytes of field `i` (fixed width, or the text/blob bytes), or
    /// `None` when NULL: equal values have equal bytes, so indexes hash them.
    #[inline]
    pub fn key<'r>(&self, row: &'r [u8], i: usize) -> Option<&'r [u8]> {
        if self.is_null(row, i) {
            return None;
        }
        let s = &self.slots[i];
        Some(if s.enc.is_var() {
            self.var_range(row, s.at)
        } else {
            &row[s.at..s.at + s.enc.width()]
        })
    }

    #[inline]
    fn var_range<'r>(&self, row: &'r [u8], k: usize) -> &'r [u8] {
        let end_at = self.var_table + 4 * k;
        let start = if k == 0 {
            0
        } else {
            u32::from_le_bytes(arr(row, end_at - 4)) as usize
        };
        let end = u32::from_le_bytes(arr(row, end_at)) as usize;
        &row[self.var_base + start..self.var_base + end]
    }

    /// Field `i` as text, when it holds text ([`Row::text`]); `None` when
    /// NULL or of another kind.
    #[inline]
    pub fn text<'r>(&self, row: &'r [u8], i: usize) -> Result<Option<&'r str>> {
        match self.held(row, i, Enc::Text) {
            Some(at) => self.str_at(row, i, at).map(Some),
            None => Ok(None),
        }
    }

    /// Where field `i` is stored, when it is stored as `enc` and not NULL:
    /// the test each typed read makes before it decodes.
    #[inline]
    fn held(&self, row: &[u8], i: usize, enc: Enc) -> Option<usize> {
        match self.slots.get(i) {
            Some(s) if s.enc == enc && !self.is_null(row, i) => Some(s.at),
            _ => None,
        }
    }

    /// Field `i` as an integer, when it holds one ([`Row::int`]; a currency
    /// as its scaled integer, as SQLite stores it); `None` when NULL or of
    /// another kind.
    #[inline]
    pub fn int(&self, row: &[u8], i: usize) -> Option<i64> {
        let s = self.slots.get(i)?;
        if self.is_null(row, i) {
            return None;
        }
        let at = s.at;
        match s.enc {
            Enc::I64 | Enc::Currency => Some(i64::from_le_bytes(arr(row, at))),
            Enc::I32 => Some(i64::from(i32::from_le_bytes(arr(row, at)))),
            Enc::U32 => Some(i64::from(u32::from_le_bytes(arr(row, at)))),
            _ => None,
        }
    }

    /// The text of field `i`, variable slot `k`, UTF-8 checked.
    #[inline]
    fn str_at<'r>(&self, row: &'r [u8], i: usize, k: usize) -> Result<&'r str> {
        burrow_core::driver::utf8(self.var_range(row, k))
            .map_err(|_| self.corrupt(i, "invalid UTF-8"))
    }

    /// Reads field `i` of a row this layout encoded (or validated).
    #[inline]
    pub fn get<'r>(&self, row: &'r [u8], i: usize) -> Result<ValueRef<'r>> {
        let s = self
            .slots
            .get(i)
            .ok_or_else(|| Error::BadInput(format!("{} has no field #{i}", self.table)))?;
        if self.is_null(row, i) {
            return Ok(ValueRef::Null);
        }
        let at = s.at;
        Ok(match s.enc {
            Enc::I64 => ValueRef::Int(i64::from_le_bytes(arr(row, at))),
            Enc::I32 => ValueRef::Int(i64::from(i32::from_le_bytes(arr(row, at)))),
            Enc::U32 => ValueRef::Int(i64::from(u32::from_le_bytes(arr(row, at)))),
            Enc::F64 => ValueRef::Real(f64::from_le_bytes(arr(row, at))),
            Enc::Bool => ValueRef::Bool(row[at] != 0),
            Enc::Currency => {
                ValueRef::Currency(Currency::from_scaled(i64::from_le_bytes(arr(row, at))))
            }
            Enc::Date => ValueRef::Date(self.date_at(row, i, at)?),
            Enc::DateTime => ValueRef::DateTime(self.datetime_at(row, i, at)?),
            Enc::Text => ValueRef::Text(Cow::Borrowed(self.str_at(row, i, at)?)),
            Enc::Blob => ValueRef::Blob(self.var_range(row, at)),
        })
    }

    /// Field `i` as a date, when it holds one ([`Row::date`]); `None` when
    /// NULL or of another kind.
    #[inline]
    pub fn date(&self, row: &[u8], i: usize) -> Result<Option<NaiveDate>> {
        match self.held(row, i, Enc::Date) {
            Some(at) => self.date_at(row, i, at).map(Some),
            None => Ok(None),
        }
    }

    /// Field `i` as a date-time, when it holds one ([`Row::datetime`]);
    /// `None` when NULL or of another kind.
    #[inline]
    pub fn datetime(&self, row: &[u8], i: usize) -> Result<Option<DateTime<Utc>>> {
        match self.held(row, i, Enc::DateTime) {
            Some(at) => self.datetime_at(row, i, at).map(Some),
            None => Ok(None),
        }
    }

    /// The date of field `i`, stored at `at`.
    #[inline]
    fn date_at(&self, row: &[u8], i: usize, at: usize) -> Result<NaiveDate> {
        date(i32::from_le_bytes(arr(row, at))).ok_or_else(|| self.corrupt(i, "date out of range"))
    }

    /// The date-time of field `i`, stored at `at`.
    #[inline]
    fn datetime_at(&self, row: &[u8], i: usize, at: usize) -> Result<DateTime<Utc>> {
        DateTime::from_timestamp(
            i64::from_le_bytes(arr(row, at)),
            u32::from_le_bytes(arr(row, at + 8)),
        )
        .ok_or_else(|| self.corrupt(i, "date-time out of range"))
    }

    #[cold]
    fn corrupt(&self, i: usize, what: &str) -> Error {
        Error::engine(
            crate::ENGINE,
            format!(
                "{}.{}: stored value is corrupt ({what})",
                self.table, self.slots[i].name
            ),
        )
    }

    /// Encodes a row into `out` (cleared first), field `i` being `value(i)`.
    pub fn encode<'v>(
        &self,
        out: &mut Vec<u8>,
        mut value: impl FnMut(usize) -> Result<ValueRef<'v>>,
    ) -> Result<()> {
        out.clear();
        out.resize(self.var_base, 0);
        for (i, s) in self.slots.iter().enumerate() {
            let v = value(i)?;
            if !self.put_natural(out, s, &v) {
                self.put(out, i, s, &v)?;
            }
        }
        Ok(())
    }

    /// Stores `v` when it has the field's own type and needs no check that can
    /// fail, which is nearly every value a record gives; returns false, having
    /// written nothing, for anything else (NULL, NaN, conversions, errors), left
    /// to [`Layout::put`]. Rows are encoded once per write, so the common case
    /// skips `put`'s per-value checks.
    #[inline(always)]
    fn put_natural(&self, out: &mut Vec<u8>, s: &Slot, v: &ValueRef<'_>) -> bool {
        let at = s.at;
        match (s.enc, v) {
            (Enc::I64, ValueRef::Int(n)) => out[at..at + 8].copy_from_slice(&n.to_le_bytes()),
            (Enc::Currency, ValueRef::Currency(c)) => {
                out[at..at + 8].copy_from_slice(&c.scaled().to_le_bytes())
            }
            (Enc::F64, ValueRef::Real(f)) if !f.is_nan() => {
                out[at..at + 8].copy_from_slice(&canonical_f64(*f).to_le_bytes())
            }
            (Enc::Bool, ValueRef::Bool(b)) => out[at] = u8::from(*b),
            (Enc::Date, ValueRef::Date(d)) => {
                out[at..at + 4].copy_from_slice(&days(*d).to_le_bytes())
            }
            (Enc::DateTime, ValueRef::DateTime(t)) => {
                out[at..at + 8].copy_from_slice(&t.timestamp().to_le_bytes());
                out[at + 8..at + 12].copy_from_slice(&t.timestamp_subsec_nanos().to_le_bytes());
            }
            (Enc::Text, ValueRef::Text(t)) => return self.put_var(out, at, t.as_bytes()),
            (Enc::Blob, ValueRef::Blob(b)) => return self.put_var(out, at, b),
            _ => return false,
        }
        true
    }

    /// Appends the bytes of var field `k` unless the row would pass 4 GiB of
    /// var data (then `put` reports it).
    #[inline(always)]
    fn put_var(&self, out: &mut Vec<u8>, k: usize, bytes: &[u8]) -> bool {
        let Ok(end) = u32::try_from(out.len() - self.var_base + bytes.len()) else {
            return false;
        };
        out.extend_from_slice(bytes);
        let p = self.var_table + 4 * k;
        out[p..p + 4].copy_from_slice(&end.to_le_bytes());
        true
    }

    fn put(&self, out: &mut Vec<u8>, i: usize, s: &Slot, v: &ValueRef<'_>) -> Result<()> {
        let at = s.at;
        let mismatch = || Error::TypeMismatch {
            at: format!("{}.{}", self.table, s.name),
            expected: s.kind.name(),
            found: v.type_name().to_owned(),
        };
        if matches!(v, ValueRef::Real(f) if f.is_nan()) {
            // SQLite would store NaN as NULL; both engines refuse it rather than lose it.
            return Err(Error::BadInput(format!(
                "{}.{}: NaN cannot be stored (as in SQLite, which has no NaN)",
                self.table, s.name
            )));
        }
        if matches!(v, ValueRef::Null) {
            if !s.nullable {
                return Err(Error::BadInput(format!(
                    "{t}: NOT NULL constraint failed: {t}.{f}",
                    t = self.table,
                    f = s.name
                )));
            }
            out[i >> 3] |= 1 << (i & 7);
            if s.enc.is_var() {
                self.end_var(out, at, &[])?;
            }
            return Ok(());
        }
        match s.enc {
            Enc::I64 | Enc::I32 | Enc::U32 => {
                let n = match v {
                    ValueRef::Int(n) => *n,
                    ValueRef::Bool(b) => i64::from(*b),
                    _ => return Err(mismatch()),
                };
                let range = |ok: bool| {
                    if ok {
                        Ok(())
                    } else {
                        Err(Error::TypeMismatch {
                            at: format!("{}.{}", self.table, s.name),
                            expected: s.kind.name(),
                            found: format!("{n}, out of range"),
                        })
                    }
                };
                match s.enc {
                    Enc::I64 => out[at..at + 8].copy_from_slice(&n.to_le_bytes()),
                    Enc::I32 => {
                        let x = i32::try_from(n);
                        range(x.is_ok())?;
                        out[at..at + 4].copy_from_slice(&x.unwrap_or(0).to_le_bytes());
                    }
                    _ => {
                        let x = u32::try_from(n);
                        range(x.is_ok())?;
                        out[at..at + 4].copy_from_slice(&x.unwrap_or(0).to_le_bytes());
                    }
                }
            }
            Enc::F64 => {
                let f = match v {
                    ValueRef::Real(f) => *f,
                    ValueRef::Int(n) => *n as f64,
                    ValueRef::Currency(c) => c.to_f64(),
                    _ => return Err(mismatch()),
                };
                out[at..at + 8].copy_from_slice(&canonical_f64(f).to_le_bytes());
            }
            Enc::Bool => {
                out[at] = match v {
                    ValueRef::Bool(b) => u8::from(*b),
                    ValueRef::Int(n @ (0 | 1)) => *n as u8,
                    _ => return Err(mismatch()),
                }
            }
            Enc::Currency => {
                let c = match v {
                    ValueRef::Currency(c) => *c,
                    // Engines store the scaled integer, as SQLite does.
                    ValueRef::Int(n) => Currency::from_scaled(*n),
                    ValueRef::Text(t) => t.parse().map_err(|_| mismatch())?,
                    _ => return Err(mismatch()),
                };
                out[at..at + 8].copy_from_slice(&c.scaled().to_le_bytes());
            }
            Enc::Date => {
                let d = match v {
                    ValueRef::Date(d) => *d,
                    ValueRef::Text(t) => parse_date(t).ok_or_else(mismatch)?,
                    _ => return Err(mismatch()),
                };
                out[at..at + 4].copy_from_slice(&days(d).to_le_bytes());
            }
            Enc::DateTime => {
                let t = match v {
                    ValueRef::DateTime(t) => *t,
                    ValueRef::Date(d) => d.and_time(NaiveTime::MIN).and_utc(),
                    ValueRef::Text(t) => parse_datetime(t).ok_or_else(mismatch)?,
                    _ => return Err(mismatch()),
                };
                out[at..at + 8].copy_from_slice(&t.timestamp().to_le_bytes());
                out[at + 8..at + 12].copy_from_slice(&t.timestamp_subsec_nanos().to_le_bytes());
            }
            Enc::Text | Enc::Blob => {
                let bytes = match (s.enc, v) {
                    (Enc::Text, ValueRef::Text(t)) => t.as_bytes(),
                    (Enc::Blob, ValueRef::Blob(b)) => b,
                    _ => return Err(mismatch()),
                };
                self.end_var(out, at, bytes)?;
            }
        }
        Ok(())
    }

    /// [`Layout::put_var`], or the error of a row past 4 GiB of var data.
    fn end_var(&self, out: &mut Vec<u8>, k: usize, bytes: &[u8]) -> Result<()> {
        if self.put_var(out, k, bytes) {
            return Ok(());
        }
        Err(Error::BadInput(format!(
            "a row of {} exceeds 4 GiB of text and blobs",
            self.table
        )))
    }

    /// Checks that `row` is a well-formed row of this layout (lengths, offsets,
    /// UTF-8, dates, booleans, NULLs only where allowed), or says what is wrong.
    pub fn validate(&self, row: &[u8]) -> std::result::Result<(), String> {
        if row.len() < self.var_base {
            return Err(format!(
                "row of {} bytes, shorter than the {} fixed bytes",
                row.len(),
                self.var_base
            ));
        }
        let n = self.slots.len();
        for i in n..self.null_bytes * 8 {
            if self.is_null(row, i) {
                return Err("NULL bit set past the last field".into());
            }
        }
        let mut prev = 0usize;
        for (i, s) in self.slots.iter().enumerate() {
            if s.enc.is_var() {
                let end = u32::from_le_bytes(arr(row, self.var_table + 4 * s.at)) as usize;
                if end < prev || self.var_base + end > row.len() {
                    return Err(format!("field {}: bad text/blob offset {end}", s.name));
                }
                prev = end;
            }
            if self.is_null(row, i) && !s.nullable {
                return Err(format!("field {}: NULL in a NOT NULL field", s.name));
            }
        }
        if self.var_base + prev != row.len() {
            return Err(format!(
                "row of {} bytes, but its fields end at {}",
                row.len(),
                self.var_base + prev
            ));
        }
        for (i, s) in self.slots.iter().enumerate() {
            if self.is_null(row, i) {
                continue;
            }
            if s.enc == Enc::Bool && row[s.at] > 1 {
                return Err(format!("field {}: boolean byte {}", s.name, row[s.at]));
            }
            if s.enc == Enc::F64 && f64::from_le_bytes(arr(row, s.at)).is_nan() {
                return Err(format!("field {}: NaN, which is never stored", s.name));
            }
            self.get(row, i).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// -0.0 is stored as 0.0 (SQLite reads an integral float back as such), so that
/// equal floats have equal bytes.
fn canonical_f64(f: f64) -> f64 {
    if f == 0.0 {
        0.0
    } else {
        f
    }
}

/// Days from 0001-01-01 (day 1) as chrono counts them.
fn days(d: NaiveDate) -> i32 {
    use burrow_core::chrono::Datelike;
    d.num_days_from_ce()
}

fn date(days: i32) -> Option<NaiveDate> {
    NaiveDate::from_num_days_from_ce_opt(days)
}

#[inline]
fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// The stored bytes a parameter would have in field `i`, when it has the field's
/// natural type (what the WHERE parser coerces parameters to); `None` otherwise,
/// and for NULL, where an index cannot answer and the caller scans.
pub fn param_key(layout: &Layout, i: usize, v: &ValueRef<'_>, buf: &mut Vec<u8>) -> Option<()> {
    let s = &layout.slots[i];
    buf.clear();
    match (s.enc, v) {
        (Enc::I64, ValueRef::Int(n)) => buf.extend_from_slice(&n.to_le_bytes()),
        (Enc::I32, ValueRef::Int(n)) => {
            buf.extend_from_slice(&i32::try_from(*n).ok()?.to_le_bytes())
        }
        (Enc::U32, ValueRef::Int(n)) => {
            buf.extend_from_slice(&u32::try_from(*n).ok()?.to_le_bytes())
        }
        (Enc::F64, ValueRef::Real(f)) if !f.is_nan() => {
            buf.extend_from_slice(&canonical_f64(*f).to_le_bytes())
        }
        (Enc::Bool, ValueRef::Bool(b)) => buf.push(u8::from(*b)),
        (Enc::Currency, ValueRef::Currency(c)) => buf.extend_from_slice(&c.scaled().to_le_bytes()),
        (Enc::Date, ValueRef::Date(d)) => buf.extend_from_slice(&days(*d).to_le_bytes()),
        (Enc::DateTime, ValueRef::DateTime(t)) => {
            buf.extend_from_slice(&t.timestamp().to_le_bytes());
            buf.extend_from_slice(&t.timestamp_subsec_nanos().to_le_bytes());
        }
        (Enc::Text, ValueRef::Text(t)) => buf.extend_from_slice(t.as_bytes()),
        (Enc::Blob, ValueRef::Blob(b)) => buf.extend_from_slice(b),
        _ => return None,
    }
    Some(())
}

impl Layout {
    /// The value of field `i` in a row written through a version of the record
    /// that lacks it: NULL, or the type's zero value when NOT NULL.
    pub fn missing(&self, i: usize) -> ValueRef<'static> {
        let s = &self.slots[i];
        if s.nullable {
            ValueRef::Null
        } else {
            default_value(s.kind)
        }
    }
}

/// The value a NOT NULL field gets in rows stored before it existed (as SQLite's
/// `ADD COLUMN … DEFAULT`).
pub fn default_value(kind: FieldKind) -> ValueRef<'static> {
    match kind {
        FieldKind::F64 => ValueRef::Real(0.0),
        FieldKind::Bool => ValueRef::Bool(false),
        FieldKind::Currency => ValueRef::Currency(Currency::ZERO),
        FieldKind::Text => ValueRef::Text(Cow::Borrowed("")),
        FieldKind::Json => ValueRef::Text(Cow::Borrowed("null")),
        FieldKind::Blob => ValueRef::Blob(&[]),
        FieldKind::Date => ValueRef::Date(NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default()),
        FieldKind::DateTime => ValueRef::DateTime(DateTime::UNIX_EPOCH),
        _ => ValueRef::Int(0),
    }
}

/// A stored row seen through the [`Row`] trait, by a version of the record
/// whose field `i` is slot `map[i]` (slot `i` without a map).
pub struct MemRow<'a> {
    pub id: i64,
    pub data: &'a [u8],
    pub layout: &'a Layout,
    pub map: Option<&'a [usize]>,
}

impl Row for MemRow<'_> {
    #[inline]
    fn id(&self) -> Result<i64> {
        Ok(self.id)
    }

    #[inline]
    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        self.layout.get(self.data, self.slot(idx)?)
    }

    // Typed: a record's text and integer fields are read without a
    // `ValueRef` made and matched on the way. Measured on the benchmark's
    // rows: a whole-table read into records a tenth faster, one through
    // SQLite's virtual table a seventh.
    #[inline]
    fn typed(&self) -> bool {
        true
    }

    #[inline]
    fn text(&self, idx: usize) -> Result<Option<&str>> {
        self.layout.text(self.data, self.slot(idx)?)
    }

    #[inline]
    fn int(&self, idx: usize) -> Result<Option<i64>> {
        Ok(self.layout.int(self.data, self.slot(idx)?))
    }

    // Dates and date-times read without a `ValueRef` made and matched: they
    // were over a third of a whole-table read into records.
    #[inline]
    fn date(&self, idx: usize) -> Result<Option<NaiveDate>> {
        self.layout.date(self.data, self.slot(idx)?)
    }

    #[inline]
    fn datetime(&self, idx: usize) -> Result<Option<DateTime<Utc>>> {
        self.layout.datetime(self.data, self.slot(idx)?)
    }
}

impl MemRow<'_> {
    /// The slot of field `idx`.
    #[inline]
    fn slot(&self, idx: usize) -> Result<usize> {
        match self.map {
            None => Ok(idx),
            Some(m) => m.get(idx).copied().ok_or_else(|| {
                Error::BadInput(format!("{} has no field #{idx}", self.layout.table))
            }),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn layout() -> Layout {
        let spec = |name: &str, kind, nullable| SlotSpec {
            name: name.into(),
            kind,
            target: None,
            nullable,
        };
        Layout::new(
            "T",
            vec![
                spec("A", FieldKind::Text, true),
                spec("B", FieldKind::I32, false),
                spec("C", FieldKind::Blob, false),
                spec("D", FieldKind::DateTime, true),
                spec("E", FieldKind::F64, true),
                spec("F", FieldKind::Bool, false),
                spec("G", FieldKind::Date, false),
                spec("H", FieldKind::Json, false),
                spec("I", FieldKind::Currency, false),
            ],
        )
        .unwrap()
    }

    #[test]
    fn encodes_decodes_and_validates() {
        let l = layout();
        let t = DateTime::from_timestamp(1_700_000_000, 5).unwrap();
        let d = NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
        let vals = [
            ValueRef::Null,
            ValueRef::Int(-7),
            ValueRef::Blob(&[1, 2, 3]),
            ValueRef::DateTime(t),
            ValueRef::Real(-0.0),
            ValueRef::Bool(true),
            ValueRef::Text("2024-02-29".into()),
            ValueRef::Text("{}".into()),
            ValueRef::Int(12_345),
        ];
        let mut row = Vec::new();
        l.encode(&mut row, |i| Ok(vals[i].clone())).unwrap();
        l.validate(&row).unwrap();
        assert_eq!(l.get(&row, 0).unwrap(), ValueRef::Null);
        assert_eq!(l.get(&row, 1).unwrap(), ValueRef::Int(-7));
        assert_eq!(l.get(&row, 2).unwrap(), ValueRef::Blob(&[1, 2, 3]));
        assert_eq!(l.get(&row, 3).unwrap(), ValueRef::DateTime(t));
        assert_eq!(l.get(&row, 4).unwrap(), ValueRef::Real(0.0));
        assert!(l
            .get(&row, 4)
            .map(|v| matches!(v, ValueRef::Real(f) if f.is_sign_positive()))
            .unwrap());
        assert_eq!(l.get(&row, 5).unwrap(), ValueRef::Bool(true));
        assert_eq!(l.get(&row, 6).unwrap(), ValueRef::Date(d));
        assert_eq!(l.get(&row, 7).unwrap(), ValueRef::Text("{}".into()));
        assert_eq!(
            l.get(&row, 8).unwrap(),
            ValueRef::Currency(Currency::from_scaled(12_345))
        );
        assert!(l.get(&row, 9).is_err());
        // Equal values have equal key bytes; NULL has none.
        assert_eq!(l.key(&row, 0), None);
        assert_eq!(l.key(&row, 1), Some(&(-7i32).to_le_bytes()[..]));
        // Damage is caught.
        assert!(l.validate(&row[..row.len() - 1]).is_err());
        let mut bad = row.clone();
        bad[0] |= 2; // B is NOT NULL
        assert!(l.validate(&bad).is_err());
        let mut longer = row.clone();
        longer.push(0);
        assert!(l.validate(&longer).is_err());
    }

    #[test]
    fn typed_reads_agree_with_get() {
        let l = layout();
        let t = DateTime::from_timestamp(1_700_000_000, 5).unwrap();
        let vals = [
            ValueRef::Text("héllo".into()),
            ValueRef::Int(-7),
            ValueRef::Blob(b"bytes"),
            ValueRef::DateTime(t),
            ValueRef::Real(1.5),
            ValueRef::Bool(true),
            ValueRef::Text("2024-02-29".into()),
            ValueRef::Text("[1]".into()),
            ValueRef::Int(-12_345),
        ];
        let mut row = Vec::new();
        l.encode(&mut row, |i| Ok(vals[i].clone())).unwrap();
        let r = MemRow {
            id: 9,
            data: &row,
            layout: &l,
            map: None,
        };
        assert!(r.typed());
        for i in 0..9 {
            // Where a typed read answers, it is what `get` says.
            match (r.text(i).unwrap(), r.int(i).unwrap(), r.get(i).unwrap()) {
                (Some(s), None, ValueRef::Text(g)) => assert_eq!(s, g),
                (None, Some(n), ValueRef::Int(g)) => assert_eq!(n, g),
                (None, Some(n), ValueRef::Currency(c)) => assert_eq!(n, c.scaled()),
                (None, None, v) => assert!(
                    !matches!(
                        v,
                        ValueRef::Text(_) | ValueRef::Int(_) | ValueRef::Currency(_)
                    ),
                    "field {i}: {v:?} has no typed read"
                ),
                other => panic!("field {i}: {other:?}"),
            }
        }
        for i in 0..9 {
            // The same for the dates and date-times read as such.
            match (
                r.date(i).unwrap(),
                r.datetime(i).unwrap(),
                r.get(i).unwrap(),
            ) {
                (Some(d), None, ValueRef::Date(g)) => assert_eq!(d, g),
                (None, Some(t), ValueRef::DateTime(g)) => assert_eq!(t, g),
                (None, None, v) => assert!(
                    !matches!(v, ValueRef::Date(_) | ValueRef::DateTime(_)),
                    "field {i}: {v:?} has no typed read"
                ),
                other => panic!("field {i}: {other:?}"),
            }
        }
        assert_eq!(r.text(0).unwrap(), Some("héllo"));
        assert_eq!(r.int(1).unwrap(), Some(-7));
        assert_eq!(r.int(8).unwrap(), Some(-12_345));
        assert_eq!(r.datetime(3).unwrap(), Some(t));
        assert_eq!(
            r.date(6).unwrap(),
            NaiveDate::from_ymd_opt(2024, 2, 29),
            "a date given as text is kept as a date"
        );
        // A NULL has none: the caller's fallback, `get`, says NULL.
        let mut nulls = Vec::new();
        l.encode(&mut nulls, |i| {
            Ok(if i == 0 || i == 3 {
                ValueRef::Null
            } else {
                vals[i].clone()
            })
        })
        .unwrap();
        let n = MemRow {
            id: 9,
            data: &nulls,
            layout: &l,
            map: None,
        };
        assert_eq!(n.text(0).unwrap(), None);
        assert_eq!(n.get(0).unwrap(), ValueRef::Null);
        assert_eq!(n.datetime(3).unwrap(), None);
        assert_eq!(n.get(3).unwrap(), ValueRef::Null);
        // Through a version's map, field 0 is slot 8 and field 1 slot 0;
        // a field the map lacks is an error, as with `get`.
        let m = MemRow {
            id: 9,
            data: &row,
            layout: &l,
            map: Some(&[8, 0]),
        };
        assert_eq!(m.int(0).unwrap(), Some(-12_345));
        assert_eq!(m.text(1).unwrap(), Some("héllo"));
        assert!(m.int(2).is_err() && m.text(2).is_err() && m.get(2).is_err());
        assert!(m.date(2).is_err() && m.datetime(2).is_err());
        let dm = MemRow {
            id: 9,
            data: &row,
            layout: &l,
            map: Some(&[6, 3]),
        };
        assert_eq!(dm.date(0).unwrap(), NaiveDate::from_ymd_opt(2024, 2, 29));
        assert_eq!(dm.datetime(1).unwrap(), Some(t));
        assert_eq!((dm.datetime(0).unwrap(), dm.date(1).unwrap()), (None, None));
        // Damaged text is an error, not a wrong answer.
        let at = l.var_base;
        let mut bad = row.clone();
        bad[at] = 0xFF;
        let b = MemRow {
            id: 9,
            data: &bad,
            layout: &l,
            map: None,
        };
        assert!(b.text(0).is_err() && b.get(0).is_err());
        // So is a date-time out of chrono's range (field D's seconds set to
        // the largest).
        let d_at = l.slots[3].at;
        let mut far = row.clone();
        far[d_at..d_at + 8].copy_from_slice(&i64::MAX.to_le_bytes());
        let f = MemRow {
            id: 9,
            data: &far,
            layout: &l,
            map: None,
        };
        assert!(f.get(3).is_err());
        let e = f.datetime(3).unwrap_err().to_string();
        assert!(
            e.contains("T.D") && e.contains("date-time out of range"),
            "{e}"
        );
    }

    #[test]
    fn refuses_wrong_types_nulls_and_ranges() {
        let l = layout();
        let mut row = Vec::new();
        let base = |i: usize| -> ValueRef<'static> {
            match i {
                1 | 8 => ValueRef::Int(0),
                2 => ValueRef::Blob(&[]),
                5 => ValueRef::Bool(false),
                6 => ValueRef::Text("2020-01-01".into()),
                7 => ValueRef::Text("null".into()),
                _ => ValueRef::Null,
            }
        };
        l.encode(&mut row, |i| Ok(base(i))).unwrap();
        for (field, v) in [
            (1, ValueRef::Null),
            (1, ValueRef::Int(1 << 40)),
            (1, ValueRef::Text("1".into())),
            (2, ValueRef::Text("x".into())),
            (5, ValueRef::Int(2)),
            (6, ValueRef::Text("2020-13-01".into())),
            (4, ValueRef::Text("1.5".into())),
            (8, ValueRef::Real(1.5)),
        ] {
            let r = l.encode(&mut row, |i| {
                Ok(if i == field { v.clone() } else { base(i) })
            });
            assert!(r.is_err(), "field {field} accepted {v:?}");
        }
        // NaN is refused (SQLite would make it NULL), nullable field or not.
        let e = l
            .encode(&mut row, |i| {
                Ok(if i == 4 {
                    ValueRef::Real(f64::NAN)
                } else {
                    base(i)
                })
            })
            .unwrap_err();
        assert!(matches!(e, Error::BadInput(_)), "{e}");
        assert!(e.to_string().contains("T.E: NaN cannot be stored"), "{e}");
        // Nor is it accepted from a file.
        l.encode(&mut row, |i| {
            Ok(if i == 4 { ValueRef::Real(1.5) } else { base(i) })
        })
        .unwrap();
        let at = l.slots[4].at;
        row[at..at + 8].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(l.validate(&row).unwrap_err().contains("NaN"));
    }
}
