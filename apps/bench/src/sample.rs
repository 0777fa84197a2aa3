//! The benchmark's record, its deterministic data, and the checks that make a
//! fast wrong answer fail.

use burrow::chrono::{DateTime, Days, NaiveDate, Utc};
use burrow::sqlite::rusqlite::Connection;
use burrow::{Currency, Record};

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

/// Checks a freshly filled table through SQL: the row count, the exact sum of
/// Amount, and the content of sampled rows (the first, the last, and every
/// 97th). Returns the number of rows checked this way.
pub fn verify_table(conn: &Connection, n: usize, since: DateTime<Utc>) -> Result<(), String> {
    let sql_err = |e: burrow::sqlite::rusqlite::Error| format!("verification query failed: {e}");
    let (count, sum, min_id, max_id): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(sum(Amount),0), coalesce(min(ID),0), coalesce(max(ID),0) FROM Sample",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .map_err(sql_err)?;
    let want_sum: i64 = (0..n).map(|i| amount(i).scaled()).sum();
    if count != n as i64 || sum != want_sum || min_id != 1 || max_id != n as i64 {
        return Err(format!(
            "table holds {count} rows (IDs {min_id}..{max_id}), Amount sum {sum}; expected {n} rows (IDs 1..{n}), sum {want_sum}"
        ));
    }
    let mut stmt = conn
        .prepare(
            "SELECT ID, FirstName, LastName, Amount, BirthDate, LastChange, CreatedAt FROM Sample WHERE ID = ?1",
        )
        .map_err(sql_err)?;
    let samples = (1..=n as i64)
        .step_by(97)
        .chain(std::iter::once(n as i64))
        .filter(|&id| id >= 1);
    for id in samples {
        let s = stmt
            .query_row([id], |r| {
                let text = |i: usize| r.get::<_, String>(i);
                Ok(Sample {
                    id: r.get(0)?,
                    first_name: text(1)?,
                    last_name: text(2)?,
                    amount: Currency::from_scaled(r.get(3)?),
                    birth_date: burrow::datetime::parse_date(&text(4)?).unwrap_or_default(),
                    last_change: burrow::datetime::parse_datetime(&text(5)?).unwrap_or_default(),
                    created_at: burrow::datetime::parse_datetime(&text(6)?).unwrap_or_default(),
                })
            })
            .map_err(sql_err)?;
        check(&s, since)?;
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
