//! Bad input: each case checks the error kind and that no data changed.

use burrow::{params, Batch, Error, ErrorKind, Orm, Query, Value};

use crate::common::*;

conformance!(
    unknown_field_in_where,
    unknown_field_in_order_by,
    unknown_field_in_update_fields,
    wrong_parameter_type,
    placeholder_count_mismatch,
    nul_in_text_is_kept_or_refused,
    injection_text_as_a_value_is_stored_verbatim,
    injection_text_as_a_where_parameter_matches_nothing,
    injection_looking_where_text_is_refused,
    duplicate_unique_key_on_add,
    duplicate_unique_key_on_update,
    wrong_type_stored_in_a_column,
    invalid_utf8_stored_in_a_text_column,
);

/// Everything a test can compare before and after: both tables in ID order,
/// and (on SQLite) the schema.
type Snapshot = (Vec<Sample>, Vec<Tag>, Option<Vec<String>>);

fn snapshot(store: &Store, c: &impl Orm) -> Result<Snapshot, Box<dyn std::error::Error>> {
    let schema = store
        .raw(|conn| {
            let mut st =
                conn.prepare("SELECT type || ' ' || name FROM sqlite_master ORDER BY 1")?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    Ok((all(c)?, all(c)?, schema))
}

/// A store with a few samples and tags, and its snapshot.
fn seeded(
    f: &dyn Factory,
) -> Result<(Store, burrow::Database, Snapshot), Box<dyn std::error::Error>> {
    let store = f.fresh()?;
    let c = store.open()?;
    let samples = seed(&c, "b", 5)?;
    for (i, s) in samples.iter().enumerate().take(2) {
        let mut t = Tag::new(&format!("tag{i}"), s.id);
        c.add(&mut t)?;
    }
    let snap = snapshot(&store, &c)?;
    if let Some(schema) = &snap.2 {
        assert!(schema.iter().any(|s| s == "table Sample"), "{schema:?}");
    }
    Ok((store, c, snap))
}

/// Runs a WHERE through every call that takes one, expecting `kind` from each.
fn refused_everywhere(c: &impl Orm, w: &str, p: &[Value], kind: ErrorKind) -> Result<(), String> {
    let check = |what: &str, r: burrow::Result<()>| -> Result<(), String> {
        match r {
            Err(e) if e.kind() == kind => Ok(()),
            Err(e) => Err(format!(
                "{what} WHERE {w:?} {p:?}: wanted {kind:?}, got {:?}: {e}",
                e.kind()
            )),
            Ok(()) => Err(format!("{what} WHERE {w:?} {p:?} was accepted")),
        }
    };
    check("list", c.list::<Sample>(w, p).map(drop))?;
    check(
        "select",
        c.select::<Sample>(&Query::filter(w, p.to_vec())).map(drop),
    )?;
    check("count", c.count::<Sample>(w, p).map(drop))?;
    check("get_where", c.get_where::<Sample>(w, p).map(drop))?;
    check("delete_where", c.delete_where::<Sample>(w, p).map(drop))?;
    check(
        "one_field_value",
        c.one_field_value::<Sample>("Name", w, p).map(drop),
    )?;
    check(
        "for_each",
        c.for_each::<Sample>(&Query::filter(w, p.to_vec()), &mut |_| Ok(())),
    )?;
    Ok(())
}

fn unknown_field_in_where(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    for (w, p) in [
        ("Nope = ?", params![1]),
        ("Name = ? AND Nope = 1", params!["b1"]),
        ("Age > 1 OR Missing IS NULL", vec![]),
        ("name_ = 'b1'", vec![]),
        ("Sample = 1", vec![]),
        ("\"Nope\" = 1", vec![]),
        ("[Na me] = 1", vec![]),
        ("LAST_NAME = 'x'", vec![]),
    ] {
        refused_everywhere(&c, w, &p, ErrorKind::BadInput)?;
        match c.list::<Sample>(w, &p) {
            Err(Error::UnknownField {
                table: "Sample", ..
            }) => {}
            other => return Err(format!("{w}: expected UnknownField, got {other:?}").into()),
        }
    }
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after unknown fields in WHERE",
    )?;
    Ok(())
}

fn unknown_field_in_order_by(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    for field in [
        "Nope",
        "Name; DROP TABLE Sample",
        "Name DESC",
        "1",
        "",
        "random()",
        "\"Name\"",
        "Name --",
    ] {
        let q = Query::all().order_by(field);
        let e = expect_kind!(c.select::<Sample>(&q), BadInput);
        assert!(matches!(e, Error::UnknownField { .. }), "{field:?}: {e:?}");
        expect_kind!(c.for_each::<Sample>(&q, &mut |_| Ok(())), BadInput);
        let q = Query::filter("Age > ?", params![1])
            .order_by("Age")
            .order_by(field);
        expect_kind!(c.select::<Sample>(&q), BadInput);
    }
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after unknown ORDER BY",
    )?;
    Ok(())
}

fn unknown_field_in_update_fields(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let mut local = before.0[1].clone();
    local.name = "changed".into();
    local.age = 1234;
    for fields in [
        &["Name", "Nope"][..],
        &["Nope"],
        &["ID"],
        &["RowID"],
        &["Name; DROP TABLE Sample"],
        &["Age = 0, Name"],
    ] {
        let e = expect_kind!(c.update_fields(&mut local, fields), BadInput);
        assert!(matches!(e, Error::UnknownField { .. }), "{fields:?}: {e:?}");
    }
    let e = expect_kind!(c.update_fields(&mut local, &[]), BadInput);
    assert!(matches!(e, Error::BadInput(_)), "empty field list: {e:?}");
    // The ORM's own time stamping of the local record may happen, but nothing
    // reaches the store.
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after bad field subsets",
    )?;
    Ok(())
}

fn wrong_parameter_type(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let cases: Vec<(&str, Vec<Value>)> = vec![
        ("Age = ?", params!["abc"]),
        ("Age = ?", params!["1; DROP TABLE Sample"]),
        ("Age = ?", params!["1"]),
        ("Age = ?", params![1.5]),
        ("Age = ?", params![vec![1u8]]),
        ("Age = ?", params![cur("1")]),
        ("Age = 'abc'", vec![]),
        ("Age = 99999999999999999999", vec![]),
        ("ID = ?", params!["1 OR 1=1"]),
        ("ID IN (?, ?)", params![1, "x"]),
        ("Amount > ?", params!["abc"]),
        ("Amount > ?", params!["1.23456"]),
        ("Amount > ?", params![f64::INFINITY]),
        ("Amount > ?", params![true]),
        ("Born < ?", params!["not a date"]),
        ("Born < ?", params!["2023-02-30"]),
        ("Born < ?", params![5]),
        ("Name = ?", params![5]),
        ("Name = ?", params![true]),
        ("Name = ?", params![vec![0u8, 1]]),
        ("Name LIKE ?", params![1]),
        ("Age LIKE ?", params!["1%"]),
        ("Age BETWEEN ? AND ?", params![1, "z"]),
        ("CreatedAt > ?", params!["yesterday"]),
        ("CreatedAt > ?", params![12]),
        ("Note = ?", params![Value::Null]),
        ("Name = NULL", vec![]),
    ];
    for (w, p) in &cases {
        refused_everywhere(&c, w, p, ErrorKind::BadInput)?;
    }
    // The type errors say where.
    let e = expect_kind!(c.count::<Sample>("Age = ?", &params!["abc"]), BadInput);
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("Age"), "{e}");
    let e = expect_kind!(c.count::<Tag>("Weight > ?", &params!["heavy"]), BadInput);
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after wrong parameter types",
    )?;
    Ok(())
}

fn placeholder_count_mismatch(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    for (w, p) in [
        ("Name = ?", vec![]),
        ("Name = ? AND Age = ?", params!["b1"]),
        ("Name = ?", params!["b1", "b2"]),
        ("Age IN (?, ?, ?)", params![1, 2]),
        ("Age BETWEEN ? AND ?", params![1]),
        ("Name = 'b1'", params!["b1"]),
        ("", params![1]),
        ("   ", params!["x"]),
    ] {
        refused_everywhere(&c, w, &p, ErrorKind::BadInput)?;
        match c.count::<Sample>(w, &p) {
            Err(Error::InvalidWhere(_)) => {}
            other => {
                return Err(format!("{w:?} {p:?}: expected InvalidWhere, got {other:?}").into())
            }
        }
    }
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after placeholder mismatches",
    )?;
    Ok(())
}

const INJECTIONS: &[&str] = &[
    "x'); DROP TABLE Sample; --",
    "'; DELETE FROM Sample; --",
    "' OR '1'='1",
    "\" OR \"\"=\"",
    "Robert'); DROP TABLE Tag;--",
    "1; UPDATE Sample SET Age = 0",
    "?",
    "?, ?",
    ":(1):",
    "/* comment */",
    "\\'; DROP TABLE Sample; --",
    "x\u{0}'; DROP TABLE Sample; --",
];

fn nul_in_text_is_kept_or_refused(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let mut s = Sample::new("nul \u{0} inside", 1, "1");
    if f.text_holds_nul() {
        c.add(&mut s)?;
        same(&c.retrieve::<Sample>(s.id)?, &s, "NUL in text")?;
        return Ok(());
    }
    expect_kind!(c.add(&mut s), BadInput);
    let mut batch = Batch::new().rollback_on_error(true);
    batch.add(Sample::new("fine", 2, "1"));
    batch.add(s.clone());
    match c.send(&mut batch) {
        Err(Error::Batch { index: 1, source }) if source.kind() == ErrorKind::BadInput => {}
        other => return Err(format!("a batch holding NUL text: {other:?}").into()),
    }
    same(&snapshot(&store, &c)?, &before, "data after a refused NUL")
}

fn injection_text_as_a_value_is_stored_verbatim(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let mut ids = Vec::new();
    let texts: Vec<String> = INJECTIONS.iter().map(|t| storable(f, t)).collect();
    for (i, text) in texts.iter().enumerate() {
        let text = &text.as_str();
        let mut s = Sample::new(text, 100 + i as i32, "1");
        s.last_name = (*text).to_owned();
        s.note = Some((*text).to_owned());
        c.add(&mut s)?;
        let back: Sample = c.retrieve(s.id)?;
        same(&back, &s, &format!("value {text:?}"))?;
        // Found by itself as a parameter, and by nothing else.
        let found = c.list::<Sample>("Name = ?", &params![*text])?;
        same(&found, &vec![s.clone()], &format!("WHERE Name = {text:?}"))?;
        assert_eq!(
            c.count::<Sample>("LastName = ? AND Note = ?", &params![*text, *text])?,
            1
        );
        // Through update and a batch too.
        let mut upd = back.clone();
        upd.note = Some(format!("{text}{text}"));
        c.update_fields(&mut upd, &["Note"])?;
        assert_eq!(c.retrieve::<Sample>(s.id)?.note, upd.note);
        let mut t = Tag::new(text, s.id);
        let mut batch = Batch::new();
        batch.add(t.clone());
        let r = c.send(&mut batch)?;
        t.id = r[0].id().ok_or("batch add")?;
        same(&c.retrieve::<Tag>(t.id)?, &t, &format!("tag {text:?}"))?;
        ids.push((s.id, t.id));
    }
    // Nothing else changed: the seeded rows are intact, the tables are there.
    let (samples, tags, schema) = snapshot(&store, &c)?;
    assert_eq!(samples.len(), before.0.len() + INJECTIONS.len());
    assert_eq!(tags.len(), before.1.len() + INJECTIONS.len());
    for s in &before.0 {
        same(&c.retrieve::<Sample>(s.id)?, s, "seeded row")?;
    }
    same(&schema, &before.2, "schema")?;
    if let Some(n) = store.raw_count("Sample") {
        assert_eq!(n? as usize, samples.len());
    }
    // And deleting by the injection value deletes exactly its row.
    for (text, (sid, _)) in texts.iter().zip(&ids) {
        assert_eq!(
            c.delete_where::<Sample>("Name = ?", &params![text.as_str()])?,
            1
        );
        assert!(c.get::<Sample>(*sid)?.is_none());
    }
    same(&all::<Sample>(&c)?, &before.0, "after deleting by value")?;
    Ok(())
}

fn injection_text_as_a_where_parameter_matches_nothing(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let texts: Vec<String> = INJECTIONS.iter().map(|t| storable(f, t)).collect();
    for text in &texts {
        let text = &text.as_str();
        assert_eq!(
            c.count::<Sample>("Name = ?", &params![*text])?,
            0,
            "{text:?}"
        );
        assert!(c
            .list::<Sample>("Name = ? OR LastName = ?", &params![*text, *text])?
            .is_empty());
        assert!(c
            .get_where::<Sample>("Note = ?", &params![*text])?
            .is_none());
        assert_eq!(c.delete_where::<Sample>("Name = ?", &params![*text])?, 0);
        assert_eq!(c.delete_where::<Tag>("Label IN (?)", &params![*text])?, 0);
        assert_eq!(
            c.one_field_value::<Sample>("Age", "Name = ?", &params![*text])?,
            None
        );
    }
    same(
        &snapshot(&store, &c)?,
        &before,
        "data after injection parameters",
    )?;
    Ok(())
}

fn injection_looking_where_text_is_refused(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let texts = [
        "1=1; DROP TABLE Sample",
        "1=1",
        "Name = 'b1'; DROP TABLE Sample; --",
        "Name = 'b1'; DELETE FROM Sample",
        "Name = 'a' OR 1=1",
        "Name = 'a' OR 'x'='x'",
        "Name = 'a' OR TRUE",
        "Name = 'b1' -- AND Age = 99",
        "Name = 'b1' /* comment */",
        "Name = 'b1' # comment",
        "ID IN (SELECT ID FROM Sample)",
        "Name = (SELECT Name FROM Sample LIMIT 1)",
        "EXISTS (SELECT 1 FROM Sample)",
        "Name = 'a' UNION SELECT * FROM Sample",
        "lower(Name) = 'b1'",
        "Name = lower('B1')",
        "ID = 1 OR ID = sqlite_version()",
        "Name = 'a' AND randomblob(1000000000) IS NOT NULL",
        "Age = 1 + 1",
        "Age = Age",
        "Name = LastName",
        "Name = \"Name\"",
        "\"Name\" = 'a' OR \"\"x\" = 'y'",
        "Name GLOB '*'",
        "Name REGEXP '.*'",
        "Name MATCH 'b1'",
        "Name LIKE 'b%' ESCAPE '!'",
        "Name COLLATE NOCASE = 'B1'",
        "CAST(Age AS TEXT) = '1'",
        "Age = 1 LIMIT 1",
        "Age = 1 ORDER BY Name",
        "Age = 1 GROUP BY Name",
        "Name = 'b1\\' OR 1=1 --'",
        "Name = 'b1' OR Name = 'b2' OR",
        "Name = :('b1'): OR 1=1",
        "Name = :(1); DROP TABLE Sample; --):",
        "Name = 'unterminated",
        "Name = x'00'",
        "Name = 'a'\u{0}; DROP TABLE Sample",
        "Name = 'a';",
        ";",
        "()",
        "NOT",
        "ID = 1) OR (1=1",
        "ID = 0x10",
        "ID = 1e999",
        "ID = ? OR ?",
        "Name IS 'b1'",
        "Name IN ()",
        "Name IN (SELECT Name FROM Tag)",
        "Age BETWEEN 1 AND 3 OR Age BETWEEN",
        "rowid = 1; VACUUM",
        "Name = 'b1' AND sqlite_master.name = 'Sample'",
        "Name = 'b1'; ATTACH DATABASE '/tmp/x' AS x",
        "Name = 'b1'; PRAGMA writable_schema = 1",
    ];
    for w in texts {
        let p: Vec<Value> = if w.contains('?') {
            params![1, 2]
        } else {
            vec![]
        };
        refused_everywhere(&c, w, &p, ErrorKind::BadInput)?;
        same(
            &snapshot(&store, &c)?,
            &before,
            &format!("data after WHERE {w:?}"),
        )?;
    }
    // Things that look odd but are valid, to show the checks are not blanket.
    assert_eq!(c.count::<Sample>("[Name] = 'b1' AND \"Age\" = 1", &[])?, 1);
    assert_eq!(
        c.count::<Sample>("name = 'b1''; DROP TABLE Sample; --'", &[])?,
        0
    );
    assert_eq!(
        c.count::<Sample>("(((Age = -1)) OR NOT (NOT Age = 2))", &[])?,
        1
    );
    Ok(())
}

fn duplicate_unique_key_on_add(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let mut dup = Sample::new("b2", 50, "5");
    let e = expect_kind!(c.add(&mut dup), UniqueViolation);
    match &e {
        Error::UniqueViolation { table, .. } => assert_eq!(table, "Sample"),
        other => return Err(format!("expected Error::UniqueViolation, got {other:?}").into()),
    }
    assert_eq!(dup.id, 0, "no ID set on failure");
    let mut dup_tag = Tag::new("tag0", before.0[3].id);
    expect_kind!(c.add(&mut dup_tag), UniqueViolation);
    // Both a taken ID and a taken name.
    let mut both = Sample::new("b3", 1, "1");
    expect_kind!(c.add_with_id(&mut both, before.0[0].id), UniqueViolation);
    // A taken name with a free forced ID.
    let mut name_only = Sample::new("b3", 1, "1");
    expect_kind!(c.add_with_id(&mut name_only, 777_777), UniqueViolation);
    assert!(c.get::<Sample>(777_777)?.is_none());
    // Inside a transaction the failure does not end it, and nothing of the
    // failed add shows.
    let tx = c.transaction()?;
    let mut ok = Sample::new("fresh", 1, "1");
    tx.add(&mut ok)?;
    let mut bad = Sample::new("fresh", 2, "2");
    expect_kind!(tx.add(&mut bad), UniqueViolation);
    assert_eq!(tx.count::<Sample>("Name = 'fresh'", &[])?, 1);
    tx.rollback()?;
    same(&snapshot(&store, &c)?, &before, "data after duplicate adds")?;
    Ok(())
}

fn duplicate_unique_key_on_update(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    let mut s = before.0[1].clone();
    s.name = before.0[2].name.clone();
    s.age = 999;
    expect_kind!(c.update(&mut s), UniqueViolation);
    expect_kind!(c.update_fields(&mut s, &["Name", "Age"]), UniqueViolation);
    let mut t = before.1[1].clone();
    t.label = before.1[0].label.clone();
    expect_kind!(c.update(&mut t), UniqueViolation);
    // Updating a row to its own unique value is fine and changes nothing else.
    let mut own = before.0[3].clone();
    c.update_fields(&mut own, &["Name"])?;
    let mut after = snapshot(&store, &c)?;
    // Only the modification time of `own` moved.
    assert!(after.0[3].changed >= before.0[3].changed);
    after.0[3].changed = before.0[3].changed;
    same(&after, &before, "data after duplicate updates")?;
    Ok(())
}

fn wrong_type_stored_in_a_column(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    if store.sqlite().is_none() {
        return Ok(()); // Needs raw SQL to corrupt a row.
    }
    let victim = before.0[2].id;
    let cases: &[(&str, &str, &str)] = &[
        ("Age", "'abc'", "Sample.Age"),
        ("Age", "3000000000", "Sample.Age"),
        ("Age", "1.5", "Sample.Age"),
        ("Age", "x'01'", "Sample.Age"),
        ("Amount", "'lots'", "Sample.Amount"),
        ("Amount", "2.5", "Sample.Amount"),
        ("Born", "'yesterday'", "Sample.Born"),
        ("Born", "20240101", "Sample.Born"),
        ("Name", "x'00ff'", "Sample.Name"),
        ("CreatedAt", "'not a time'", "Sample.CreatedAt"),
        ("Changed", "12345", "Sample.Changed"),
    ];
    for (column, literal, at) in cases {
        let sql = format!("UPDATE Sample SET \"{column}\" = {literal} WHERE ID = {victim}");
        store.raw(|conn| conn.execute(&sql, [])).transpose()?;
        let check = |what: &str, r: burrow::Result<()>| -> TestResult {
            match r {
                Err(Error::TypeMismatch { at: got, .. }) if got == *at => Ok(()),
                other => Err(format!(
                    "{what} after {sql}: expected TypeMismatch at {at}, got {other:?}"
                )
                .into()),
            }
        };
        check("retrieve", c.retrieve::<Sample>(victim).map(drop))?;
        check("get", c.get::<Sample>(victim).map(drop))?;
        let mut into = before.0[0].clone();
        check(
            "retrieve_into",
            c.retrieve_into(victim, &mut into).map(drop),
        )?;
        check("list", c.list::<Sample>("", &[]).map(drop))?;
        check(
            "get_where",
            c.get_where::<Sample>("ID = ?", &params![victim]).map(drop),
        )?;
        check(
            "for_each",
            c.for_each::<Sample>(&Query::all().order_by("ID"), &mut |_| Ok(())),
        )?;
        // The other rows still read.
        for s in before.0.iter().filter(|s| s.id != victim) {
            same(&c.retrieve::<Sample>(s.id)?, s, "an intact row")?;
        }
        assert_eq!(c.count::<Sample>("", &[])?, before.0.len() as u64);
        // Repair the row for the next case.
        let good = &before.0[2];
        let mut fix = good.clone();
        store
            .raw(|conn| {
                conn.execute(
                    "UPDATE Sample SET Age = ?1, Amount = ?2, Born = ?3, Name = ?4, \
                     CreatedAt = '2000-01-01T00:00:00', Changed = '2000-01-01T00:00:00' WHERE ID = ?5",
                    burrow::sqlite::rusqlite::params![
                        good.age,
                        good.amount.scaled(),
                        good.born.to_string(),
                        good.name,
                        victim
                    ],
                )
            })
            .transpose()?;
        fix.created_at = "2000-01-01T00:00:00Z".parse()?;
        fix.changed = fix.created_at;
        same(&c.retrieve::<Sample>(victim)?, &fix, "repaired row")?;
    }
    // Tags: an out-of-range reference is fine (any i64), a text is not.
    let tag = before.1[0].id;
    store
        .raw(|conn| conn.execute("UPDATE Tag SET Owner = 'nobody' WHERE ID = ?1", [tag]))
        .transpose()?;
    match c.retrieve::<Tag>(tag) {
        Err(Error::TypeMismatch { at, .. }) if at == "Tag.Owner" => {}
        other => return Err(format!("expected TypeMismatch at Tag.Owner, got {other:?}").into()),
    }
    Ok(())
}

fn invalid_utf8_stored_in_a_text_column(f: &dyn Factory) -> TestResult {
    let (store, c, before) = seeded(f)?;
    if store.sqlite().is_none() {
        return Ok(());
    }
    let victim = before.0[1].id;
    store
        .raw(|conn| {
            conn.execute(
                "UPDATE Sample SET LastName = CAST(x'41ff42' AS TEXT) WHERE ID = ?1",
                [victim],
            )
        })
        .transpose()?;
    // An error, not a panic, and not a silently altered value.
    let r = c.retrieve::<Sample>(victim);
    assert!(r.is_err(), "invalid UTF-8 read as {r:?}");
    assert!(c.list::<Sample>("", &[]).is_err());
    for s in before.0.iter().filter(|s| s.id != victim) {
        same(&c.retrieve::<Sample>(s.id)?, s, "an intact row")?;
    }
    Ok(())
}
