//! A table of each engine seen through the SQL of an in-memory SQLite engine,
//! as a virtual table: whatever the engine is asked to filter, a statement
//! answers exactly what it answers on the same rows held by SQLite itself.

use std::sync::Arc;

use burrow::chrono::{DateTime, NaiveDate, Utc};
use burrow::sqlite::SqliteEngine;
use burrow::{Currency, Database, Model, Orm, Record};

use crate::common::*;

conformance!(filters_answer_as_sqlite_does);

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(table = "Visit")]
pub struct Visit {
    pub id: i64,
    pub name: String,
    pub small: i32,
    pub weight: f64,
    pub price: Currency,
    pub day: NaiveDate,
    pub at: DateTime<Utc>,
    pub note: Option<String>,
}

fn at(s: &str) -> Result<DateTime<Utc>, Box<dyn std::error::Error>> {
    burrow::driver::datetime::parse_datetime(s).ok_or_else(|| format!("bad time {s}").into())
}

fn visit_ids(rows: burrow::Result<Vec<Visit>>) -> Result<Vec<i64>, Box<dyn std::error::Error>> {
    Ok(rows?.iter().map(|v| v.id).collect())
}

fn filters_answer_as_sqlite_does(f: &dyn Factory) -> TestResult {
    let store = f.fresh()?;
    let main = Arc::new(SqliteEngine::memory()?);
    let client = Database::builder(Model::new().with::<Visit>())
        .default_engine(main.clone())
        .place::<Visit>(store.engine_for(Model::new().with::<Visit>())?)
        .open()?;
    let rows = [
        (
            "Ann",
            1,
            1.5,
            "10",
            "2020-01-01",
            "2020-01-01T10:00:00",
            None,
        ),
        (
            "ann",
            2,
            2.0,
            "10.5",
            "2020-01-02",
            "2020-01-01T10:00:00.5",
            Some("x"),
        ),
        (
            "ANN",
            -3,
            0.25,
            "0",
            "2020-01-02",
            "2020-01-01T10:00:01",
            Some(""),
        ),
        (
            "Bob",
            40_000,
            1.5,
            "-2.25",
            "1999-12-31",
            "2019-12-31T23:59:59.25",
            None,
        ),
        (
            "b",
            7,
            3.75,
            "100",
            "2020-02-29",
            "2020-03-01T00:00:00",
            Some("y"),
        ),
    ];
    for (name, small, weight, price, day, time, note) in rows {
        client.add(&mut Visit {
            id: 0,
            name: name.into(),
            small,
            weight,
            price: price.parse()?,
            day: NaiveDate::parse_from_str(day, "%Y-%m-%d")?,
            at: at(time)?,
            note: note.map(Into::into),
        })?;
    }
    if f.dates_beyond_four_digit_years() {
        // Written with a sign, such dates sort as text before all others.
        for (day, time) in [
            (
                NaiveDate::from_ymd_opt(10_000, 1, 1),
                "+10000-01-01T00:00:00",
            ),
            (NaiveDate::from_ymd_opt(-5, 6, 1), "-0005-06-01T12:00:00"),
        ] {
            client.add(&mut Visit {
                name: format!("far {time}"),
                day: day.ok_or("date")?,
                at: at(time)?,
                ..Visit::default()
            })?;
        }
    }
    // The same rows, in a table of SQLite's own.
    main.with_connection(|c| c.execute_batch("CREATE TABLE VisitCopy AS SELECT * FROM Visit"))?;
    let list = |sql: &str| {
        main.with_connection(|c| {
            let mut s = c.prepare(sql)?;
            let r = s.query_map([], |r| r.get::<_, i64>(0))?;
            r.collect::<Result<Vec<_>, _>>()
        })
    };
    let ids =
        |table: &str, cond: &str| list(&format!("SELECT ID FROM {table} WHERE {cond} ORDER BY ID"));
    for cond in [
        "ID = 2",
        "rowid = 3",
        "ID > 2",
        "ID >= 2 AND ID < 4",
        "ID > 2.5",
        "ID = '2'",
        "ID = NULL",
        "ID > NULL",
        "Name = 'ann'",
        "Name = 'ANN' COLLATE NOCASE",
        "Name COLLATE NOCASE = 'bob'",
        "Name = 'Bob  ' COLLATE RTRIM",
        "Name >= 'b' COLLATE NOCASE",
        "Name = 'Bob '",
        "Name > 'a'",
        "Name < 'a'",
        "Name <= 'b'",
        "Name <> 'Ann'",
        "Name LIKE 'a%'",
        "Small < 3000000000",
        "Small > -5 AND Small <= 7",
        "Small = 40000",
        "Weight >= 1.5",
        "Weight < 2",
        "Price > 100000",
        "Price <= 0",
        "Price = 105000",
        "Price > '5'",
        "Day = '2020-01-02'",
        "Day >= '2020-01-02'",
        "Day > '2020-1-2'",
        "Day < '2020-02-29'",
        "Day <= '2020-01-02'",
        "At < '2020-01-01T10:00:00.5'",
        "At <= '2020-01-01T10:00:01' AND Day >= '1999-12-31'",
        "Day < 5",
        "At > '2020-01-01T10:00:00'",
        "At >= '2020-01-01T10:00:00.5'",
        "At > '2020-01-01 10:00:00'",
        "At < '2020-01-01T10:00:00.0000005'",
        "ID IN (2, 4)",
        "Name IN ('ann', 'b', 'zz')",
        "Note IS NULL",
        "Note IS NOT NULL",
        "Note = ''",
        "Note IS NOT NULL AND Day > '2020-01-01' AND Weight > 1",
    ] {
        let through = ids("Visit", cond)?;
        let native = ids("VisitCopy", cond)?;
        // The ORM's SQL, which an engine filtering as SQLite does answers
        // itself (the rest through the virtual table): the same rows.
        let typed = visit_ids(client.sql_list(
            &format!("SELECT * FROM Visit WHERE {cond} ORDER BY ID"),
            &[],
        ))?;
        if typed != native {
            return Err(format!(
                "{}: WHERE {cond}: {typed:?} from sql_list, {native:?} in SQLite",
                f.name()
            )
            .into());
        }
        if through != native {
            return Err(format!(
                "{}: WHERE {cond}: {through:?} through the virtual table, {native:?} in SQLite",
                f.name()
            )
            .into());
        }
    }
    // Orders, limits and offsets, whichever of them the engine is given.
    for tail in [
        "ORDER BY ID DESC LIMIT 2",
        "ORDER BY ID LIMIT 2 OFFSET 1",
        "ORDER BY rowid DESC LIMIT -1 OFFSET 3",
        "ORDER BY ID LIMIT 0",
        "WHERE Name = 'ann' ORDER BY ID DESC LIMIT 1",
        "WHERE Name LIKE 'b%' ORDER BY ID LIMIT 1",
        "WHERE ID IN (5, 1, 3) ORDER BY ID DESC LIMIT 2",
        "WHERE Weight > 1 ORDER BY ID DESC LIMIT 2 OFFSET 1",
        "ORDER BY Weight DESC, ID LIMIT 3",
        "ORDER BY Day, ID DESC LIMIT 2 OFFSET 2",
    ] {
        let through = list(&format!("SELECT ID FROM Visit {tail}"))?;
        let native = list(&format!("SELECT ID FROM VisitCopy {tail}"))?;
        let typed = visit_ids(client.sql_list(&format!("SELECT * FROM Visit {tail}"), &[]))?;
        if typed != native {
            return Err(format!(
                "{}: {tail}: {typed:?} from sql_list, {native:?} in SQLite",
                f.name()
            )
            .into());
        }
        if through != native {
            return Err(format!(
                "{}: {tail}: {through:?} through the virtual table, {native:?} in SQLite",
                f.name()
            )
            .into());
        }
    }
    let u = "SELECT count(*) FROM (SELECT ID FROM {t} LIMIT 2 OFFSET 4)";
    assert_eq!(
        list(&u.replace("{t}", "Visit"))?,
        list(&u.replace("{t}", "VisitCopy"))?
    );
    let u = "SELECT ID FROM {t} UNION ALL SELECT ID FROM {t} ORDER BY 1 DESC LIMIT 3 OFFSET 2";
    assert_eq!(
        list(&u.replace("{t}", "Visit"))?,
        list(&u.replace("{t}", "VisitCopy"))?
    );
    // Without an order, each side of a UNION ALL may be given the LIMIT.
    for n in [3, 7] {
        let u = format!(
            "SELECT count(*) FROM (SELECT ID FROM Visit UNION ALL SELECT ID FROM Visit LIMIT {n})"
        );
        assert_eq!(list(&u)?, [n]);
    }
    let u = "SELECT ID FROM (SELECT ID FROM Visit LIMIT 2 OFFSET 1) UNION ALL SELECT 0";
    assert_eq!(list(u)?.len(), 3);

    // Typed reads through the ORM's SQL path agree with its own query.
    let sql: Vec<Visit> = client.sql_list(
        "SELECT * FROM Visit WHERE Day >= ? AND Price > ? ORDER BY ID",
        burrow::params!["2020-01-02", 0],
    )?;
    let direct: Vec<Visit> = client.select(
        &burrow::Query::filter("Day >= ? AND Price > ?", burrow::params!["2020-01-02", 0])
            .order_by("ID"),
    )?;
    assert_eq!(sql, direct);
    assert_eq!(sql.len(), 2);
    Ok(())
}
