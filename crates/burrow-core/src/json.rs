//! The JSON codec for records and result sets, in the forms mORMot peers exchange.
//!
//! | field kind | written | read |
//! |---|---|---|
//! | ID, integers, references | a JSON integer | an integer (range-checked) |
//! | `F64` | a JSON number (`null` for NaN and infinities) | any number |
//! | `Bool` | `true` / `false` | `true`/`false`, `0`/`1` |
//! | `Currency` | a number with at most 4 decimals, trailing zeros dropped | a number or a string such as `"12.5"` |
//! | `Text` | a string | a string |
//! | `Json` | the document itself, inline | any JSON value |
//! | `Blob` | `"\uFFF0"` followed by Base64 (mORMot's magic prefix) | the same, or plain Base64 |
//! | `Date` | `"YYYY-MM-DD"` | that, or a date-time whose date is kept; `""` is unset |
//! | `DateTime` | `"YYYY-MM-DDThh:mm:ss"`; creation and modification times as *TimeLog* integers | ISO 8601 text, or a TimeLog integer; `""` is unset |
//!
//! [`JsonDialect::Mormot`] writes what a mORMot client expects: date-times to the
//! second, and automatic times as TimeLog. [`JsonDialect::Exact`] keeps every
//! date-time as ISO 8601 text with its fraction of a second, so a Burrow client
//! reads back exactly what it wrote. Both are always accepted on input.
//!
//! An unset (`""`) date or date-time is NULL in a nullable field and the zero
//! value (1970-01-01) otherwise; an explicit `null` in a field that is not
//! nullable is an error. A field missing from an object written as a whole
//! takes its kind's zero value (see [`zero_value`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};

use crate::currency::{Currency, CURRENCY_SCALE};
use crate::datetime::{parse_date, parse_datetime, write_date, write_datetime, DATETIME_BUF};
use crate::error::{Error, Result};
use crate::record::{ConvertError, FieldType, Fields, Row};
use crate::schema::{AutoTime, Column, Field, FieldKind, Table};
use crate::value::{Value, ValueRef};

/// How date-times are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonDialect {
    /// mORMot's forms: date-times to the second, creation and modification
    /// times as TimeLog integers.
    #[default]
    Mormot,
    /// Every date-time as ISO 8601 text with its full fraction of a second.
    Exact,
}

/// The prefix mORMot puts before Base64 to mark a blob in JSON (U+FFF0).
pub const BLOB_MAGIC: &str = "\u{FFF0}";

// ---------------------------------------------------------------- TimeLog

/// A UTC time as mORMot's *TimeLog* integer:
/// `sec | min<<6 | hour<<12 | (day-1)<<17 | (month-1)<<22 | year<<26`.
/// The fraction of a second is dropped.
pub fn to_timelog(t: DateTime<Utc>) -> i64 {
    let d = t.date_naive();
    i64::from(t.second().min(59))
        | i64::from(t.minute()) << 6
        | i64::from(t.hour()) << 12
        | i64::from(d.day() - 1) << 17
        | i64::from(d.month() - 1) << 22
        | i64::from(d.year()) << 26
}

/// The UTC time of a TimeLog integer, `None` when it names no valid time.
pub fn from_timelog(v: i64) -> Option<DateTime<Utc>> {
    if v < 0 {
        return None;
    }
    let sec = (v & 63) as u32;
    let min = ((v >> 6) & 63) as u32;
    let hour = ((v >> 12) & 31) as u32;
    let day = ((v >> 17) & 31) as u32 + 1;
    let month = ((v >> 22) & 15) as u32 + 1;
    let year = i32::try_from(v >> 26).ok()?;
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    let time = NaiveTime::from_hms_opt(hour, min, sec)?;
    Some(Utc.from_utc_datetime(&date.and_time(time)))
}

// ---------------------------------------------------------------- writing

/// Appends `s` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
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
const NON_FINITE: [(&str, f64); 3] = [
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
const CURRENCY_EXACT_AS_NUMBER: u64 = 1 << 53;

/// Prints at most four decimals with trailing zeros dropped, as
/// [`Currency`]'s `Display` does, without the formatting machinery.
fn write_currency(out: &mut Vec<u8>, c: Currency) {
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

/// Appends `{"ID":…,"Field":…}` for the listed columns of `row`.
pub fn write_row(
    out: &mut Vec<u8>,
    table: &Table,
    row: &dyn Row,
    columns: &[Column],
    dialect: JsonDialect,
) -> Result<()> {
    out.push(b'{');
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, table.column_name(*c));
        out.push(b':');
        match c {
            Column::Id => write_i64(out, row.id()?),
            Column::Field(f) => write_stored(out, table, *f, &row.get(*f)?, dialect)?,
        }
    }
    out.push(b'}');
    Ok(())
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
    // Converted once: the check and the writer then see the typed value.
    let v = typed(Some(field), v);
    check_stored(field, &v).map_err(|e| e.at(table, idx))?;
    write_value(out, Some(field), &v, dialect);
    Ok(())
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

    /// Appends one row.
    pub fn row(&mut self, out: &mut Vec<u8>, row: &dyn Row) -> Result<()> {
        if self.compact {
            for c in self.columns {
                out.push(b',');
                match c {
                    Column::Id => write_i64(out, row.id()?),
                    Column::Field(f) => {
                        write_stored(out, self.table, *f, &row.get(*f)?, self.dialect)?
                    }
                }
            }
        } else {
            if self.rows > 0 {
                out.push(b',');
            }
            write_row(out, self.table, row, self.columns, self.dialect)?;
        }
        self.rows += 1;
        Ok(())
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

// ---------------------------------------------------------------- reading

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

/// A row held as values: what the server builds from a request body and what
/// the HTTP client builds from a response. It is a [`Row`] (to read into a
/// record) and a [`Fields`] (to hand to an engine).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedRow {
    /// The table.
    pub table: &'static Table,
    /// The ID (0 when not assigned).
    pub id: i64,
    /// One value per field of the table, in declared order.
    pub values: Vec<Value>,
}

impl OwnedRow {
    /// A row of zero values (see [`zero_value`]).
    pub fn zero(table: &'static Table) -> Self {
        OwnedRow {
            table,
            id: 0,
            values: table.fields.iter().map(zero_value).collect(),
        }
    }

    /// Copies a record's values.
    pub fn from_fields(rec: &dyn Fields) -> Self {
        let table = rec.table();
        OwnedRow {
            table,
            id: rec.id(),
            values: (0..table.fields.len())
                .map(|i| rec.field(i).to_owned())
                .collect(),
        }
    }

    /// Copies a row read from an engine.
    pub fn from_row(table: &'static Table, row: &dyn Row) -> Result<Self> {
        Ok(OwnedRow {
            table,
            id: row.id()?,
            values: (0..table.fields.len())
                .map(|i| row.get(i).map(|v| v.to_owned()))
                .collect::<Result<_>>()?,
        })
    }

    /// Builds a row from a JSON object. With `whole`, fields it leaves out take
    /// their zero value; otherwise only the fields present are returned, as
    /// indexes. An `ID` (or `RowID`) member sets the ID. Unknown members are an
    /// [`Error::UnknownField`].
    pub fn from_object(
        table: &'static Table,
        obj: &serde_json::Map<String, serde_json::Value>,
        whole: bool,
    ) -> Result<(OwnedRow, Vec<usize>)> {
        let mut row = OwnedRow::zero(table);
        let mut present = Vec::with_capacity(obj.len());
        for (name, v) in obj {
            match table.column(name) {
                Some(Column::Id) => {
                    row.id = parse_id(v).ok_or_else(|| {
                        Error::BadInput(format!("{}: ID must be a positive integer", table.name))
                    })?;
                }
                Some(Column::Field(i)) => {
                    row.values[i] = parse_value(table, &table.fields[i], v)?;
                    if !present.contains(&i) {
                        present.push(i);
                    }
                }
                None => {
                    return Err(Error::UnknownField {
                        table: table.name,
                        field: name.clone(),
                    })
                }
            }
        }
        if whole {
            present = (0..table.fields.len()).collect();
        }
        Ok((row, present))
    }

    /// Builds a row from an array of every field's value, in declared order
    /// (mORMot's `"SIMPLE"` form), or of the listed fields only.
    pub fn from_array(
        table: &'static Table,
        values: &[serde_json::Value],
        fields: Option<&[usize]>,
    ) -> Result<OwnedRow> {
        let mut row = OwnedRow::zero(table);
        let n = fields.map_or(table.fields.len(), <[usize]>::len);
        if values.len() != n {
            return Err(Error::BadInput(format!(
                "{}: {} value(s) given for {n} field(s)",
                table.name,
                values.len()
            )));
        }
        for (k, v) in values.iter().enumerate() {
            let idx = fields.map_or(k, |f| f[k]);
            row.values[idx] = parse_value(table, &table.fields[idx], v)?;
        }
        Ok(row)
    }
}

impl Row for OwnedRow {
    fn id(&self) -> Result<i64> {
        Ok(self.id)
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        self.values
            .get(idx)
            .map(Value::as_ref)
            .ok_or_else(|| Error::BadInput(format!("{} has no field #{idx}", self.table.name)))
    }
}

impl Fields for OwnedRow {
    fn table(&self) -> &'static Table {
        self.table
    }

    fn id(&self) -> i64 {
        self.id
    }

    fn field(&self, idx: usize) -> ValueRef<'_> {
        self.values.get(idx).map_or(ValueRef::Null, Value::as_ref)
    }
}

/// Parses a list in either form (expanded array of objects, or compact
/// `fieldCount`/`values`), each row holding the fields the list names and zero
/// values elsewhere. Rows without an `ID` column get ID 0.
pub fn parse_list(table: &'static Table, body: &[u8]) -> Result<Vec<OwnedRow>> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Error::BadInput(format!("invalid JSON list: {e}")))?;
    match v {
        serde_json::Value::Array(items) => items
            .iter()
            .map(|it| match it {
                serde_json::Value::Object(o) => {
                    OwnedRow::from_object(table, o, false).map(|(r, _)| r)
                }
                _ => Err(Error::BadInput("a list item is not an object".into())),
            })
            .collect(),
        serde_json::Value::Object(o) => {
            let n = o
                .get("fieldCount")
                .and_then(serde_json::Value::as_u64)
                .filter(|n| *n > 0)
                .ok_or_else(|| Error::BadInput("a compact list without fieldCount".into()))?
                as usize;
            let values = o
                .get("values")
                .and_then(serde_json::Value::as_array)
                .ok_or_else(|| Error::BadInput("a compact list without values".into()))?;
            if values.len() < n || values.len() % n != 0 {
                return Err(Error::BadInput("a compact list of the wrong length".into()));
            }
            let cols = values[..n]
                .iter()
                .map(|name| {
                    let name = name.as_str().unwrap_or("");
                    table.column(name).ok_or_else(|| Error::UnknownField {
                        table: table.name,
                        field: name.to_owned(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            values[n..]
                .chunks(n)
                .map(|cells| {
                    let mut row = OwnedRow::zero(table);
                    for (c, v) in cols.iter().zip(cells) {
                        match c {
                            Column::Id => {
                                row.id = parse_id(v).ok_or_else(|| {
                                    Error::BadInput("a row's ID is not a positive integer".into())
                                })?
                            }
                            Column::Field(i) => {
                                row.values[*i] = parse_value(table, &table.fields[*i], v)?
                            }
                        }
                    }
                    Ok(row)
                })
                .collect()
        }
        _ => Err(Error::BadInput(
            "a list is an array or a compact object".into(),
        )),
    }
}

// ---------------------------------------------------------------- Base64

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends the standard, padded Base64 form of `data`.
pub fn base64_encode(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        out.push(B64[(n >> 18) as usize & 63]);
        out.push(B64[(n >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            B64[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            B64[n as usize & 63]
        } else {
            b'='
        });
    }
}

/// Decodes standard Base64 (padding optional); `None` on any other character.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod test {
    use super::*;

    const fn f(name: &'static str, kind: FieldKind, auto: AutoTime, nullable: bool) -> Field {
        let f = Field::new(name, kind).auto(auto);
        if nullable {
            f.nullable()
        } else {
            f
        }
    }

    static T: Table = Table {
        name: "Sample",
        fields: &[
            f("Name", FieldKind::Text, AutoTime::No, false),
            f("Amount", FieldKind::Currency, AutoTime::No, false),
            f("Born", FieldKind::Date, AutoTime::No, true),
            f("Changed", FieldKind::DateTime, AutoTime::Modified, false),
            f("Data", FieldKind::Blob, AutoTime::No, false),
            f("Doc", FieldKind::Json, AutoTime::No, false),
        ],
    };

    fn row() -> OwnedRow {
        OwnedRow {
            table: &T,
            id: 7,
            values: vec![
                Value::Text("A \"q\"\n\u{1}".into()),
                Value::Currency("12.5".parse().unwrap()),
                Value::Null,
                Value::DateTime(parse_datetime("2024-03-04T05:06:07.25").unwrap()),
                Value::Blob(vec![0, 1, 2, 250]),
                Value::Text(r#"{"a":[1,2]}"#.into()),
            ],
        }
    }

    #[test]
    fn timelog_round_trips() {
        let t = parse_datetime("2024-02-29T23:59:58").unwrap();
        assert_eq!(from_timelog(to_timelog(t)), Some(t));
        assert_eq!(
            to_timelog(t),
            58 | 59 << 6 | 23 << 12 | 28 << 17 | 1 << 22 | 2024 << 26
        );
        assert_eq!(from_timelog(-1), None);
    }

    #[test]
    fn mormot_and_exact_dialects() -> Result<()> {
        let cols: Vec<Column> = std::iter::once(Column::Id)
            .chain((0..T.fields.len()).map(Column::Field))
            .collect();
        let mut out = Vec::new();
        write_row(&mut out, &T, &row(), &cols, JsonDialect::Mormot)?;
        let s = String::from_utf8(out).unwrap();
        let tl = to_timelog(parse_datetime("2024-03-04T05:06:07").unwrap());
        assert_eq!(
            s,
            format!(
                r#"{{"ID":7,"Name":"A \"q\"\n\u0001","Amount":12.5,"Born":null,"Changed":{tl},"Data":"{BLOB_MAGIC}AAEC+g==","Doc":{{"a":[1,2]}}}}"#
            )
        );
        let mut exact = Vec::new();
        write_row(&mut exact, &T, &row(), &cols, JsonDialect::Exact)?;
        let v: serde_json::Value = serde_json::from_slice(&exact).unwrap();
        let (back, _) = OwnedRow::from_object(&T, v.as_object().unwrap(), true)?;
        assert_eq!(back, row());
        Ok(())
    }

    #[test]
    fn lists_in_both_forms() -> Result<()> {
        let cols = [Column::Id, Column::Field(0)];
        for compact in [false, true] {
            let mut out = Vec::new();
            let mut w = ListWriter::begin(&mut out, &T, &cols, compact, JsonDialect::Exact);
            w.row(&mut out, &row())?;
            w.row(&mut out, &row())?;
            w.finish(&mut out);
            assert!(out.ends_with(b"\n"));
            let rows = parse_list(&T, &out)?;
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[1].id, 7);
            assert_eq!(rows[1].values[0], row().values[0]);
        }
        let mut out = Vec::new();
        ListWriter::begin(&mut out, &T, &cols, false, JsonDialect::Exact).finish(&mut out);
        assert_eq!(
            out,
            b"{\"fieldCount\":2,\"values\":[\"ID\",\"Name\"],\"rowCount\":0}\n"
        );
        assert!(parse_list(&T, &out)?.is_empty());
        Ok(())
    }

    #[test]
    fn refuses_wrong_types() {
        let bad = [
            r#"{"Name":1}"#,
            r#"{"Amount":"x"}"#,
            r#"{"Amount":1.23456}"#,
            r#"{"Born":"2024-13-01"}"#,
            r#"{"Name":null}"#,
            r#"{"Nope":1}"#,
            r#"{"ID":-3}"#,
            r#"{"Data":"*"}"#,
        ];
        for b in bad {
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            assert!(
                OwnedRow::from_object(&T, v.as_object().unwrap(), true).is_err(),
                "{b}"
            );
        }
    }

    #[test]
    fn direct_writers_match_the_general_ones() {
        for scaled in [
            0,
            1,
            -1,
            5000,
            -100,
            12_345_678,
            10_000,
            -10_000,
            123_450,
            i64::MAX,
            i64::MIN,
        ] {
            let c = Currency::from_scaled(scaled);
            let mut out = Vec::new();
            write_currency(&mut out, c);
            let text = String::from_utf8(out).unwrap();
            // Beyond what a double holds exactly, an amount is a string.
            let want = if scaled.unsigned_abs() > CURRENCY_EXACT_AS_NUMBER {
                format!("\"{c}\"")
            } else {
                c.to_string()
            };
            assert_eq!(text, want);
        }
        let plain = f("When", FieldKind::DateTime, AutoTime::No, false);
        for s in [
            "2024-02-29T23:59:58",
            "2024-02-29T23:59:58.5",
            "0001-01-01T00:00:00.000000001",
            "9999-12-31T23:59:59.999999999",
            "1999-12-31T12:34:56.12345",
            "-0044-03-15T12:30:15.000000005",
            "+10000-01-01T00:00:00",
            "2016-12-31T23:59:60.5",
        ] {
            let t = parse_datetime(s).unwrap();
            let mut buf = [0; DATETIME_BUF];
            let full = write_datetime(t, &mut buf);
            for (dialect, want) in [
                (JsonDialect::Exact, full),
                (JsonDialect::Mormot, full.split('.').next().unwrap()),
            ] {
                let mut out = Vec::new();
                write_value(&mut out, Some(&plain), &ValueRef::DateTime(t), dialect);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    format!("\"{want}\""),
                    "{s}"
                );
            }
            let d = t.date_naive();
            let mut out = Vec::new();
            write_value(&mut out, None, &ValueRef::Date(d), JsonDialect::Exact);
            let mut buf = [0; DATETIME_BUF];
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("\"{}\"", write_date(d, &mut buf))
            );
        }
        let mut simple = SimpleWriter::new();
        let mut r = row();
        for dialect in [JsonDialect::Exact, JsonDialect::Mormot] {
            for _ in 0..2 {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                simple.write(&mut a, &r, dialect);
                write_simple(&mut b, &r, dialect);
                assert_eq!(a, b);
                r.values[3] = Value::DateTime(parse_datetime("2024-03-04T05:06:08.5").unwrap());
            }
        }
        for s in [
            "",
            "plain text",
            "\"quoted\" and \\ more than eight",
            "ctl\u{1f}\u{7f}é\t",
        ] {
            let mut out = Vec::new();
            write_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn base64_round_trips() {
        for n in 0..10 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            let mut out = Vec::new();
            base64_encode(&mut out, &data);
            assert_eq!(
                base64_decode(std::str::from_utf8(&out).unwrap()),
                Some(data)
            );
        }
    }
}
