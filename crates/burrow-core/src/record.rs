//! Records: the structs an application declares, and the per-field conversions
//! that move them to and from engines without an intermediate map.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{de::DeserializeOwned, Serialize};

use crate::currency::Currency;
use crate::datetime::{parse_date, parse_datetime};
use crate::error::{Error, Result};
use crate::schema::{AutoTime, FieldKind, Table};
use crate::value::ValueRef;

/// A struct stored as a row of a table. Implemented by `#[derive(Record)]`.
///
/// Field indexes are positions in [`Table::fields`]; the ID is not a field.
pub trait Record: Sized + Send + Sync + 'static {
    /// The table's name, usable in constant contexts (see [`Ref`]).
    const TABLE_NAME: &'static str;

    /// The table description, one static per type.
    fn table() -> &'static Table;

    /// The ID (0 before the record is added).
    fn id(&self) -> i64;

    /// Sets the ID.
    fn set_id(&mut self, id: i64);

    /// The value of the field at `idx`, borrowed where possible.
    fn field(&self, idx: usize) -> ValueRef<'_>;

    /// Sets the field at `idx`, converting `value` to the field's type.
    fn set_field(&mut self, idx: usize, value: ValueRef<'_>) -> Result<()>;

    /// Builds a record from a row whose columns follow [`Table::fields`].
    fn from_row(row: &dyn Row) -> Result<Self>;

    /// Overwrites this record from a row, reusing its text and blob buffers: the
    /// streaming reads call this on one record for every row.
    fn read_row(&mut self, row: &dyn Row) -> Result<()> {
        self.set_id(row.id()?);
        for idx in 0..Self::table().fields.len() {
            self.set_field(idx, row.get(idx)?)?;
        }
        Ok(())
    }

    /// Fills the automatic time fields: `Modified` always, `Created` on insert.
    fn stamp(&mut self, now: DateTime<Utc>, inserting: bool) {
        for (idx, f) in Self::table().fields.iter().enumerate() {
            let set = match f.auto {
                AutoTime::No => false,
                AutoTime::Created => inserting,
                AutoTime::Modified => true,
            };
            if set {
                // A time field always accepts a time value.
                let _ = self.set_field(idx, ValueRef::DateTime(now));
            }
        }
    }
}

/// A record seen through its table, without its type: what engines receive.
pub trait Fields {
    /// The table.
    fn table(&self) -> &'static Table;
    /// The ID (0 when not assigned).
    fn id(&self) -> i64;
    /// The value of the field at `idx`.
    fn field(&self, idx: usize) -> ValueRef<'_>;
}

impl<T: Record> Fields for T {
    fn table(&self) -> &'static Table {
        T::table()
    }
    fn id(&self) -> i64 {
        Record::id(self)
    }
    fn field(&self, idx: usize) -> ValueRef<'_> {
        Record::field(self, idx)
    }
}

/// A row being read from an engine; columns follow [`Table::fields`].
pub trait Row {
    /// The row's ID.
    fn id(&self) -> Result<i64>;
    /// The value of field `idx`.
    fn get(&self, idx: usize) -> Result<ValueRef<'_>>;

    /// Whether this row answers [`Row::text`] and [`Row::int`]: a reader
    /// asks once per row, so a row without them costs no call per field
    /// that could only answer `None`. `false` by default.
    #[inline]
    fn typed(&self) -> bool {
        false
    }

    /// Field `idx` as text borrowed from the engine, when it holds text;
    /// `None` when it holds anything else ([`Row::get`] then says what), and
    /// by default. A text, date or date-time field reads through it without
    /// a [`ValueRef`] made and matched on the way.
    #[inline]
    fn text(&self, idx: usize) -> Result<Option<&str>> {
        let _ = idx;
        Ok(None)
    }

    /// Field `idx` as an integer, when the engine holds one; `None` when it
    /// holds anything else, and by default. As [`Row::text`], for integer
    /// and currency fields.
    #[inline]
    fn int(&self, idx: usize) -> Result<Option<i64>> {
        let _ = idx;
        Ok(None)
    }

    /// Field `idx` as a date, when the engine holds it as one (the memory
    /// engine's day numbers), not as text; `None` when it holds anything
    /// else, and by default. As [`Row::text`], for date fields: a date read
    /// this way makes no [`ValueRef`]. A reader asks for the text first.
    #[inline]
    fn date(&self, idx: usize) -> Result<Option<NaiveDate>> {
        let _ = idx;
        Ok(None)
    }

    /// Field `idx` as a date-time, when the engine holds it as one; `None`
    /// otherwise, and by default. As [`Row::date`], for date-time fields.
    #[inline]
    fn datetime(&self, idx: usize) -> Result<Option<DateTime<Utc>>> {
        let _ = idx;
        Ok(None)
    }

    /// The date or date-time field `idx` as the text Burrow writes for it, when
    /// the engine holds exactly that text ([`crate::datetime::is_written_date`]):
    /// a reader that wants the text is spared a parse and a format. `None`
    /// otherwise, and by default.
    fn written_text(&self, idx: usize) -> Option<&str> {
        let _ = idx;
        None
    }
}

/// Why a value could not become a field's type.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertError {
    /// What the field expected.
    pub expected: &'static str,
    /// What it got (a type name, or the offending text).
    pub found: String,
}

impl ConvertError {
    fn new(expected: &'static str, v: &ValueRef<'_>) -> Self {
        let found = match v {
            ValueRef::Text(t) if t.len() <= 40 => format!("text {t:?}"),
            other => other.type_name().to_owned(),
        };
        ConvertError { expected, found }
    }

    /// Names the field it happened to, as an [`Error::TypeMismatch`].
    pub fn at(self, table: &Table, idx: usize) -> Error {
        Error::TypeMismatch {
            at: format!("{}.{}", table.name, table.fields[idx].name),
            expected: self.expected,
            found: self.found,
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}, got {}", self.expected, self.found)
    }
}

/// A Rust type that can be a record field.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a record field",
    label = "not a field type",
    note = "field types: i32, i64, u32, f64, bool, String, Vec<u8>, Currency, NaiveDate, \
            DateTime<Utc>, serde_json::Value, Ref<T>, and Option of each",
    note = "any serde type can be stored as JSON: declare the field as `burrow::Json<{Self}>`"
)]
pub trait FieldType: Sized {
    /// How engines store it.
    const KIND: FieldKind;
    /// Whether it may be NULL.
    const NULLABLE: bool = false;
    /// The value to bind, borrowed where possible.
    fn to_value(&self) -> ValueRef<'_>;
    /// Converts a value read from an engine or the wire.
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError>;
    /// Overwrites `self`; text and blob types reuse their buffer.
    fn assign(&mut self, v: ValueRef<'_>) -> Result<(), ConvertError> {
        *self = Self::from_value(v)?;
        Ok(())
    }
    /// Reads field `idx` of `row`, a field of `table` (for the error's name).
    /// The types an engine stores as text or as an integer take the value
    /// straight from [`Row::text`] or [`Row::int`], and fall back to
    /// [`Row::get`] with the same result as [`FieldType::from_value`].
    #[inline]
    fn read(row: &dyn Row, table: &Table, idx: usize) -> Result<Self> {
        Self::from_value(row.get(idx)?).map_err(|e| e.at(table, idx))
    }
    /// The value of an automatic time field (`created`, `modified`) at `t`;
    /// `None` for a type that holds no time. Every write stamps these, so the
    /// time types answer without going through [`FieldType::from_value`].
    #[inline]
    fn from_time(t: DateTime<Utc>) -> Option<Self> {
        Self::from_value(ValueRef::DateTime(t)).ok()
    }
}

/// The typed read of a field type an engine may hand over as `$get`
/// ([`Row::text`] or [`Row::int`]): its value made as `$make` makes it, else
/// the general path. With `[$own]`, the engine's own form of the type
/// ([`Row::date`], [`Row::datetime`]) is asked for before the general path:
/// after the text, so that SQLite's rows, which hold dates as text, make no
/// call more.
macro_rules! typed_read {
    ($get:ident $([$own:ident])?, |$v:ident| $make:expr) => {
        #[inline]
        fn read(row: &dyn Row, table: &Table, idx: usize) -> Result<Self> {
            if let Some($v) = row.$get(idx)? {
                return $make.map_err(|e: ConvertError| e.at(table, idx));
            }
            $(
                if let Some(v) = row.$own(idx)? {
                    return Ok(v);
                }
            )?
            Self::from_value(row.get(idx)?).map_err(|e| e.at(table, idx))
        }
    };
}

macro_rules! int_field {
    ($($t:ty => $kind:ident),*) => {$(
        impl FieldType for $t {
            const KIND: FieldKind = FieldKind::$kind;
            fn to_value(&self) -> ValueRef<'_> {
                ValueRef::Int(i64::from(*self))
            }
            fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
                match v {
                    ValueRef::Int(i) => <$t>::try_from(i).map_err(|_| ConvertError {
                        expected: stringify!($t),
                        found: format!("{i}, out of range"),
                    }),
                    ValueRef::Bool(b) => Ok(<$t>::from(b)),
                    other => Err(ConvertError::new(stringify!($t), &other)),
                }
            }
            typed_read!(int, |i| Self::from_value(ValueRef::Int(i)));
        }
    )*};
}

int_field!(i64 => I64, i32 => I32, u32 => U32);

impl FieldType for f64 {
    const KIND: FieldKind = FieldKind::F64;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(*self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Real(f) => Ok(f),
            ValueRef::Int(i) => Ok(i as f64),
            ValueRef::Currency(c) => Ok(c.to_f64()),
            other => Err(ConvertError::new("f64", &other)),
        }
    }
}

impl FieldType for bool {
    const KIND: FieldKind = FieldKind::Bool;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Bool(*self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Bool(b) => Ok(b),
            ValueRef::Int(0) => Ok(false),
            ValueRef::Int(1) => Ok(true),
            other => Err(ConvertError::new("bool", &other)),
        }
    }
}

impl FieldType for Currency {
    const KIND: FieldKind = FieldKind::Currency;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Currency(*self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Currency(c) => Ok(c),
            // Engines store the scaled integer.
            ValueRef::Int(i) => Ok(Currency::from_scaled(i)),
            ValueRef::Text(ref t) => t.parse().map_err(|_| ConvertError::new("currency", &v)),
            other => Err(ConvertError::new("currency", &other)),
        }
    }
    typed_read!(int, |i| Ok(Currency::from_scaled(i)));
}

impl FieldType for String {
    const KIND: FieldKind = FieldKind::Text;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(Cow::Borrowed(self))
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Text(t) => Ok(t.into_owned()),
            other => Err(ConvertError::new("text", &other)),
        }
    }
    typed_read!(text, |t| Ok(t.to_owned()));
    fn assign(&mut self, v: ValueRef<'_>) -> Result<(), ConvertError> {
        match v {
            ValueRef::Text(t) => {
                self.clear();
                self.push_str(&t);
                Ok(())
            }
            other => Err(ConvertError::new("text", &other)),
        }
    }
}

impl FieldType for Vec<u8> {
    const KIND: FieldKind = FieldKind::Blob;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Blob(b) => Ok(b.to_vec()),
            other => Err(ConvertError::new("blob", &other)),
        }
    }
    fn assign(&mut self, v: ValueRef<'_>) -> Result<(), ConvertError> {
        match v {
            ValueRef::Blob(b) => {
                self.clear();
                self.extend_from_slice(b);
                Ok(())
            }
            other => Err(ConvertError::new("blob", &other)),
        }
    }
}

impl FieldType for NaiveDate {
    const KIND: FieldKind = FieldKind::Date;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Date(*self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Date(d) => Ok(d),
            ValueRef::Text(ref t) => parse_date(t).ok_or_else(|| ConvertError::new("date", &v)),
            other => Err(ConvertError::new("date", &other)),
        }
    }
    typed_read!(text[date], |t| parse_date(t).ok_or_else(|| {
        ConvertError::new("date", &ValueRef::Text(Cow::Borrowed(t)))
    }));
}

impl FieldType for DateTime<Utc> {
    const KIND: FieldKind = FieldKind::DateTime;
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::DateTime(*self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::DateTime(d) => Ok(d),
            ValueRef::Text(ref t) => {
                parse_datetime(t).ok_or_else(|| ConvertError::new("date-time", &v))
            }
            other => Err(ConvertError::new("date-time", &other)),
        }
    }
    typed_read!(text[datetime], |t| parse_datetime(t).ok_or_else(|| {
        ConvertError::new("date-time", &ValueRef::Text(Cow::Borrowed(t)))
    }));
    #[inline]
    fn from_time(t: DateTime<Utc>) -> Option<Self> {
        Some(t)
    }
}

impl<T: FieldType> FieldType for Option<T> {
    const KIND: FieldKind = T::KIND;
    const NULLABLE: bool = true;
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref().map_or(ValueRef::Null, T::to_value)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Null => Ok(None),
            v => {
                let json_null = T::KIND == FieldKind::Json
                    && matches!(&v, ValueRef::Text(t) if t.trim() == "null");
                match T::from_value(v) {
                    Ok(x) => Ok(Some(x)),
                    // A JSON null that the type cannot hold (as in a column
                    // added to rows written before the field existed) is absent.
                    Err(_) if json_null => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
    #[inline]
    fn from_time(t: DateTime<Utc>) -> Option<Self> {
        T::from_time(t).map(Some)
    }
}

fn json_text<'a>(v: &impl Serialize) -> ValueRef<'a> {
    // Serializing an in-memory JSON value or a derived Serialize type only fails
    // for maps with non-string keys; such a value is stored as JSON null.
    ValueRef::Text(Cow::Owned(
        serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned()),
    ))
}

fn json_parse<T: DeserializeOwned>(v: ValueRef<'_>) -> Result<T, ConvertError> {
    match v {
        ValueRef::Text(ref t) => serde_json::from_str(t).map_err(|e| ConvertError {
            expected: "JSON",
            found: if t.trim() == "null" {
                // The default of a JSON column added to a table that had rows.
                format!(
                    "JSON null, which this type cannot hold ({e}); a row written before \
                     the field existed? Declare such a field as an Option"
                )
            } else {
                format!("invalid JSON ({e})")
            },
        }),
        other => Err(ConvertError::new("JSON text", &other)),
    }
}

impl FieldType for serde_json::Value {
    const KIND: FieldKind = FieldKind::Json;
    fn to_value(&self) -> ValueRef<'_> {
        json_text(self)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        json_parse(v)
    }
}

/// Any `Serialize + Deserialize` value stored as JSON text in one field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize + DeserializeOwned> FieldType for Json<T> {
    const KIND: FieldKind = FieldKind::Json;
    fn to_value(&self) -> ValueRef<'_> {
        json_text(&self.0)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        json_parse(v).map(Json)
    }
}

/// The ID of a record of table `T`: a typed foreign key.
pub struct Ref<T> {
    id: i64,
    _to: PhantomData<fn() -> T>,
}

impl<T> Ref<T> {
    /// A reference to the record with this ID.
    pub const fn new(id: i64) -> Self {
        Ref {
            id,
            _to: PhantomData,
        }
    }

    /// The referenced ID.
    pub const fn id(&self) -> i64 {
        self.id
    }
}

impl<T> Clone for Ref<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ref<T> {}
impl<T> PartialEq for Ref<T> {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
    }
}
impl<T> Eq for Ref<T> {}
impl<T> std::hash::Hash for Ref<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.id.hash(h)
    }
}
impl<T> Default for Ref<T> {
    fn default() -> Self {
        Ref::new(0)
    }
}
impl<T: Record> fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", T::TABLE_NAME, self.id)
    }
}

impl<T: Record> FieldType for Ref<T> {
    const KIND: FieldKind = FieldKind::Reference(T::TABLE_NAME);
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Int(self.id)
    }
    fn from_value(v: ValueRef<'_>) -> Result<Self, ConvertError> {
        match v {
            ValueRef::Int(i) => Ok(Ref::new(i)),
            other => Err(ConvertError::new("reference ID", &other)),
        }
    }
}
