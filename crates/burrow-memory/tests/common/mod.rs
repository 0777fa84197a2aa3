//! Records and data shared by the tests.
#![allow(dead_code)]

use std::sync::Arc;

use burrow_core::chrono::{DateTime, NaiveDate, TimeZone, Utc};
use burrow_core::{Currency, Database, Model, Ref, Value};
use burrow_derive::Record;
use burrow_memory::MemoryEngine;
use burrow_sqlite::SqliteEngine;

/// Every field kind, nullable and not, with a unique and two indexed fields.
#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core")]
pub struct Person {
    pub id: i64,
    #[burrow(unique)]
    pub email: String,
    #[burrow(index)]
    pub last_name: String,
    pub first_name: Option<String>,
    pub age: Option<i32>,
    pub score: Option<f64>,
    pub amount: Currency,
    pub born: Option<NaiveDate>,
    pub seen: Option<DateTime<Utc>>,
    pub active: Option<bool>,
    pub visits: u32,
    pub big: i64,
    pub photo: Option<Vec<u8>>,
    pub meta: serde_json::Value,
    pub boss: Ref<Person>,
    #[burrow(index)]
    pub team: Option<i32>,
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

pub const LAST_NAMES: &[&str] = &[
    "Dupont", "dupont", "DUPONT", "Martin", "Éloïse", "éloïse", "O'Brien", "100%", "a_b", "ab", "",
    "Zoë", "zz", "Dali", "Dalí",
];
pub const FIRST_NAMES: &[&str] = &[
    "Anna", "anne", "Bob", "bobby", "Ça", "Élan", "", "x%y", "x_y",
];

pub fn person(i: u64, rng: &mut Rng) -> Person {
    let born = NaiveDate::from_ymd_opt(
        1950 + rng.below(70) as i32,
        1 + rng.below(12) as u32,
        1 + rng.below(28) as u32,
    );
    Person {
        id: 0,
        email: format!("p{i}@example.org"),
        last_name: rng.pick(LAST_NAMES).to_string(),
        first_name: (!rng.chance(15)).then(|| rng.pick(FIRST_NAMES).to_string()),
        age: (!rng.chance(20)).then(|| rng.below(90) as i32 - 5),
        score: (!rng.chance(20)).then(|| (rng.below(2000) as f64 - 1000.0) / 8.0),
        amount: Currency::from_scaled(rng.below(2_000_000) as i64 - 1_000_000),
        born: born.filter(|_| !rng.chance(15)),
        seen: (!rng.chance(15)).then(|| {
            Utc.timestamp_opt(
                1_600_000_000 + rng.below(100_000) as i64,
                (rng.below(4) * 250_000_000) as u32,
            )
            .unwrap()
        }),
        active: (!rng.chance(20)).then(|| rng.chance(50)),
        visits: rng.below(5) as u32 * 1_000_000_000,
        big: rng.next() as i64 >> rng.below(60),
        photo: (!rng.chance(30)).then(|| (0..rng.below(4)).map(|_| rng.below(256) as u8).collect()),
        meta: serde_json::json!({"k": rng.below(3), "tags": ["a", "b"]}),
        boss: Ref::new(rng.below(20) as i64),
        team: (!rng.chance(25)).then(|| rng.below(6) as i32),
    }
}

pub fn people(n: u64, seed: u64) -> Vec<Person> {
    let mut rng = Rng::new(seed);
    (0..n).map(|i| person(i, &mut rng)).collect()
}

pub fn model() -> Model {
    Model::new().with::<Person>()
}

pub fn memory_client() -> (Database, Arc<MemoryEngine>) {
    let e = Arc::new(MemoryEngine::new());
    (Database::open(model(), e.clone()).unwrap(), e)
}

pub fn sqlite_client() -> Database {
    Database::open(model(), Arc::new(SqliteEngine::memory().unwrap())).unwrap()
}

/// A parameter value for a column of [`Person`], drawn like the data.
pub fn param_for(field: &str, rng: &mut Rng) -> Value {
    let p = person(rng.below(1000), rng);
    match field {
        "ID" => Value::Int(rng.below(320) as i64),
        "Email" => Value::from(format!("p{}@example.org", rng.below(320))),
        "LastName" => Value::from(*rng.pick(LAST_NAMES)),
        "FirstName" => Value::from(*rng.pick(FIRST_NAMES)),
        "Age" => Value::Int(rng.below(90) as i64 - 5),
        "Score" => Value::Real((rng.below(2000) as f64 - 1000.0) / 8.0),
        "Amount" => Value::Currency(p.amount),
        "Born" => Value::from(p.born.unwrap_or_default()),
        "Seen" => Value::from(p.seen.unwrap_or_default()),
        "Active" => Value::Bool(rng.chance(50)),
        "Visits" => Value::Int(rng.below(5) as i64 * 1_000_000_000),
        "Big" => Value::Int(p.big),
        "Photo" => Value::Blob(p.photo.unwrap_or_default()),
        "Meta" => Value::from(p.meta.to_string()),
        "Boss" => Value::Int(rng.below(20) as i64),
        "Team" => Value::Int(rng.below(6) as i64),
        other => panic!("no field {other}"),
    }
}

pub const FIELDS: &[&str] = &[
    "ID",
    "Email",
    "LastName",
    "FirstName",
    "Age",
    "Score",
    "Amount",
    "Born",
    "Seen",
    "Active",
    "Visits",
    "Big",
    "Photo",
    "Meta",
    "Boss",
    "Team",
];

pub const TEXT_FIELDS: &[&str] = &["Email", "LastName", "FirstName", "Meta"];
