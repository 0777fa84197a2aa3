//! The memory engine answers as SQLite does: the same writes and the same
//! queries on both, compared result by result.

mod common;

use burrow_core::{Batch, Column, Database, ErrorKind, Filter, Orm, Query, Select, Value};
use common::*;

fn populated(n: u64) -> (Database, Database) {
    let (mem, _) = memory_client();
    let sql = sqlite_client();
    for mut p in people(n, 7) {
        let mut q = p.clone();
        let a = mem.add(&mut p).unwrap();
        let b = sql.add(&mut q).unwrap();
        assert_eq!(a, b);
    }
    (mem, sql)
}

const LIKE_PATTERNS: &[&str] = &[
    "%",
    "",
    "d%",
    "D%",
    "%T",
    "_u%",
    "%o%",
    "%%",
    "100%",
    "a_b",
    "a%b",
    "é%",
    "É%",
    "%ë",
    "__",
    "_",
    "x_y",
    "p1%",
    "%@example.org",
    "{%",
    "%\"k\":1%",
    "Dal_",
    "Dal%",
];

fn predicate(rng: &mut Rng, params: &mut Vec<Value>) -> String {
    let f = *rng.pick(FIELDS);
    let not = if rng.chance(30) { "NOT " } else { "" };
    match rng.below(8) {
        0 | 1 => {
            let op = *rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
            params.push(param_for(f, rng));
            format!("{f} {op} ?")
        }
        2 => {
            let n = 1 + rng.below(4);
            for _ in 0..n {
                params.push(param_for(f, rng));
            }
            let q = vec!["?"; n as usize].join(", ");
            format!("{f} {not}IN ({q})")
        }
        3 => format!("{f} IS {not}NULL"),
        4 => {
            let f = *rng.pick(TEXT_FIELDS);
            params.push(Value::from(*rng.pick(LIKE_PATTERNS)));
            format!("{f} {not}LIKE ?")
        }
        5 => {
            params.push(param_for(f, rng));
            params.push(param_for(f, rng));
            format!("{f} {not}BETWEEN ? AND ?")
        }
        _ => {
            params.push(param_for(f, rng));
            format!("{f} = ?")
        }
    }
}

fn expr(rng: &mut Rng, depth: u32, params: &mut Vec<Value>) -> String {
    if depth == 0 || rng.chance(40) {
        return predicate(rng, params);
    }
    let n = 2 + rng.below(2);
    let op = if rng.chance(50) { " AND " } else { " OR " };
    let parts: Vec<String> = (0..n).map(|_| expr(rng, depth - 1, params)).collect();
    let not = if rng.chance(20) { "NOT " } else { "" };
    format!("{not}({})", parts.join(op))
}

fn by_id(mut v: Vec<Person>) -> Vec<Person> {
    v.sort_by_key(|p| p.id);
    v
}

/// Returns how many rows matched (`None` when both engines refused the query).
fn check_query(
    mem: &Database,
    sql: &Database,
    text: &str,
    params: &[Value],
    rng: &mut Rng,
) -> Option<usize> {
    // Unordered: the same rows (SQLite's order then depends on its plan).
    let q = Query::filter(text, params.to_vec());
    let a = mem.select::<Person>(&q);
    let b = sql.select::<Person>(&q);
    let matched = match (a, b) {
        (Ok(a), Ok(b)) => {
            let n = a.len();
            assert_eq!(by_id(a), by_id(b), "WHERE {text} {params:?}");
            n
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.kind(), b.kind(), "WHERE {text}: {a} / {b}");
            return None;
        }
        (a, b) => panic!("WHERE {text} {params:?}: memory {a:?}, sqlite {b:?}"),
    };
    // Ordered and paged: the same rows in the same order, through the ORM's
    // query on both and through the memory engine's one-table SQL.
    let mut q = Query::filter(text, params.to_vec());
    let mut order = Vec::new();
    for _ in 0..1 + rng.below(2) {
        let f = *rng.pick(FIELDS);
        q = q.order_by(f);
        let desc = rng.chance(50);
        if desc {
            q = q.desc();
        }
        order.push(format!("{f}{}", if desc { " DESC" } else { "" }));
    }
    q = q.order_by("ID");
    let desc = rng.chance(50);
    if desc {
        q = q.desc();
    }
    order.push(format!("ID{}", if desc { " DESC" } else { "" }));
    let mut limit = None;
    let mut offset = 0;
    if rng.chance(60) {
        limit = Some(rng.below(40));
        q = q.limit(limit.unwrap_or(0));
    }
    if rng.chance(40) {
        offset = rng.below(60);
        q = q.offset(offset);
    }
    let a = mem.select::<Person>(&q).unwrap();
    let b = sql.select::<Person>(&q).unwrap();
    assert_eq!(a, b, "{q:?}");
    let filter = if text.is_empty() {
        String::new()
    } else {
        format!(" WHERE {text}")
    };
    let statement = format!(
        "SELECT * FROM Person{filter} ORDER BY {} LIMIT ? OFFSET ?",
        order.join(", ")
    );
    let mut all = params.to_vec();
    all.push(Value::Int(limit.map_or(i64::MAX, |l| l as i64)));
    all.push(Value::Int(offset as i64));
    // Against the query's rows, not SQLite's SQL: SQLite compares a literal
    // with the stored form (an amount in 1/10,000), the ORM's filter with
    // the field's value.
    let by_sql = mem.sql_list::<Person>(&statement, all.as_slice()).unwrap();
    assert_eq!(by_sql, a, "{statement}");
    assert_eq!(
        mem.count::<Person>(text, params).unwrap(),
        sql.count::<Person>(text, params).unwrap(),
        "count WHERE {text}"
    );
    // select_value: max(ID) and the smallest value of a column among the matches.
    let table = <Person as burrow_core::Record>::table();
    let filter = Filter::parse(table, text, params).unwrap();
    let f = *rng.pick(FIELDS);
    let c = table.column(f).unwrap();
    for (col, order) in [
        (Column::Id, vec![(Column::Id, true)]),
        (c, vec![(c, false), (Column::Id, false)]),
    ] {
        let sel = Select {
            filter: filter.clone(),
            order,
            limit: Some(1),
            offset: 0,
        };
        let a = mem
            .engine_of("Person")
            .unwrap()
            .select_value(table, col, &sel)
            .unwrap();
        let b = sql
            .engine_of("Person")
            .unwrap()
            .select_value(table, col, &sel)
            .unwrap();
        assert_eq!(a, b, "select_value {col:?} WHERE {text} {params:?}");
    }
    Some(matched)
}

#[test]
fn fixed_queries_match_sqlite() {
    let (mem, sql) = populated(300);
    let mut rng = Rng::new(1);
    let cases: &[(&str, Vec<Value>)] = &[
        ("", vec![]),
        ("ID = 5", vec![]),
        ("ID IN (1, 3, 3, 999)", vec![]),
        ("Email = ?", vec!["p7@example.org".into()]),
        (
            "Email IN (?, ?) AND Age > 10",
            vec!["p7@example.org".into(), "p8@example.org".into()],
        ),
        ("LastName = 'Dupont'", vec![]),
        ("LastName LIKE 'dupont'", vec![]),
        ("LastName IN ('Dupont', 'Martin') OR Team = 3", vec![]),
        ("Team = 2 AND Age IS NOT NULL", vec![]),
        ("Team IS NULL", vec![]),
        ("Age >= 18 AND Age < 65 AND NOT Active = true", vec![]),
        ("Amount BETWEEN -10 AND 25.5", vec![]),
        ("Born < '1970-01-01' OR Born IS NULL", vec![]),
        ("Seen > ?", vec!["2020-09-14T00:00:00.5".into()]),
        ("Score > 10 AND Score <= ?", vec![Value::Int(90)]),
        ("FirstName NOT LIKE 'a%'", vec![]),
        ("Visits = 4000000000", vec![]),
        ("Boss = 3", vec![]),
        ("Meta LIKE '%\"k\":2%'", vec![]),
        ("Photo = ?", vec![Value::Blob(vec![])]),
        (
            "Photo IS NOT NULL AND Photo > ?",
            vec![Value::Blob(vec![128])],
        ),
        ("Active = true", vec![]),
        ("Active <> 1", vec![]),
        ("NOT (Age < 30 OR Age > 60)", vec![]),
        ("ID NOT IN (1, 2) AND ID BETWEEN 3 AND 40", vec![]),
    ];
    for (text, params) in cases {
        assert!(
            check_query(&mem, &sql, text, params, &mut rng).is_some(),
            "{text}"
        );
    }
}

#[test]
fn random_queries_match_sqlite() {
    let (mem, sql) = populated(300);
    let mut rng = Rng::new(42);
    let (mut some, mut none, mut refused) = (0, 0, 0);
    for _ in 0..600 {
        let mut params = Vec::new();
        let text = expr(&mut rng, 2, &mut params);
        match check_query(&mem, &sql, &text, &params, &mut rng) {
            Some(0) => none += 1,
            Some(_) => some += 1,
            None => refused += 1,
        }
    }
    // The generator must exercise real answers, not only refusals or empty sets.
    assert!(
        some > 250 && none > 30,
        "{some} with rows, {none} empty, {refused} refused"
    );
}

fn all(c: &Database) -> Vec<Person> {
    c.select::<Person>(&Query::all().order_by("ID")).unwrap()
}

#[test]
fn writes_match_sqlite() {
    let (mem, sql) = populated(200);
    let mut rng = Rng::new(9);
    let fresh = people(400, 99);
    for step in 0..600u64 {
        let id = 1 + rng.below(260) as i64;
        match rng.below(6) {
            0 => {
                let mut p = fresh[rng.below(400) as usize].clone();
                p.id = id;
                p.email = format!("u{step}@example.org");
                let (mut a, mut b) = (p.clone(), p);
                let ra = mem.update(&mut a);
                let rb = sql.update(&mut b);
                assert_eq!(ra.is_ok(), rb.is_ok(), "update {id}: {ra:?} {rb:?}");
            }
            1 => {
                let mut p = fresh[rng.below(400) as usize].clone();
                p.id = id;
                let fields: &[&str] = match rng.below(3) {
                    0 => &["Age", "LastName"],
                    1 => &["Team", "Score", "Photo"],
                    _ => &["Email"],
                };
                if fields == ["Email"] {
                    // Sometimes a duplicate: both must refuse it.
                    p.email = format!("p{}@example.org", rng.below(200));
                }
                let (mut a, mut b) = (p.clone(), p);
                let ra = mem.update_fields(&mut a, fields);
                let rb = sql.update_fields(&mut b, fields);
                match (&ra, &rb) {
                    (Err(x), Err(y)) => assert_eq!(x.kind(), y.kind()),
                    (x, y) => assert_eq!(x.is_ok(), y.is_ok(), "update_fields {id}: {ra:?} {rb:?}"),
                }
            }
            2 => assert_eq!(
                mem.delete::<Person>(id).unwrap(),
                sql.delete::<Person>(id).unwrap()
            ),
            3 => {
                let mut p = fresh[rng.below(400) as usize].clone();
                if rng.chance(70) {
                    p.email = format!("n{step}@example.org");
                }
                let (mut a, mut b) = (p.clone(), p);
                let ra = mem.add_with_id(&mut a, id);
                let rb = sql.add_with_id(&mut b, id);
                match (&ra, &rb) {
                    (Err(x), Err(y)) => assert_eq!(x.kind(), y.kind()),
                    _ => assert_eq!(
                        ra.as_ref().ok(),
                        rb.as_ref().ok(),
                        "add {id}: {ra:?} {rb:?}"
                    ),
                }
            }
            4 => {
                let mut params = Vec::new();
                let text = expr(&mut rng, 1, &mut params);
                let text = format!("{text} AND ID > {}", rng.below(250));
                assert_eq!(
                    mem.delete_where::<Person>(&text, &params).unwrap(),
                    sql.delete_where::<Person>(&text, &params).unwrap(),
                    "delete_where {text}"
                );
            }
            _ => {
                // A batch of mixed writes, the forced IDs chosen the same for both.
                let mut ba = Batch::new();
                let mut bb = Batch::new();
                for k in 0..5 {
                    let mut p = fresh[rng.below(400) as usize].clone();
                    p.email = format!("b{step}-{k}@example.org");
                    let id = 1 + rng.below(300) as i64;
                    match rng.below(3) {
                        0 => {
                            ba.add_with_id(p.clone(), id);
                            bb.add_with_id(p, id);
                        }
                        1 => {
                            p.id = id;
                            ba.update(p.clone());
                            bb.update(p);
                        }
                        _ => {
                            ba.delete::<Person>(id);
                            bb.delete::<Person>(id);
                        }
                    }
                }
                let ra = mem.send(&mut ba).unwrap();
                let rb = sql.send(&mut bb).unwrap();
                let shape = |r: &[burrow_core::BatchResult]| {
                    r.iter()
                        .map(|x| format!("{:?}", x).chars().take(6).collect::<String>())
                        .collect::<Vec<_>>()
                };
                assert_eq!(shape(&ra), shape(&rb));
            }
        }
        if step % 50 == 0 {
            assert_eq!(all(&mem), all(&sql), "after step {step}");
        }
    }
    assert_eq!(all(&mem), all(&sql));
    let mut params = Vec::new();
    let text = expr(&mut rng, 2, &mut params);
    check_query(&mem, &sql, &text, &params, &mut rng);
}

#[test]
fn unique_violations_match_sqlite() {
    let (mem, sql) = populated(20);
    for c in [&mem, &sql] {
        let mut p = people(1, 3).remove(0);
        p.email = "p3@example.org".into();
        let e = c.add(&mut p).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UniqueViolation, "{e}");
        let e = c.add_with_id(&mut p.clone(), 4).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UniqueViolation, "{e}");
        let mut q = c.retrieve::<Person>(5).unwrap();
        q.email = "p6@example.org".into();
        let e = c.update(&mut q).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UniqueViolation, "{e}");
        assert_eq!(c.count::<Person>("", &[]).unwrap(), 20);
    }
    assert_eq!(all(&mem), all(&sql));
}

/// A list written as JSON from each engine's rows (as the REST server
/// writes one): the memory engine's typed reads and SQLite's give the same
/// bytes, for every field kind, NULLs included, in both list forms and both
/// dialects.
#[test]
fn json_lists_match_sqlite() {
    use burrow_core::json::{JsonDialect, ListWriter};
    use burrow_core::{Record, RowOps};
    use burrow_sqlite::SqliteEngine;
    use std::sync::Arc;

    let (mem, mem_engine) = memory_client();
    let lite = Arc::new(SqliteEngine::memory().unwrap());
    let sql = Database::open(model(), lite.clone()).unwrap();
    for mut p in people(200, 11) {
        let mut q = p.clone();
        assert_eq!(mem.add(&mut p).unwrap(), sql.add(&mut q).unwrap());
    }
    let t = Person::table();
    let mut columns = vec![Column::Id];
    columns.extend((0..t.fields.len()).map(Column::Field));
    let list = |engine: &dyn RowOps, compact: bool, dialect: JsonDialect| {
        let mut out = Vec::new();
        let mut w = ListWriter::begin(&mut out, t, &columns, compact, dialect);
        engine
            .select(t, &Select::all(), &mut |row| w.row(&mut out, row).map(drop))
            .unwrap();
        w.finish(&mut out);
        String::from_utf8(out).unwrap()
    };
    for compact in [false, true] {
        for dialect in [JsonDialect::Mormot, JsonDialect::Exact] {
            let m = list(mem_engine.as_ref(), compact, dialect);
            assert_eq!(m, list(lite.as_ref(), compact, dialect));
            assert!(m.contains("null"), "the rows hold NULLs");
            assert_eq!(m.matches("p1@example.org").count(), 1, "{m}");
        }
    }
}
