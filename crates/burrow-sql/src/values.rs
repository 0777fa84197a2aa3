//! Values between Burrow and a database: each converted to the form its
//! column stores when bound, and read back as its field's typed value.

use std::borrow::Cow;

use burrow_core::chrono::NaiveTime;
use burrow_core::datetime::{format_date, format_datetime};
use burrow_core::{Error, FieldKind, Fields, Filter, Result, Row, Select, Table, ValueRef};
use smallvec::SmallVec;

use crate::conn::RawRow;
use crate::dialect::{param_columns, Dialect, Enc};
use crate::table::TableSql;
use crate::ENGINE;

/// Converts a value to the form its column stores.
// Inlined: called per value, and its match folds into the caller's loop.
#[inline(always)]
pub(crate) fn store<'a>(dialect: Dialect, enc: Enc, v: ValueRef<'a>) -> ValueRef<'a> {
    match (enc, v) {
        // The SQLite driver writes dates and date-times as this same text
        // itself, into a stack buffer: a `String` here would be an allocation
        // per value, a third of the ORM's own cost of an in-memory insert.
        (Enc::DateText, v @ ValueRef::Date(_)) | (Enc::StampText, v @ ValueRef::DateTime(_))
            if dialect == Dialect::Sqlite =>
        {
            v
        }
        (Enc::StampText, ValueRef::Date(d)) if dialect == Dialect::Sqlite => {
            ValueRef::DateTime(d.and_time(NaiveTime::MIN).and_utc())
        }
        (Enc::DateText, ValueRef::Date(d)) => ValueRef::Text(format_date(d).into()),
        (Enc::StampText, ValueRef::DateTime(t)) => ValueRef::Text(format_datetime(t).into()),
        (Enc::StampText, ValueRef::Date(d)) => {
            ValueRef::Text(format_datetime(d.and_time(NaiveTime::MIN).and_utc()).into())
        }
        (Enc::Stamp, ValueRef::Date(d)) => ValueRef::DateTime(d.and_time(NaiveTime::MIN).and_utc()),
        // A date for a text column (a hand-built row, a filter comparing
        // text with a date) is its ISO text in every database, not what a
        // driver makes of a date there (MySQL: `1991-03-03 00:00:00`).
        (Enc::Text, ValueRef::Date(d)) => ValueRef::Text(format_date(d).into()),
        (Enc::Text, ValueRef::DateTime(t)) => ValueRef::Text(format_datetime(t).into()),
        (_, v) => v,
    }
}

/// A stored value read back as the typed value of its field kind.
pub(crate) fn typed(kind: FieldKind, v: ValueRef<'_>) -> ValueRef<'_> {
    kind.typed(&v).unwrap_or(v)
}

/// A result row of `SELECT id, fields…`, each value typed by its field.
pub(crate) struct TypedRow<'r> {
    pub raw: &'r dyn RawRow,
    pub table: &'static Table,
}

impl Row for TypedRow<'_> {
    fn id(&self) -> Result<i64> {
        if let Some(i) = self.raw.int(0)? {
            return Ok(i);
        }
        match self.raw.value(0)? {
            ValueRef::Int(i) => Ok(i),
            other => Err(Error::engine(
                ENGINE,
                format!("the ID column holds {}", other.type_name()),
            )),
        }
    }

    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        let f = self
            .table
            .fields
            .get(idx)
            .ok_or_else(|| Error::BadInput(format!("no field #{idx}")))?;
        Ok(typed(f.kind, self.raw.value(idx + 1)?))
    }

    #[inline]
    fn typed(&self) -> bool {
        true
    }

    #[inline]
    fn text(&self, idx: usize) -> Result<Option<&str>> {
        if idx >= self.table.fields.len() {
            return Ok(None);
        }
        self.raw.text(idx + 1)
    }

    #[inline]
    fn int(&self, idx: usize) -> Result<Option<i64>> {
        if idx >= self.table.fields.len() {
            return Ok(None);
        }
        self.raw.int(idx + 1)
    }

    fn written_text(&self, idx: usize) -> Option<&str> {
        let written = match self.table.fields.get(idx)?.kind {
            FieldKind::Date => burrow_core::datetime::is_written_date,
            FieldKind::DateTime => burrow_core::datetime::is_written_datetime,
            _ => return None,
        };
        match self.raw.value(idx + 1).ok()? {
            ValueRef::Text(Cow::Borrowed(t)) if written(t) => Some(t),
            _ => None,
        }
    }
}

/// Statement parameters: on the stack for one usual record, since a heap
/// allocation and free per written row is a measurable share of an in-memory
/// SQLite insert; a multi-row statement's spill to the heap once.
pub(crate) type Params<'a> = SmallVec<[ValueRef<'a>; 16]>;

pub(crate) fn push_fields<'a>(
    t: &TableSql,
    row: &'a dyn Fields,
    fields: impl Iterator<Item = usize>,
    out: &mut Params<'a>,
) {
    for i in fields {
        out.push(store(t.dialect, t.encs[i], row.field(i)));
    }
}

/// The filter's parameters, each in the storage form of the column it is
/// compared with.
pub(crate) fn filter_params<'a>(t: &TableSql, filter: &'a Filter, out: &mut Vec<ValueRef<'a>>) {
    let cols = param_columns(filter);
    for (i, p) in filter.params.iter().enumerate() {
        let enc = cols.get(i).map_or(Enc::Int, |c| t.enc(*c));
        out.push(store(t.dialect, enc, p.as_ref()));
    }
}

/// The filter's parameters in storage form, then LIMIT and OFFSET if paged.
pub(crate) fn page_params<'s>(t: &TableSql, select: &'s Select, paged: bool) -> Vec<ValueRef<'s>> {
    let mut p = Vec::with_capacity(select.filter.params.len() + 2);
    filter_params(t, &select.filter, &mut p);
    if paged {
        let limit = match select.limit {
            Some(l) => Some(i64::try_from(l).unwrap_or(i64::MAX)),
            None => t.dialect.no_limit(),
        };
        p.push(limit.map_or(ValueRef::Null, ValueRef::Int));
        p.push(ValueRef::Int(
            i64::try_from(select.offset).unwrap_or(i64::MAX),
        ));
    }
    p
}
