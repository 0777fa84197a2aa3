//! Values as they travel between records, engines and the wire.

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, NaiveDate, Utc};

use crate::currency::Currency;

/// An owned value: a WHERE parameter, a cell of a result, a field read back.
///
/// The typed variants (`Bool`, `Currency`, `Date`, `DateTime`) keep their meaning
/// so that an engine without SQL (the memory engine) compares them natively, and
/// each SQL engine decides how they are stored (see [`crate::FieldKind`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL / `None`.
    Null,
    /// A 64-bit integer (also IDs and references).
    Int(i64),
    /// A double.
    Real(f64),
    /// A boolean.
    Bool(bool),
    /// A fixed-point amount with four decimals.
    Currency(Currency),
    /// A calendar date.
    Date(NaiveDate),
    /// A UTC instant.
    DateTime(DateTime<Utc>),
    /// UTF-8 text (also JSON documents).
    Text(String),
    /// Raw bytes.
    Blob(Vec<u8>),
}

/// A borrowed view of a [`Value`]: what a record hands to an engine for binding,
/// and what an engine hands back while a row is being read, without copying text.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueRef<'a> {
    /// SQL NULL / `None`.
    Null,
    /// A 64-bit integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// A boolean.
    Bool(bool),
    /// A fixed-point amount with four decimals.
    Currency(Currency),
    /// A calendar date.
    Date(NaiveDate),
    /// A UTC instant.
    DateTime(DateTime<Utc>),
    /// UTF-8 text; owned only when the field had to render it (JSON fields).
    Text(Cow<'a, str>),
    /// Raw bytes.
    Blob(&'a [u8]),
}

impl Value {
    /// Borrows this value.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Int(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Bool(v) => ValueRef::Bool(*v),
            Value::Currency(v) => ValueRef::Currency(*v),
            Value::Date(v) => ValueRef::Date(*v),
            Value::DateTime(v) => ValueRef::DateTime(*v),
            Value::Text(v) => ValueRef::Text(Cow::Borrowed(v)),
            Value::Blob(v) => ValueRef::Blob(v),
        }
    }

    /// A short name of the variant, for error messages.
    pub fn type_name(&self) -> &'static str {
        self.as_ref().type_name()
    }
}

impl ValueRef<'_> {
    /// Borrows this value as a whole: text it owns (a rendered JSON field) is
    /// lent from it rather than cloned. Every variant is spelled out: through
    /// `clone` the scalars cost a call per value on the insert path.
    #[inline]
    pub fn lent(&self) -> ValueRef<'_> {
        match self {
            ValueRef::Null => ValueRef::Null,
            ValueRef::Int(v) => ValueRef::Int(*v),
            ValueRef::Real(v) => ValueRef::Real(*v),
            ValueRef::Bool(v) => ValueRef::Bool(*v),
            ValueRef::Currency(v) => ValueRef::Currency(*v),
            ValueRef::Date(v) => ValueRef::Date(*v),
            ValueRef::DateTime(v) => ValueRef::DateTime(*v),
            ValueRef::Text(v) => ValueRef::Text(Cow::Borrowed(v)),
            ValueRef::Blob(v) => ValueRef::Blob(v),
        }
    }

    /// Copies this value into an owned [`Value`].
    pub fn to_owned(&self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Int(v) => Value::Int(*v),
            ValueRef::Real(v) => Value::Real(*v),
            ValueRef::Bool(v) => Value::Bool(*v),
            ValueRef::Currency(v) => Value::Currency(*v),
            ValueRef::Date(v) => Value::Date(*v),
            ValueRef::DateTime(v) => Value::DateTime(*v),
            ValueRef::Text(v) => Value::Text(v.to_string()),
            ValueRef::Blob(v) => Value::Blob(v.to_vec()),
        }
    }

    /// A short name of the variant, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            ValueRef::Null => "null",
            ValueRef::Int(_) => "integer",
            ValueRef::Real(_) => "float",
            ValueRef::Bool(_) => "boolean",
            ValueRef::Currency(_) => "currency",
            ValueRef::Date(_) => "date",
            ValueRef::DateTime(_) => "date-time",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "blob",
        }
    }

    /// Whether this is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, ValueRef::Null)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Real(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Currency(v) => write!(f, "{v}"),
            Value::Date(v) => f.write_str(&crate::datetime::format_date(*v)),
            Value::DateTime(v) => f.write_str(&crate::datetime::format_datetime(*v)),
            Value::Text(v) => write!(f, "{v:?}"),
            Value::Blob(v) => write!(f, "<{} bytes>", v.len()),
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $var:ident $(as $cast:ty)?),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::$var(v $(as $cast)?) }
        }
    )*};
}

value_from! {
    i64 => Int, i32 => Int as i64, u32 => Int as i64, i16 => Int as i64, u16 => Int as i64,
    u8 => Int as i64, i8 => Int as i64, f64 => Real, f32 => Real as f64, bool => Bool,
    Currency => Currency, NaiveDate => Date, DateTime<Utc> => DateTime, String => Text,
    Vec<u8> => Blob,
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Blob(v.to_vec())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        Value::Text(v.to_string())
    }
}

/// The values bound to the `?` of a WHERE clause or a SQL statement, in
/// order. Every method that takes parameters takes any of these forms alike:
/// `params![…]`, `&params![…]`, `&[]`, `[Value; N]`, a `Vec<Value>` or a
/// slice of values.
///
/// ```
/// use burrow_core::{params, Params, Value};
/// fn count(p: impl Params) -> usize {
///     p.as_values().len()
/// }
/// assert_eq!(count(params![1, "a"]), 2);
/// assert_eq!(count(&params![1]), 1);
/// assert_eq!(count(&[]), 0);
/// assert_eq!(count([Value::Int(1)]), 1);
/// ```
pub trait Params {
    /// The values, in order.
    fn as_values(&self) -> &[Value];

    /// The values, owned (moved out when they already are).
    fn into_values(self) -> Vec<Value>
    where
        Self: Sized,
    {
        self.as_values().to_vec()
    }
}

impl Params for [Value] {
    fn as_values(&self) -> &[Value] {
        self
    }
}

impl<const N: usize> Params for [Value; N] {
    fn as_values(&self) -> &[Value] {
        self
    }
}

impl Params for Vec<Value> {
    fn as_values(&self) -> &[Value] {
        self
    }

    fn into_values(self) -> Vec<Value> {
        self
    }
}

impl<P: Params + ?Sized> Params for &P {
    fn as_values(&self) -> &[Value] {
        (**self).as_values()
    }
}

/// Builds a `Vec<Value>` of WHERE parameters from expressions of mixed types.
///
/// ```
/// let p = burrow_core::params![42, "Dupont", 1.5];
/// assert_eq!(p.len(), 3);
/// ```
#[macro_export]
macro_rules! params {
    () => { ::std::vec::Vec::<$crate::Value>::new() };
    ($($v:expr),+ $(,)?) => { ::std::vec![$($crate::Value::from($v)),+] };
}
