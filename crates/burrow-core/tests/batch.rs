//! Batches keep their items in the order they were given, and a `Vec` handed
//! to `add_all` keeps its records where they are.

use burrow_core::chrono::{TimeZone, Utc};
use burrow_core::{Batch, BatchOp, Fields, ValueRef};
use burrow_derive::Record;

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Note")]
struct Note {
    id: i64,
    text: String,
    #[burrow(created)]
    created: burrow_core::chrono::DateTime<Utc>,
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Tag")]
struct Tag {
    id: i64,
    name: String,
}

fn note(text: &str) -> Note {
    Note {
        text: text.into(),
        ..Note::default()
    }
}

/// What each item is, as text: the op, its table and its record's first field.
fn described(batch: &Batch) -> Vec<String> {
    batch
        .items()
        .iter()
        .map(|item| {
            let (what, text) = match item.op {
                BatchOp::Add { id, row } => (format!("add {id:?}"), format!("{:?}", row.field(0))),
                BatchOp::Update { row, .. } => ("update".into(), format!("{:?}", row.field(0))),
                BatchOp::Delete { id } => (format!("delete {id}"), String::new()),
            };
            format!("{what} {} {text}", item.table.name)
        })
        .collect()
}

#[test]
fn items_keep_the_order_they_were_given_in() {
    let mut batch = Batch::new();
    batch.add(note("a"));
    batch.add_all(vec![note("b"), note("c")]);
    batch.add(note("d"));
    batch.add_all([note("e")]);
    batch.add_with_id(note("f"), 7);
    batch.add_all(Vec::<Note>::new());
    batch.add_all(vec![Tag {
        id: 0,
        name: "t".into(),
    }]);
    batch.update(note("g"));
    batch.add_all((0..2).map(|i| note(&format!("h{i}"))));
    batch.delete::<Note>(3);
    assert_eq!(batch.len(), 11);
    let text = |t: &str| format!("Text({t:?})");
    let want: Vec<String> = [
        ("add None", "Note", text("a")),
        ("add None", "Note", text("b")),
        ("add None", "Note", text("c")),
        ("add None", "Note", text("d")),
        ("add None", "Note", text("e")),
        ("add Some(7)", "Note", text("f")),
        ("add None", "Tag", text("t")),
        ("update", "Note", text("g")),
        ("add None", "Note", text("h0")),
        ("add None", "Note", text("h1")),
        ("delete 3", "Note", String::new()),
    ]
    .iter()
    .map(|(w, t, x)| format!("{w} {t} {x}"))
    .collect();
    assert_eq!(described(&batch), want);
}

#[test]
fn a_vec_given_to_add_all_is_not_copied_and_is_stamped() {
    let recs: Vec<Note> = (0..1000).map(|i| note(&i.to_string())).collect();
    let first = recs.as_ptr();
    let mut batch = Batch::new();
    batch.add_all(recs);
    let now = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    batch.stamp(now);
    let items = batch.items();
    assert_eq!(items.len(), 1000);
    let BatchOp::Add { row, .. } = items[0].op else {
        panic!("an add");
    };
    assert_eq!(
        std::ptr::from_ref::<dyn Fields>(row).cast::<Note>(),
        first,
        "the records stay in the Vec's buffer"
    );
    for item in &items {
        let BatchOp::Add { row, .. } = item.op else {
            panic!("an add");
        };
        assert_eq!(
            format!("{:?}", row.field(1)),
            format!("{:?}", ValueRef::DateTime(now)),
            "stamped"
        );
    }
}
