//! A property test: random sequences of writes and reads agree with a
//! `BTreeMap` model, unique-key collisions included.

use std::collections::BTreeMap;
use std::fmt::Display;

use burrow::{
    params, Batch, BatchResult, Currency, Database, Error, ErrorKind, Model, Orm, Record,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::common::*;

conformance!(engine_agrees_with_a_btreemap);

/// The record under test: a unique name among few, so that collisions are
/// frequent.
#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Prop")]
pub struct PropRec {
    pub id: i64,
    #[burrow(unique)]
    pub name: String,
    pub amount: Currency,
    pub age: i32,
    pub note: Option<String>,
}

/// The values of a record, before it has an ID.
#[derive(Debug, Clone)]
pub struct Vals {
    name: u8,
    amount: i64,
    age: i32,
    note: Option<u8>,
}

impl Vals {
    fn rec(&self, id: i64) -> PropRec {
        PropRec {
            id,
            name: format!("name{}", self.name),
            amount: Currency::from_scaled(self.amount),
            age: self.age,
            note: self.note.map(|n| format!("note{n}")),
        }
    }
}

/// Which record an operation targets: an existing one (by position among the
/// model's IDs) or an ID that does not exist.
#[derive(Debug, Clone)]
pub enum Pick {
    Existing(usize),
    Missing(i64),
}

/// One step of a scenario.
#[derive(Debug, Clone)]
pub enum Op {
    Add(Vals),
    AddWithId(i64, Vals),
    Update(Pick, Vals),
    /// Which of Name, Amount, Age, Note to write.
    UpdateFields(Pick, Vals, [bool; 4]),
    Delete(Pick),
    Retrieve(Pick),
    CountAbove(i64),
    DeleteAge(i32),
    Batch(Vec<Vals>, bool),
    Transaction(Vec<Vals>, bool),
}

fn vals() -> impl Strategy<Value = Vals> {
    (0u8..6, -500i64..500, 0i32..4, proptest::option::of(0u8..3)).prop_map(
        |(name, amount, age, note)| Vals {
            name,
            amount,
            age,
            note,
        },
    )
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => any::<usize>().prop_map(Pick::Existing),
        1 => (1_000i64..1_100).prop_map(Pick::Missing),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => vals().prop_map(Op::Add),
        2 => (1i64..12, vals()).prop_map(|(id, v)| Op::AddWithId(id, v)),
        3 => (pick(), vals()).prop_map(|(p, v)| Op::Update(p, v)),
        3 => (pick(), vals(), any::<[bool; 4]>()).prop_map(|(p, v, m)| Op::UpdateFields(p, v, m)),
        2 => pick().prop_map(Op::Delete),
        2 => pick().prop_map(Op::Retrieve),
        1 => (-500i64..500).prop_map(Op::CountAbove),
        1 => (0i32..4).prop_map(Op::DeleteAge),
        1 => (vec(vals(), 0..6), any::<bool>()).prop_map(|(v, rb)| Op::Batch(v, rb)),
        1 => (vec(vals(), 1..4), any::<bool>()).prop_map(|(v, c)| Op::Transaction(v, c)),
    ]
}

type Map = BTreeMap<i64, PropRec>;

fn fail<E: Display>(what: &'static str) -> impl FnOnce(E) -> TestCaseError {
    move |e| TestCaseError::fail(format!("{what}: {e}"))
}

fn id_of(model: &Map, p: &Pick) -> i64 {
    match p {
        Pick::Existing(n) if !model.is_empty() => {
            *model.keys().nth(n % model.len()).expect("in range")
        }
        Pick::Existing(n) => 1_000 + (*n % 100) as i64,
        Pick::Missing(id) => *id,
    }
}

fn name_taken(model: &Map, name: &str, except: i64) -> bool {
    model.iter().any(|(id, r)| *id != except && r.name == name)
}

/// Checks that `r` failed with `kind`.
fn expect_err<T: std::fmt::Debug>(
    r: burrow::Result<T>,
    kind: ErrorKind,
    what: &str,
) -> Result<(), TestCaseError> {
    match r {
        Err(e) if e.kind() == kind => Ok(()),
        other => Err(TestCaseError::fail(format!(
            "{what}: expected {kind:?}, got {other:?}"
        ))),
    }
}

fn add_one(c: &impl Orm, model: &mut Map, v: &Vals, what: &str) -> Result<(), TestCaseError> {
    let mut r = v.rec(0);
    let res = c.add(&mut r);
    if name_taken(model, &r.name, 0) {
        expect_err(res, ErrorKind::UniqueViolation, what)
    } else {
        let id = res.map_err(fail("add"))?;
        prop_assert_eq!(r.id, id);
        prop_assert!(!model.contains_key(&id), "{}: ID {} given twice", what, id);
        model.insert(id, r);
        Ok(())
    }
}

fn step(c: &Database, model: &mut Map, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::Add(v) => add_one(c, model, v, "add")?,
        Op::AddWithId(id, v) => {
            let mut r = v.rec(0);
            let res = c.add_with_id(&mut r, *id);
            if model.contains_key(id) || name_taken(model, &r.name, 0) {
                expect_err(res, ErrorKind::UniqueViolation, "add_with_id")?;
            } else {
                prop_assert_eq!(res.map_err(fail("add_with_id"))?, *id);
                prop_assert_eq!(r.id, *id);
                model.insert(*id, r);
            }
        }
        Op::Update(p, v) => {
            let id = id_of(model, p);
            let mut r = v.rec(id);
            let res = c.update(&mut r);
            if !model.contains_key(&id) {
                expect_err(res, ErrorKind::NotFound, "update of a missing ID")?;
            } else if name_taken(model, &r.name, id) {
                expect_err(res, ErrorKind::UniqueViolation, "update")?;
            } else {
                res.map_err(fail("update"))?;
                model.insert(id, r);
            }
        }
        Op::UpdateFields(p, v, mask) => {
            let id = id_of(model, p);
            let names = ["Name", "Amount", "Age", "Note"];
            let fields: Vec<&str> = names
                .iter()
                .zip(mask)
                .filter(|(_, on)| **on)
                .map(|(n, _)| *n)
                .collect();
            let mut r = v.rec(id);
            let res = c.update_fields(&mut r, &fields);
            if fields.is_empty() {
                expect_err(res, ErrorKind::BadInput, "update_fields with no field")?;
            } else if let Some(old) = model.get(&id) {
                let mut new = old.clone();
                if mask[0] {
                    new.name = r.name.clone();
                }
                if mask[1] {
                    new.amount = r.amount;
                }
                if mask[2] {
                    new.age = r.age;
                }
                if mask[3] {
                    new.note = r.note.clone();
                }
                if mask[0] && name_taken(model, &new.name, id) {
                    expect_err(res, ErrorKind::UniqueViolation, "update_fields")?;
                } else {
                    res.map_err(fail("update_fields"))?;
                    model.insert(id, new);
                }
            } else {
                expect_err(res, ErrorKind::NotFound, "update_fields of a missing ID")?;
            }
        }
        Op::Delete(p) => {
            let id = id_of(model, p);
            let existed = c.delete::<PropRec>(id).map_err(fail("delete"))?;
            prop_assert_eq!(existed, model.remove(&id).is_some(), "delete {}", id);
        }
        Op::Retrieve(p) => {
            let id = id_of(model, p);
            let got = c.get::<PropRec>(id).map_err(fail("get"))?;
            prop_assert_eq!(got.as_ref(), model.get(&id), "get {}", id);
            match model.get(&id) {
                Some(want) => {
                    let r: PropRec = c.retrieve(id).map_err(fail("retrieve"))?;
                    prop_assert_eq!(&r, want);
                }
                None => expect_err(c.retrieve::<PropRec>(id), ErrorKind::NotFound, "retrieve")?,
            }
        }
        Op::CountAbove(t) => {
            let t = Currency::from_scaled(*t);
            let n = c
                .count::<PropRec>("Amount > ?", &params![t])
                .map_err(fail("count"))?;
            let want = model.values().filter(|r| r.amount > t).count() as u64;
            prop_assert_eq!(n, want, "count Amount > {}", t);
            let all = c.count::<PropRec>("", &[]).map_err(fail("count"))?;
            prop_assert_eq!(all, model.len() as u64);
        }
        Op::DeleteAge(age) => {
            let n = c
                .delete_where::<PropRec>("Age = ?", &params![*age])
                .map_err(fail("delete_where"))?;
            let before = model.len();
            model.retain(|_, r| r.age != *age);
            prop_assert_eq!(n, (before - model.len()) as u64);
        }
        Op::Batch(items, rollback) => {
            let mut batch = Batch::new().rollback_on_error(*rollback);
            for v in items {
                batch.add(v.rec(0));
            }
            let res = c.send(&mut batch);
            // What the model says, item by item.
            let mut next = model.clone();
            let mut first_failure = None;
            let mut want: Vec<Option<PropRec>> = Vec::new();
            for (i, v) in items.iter().enumerate() {
                let r = v.rec(0);
                if name_taken(&next, &r.name, 0) {
                    first_failure.get_or_insert(i);
                    want.push(None);
                } else {
                    // A placeholder ID until the engine says which.
                    next.insert(-(i as i64) - 1, r.clone());
                    want.push(Some(r));
                }
            }
            match (rollback, first_failure) {
                (true, Some(index)) => match res {
                    Err(Error::Batch { index: got, source }) => {
                        prop_assert_eq!(got, index);
                        prop_assert_eq!(source.kind(), ErrorKind::UniqueViolation);
                    }
                    other => {
                        return Err(TestCaseError::fail(format!(
                            "batch with rollback: expected Error::Batch at {index}, got {other:?}"
                        )))
                    }
                },
                _ => {
                    let results = res.map_err(fail("send"))?;
                    prop_assert_eq!(results.len(), items.len());
                    for (i, (res, w)) in results.iter().zip(&want).enumerate() {
                        match (res, w) {
                            (BatchResult::Added(id), Some(r)) => {
                                prop_assert!(
                                    !model.contains_key(id),
                                    "batch item {}: ID {} given twice",
                                    i,
                                    id
                                );
                                let mut r = r.clone();
                                r.id = *id;
                                model.insert(*id, r);
                            }
                            (BatchResult::Failed(e), None) => {
                                prop_assert_eq!(e.kind(), ErrorKind::UniqueViolation);
                            }
                            (got, w) => {
                                return Err(TestCaseError::fail(format!(
                                    "batch item {i}: got {got:?}, model says {w:?}"
                                )))
                            }
                        }
                    }
                }
            }
        }
        Op::Transaction(items, commit) => {
            let tx = c.transaction().map_err(fail("begin"))?;
            let mut inside = model.clone();
            for v in items {
                add_one(&tx, &mut inside, v, "add in a transaction")?;
            }
            let n = tx
                .count::<PropRec>("", &[])
                .map_err(fail("count in a transaction"))?;
            prop_assert_eq!(n, inside.len() as u64);
            if *commit {
                tx.commit().map_err(fail("commit"))?;
                *model = inside;
            } else {
                tx.rollback().map_err(fail("rollback"))?;
            }
        }
    }
    Ok(())
}

fn run_case(f: &dyn Factory, ops: &[Op]) -> Result<(), TestCaseError> {
    let store = f.fresh().map_err(fail("fresh store"))?;
    let c = store
        .client(Model::new().with::<PropRec>())
        .map_err(fail("open"))?;
    let mut model = Map::new();
    for (i, op) in ops.iter().enumerate() {
        step(&c, &mut model, op)
            .map_err(|e| TestCaseError::fail(format!("step {i} {op:?}: {e}")))?;
    }
    let stored = all::<PropRec>(&c).map_err(fail("list"))?;
    let want: Vec<PropRec> = model.into_values().collect();
    prop_assert_eq!(stored, want, "final contents");
    Ok(())
}

fn engine_agrees_with_a_btreemap(f: &dyn Factory) -> TestResult {
    // A store that is not configured here skips the test, before the runner
    // would turn that into a failed case.
    drop(f.fresh()?);
    let cases = if f.slow_writes() { 16 } else { 128 };
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 500,
        ..Config::default()
    });
    runner
        .run(&vec(op(), 1..40), |ops| run_case(f, &ops))
        .map_err(|e| format!("{}: {e}", f.name()).into())
}
