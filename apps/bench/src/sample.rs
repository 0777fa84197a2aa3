//! The benchmark's record, its deterministic data, and the checks that make a
//! fast wrong answer fail.

use burrow::chrono::{DateTime, Days, NaiveDate, Utc};
use burrow::{Currency, Record};

use crate::targets::{Stats, Target};

/// The classic sample record.
#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(table = "Sample")]
pub struct Sample {
    pub id: i64,
    pub first_name: String,
    pub last_name: String,
    pub amount: Currency,
    pub birth_date: NaiveDate,
    #[burrow(modified)]
    pub last_change: DateTime<Utc>,
    #[burrow(created)]
    pub created_at: DateTime<Utc>,
}

/// The same table, created by hand for the raw driver.
pub const RAW_DDL: &str = "CREATE TABLE Sample (ID INTEGER PRIMARY KEY, \
    FirstName TEXT NOT NULL DEFAULT '', LastName TEXT NOT NULL DEFAULT '', \
    Amount INTEGER NOT NULL DEFAULT 0, BirthDate TEXT NOT NULL DEFAULT '1970-01-01', \
    LastChange TEXT NOT NULL DEFAULT '1970-01-01T00:00:00', \
    CreatedAt TEXT NOT NULL DEFAULT '1970-01-01T00:00:00')";

/// The amount of row `i` (from 0), in 1/10,000: varied, with all four decimals used.
pub fn amount(i: usize) -> Currency {
    Currency::from_scaled(((i as i64).wrapping_mul(7_919_993) % 100_000_000) + 12_345)
}

fn birth_date(i: usize) -> NaiveDate {
    NaiveDate::from_ymd_opt(1900, 1, 1).expect("valid") + Days::new((i % 40_000) as u64)
}

/// Row `i` (from 0), before insertion (ID 0, times unset).
pub fn make(i: usize) -> Sample {
    Sample {
        id: 0,
        first_name: format!("Salvador{i}"),
        last_name: format!("Dali{}", i * 7),
        amount: amount(i),
        birth_date: birth_date(i),
        last_change: DateTime::UNIX_EPOCH,
        created_at: DateTime::UNIX_EPOCH,
    }
}

/// Rows 0..n.
pub fn make_all(n: usize) -> Vec<Sample> {
    (0..n).map(make).collect()
}

/// Whether `s`, read back, is row `id - 1` as written at or after `since`.
pub fn check(s: &Sample, since: DateTime<Utc>) -> Result<(), String> {
    let i = usize::try_from(s.id - 1).map_err(|_| format!("bad ID {}", s.id))?;
    let want = make(i);
    if s.first_name != want.first_name
        || s.last_name != want.last_name
        || s.amount != want.amount
        || s.birth_date != want.birth_date
        || s.last_change < since
        || s.created_at < since
    {
        return Err(format!("row {} reads back wrong: {s:?}", s.id));
    }
    Ok(())
}

/// Checks a freshly filled table by the engine's own means: the row count, the
/// IDs 1..=n, the exact sum of Amount, and the content of sampled rows (the
/// first, the last, and every 97th).
pub fn verify_table(t: &dyn Target, n: usize, since: DateTime<Utc>) -> Result<(), String> {
    let s = t.stats()?;
    let want_sum: i64 = (0..n).map(|i| amount(i).scaled()).sum();
    let want = Stats {
        count: n as i64,
        amount_sum: want_sum,
        min_id: 1,
        max_id: n as i64,
    };
    if s != want {
        return Err(format!("table holds {s:?}; expected {want:?}"));
    }
    let samples = (1..=n as i64).step_by(97).chain(std::iter::once(n as i64));
    for id in samples {
        let row = t.fetch(id)?.ok_or_else(|| format!("row {id} is missing"))?;
        check(&row, since)?;
    }
    Ok(())
}

/// Checks rows read back by a read mode: every ID 1..=n exactly once, each
/// with its content.
pub fn verify_read(rows: &[Sample], n: usize, since: DateTime<Utc>) -> Result<(), String> {
    if rows.len() != n {
        return Err(format!("read {} rows, expected {n}", rows.len()));
    }
    let mut seen = vec![false; n];
    for s in rows {
        check(s, since)?;
        let slot = &mut seen[(s.id - 1) as usize];
        if *slot {
            return Err(format!("row {} read twice", s.id));
        }
        *slot = true;
    }
    Ok(())
}
