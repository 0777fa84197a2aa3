//! Writing records, values and result sets as JSON, straight into a reused
//! buffer.

use std::borrow::Cow;
use std::fmt::Write as _;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};

use crate::currency::{Currency, CURRENCY_SCALE};
use crate::datetime::{
    is_valid_written_date, is_valid_written_datetime, write_date, write_datetime, DATETIME_BUF,
};
use crate::error::Result;
use crate::record::{ConvertError, FieldType, Fields, Row};
use crate::schema::{AutoTime, Column, Field, FieldKind, Table};
use crate::value::ValueRef;

use super::base64::base64_encode;
use super::timelog::to_timelog;
use super::{JsonDialect, BLOB_MAGIC};

/// Appends `s` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    if !any_escape(b) {
        // Nearly every stored name and code: one copy.
        out.extend_from_slice(b);
        out.push(b'"');
        return;
    }
    let mut from = 0;
    let mut i = 0;
    while i < b.len() {
        // Eight bytes at a time, up to the first one that may need an escape.
        if let Some(chunk) = b.get(i..i + 8) {
            let found = needs_escape(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
            if found == 0 {
                i += 8;
                continue;
            }
            i += found.trailing_zeros() as usize / 8;
        }
        let c = b[i];
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&b[from..i]);
        if esc.is_empty() {
            let _ = write!(Hex4(out), "\\u{:04x}", c);
        } else {
            out.extend_from_slice(esc);
        }
        i += 1;
        from = i;
    }
    out.extend_from_slice(&b[from..]);
    out.push(b'"');
}

/// Marks the bytes of `w` (read little-endian) that are `"`, `\` or a
/// control character: the lowest mark is exact, so its position is the first
/// such byte; no mark means none. Scanning eight bytes at a time this way is
/// what makes writing and reading long strings cheap.
pub fn needs_escape(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | zero_byte(w ^ (ONES * u64::from(b'"'))) | zero_byte(w ^ (ONES * u64::from(b'\\')))
}

/// Whether some byte of `b` needs an escape in a JSON string, found a word
/// at a time: a tail shorter than a word is read as the last eight bytes
/// (overlapping the word before), or padded when `b` is that short, rather
/// than a byte at a time.
#[inline]
fn any_escape(b: &[u8]) -> bool {
    crate::text::any_word(b, b'a', |w| needs_escape(w) != 0)
}

/// `fmt::Write` over a byte buffer.
struct Hex4<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Hex4<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn write_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// The texts of the doubles JSON has no number for; [`parse_value`] reads
/// them back for a floating-point field (`null` would read as no value).
pub(super) const NON_FINITE: [(&str, f64); 3] = [
    ("Infinity", f64::INFINITY),
    ("-Infinity", f64::NEG_INFINITY),
    ("NaN", f64::NAN),
];

fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let _ = write!(Hex4(out), "{v}");
    } else {
        let (text, _) = NON_FINITE
            .iter()
            .find(|(_, x)| x.to_bits() == v.to_bits() || (v.is_nan() && x.is_nan()))
            .expect("a non-finite double is one of the three");
        write_str(out, text);
    }
}

/// Amounts beyond this many 1/10,000ths are written as strings: a reader
/// that takes JSON numbers as doubles (most do) would round them.
pub(super) const CURRENCY_EXACT_AS_NUMBER: u64 = 1 << 53;

/// Prints at most four decimals with trailing zeros dropped, as
/// [`Currency`]'s `Display` does, without the formatting machinery.
pub(super) fn write_currency(out: &mut Vec<u8>, c: Currency) {
    let v = c.scaled();
    let quoted = v.unsigned_abs() > CURRENCY_EXACT_AS_NUMBER;
    if quoted {
        out.push(b'"');
    }
    write_amount(out, v);
    if quoted {
        out.push(b'"');
    }
}

fn write_amount(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    let abs = v.unsigned_abs();
    let scale = CURRENCY_SCALE as u64;
    out.extend_from_slice(itoa::Buffer::new().format(abs / scale).as_bytes());
    let mut frac = abs % scale;
    if frac != 0 {
        let mut digits = [b'.', 0, 0, 0, 0];
        for d in digits[1..].iter_mut().rev() {
            *d = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        let len = 5 - digits[1..].iter().rev().take_while(|d| **d == b'0').count();
        out.extend_from_slice(&digits[..len]);
    }
}

fn put2(buf: &mut [u8], at: usize, v: u32) {
    buf[at] = b'0' + (v / 10) as u8;
    buf[at + 1] = b'0' + (v % 10) as u8;
}

/// A quoted `"YYYY-MM-DD"` as [`write_date`] writes it, `None` for years
/// outside 0..=9999, which it writes in another form.
fn quoted_date(d: NaiveDate) -> Option<[u8; 12]> {
    let year = u32::try_from(d.year()).ok().filter(|y| *y <= 9999)?;
    let mut buf = *b"\"0000-00-00\"";
    put2(&mut buf, 1, year / 100);
    put2(&mut buf, 3, year % 100);
    put2(&mut buf, 6, d.month());
    put2(&mut buf, 9, d.day());
    Some(buf)
}

/// Room for a quoted date-time with nanoseconds.
const QUOTED_BUF: usize = 32;

/// A quoted date-time as [`write_datetime`] writes it (to the second unless
/// `exact`) and its length, `None` for what it writes in another form
/// (years outside 0..=9999, leap seconds).
fn quoted_datetime(t: DateTime<Utc>, exact: bool) -> Option<([u8; QUOTED_BUF], usize)> {
    let n = t.naive_utc();
    let nanos = n.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    let date = quoted_date(n.date())?;
    let mut buf = *b"\"0000-00-00T00:00:00.000000000\"\0";
    buf[..11].copy_from_slice(&date[..11]);
    put2(&mut buf, 12, n.hour());
    put2(&mut buf, 15, n.minute());
    put2(&mut buf, 18, n.second());
    let mut len = 20;
    if exact && nanos != 0 {
        let mut f = nanos;
        for d in buf[21..30].iter_mut().rev() {
            *d = b'0' + (f % 10) as u8;
            f /= 10;
        }
        len = 30 - buf[21..30].iter().rev().take_while(|d| **d == b'0').count();
    }
    buf[len] = b'"';
    Some((buf, len + 1))
}

/// Writes the rows of a batch in mORMot's `"SIMPLE"` form, one after the
/// other (as [`write_simple`]), remembering the last date-time it wrote: the
/// rows of a batch share their automatic times, stamped once for all.
#[derive(Debug, Default)]
pub struct SimpleWriter {
    last: Option<(DateTime<Utc>, bool, [u8; QUOTED_BUF], usize)>,
}

impl SimpleWriter {
    /// A writer that remembers nothing yet.
    pub fn new() -> Self {
        SimpleWriter::default()
    }

    /// Appends every field of `rec`, in declared order, as a JSON array.
    pub fn write(&mut self, out: &mut Vec<u8>, rec: &dyn Fields, dialect: JsonDialect) {
        let table = rec.table();
        out.push(b'[');
        for (i, f) in table.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let v = rec.field(i);
            // The usual values of a record, which need no conversion (see
            // `typed`), go straight to their writer.
            match (&v, f.kind) {
                (ValueRef::Text(t), FieldKind::Text) => {
                    write_str(out, t);
                    continue;
                }
                (ValueRef::Currency(c), _) => {
                    write_currency(out, *c);
                    continue;
                }
                (ValueRef::Date(d), FieldKind::Date) => {
                    if let Some(buf) = quoted_date(*d) {
                        out.extend_from_slice(&buf);
                        continue;
                    }
                }
                _ => {}
            }
            if let ValueRef::DateTime(t) = v {
                let exact = dialect == JsonDialect::Exact;
                if exact || f.auto == AutoTime::No {
                    if let Some((at, ex, buf, len)) = &self.last {
                        if *at == t && *ex == exact {
                            out.extend_from_slice(&buf[..*len]);
                            continue;
                        }
                    }
                    if let Some((buf, len)) = quoted_datetime(t, exact) {
                        out.extend_from_slice(&buf[..len]);
                        self.last = Some((t, exact, buf, len));
                        continue;
                    }
                }
            }
            write_value(out, Some(f), &v, dialect);
        }
        out.push(b']');
    }
}

/// A value as an engine stores it turned back into the field's typed value
/// (see [`FieldKind::typed`]).
fn typed<'a>(field: Option<&Field>, v: &'a ValueRef<'a>) -> Cow<'a, ValueRef<'a>> {
    match field.and_then(|f| f.kind.typed(v)) {
        Some(t) => Cow::Owned(t),
        None => Cow::Borrowed(v),
    }
}

/// Appends one value as JSON. `field` is `None` for the ID; it decides how
/// stored values are read back (see [`FieldKind`]) and how date-times are
/// written under `dialect`.
pub fn write_value(
    out: &mut Vec<u8>,
    field: Option<&Field>,
    v: &ValueRef<'_>,
    dialect: JsonDialect,
) {
    let v = typed(field, v);
    match v.as_ref() {
        ValueRef::Null => out.extend_from_slice(b"null"),
        ValueRef::Int(i) => write_i64(out, *i),
        ValueRef::Real(f) => write_f64(out, *f),
        ValueRef::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        ValueRef::Currency(c) => write_currency(out, *c),
        ValueRef::Date(d) => match quoted_date(*d) {
            Some(buf) => out.extend_from_slice(&buf),
            None => {
                let mut buf = [0; DATETIME_BUF];
                write_str(out, write_date(*d, &mut buf));
            }
        },
        ValueRef::DateTime(t) => {
            let auto = field.is_some_and(|f| f.auto != AutoTime::No);
            let exact = match dialect {
                JsonDialect::Mormot if auto => return write_i64(out, to_timelog(*t)),
                JsonDialect::Mormot => false,
                JsonDialect::Exact => true,
            };
            match quoted_datetime(*t, exact) {
                Some((buf, len)) => out.extend_from_slice(&buf[..len]),
                None => {
                    let mut buf = [0; DATETIME_BUF];
                    let s = write_datetime(*t, &mut buf);
                    // To the second, as mORMot writes and reads them.
                    let s = if exact {
                        s
                    } else {
                        s.split('.').next().unwrap_or(s)
                    };
                    write_str(out, s);
                }
            }
        }
        ValueRef::Text(t) => {
            if field.is_some_and(|f| f.kind == FieldKind::Json)
                && serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok()
            {
                out.extend_from_slice(t.as_bytes());
            } else {
                write_str(out, t);
            }
        }
        ValueRef::Blob(b) => {
            out.push(b'"');
            out.extend_from_slice(BLOB_MAGIC.as_bytes());
            base64_encode(out, b);
            out.push(b'"');
        }
    }
}

/// Appends `{"ID":…,"Field":…}` for the listed columns of `row`; the ID
/// when it is one of them.
pub fn write_row(
    out: &mut Vec<u8>,
    table: &Table,
    row: &dyn Row,
    columns: &[Column],
    dialect: JsonDialect,
) -> Result<Option<i64>> {
    out.push(b'{');
    let typed = row.typed();
    let mut id = None;
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, table.column_name(*c));
        out.push(b':');
        write_column(out, table, *c, row, typed, dialect, &mut id)?;
    }
    out.push(b'}');
    Ok(id)
}

/// Appends column `c` of `row`, noting the ID in `id` when it is the ID.
#[inline]
fn write_column(
    out: &mut Vec<u8>,
    table: &Table,
    c: Column,
    row: &dyn Row,
    typed: bool,
    dialect: JsonDialect,
    id: &mut Option<i64>,
) -> Result<()> {
    match c {
        Column::Id => write_i64(out, *id.insert(row.id()?)),
        Column::Field(f) => write_field(out, table, f, row, typed, dialect)?,
    }
    Ok(())
}

/// Appends field `idx` of `row`. From a row that hands values over as they
/// are stored (`typed`: [`Row::typed`], asked once per row), the usual forms
/// are written straight from [`Row::text`] or [`Row::int`]: text, a date or
/// date-time stored in the written form, a currency's scaled integer, a
/// 64-bit integer; any other goes through [`write_stored`].
fn write_field(
    out: &mut Vec<u8>,
    table: &Table,
    idx: usize,
    row: &dyn Row,
    typed: bool,
    dialect: JsonDialect,
) -> Result<()> {
    let field = &table.fields[idx];
    if !typed {
        return write_stored(out, table, idx, &row.get(idx)?, dialect);
    }
    match field.kind {
        FieldKind::Text => {
            if let Some(t) = row.text(idx)? {
                write_str(out, t);
                return Ok(());
            }
        }
        FieldKind::Date | FieldKind::DateTime => {
            if let Some(t) = row.text(idx)? {
                if write_as_written(out, field, t, dialect) {
                    return Ok(());
                }
            }
        }
        FieldKind::Currency => {
            if let Some(i) = row.int(idx)? {
                write_currency(out, Currency::from_scaled(i));
                return Ok(());
            }
        }
        FieldKind::I64 | FieldKind::Reference(_) => {
            if let Some(i) = row.int(idx)? {
                write_i64(out, i);
                return Ok(());
            }
        }
        _ => {}
    }
    write_stored(out, table, idx, &row.get(idx)?, dialect)
}

/// Appends the value an engine stored for field `idx`, once it is checked to
/// read as a value of that field.
fn write_stored(
    out: &mut Vec<u8>,
    table: &Table,
    idx: usize,
    v: &ValueRef<'_>,
    dialect: JsonDialect,
) -> Result<()> {
    let field = &table.fields[idx];
    if let ValueRef::Text(t) = v {
        if write_as_written(out, field, t, dialect) {
            return Ok(());
        }
    }
    // Converted once: the check and the writer then see the typed value.
    let v = typed(Some(field), v);
    check_stored(field, &v).map_err(|e| e.at(table, idx))?;
    write_value(out, Some(field), &v, dialect);
    Ok(())
}

/// Appends `t`, the text stored for `field`, as it is when it is the text
/// [`write_value`] writes (see [`stored_as_written`]); whether it did.
fn write_as_written(out: &mut Vec<u8>, field: &Field, t: &str, dialect: JsonDialect) -> bool {
    if !stored_as_written(field, t, dialect) {
        return false;
    }
    out.push(b'"');
    out.extend_from_slice(t.as_bytes());
    out.push(b'"');
    true
}

/// Whether `t`, the text an engine stored for a date or date-time `field`,
/// is the very text [`write_value`] writes for it under `dialect`, so that
/// it is written as it is: parsing it and writing it again (most of a list's
/// cost on the server, two date-times a row) gives it back. A valid date
/// and time in the form this module writes, a time to the second unless
/// every fraction is written ([`JsonDialect::Exact`]), and not an automatic
/// time where mORMot's TimeLog integer is written instead.
fn stored_as_written(field: &Field, t: &str, dialect: JsonDialect) -> bool {
    match field.kind {
        FieldKind::Date => is_valid_written_date(t),
        FieldKind::DateTime => match dialect {
            JsonDialect::Exact => is_valid_written_datetime(t),
            JsonDialect::Mormot => {
                field.auto == AutoTime::No && t.len() == 19 && is_valid_written_datetime(t)
            }
        },
        _ => false,
    }
}

/// Whether a stored value reads as a value of its field, by the conversion a
/// record itself applies: a column another writer filled with something else
/// is an error here as it is in process, not a value a reader of the JSON
/// would take for another (a double in an amount column reads as an amount).
fn check_stored(field: &Field, v: &ValueRef<'_>) -> std::result::Result<(), ConvertError> {
    fn fits<T: FieldType>(v: &ValueRef<'_>) -> std::result::Result<(), ConvertError> {
        T::from_value(v.clone()).map(drop)
    }
    match (field.kind, v) {
        (_, ValueRef::Null) if field.nullable => Ok(()),
        (FieldKind::Text | FieldKind::Json, ValueRef::Text(_)) => Ok(()),
        (FieldKind::Text | FieldKind::Json, _) => fits::<String>(v),
        (FieldKind::Blob, _) => fits::<Vec<u8>>(v),
        (FieldKind::I64 | FieldKind::Reference(_), _) => fits::<i64>(v),
        (FieldKind::I32, _) => fits::<i32>(v),
        (FieldKind::U32, _) => fits::<u32>(v),
        (FieldKind::F64, _) => fits::<f64>(v),
        (FieldKind::Bool, _) => fits::<bool>(v),
        (FieldKind::Currency, _) => fits::<Currency>(v),
        (FieldKind::Date, _) => fits::<NaiveDate>(v),
        (FieldKind::DateTime, _) => fits::<DateTime<Utc>>(v),
    }
}

/// Appends a record as a JSON object: its ID when `with_id`, then every field
/// or the listed ones.
pub fn write_fields(
    out: &mut Vec<u8>,
    rec: &dyn Fields,
    fields: Option<&[usize]>,
    with_id: bool,
    dialect: JsonDialect,
) {
    let table = rec.table();
    out.push(b'{');
    let mut first = true;
    if with_id {
        out.extend_from_slice(b"\"ID\":");
        write_i64(out, rec.id());
        first = false;
    }
    let mut one = |idx: usize, out: &mut Vec<u8>| {
        if !first {
            out.push(b',');
        }
        first = false;
        let f = &table.fields[idx];
        write_str(out, f.name);
        out.push(b':');
        write_value(out, Some(f), &rec.field(idx), dialect);
    };
    match fields {
        None => (0..table.fields.len()).for_each(|i| one(i, out)),
        Some(list) => list.iter().for_each(|&i| one(i, out)),
    }
    out.push(b'}');
}

/// Appends every field of a record, in declared order, as a JSON array (the
/// values of mORMot's `"SIMPLE"` batch form).
pub fn write_simple(out: &mut Vec<u8>, rec: &dyn Fields, dialect: JsonDialect) {
    let table = rec.table();
    out.push(b'[');
    for (i, f) in table.fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_value(out, Some(f), &rec.field(i), dialect);
    }
    out.push(b']');
}

/// Writes a list of rows, expanded (`[{…},…]`) or compact
/// (`{"fieldCount":N,"values":[names…,values…],"rowCount":M}`), ending with a
/// newline as mORMot's lists do. An empty list is always compact.
pub struct ListWriter<'a> {
    table: &'a Table,
    columns: &'a [Column],
    compact: bool,
    dialect: JsonDialect,
    rows: usize,
    /// Where the list starts in the buffer, to rewrite an empty expanded list.
    start: usize,
}

impl<'a> ListWriter<'a> {
    /// Starts a list of `columns` of `table` at the end of `out`.
    pub fn begin(
        out: &mut Vec<u8>,
        table: &'a Table,
        columns: &'a [Column],
        compact: bool,
        dialect: JsonDialect,
    ) -> Self {
        let start = out.len();
        if compact {
            write_compact_head(out, table, columns);
        } else {
            out.push(b'[');
        }
        ListWriter {
            table,
            columns,
            compact,
            dialect,
            rows: 0,
            start,
        }
    }

    /// Goes on with a list whose head and first `rows` rows (at least one)
    /// were written earlier, into another buffer: a list written in pieces.
    pub fn resume(
        table: &'a Table,
        columns: &'a [Column],
        compact: bool,
        dialect: JsonDialect,
        rows: usize,
    ) -> Self {
        debug_assert!(rows > 0, "an empty list is written whole");
        ListWriter {
            table,
            columns,
            compact,
            dialect,
            rows,
            start: 0,
        }
    }

    /// Appends one row; its ID when one of the columns is the ID (a caller
    /// that needs it too reads no cell twice).
    pub fn row(&mut self, out: &mut Vec<u8>, row: &dyn Row) -> Result<Option<i64>> {
        let id = if self.compact {
            let typed = row.typed();
            let mut id = None;
            for c in self.columns {
                out.push(b',');
                write_column(out, self.table, *c, row, typed, self.dialect, &mut id)?;
            }
            id
        } else {
            if self.rows > 0 {
                out.push(b',');
            }
            write_row(out, self.table, row, self.columns, self.dialect)?
        };
        self.rows += 1;
        Ok(id)
    }

    /// How many rows were written.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Closes the list.
    pub fn finish(self, out: &mut Vec<u8>) {
        if !self.compact && self.rows == 0 {
            out.truncate(self.start);
            write_compact_head(out, self.table, self.columns);
            out.extend_from_slice(b"],\"rowCount\":0}\n");
        } else if self.compact {
            out.extend_from_slice(b"],\"rowCount\":");
            write_i64(out, self.rows as i64);
            out.extend_from_slice(b"}\n");
        } else {
            out.extend_from_slice(b"]\n");
        }
    }
}

fn write_compact_head(out: &mut Vec<u8>, table: &Table, columns: &[Column]) {
    out.extend_from_slice(b"{\"fieldCount\":");
    write_i64(out, columns.len() as i64);
    out.extend_from_slice(b",\"values\":[");
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, table.column_name(*c));
    }
}
