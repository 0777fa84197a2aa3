//! `#[derive(Record)]`: the generated table, accessors, row reading and stamping.

use burrow_core::chrono::{DateTime, NaiveDate, TimeZone, Utc};
use burrow_core::{
    AutoTime, Currency, Error, FieldKind, Json, OwnedRow, Record, Ref, Result, Row, Value, ValueRef,
};
use burrow_derive::Record;
use serde::{Deserialize, Serialize};

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Sample")]
struct SampleRecord {
    id: i64,
    #[burrow(unique)]
    first_name: String,
    #[burrow(index, column = "LAST_NAME")]
    last_name: String,
    #[burrow(name = "Amt")]
    amount: Currency,
    #[burrow(modified)]
    last_change: DateTime<Utc>,
    #[burrow(created)]
    created_at: DateTime<Utc>,
    note: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
struct Point {
    x: i32,
    y: i32,
}

/// One field of every supported type.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core")]
struct AllTypes {
    id: i64,
    small: i32,
    big: i64,
    unsigned: u32,
    real: f64,
    flag: bool,
    text: String,
    bytes: Vec<u8>,
    day: Option<NaiveDate>,
    instant: Option<DateTime<Utc>>,
    money: Currency,
    maybe: Option<i64>,
    doc: serde_json::Value,
    point: Json<Point>,
    sample: Ref<SampleRecord>,
    birth_date2: Option<String>,
}

/// A custom ID, a skipped field, a raw identifier, a reference to itself and
/// nullable automatic times.
#[derive(Record, Debug, Default)]
#[burrow(crate = "::burrow_core")]
struct Node {
    #[burrow(id)]
    key: i64,
    r#type: String,
    parent: Option<Ref<Self>>,
    #[burrow(skip)]
    cache: Vec<String>,
    #[burrow(created)]
    born: Option<DateTime<Utc>>,
    #[burrow(modified)]
    touched: Option<DateTime<Utc>>,
}

/// A row read from an engine, columns following the table's fields.
struct VecRow {
    id: i64,
    values: Vec<Value>,
}

impl Row for VecRow {
    fn id(&self) -> Result<i64> {
        Ok(self.id)
    }
    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        self.values
            .get(idx)
            .map(Value::as_ref)
            .ok_or_else(|| Error::BadInput(format!("no column {idx}")))
    }
}

/// Every field of a record, as owned values.
fn values_of<R: Record>(r: &R) -> Vec<Value> {
    (0..R::table().fields.len())
        .map(|i| r.field(i).to_owned())
        .collect()
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).unwrap()
}

fn all_types() -> AllTypes {
    AllTypes {
        id: 7,
        small: -5,
        big: i64::MAX,
        unsigned: u32::MAX,
        real: 1.25,
        flag: true,
        text: "héllo".into(),
        bytes: vec![0, 1, 255],
        day: NaiveDate::from_ymd_opt(2024, 2, 29),
        instant: Some(at(1_700_000_000)),
        money: "12.3456".parse().unwrap(),
        maybe: None,
        doc: serde_json::json!({"a": [1, 2, {"b": null}]}),
        point: Json(Point { x: 3, y: -4 }),
        sample: Ref::new(42),
        birth_date2: Some("x".into()),
    }
}

#[test]
fn table_describes_the_fields() {
    let t = SampleRecord::table();
    assert_eq!(SampleRecord::TABLE_NAME, "Sample");
    assert_eq!(t.name, "Sample");
    assert!(
        std::ptr::eq(t, SampleRecord::table()),
        "one static per type"
    );

    let names: Vec<_> = t.fields.iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "FirstName",
            "LastName",
            "Amt",
            "LastChange",
            "CreatedAt",
            "Note"
        ]
    );
    let columns: Vec<_> = t.fields.iter().map(|f| f.column).collect();
    assert_eq!(
        columns,
        [
            "FirstName",
            "LAST_NAME",
            "Amt",
            "LastChange",
            "CreatedAt",
            "Note"
        ]
    );
    let kinds: Vec<_> = t.fields.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [
            FieldKind::Text,
            FieldKind::Text,
            FieldKind::Currency,
            FieldKind::DateTime,
            FieldKind::DateTime,
            FieldKind::Text
        ]
    );
    let flags: Vec<_> = t
        .fields
        .iter()
        .map(|f| (f.nullable, f.unique, f.indexed, f.auto))
        .collect();
    assert_eq!(
        flags,
        [
            (false, true, false, AutoTime::No),
            (false, false, true, AutoTime::No),
            (false, false, false, AutoTime::No),
            (false, false, false, AutoTime::Modified),
            (false, false, false, AutoTime::Created),
            (true, false, false, AutoTime::No),
        ]
    );
    assert_eq!(t.field_index("last_name"), None);
    assert_eq!(t.field_index("lastname"), Some(1));
}

#[test]
fn table_of_every_type() {
    let t = AllTypes::table();
    assert_eq!(t.name, "AllTypes");
    let kinds: Vec<_> = t
        .fields
        .iter()
        .map(|f| (f.name, f.kind, f.nullable))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Small", FieldKind::I32, false),
            ("Big", FieldKind::I64, false),
            ("Unsigned", FieldKind::U32, false),
            ("Real", FieldKind::F64, false),
            ("Flag", FieldKind::Bool, false),
            ("Text", FieldKind::Text, false),
            ("Bytes", FieldKind::Blob, false),
            ("Day", FieldKind::Date, true),
            ("Instant", FieldKind::DateTime, true),
            ("Money", FieldKind::Currency, false),
            ("Maybe", FieldKind::I64, true),
            ("Doc", FieldKind::Json, false),
            ("Point", FieldKind::Json, false),
            ("Sample", FieldKind::Reference("Sample"), false),
            ("BirthDate2", FieldKind::Text, true),
        ]
    );
    assert!(t.fields.iter().all(|f| f.column == f.name));
}

#[test]
fn custom_id_skip_raw_ident_and_self_reference() -> Result<()> {
    let t = Node::table();
    assert_eq!(t.name, "Node");
    let names: Vec<_> = t.fields.iter().map(|f| (f.name, f.kind)).collect();
    assert_eq!(
        names,
        [
            ("Type", FieldKind::Text),
            ("Parent", FieldKind::Reference("Node")),
            ("Born", FieldKind::DateTime),
            ("Touched", FieldKind::DateTime),
        ]
    );
    assert!(t.fields[2].nullable && t.fields[3].nullable);

    let mut n = Node {
        cache: vec!["kept".into()],
        ..Node::default()
    };
    n.set_id(3);
    assert_eq!((n.id(), n.key), (3, 3));
    n.set_field(0, ValueRef::Text("leaf".into()))?;
    n.set_field(1, ValueRef::Int(9))?;
    assert_eq!(n.r#type, "leaf");
    assert_eq!(n.parent, Some(Ref::new(9)));
    n.set_field(1, ValueRef::Null)?;
    assert_eq!(n.parent, None);

    let row = VecRow {
        id: 11,
        values: vec!["root".into(), Value::Null, Value::Null, at(5).into()],
    };
    n.read_row(&row)?;
    assert_eq!(n.key, 11);
    assert_eq!(n.cache, ["kept"], "read_row leaves skipped fields alone");
    assert_eq!(n.touched, Some(at(5)));
    let fresh = Node::from_row(&row)?;
    assert!(fresh.cache.is_empty(), "from_row defaults skipped fields");
    assert_eq!((fresh.key, fresh.r#type.as_str()), (11, "root"));
    Ok(())
}

#[test]
fn field_and_set_field_round_trip_every_type() -> Result<()> {
    let src = all_types();
    let values = values_of(&src);
    assert_eq!(values[0], Value::Int(-5));
    assert_eq!(values[2], Value::Int(i64::from(u32::MAX)));
    assert_eq!(values[10], Value::Null);
    assert_eq!(values[12], Value::Text(r#"{"x":3,"y":-4}"#.into()));
    assert_eq!(values[13], Value::Int(42));

    let mut dst = AllTypes::default();
    dst.set_id(src.id());
    for (i, v) in values.iter().enumerate() {
        dst.set_field(i, v.as_ref())?;
    }
    assert_eq!(dst, src);

    // And back to defaults (NULLs where nullable), through buffers being reused.
    let empty = AllTypes::default();
    for (i, v) in values_of(&empty).iter().enumerate() {
        dst.set_field(i, v.as_ref())?;
    }
    assert_eq!(dst.id, 7);
    dst.id = 0;
    assert_eq!(dst, empty);
    Ok(())
}

#[test]
fn out_of_range_indexes() {
    let mut r = all_types();
    let n = AllTypes::table().fields.len();
    assert_eq!(r.field(n), ValueRef::Null);
    let err = r.set_field(n, ValueRef::Int(1)).unwrap_err();
    assert!(matches!(err, Error::BadInput(_)), "{err:?}");
}

#[test]
fn from_row_and_read_row() -> Result<()> {
    let src = all_types();
    let row = VecRow {
        id: src.id,
        values: values_of(&src),
    };
    assert_eq!(AllTypes::from_row(&row)?, src);

    let mut r = AllTypes::default();
    r.read_row(&row)?;
    assert_eq!(r, src);

    // Text and blob buffers are reused.
    let before = (r.text.as_ptr(), r.text.capacity());
    let mut values = values_of(&src);
    values[5] = "hi".into();
    r.read_row(&VecRow { id: 8, values })?;
    assert_eq!((r.id, r.text.as_str()), (8, "hi"));
    assert_eq!((r.text.as_ptr(), r.text.capacity()), before);
    Ok(())
}

#[test]
fn type_mismatch_names_the_field() -> Result<()> {
    let mut s = SampleRecord::default();
    let err = s.set_field(2, ValueRef::Bool(true)).unwrap_err();
    match err {
        Error::TypeMismatch {
            at,
            expected,
            found,
        } => {
            assert_eq!(at, "Sample.Amt");
            assert_eq!(expected, "currency");
            assert_eq!(found, "boolean");
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }

    let mut values = values_of(&SampleRecord::default());
    values[0] = Value::Int(3);
    let row = VecRow { id: 1, values };
    for err in [
        SampleRecord::from_row(&row).unwrap_err(),
        s.read_row(&row).unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::TypeMismatch { at, .. } if at == "Sample.FirstName"),
            "{err:?}"
        );
    }

    let mut a = AllTypes::default();
    let err = a.set_field(2, ValueRef::Int(-1)).unwrap_err();
    assert!(
        matches!(&err, Error::TypeMismatch { at, .. } if at == "AllTypes.Unsigned"),
        "{err:?}"
    );
    a.set_field(2, ValueRef::Int(1))?;
    assert_eq!(a.unsigned, 1);
    Ok(())
}

#[test]
fn stamp_sets_created_on_insert_and_modified_always() {
    let mut s = SampleRecord::default();
    s.stamp(at(100), true);
    assert_eq!((s.created_at, s.last_change), (at(100), at(100)));
    s.stamp(at(200), false);
    assert_eq!((s.created_at, s.last_change), (at(100), at(200)));

    let mut n = Node::default();
    n.stamp(at(300), false);
    assert_eq!((n.born, n.touched), (None, Some(at(300))));
    n.stamp(at(400), true);
    assert_eq!((n.born, n.touched), (Some(at(400)), Some(at(400))));

    // A record without automatic times is left alone.
    let mut a = all_types();
    a.stamp(at(500), true);
    assert_eq!(a, all_types());
}

/// A row that answers the typed reads: the library's own [`OwnedRow`], which
/// the HTTP client reads a list into. A record reads from it exactly what it
/// reads through `get` alone, and a value of the wrong type fails the same
/// way, naming the same field.
fn typed_row<R: Record>(id: i64, values: Vec<Value>) -> OwnedRow {
    OwnedRow {
        table: R::table(),
        id,
        values,
    }
}

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core", table = "Times")]
struct Times {
    id: i64,
    day: NaiveDate,
    at: DateTime<Utc>,
}

/// Dates and date-times an engine holds as such (the memory engine) read as
/// they do through `get`; held as text they are parsed, and held as the
/// other kind they fail the same way.
#[test]
fn dates_held_as_such_read_as_through_get() -> Result<()> {
    let src = Times {
        id: 3,
        day: NaiveDate::from_ymd_opt(2024, 2, 29).unwrap(),
        at: Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap(),
    };
    let values = values_of(&src);
    assert!(matches!(values[..], [Value::Date(_), Value::DateTime(_)]));
    let typed = Times::from_row(&typed_row::<Times>(3, values.clone()))?;
    assert_eq!(typed, src);
    let cases: [(usize, Value, bool); 4] = [
        (0, Value::Text("2024-02-29".into()), true),
        (1, Value::Text("2023-11-14T22:13:20.123456789".into()), true),
        (0, Value::DateTime(src.at), false),
        (1, Value::Date(src.day), false),
    ];
    for (idx, v, reads) in cases {
        let mut held = values.clone();
        held[idx] = v.clone();
        let typed = read_both_ways::<Times>(3, held, reads, &format!("field {idx} holding {v:?}"));
        if reads {
            assert_eq!(typed?, src);
        }
    }
    Ok(())
}

/// Reads a record from `values` through `get` alone and through the typed
/// reads, and checks that both read or fail alike (`reads`: whether they
/// read); the typed read's outcome.
fn read_both_ways<R: Record + std::fmt::Debug>(
    id: i64,
    values: Vec<Value>,
    reads: bool,
    what: &str,
) -> Result<R> {
    let plain = R::from_row(&VecRow {
        id,
        values: values.clone(),
    });
    let typed = R::from_row(&typed_row::<R>(id, values));
    assert_eq!(plain.is_ok(), reads, "{what}: {plain:?}");
    assert_eq!(format!("{plain:?}"), format!("{typed:?}"), "{what}");
    typed
}

#[test]
fn typed_reads_give_what_values_give() -> Result<()> {
    // Stored forms as a SQL engine holds them: dates and times as text,
    // currency as its scaled integer.
    let stored = |values: Vec<Value>| {
        values
            .into_iter()
            .map(|v| match v {
                Value::Date(d) => Value::Text(d.to_string()),
                Value::DateTime(t) => {
                    Value::Text(burrow_core::datetime::format_datetime(t).to_string())
                }
                Value::Currency(c) => Value::Int(c.scaled()),
                other => other,
            })
            .collect::<Vec<_>>()
    };
    let src = all_types();
    // Held as a SQL engine stores them, and as the HTTP client holds them
    // (dates, times and currency as such).
    for (values, what) in [
        (stored(values_of(&src)), "stored forms"),
        (values_of(&src), "values as such"),
    ] {
        assert_eq!(read_both_ways::<AllTypes>(7, values, true, what)?, src);
    }
    let money = Value::Currency(Currency::from_scaled(-12_345));
    let field = |name| AllTypes::table().field_index(name).unwrap();
    let cases = [
        (field("Money"), money.clone(), true),
        // An integer field holding a currency: no integer to hand over.
        (field("Big"), money, false),
    ];
    for (idx, v, reads) in cases {
        let mut values = values_of(&src);
        values[idx] = v.clone();
        read_both_ways::<AllTypes>(7, values, reads, &format!("field {idx} holding {v:?}")).ok();
    }

    let base = stored(values_of(&SampleRecord::default()));
    // Field, value held, whether it reads.
    let cases: [(usize, Value, bool); 5] = [
        (0, Value::Int(3), false),                    // text field, an integer
        (2, Value::Text("lots".into()), false),       // currency, other text
        (3, Value::Text("not a time".into()), false), // date-time, other text
        (3, Value::Int(12_345), false),               // date-time, an integer
        (2, Value::Text("12.5".into()), true),        // currency as text
    ];
    for (idx, v, reads) in cases {
        let mut values = base.clone();
        values[idx] = v.clone();
        read_both_ways::<SampleRecord>(1, values, reads, &format!("field {idx} holding {v:?}"))
            .ok();
    }
    Ok(())
}
