//! Tables and fields: the static description of a record that every engine reads.

/// What a field holds, which decides how each engine stores it.
///
/// | kind | SQLite column | note |
/// |---|---|---|
/// | `I32`, `I64`, `U32`, `Reference` | `INTEGER` | range-checked on read |
/// | `F64` | `REAL` | |
/// | `Bool` | `INTEGER` 0/1 | |
/// | `Currency` | `INTEGER`, in 1/10,000 | exact |
/// | `Text`, `Json` | `TEXT` | JSON as its text |
/// | `Blob` | `BLOB` | |
/// | `Date` | `TEXT` `YYYY-MM-DD` | sorts as text |
/// | `DateTime` | `TEXT` `YYYY-MM-DDThh:mm:ss[.f]`, UTC | sorts as text |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldKind {
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u32`.
    U32,
    /// `f64`.
    F64,
    /// `bool`.
    Bool,
    /// [`crate::Currency`].
    Currency,
    /// `String`.
    Text,
    /// `Vec<u8>`.
    Blob,
    /// `chrono::NaiveDate`.
    Date,
    /// `chrono::DateTime<Utc>`.
    DateTime,
    /// A JSON document (`serde_json::Value` or [`crate::Json`]).
    Json,
    /// The ID of a record of the named table ([`crate::Ref`]).
    Reference(&'static str),
}

impl FieldKind {
    /// A value as engines store it (a currency as its scaled integer, a
    /// boolean as 0 or 1, a date or date-time as ISO text, or a date where a
    /// date-time is wanted and back) as this kind's typed value; `None` when
    /// `v` needs no change or is not one of those forms (the reader's own
    /// conversion then decides).
    ///
    /// Inlined down to the kind test, which readers pay per field of every
    /// row; the conversion itself stays out of line.
    #[inline]
    pub fn typed(self, v: &crate::ValueRef<'_>) -> Option<crate::ValueRef<'static>> {
        if !self.has_stored_form() {
            return None;
        }
        self.converted(v)
    }

    #[inline(never)]
    fn converted(self, v: &crate::ValueRef<'_>) -> Option<crate::ValueRef<'static>> {
        use crate::datetime::{parse_date, parse_datetime};
        use crate::ValueRef as V;
        Some(match (self, v) {
            (FieldKind::Currency, V::Int(i)) => V::Currency(crate::Currency::from_scaled(*i)),
            (FieldKind::Bool, V::Int(i)) => V::Bool(*i != 0),
            (FieldKind::Date, V::Text(t)) => V::Date(parse_date(t)?),
            (FieldKind::DateTime, V::Text(t)) => V::DateTime(parse_datetime(t)?),
            (FieldKind::Date, V::DateTime(t)) => V::Date(t.date_naive()),
            (FieldKind::DateTime, V::Date(d)) => {
                V::DateTime(d.and_time(chrono::NaiveTime::MIN).and_utc())
            }
            _ => return None,
        })
    }

    /// Whether engines may store values of this kind in another form, which
    /// [`FieldKind::typed`] turns back; for the other kinds a stored value is
    /// already the typed one, and readers on a per-row path skip the call.
    #[inline]
    pub const fn has_stored_form(self) -> bool {
        matches!(
            self,
            FieldKind::Currency | FieldKind::Bool | FieldKind::Date | FieldKind::DateTime
        )
    }

    /// A short name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            FieldKind::I32 => "i32",
            FieldKind::I64 => "i64",
            FieldKind::U32 => "u32",
            FieldKind::F64 => "f64",
            FieldKind::Bool => "bool",
            FieldKind::Currency => "currency",
            FieldKind::Text => "text",
            FieldKind::Blob => "blob",
            FieldKind::Date => "date",
            FieldKind::DateTime => "date-time",
            FieldKind::Json => "json",
            FieldKind::Reference(_) => "reference",
        }
    }
}

/// A field filled by the ORM rather than by the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AutoTime {
    /// Set by the application.
    #[default]
    No,
    /// Set to the current time when the record is added.
    Created,
    /// Set to the current time when the record is added or updated.
    Modified,
}

/// One field of a table (the ID is not a field: every table has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    /// The name used in WHERE clauses, ORDER BY, field subsets and JSON.
    pub name: &'static str,
    /// The column that stores it, which may differ from `name`.
    pub column: &'static str,
    /// What it holds.
    pub kind: FieldKind,
    /// Whether it may be NULL (an `Option`).
    pub nullable: bool,
    /// Whether a unique index enforces it.
    pub unique: bool,
    /// Whether a plain index speeds lookups on it.
    pub indexed: bool,
    /// Whether the ORM fills it with the time.
    pub auto: AutoTime,
}

impl Field {
    /// A field stored in a column of its own name: NOT NULL, no index, no
    /// automatic time. For tables declared by hand rather than derived.
    pub const fn new(name: &'static str, kind: FieldKind) -> Field {
        Field {
            name,
            column: name,
            kind,
            nullable: false,
            unique: false,
            indexed: false,
            auto: AutoTime::No,
        }
    }

    /// The same field, filled with the time as `auto` says.
    pub const fn auto(self, auto: AutoTime) -> Field {
        Field { auto, ..self }
    }

    /// The same field, allowed to be NULL.
    pub const fn nullable(self) -> Field {
        Field {
            nullable: true,
            ..self
        }
    }
}

/// A table: a name and its fields, in declaration order. Built once per record type
/// by `#[derive(Record)]` and shared as `&'static`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Table {
    /// The table's name (the struct's name unless overridden).
    pub name: &'static str,
    /// The fields after the ID, in declaration order.
    pub fields: &'static [Field],
}

/// A column a query names: the ID or a field by its index in [`Table::fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    /// The ID (also accepted as `RowID`).
    Id,
    /// The field at this index.
    Field(usize),
}

impl Table {
    /// The index of the field called `name`, ignoring ASCII case as SQL does.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields
            .iter()
            .position(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// The column called `name`: `ID`/`RowID` or a field.
    pub fn column(&self, name: &str) -> Option<Column> {
        if name.eq_ignore_ascii_case("id") || name.eq_ignore_ascii_case("rowid") {
            Some(Column::Id)
        } else {
            self.field_index(name).map(Column::Field)
        }
    }

    /// The name of a column, for messages and wire forms.
    pub fn column_name(&self, c: Column) -> &'static str {
        match c {
            Column::Id => "ID",
            Column::Field(i) => self.fields[i].name,
        }
    }

    /// Whether two tables are the same: the same static, or equal names.
    pub fn same(&self, other: &Table) -> bool {
        std::ptr::eq(self, other) || self.name == other.name
    }
}
