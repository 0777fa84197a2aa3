//! The ORM through the HTTP client: CRUD, lists, counts, batches, transactions.

use burrow_core::{params, Batch, BatchResult, ErrorKind, Orm, Query, Value};

use crate::common::*;

#[test]
fn crud_round_trips_exactly() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    let mut a = sample(1);
    let id = db.add(&mut a)?;
    assert_eq!(id, 1);
    let back: Sample = db.retrieve(id)?;
    // Exact date-times, blobs, currency and NULL dates survive the wire.
    assert_eq!(back, a);
    a.first_name = "x'); DROP TABLE Sample; --".into();
    a.birth_date = None;
    db.update(&mut a)?;
    assert_eq!(db.retrieve::<Sample>(id)?, a);
    a.first_name = "Partial".into();
    a.email = "not-sent@example.com".into();
    db.update_fields(&mut a, &["FirstName"])?;
    let back: Sample = db.retrieve(id)?;
    assert_eq!(back.first_name, "Partial");
    assert_eq!(back.email, "user1@example.com");
    assert!(db.get::<Sample>(99)?.is_none());
    assert_eq!(
        db.retrieve::<Sample>(99).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let mut ghost = sample(2);
    ghost.id = 77;
    assert_eq!(
        db.update(&mut ghost).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(db.delete::<Sample>(id)?);
    assert!(!db.delete::<Sample>(id)?);
    assert_eq!(count(&db), 0);
    let mut forced = sample(3);
    assert_eq!(db.add_with_id(&mut forced, 500)?, 500);
    let e = db.add_with_id(&mut sample(4), 500).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UniqueViolation);
    // Worded once, as the server's engine words it.
    let text = e.to_string();
    assert_eq!(text.matches("duplicate value refused").count(), 1, "{text}");
    assert!(text.contains("of Sample: "), "{text}");
    Ok(())
}

#[test]
fn add_or_update_over_the_wire() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    let mut a = sample(1);
    a.id = 40;
    assert!(db.add_or_update(&mut a)?);
    assert_eq!(db.retrieve::<Sample>(40)?, a);
    let mut b = sample(2);
    b.id = 40;
    assert!(!db.add_or_update(&mut b)?);
    assert_eq!(b.created_at, a.created_at);
    assert_eq!(db.retrieve::<Sample>(40)?, b);
    // Onto another row's unique email: refused, nothing written.
    let mut c = sample(3);
    db.add(&mut c)?;
    let mut clash = sample(2);
    clash.id = 500;
    assert_eq!(
        db.add_or_update(&mut clash).unwrap_err().kind(),
        ErrorKind::UniqueViolation
    );
    assert!(db.get::<Sample>(500)?.is_none());
    assert_eq!(count(&db), 2);
    Ok(())
}

#[test]
fn lists_counts_and_values() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    for i in 0..20 {
        db.add(&mut sample(i))?;
    }
    let q = Query::filter("Amount > ? AND FirstName LIKE ?", params![10, "First1%"])
        .order_by("Amount")
        .desc()
        .limit(3)
        .offset(1);
    let rows: Vec<Sample> = db.select(&q)?;
    let local: Vec<i64> = (10..20)
        .rev()
        .skip(1)
        .take(3)
        .map(|i| i as i64 + 1)
        .collect();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), local);
    assert_eq!(
        db.count::<Sample>("Email = ?", &params!["user7@example.com"])?,
        1
    );
    assert_eq!(db.count::<Sample>("", &[])?, 20);
    let v = db.one_field_value::<Sample>("Email", "ID = ?", &params![3])?;
    assert_eq!(v, Some(Value::Text("user2@example.com".into())));
    let d = db.one_field_value::<Sample>("BirthDate", "ID = ?", &params![3])?;
    assert!(matches!(d, Some(Value::Date(_))));
    assert_eq!(db.delete_where::<Sample>("ID > ?", &params![15])?, 5);
    assert_eq!(count(&db), 15);
    let all: Vec<Sample> = db.list("", &[])?;
    assert_eq!(all.len(), 15);
    let third = all.iter().find(|s| s.id == 3).cloned();
    assert_eq!(third, Some(db.retrieve::<Sample>(3)?));
    let by_sql: Vec<Sample> = db.sql_list(
        "SELECT * FROM Sample WHERE ID < ? ORDER BY ID DESC",
        params![3],
    )?;
    assert_eq!(by_sql.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1]);
    // An unsafe WHERE never leaves the client: the filter is checked first.
    assert_eq!(
        db.list::<Sample>("ID = 1; DROP TABLE Sample", &[])
            .unwrap_err()
            .kind(),
        ErrorKind::BadInput
    );
    Ok(())
}

#[test]
fn batches_return_ids_and_roll_back_on_error() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    let mut b = Batch::new();
    b.add_all((0..50).map(sample));
    let r = db.send(&mut b)?;
    assert_eq!(
        r.iter().map(|r| r.id()).collect::<Vec<_>>(),
        (1..=50).map(Some).collect::<Vec<_>>()
    );
    let mut one: Sample = db.retrieve(5)?;
    one.first_name = "Updated".into();
    let mut b = Batch::new();
    b.update_fields(one.clone(), &["FirstName"])?;
    b.delete::<Sample>(6);
    b.delete::<Sample>(999);
    b.add(Secret {
        id: 0,
        note: "other table".into(),
    });
    let r = db.send(&mut b)?;
    assert!(matches!(
        r[..],
        [
            BatchResult::Done,
            BatchResult::Done,
            BatchResult::Missing,
            BatchResult::Added(1)
        ]
    ));
    assert_eq!(db.retrieve::<Sample>(5)?.first_name, "Updated");
    // A duplicate email in the middle: with rollback_on_error nothing stays.
    let mut b = Batch::new().rollback_on_error(true);
    b.add(sample(100));
    b.add(sample(7));
    b.add(sample(101));
    let e = db.send(&mut b).unwrap_err();
    assert!(
        matches!(e, burrow_core::Error::Batch { index: 1, .. }),
        "{e}"
    );
    assert_eq!(count(&db), 49);
    // Without it, the failure is reported per item and the rest is written.
    let mut b = Batch::new().auto_transaction_rows(0);
    b.add(sample(100));
    b.add(sample(7));
    b.add(sample(101));
    let r = db.send(&mut b)?;
    assert!(matches!(r[1], BatchResult::Failed(ref e) if e.kind() == ErrorKind::UniqueViolation));
    assert_eq!(count(&db), 51);
    Ok(())
}

#[test]
fn transactions_over_the_wire() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    let other = remote(&server);
    {
        let tx = db.transaction()?;
        tx.add(&mut sample(1))?;
        tx.add(&mut sample(2))?;
        assert_eq!(count(&tx), 2);
        tx.commit()?;
    }
    assert_eq!(count(&other), 2);
    {
        let tx = db.transaction()?;
        tx.delete::<Sample>(1)?;
        assert_eq!(count(&tx), 1);
        // Dropped: rolled back.
    }
    assert_eq!(count(&other), 2);
    let r: burrow_core::Result<()> = db.in_transaction(|d| {
        d.add(&mut sample(3))?;
        d.add(&mut sample(1)).map(|_| ())
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::UniqueViolation);
    assert_eq!(count(&other), 2);
    let tx = db.transaction()?;
    tx.add(&mut sample(3))?;
    tx.rollback()?;
    assert_eq!(count(&other), 2);
    Ok(())
}

#[test]
fn a_remote_transactions_row_callback_may_read_through_it() -> TestResult {
    let (server, _hosted, _) = open_server();
    let db = remote(&server);
    let tx = db.transaction()?;
    for i in 1..=3 {
        tx.add(&mut sample(i))?;
    }
    let mut seen = Vec::new();
    tx.for_each::<Sample>(&Query::all(), &mut |s: &Sample| {
        // A call through the same transaction while its list is read.
        seen.push(tx.retrieve::<Sample>(s.id)?.id);
        Ok(())
    })?;
    assert_eq!(seen, vec![1, 2, 3]);
    tx.commit()?;
    Ok(())
}

#[test]
fn a_remote_transaction_dropped_uncommitted_leaves_nothing() -> TestResult {
    let (server, hosted, _) = open_server();
    let db = remote(&server);
    hosted.add(&mut sample(1))?;
    {
        let tx = db.transaction()?;
        tx.add(&mut sample(2))?;
        let mut s: Sample = tx.retrieve(1)?;
        s.first_name = "Uncommitted".into();
        tx.update(&mut s)?;
        assert_eq!(count(&tx), 2);
        // Dropped here, without a commit.
    }
    // Rolled back by the time the drop returned: the server's engine, which
    // would make these calls wait for an open transaction, answers at once.
    assert_eq!(count(&*hosted), 1);
    assert_eq!(hosted.retrieve::<Sample>(1)?.first_name, "First1");
    assert_eq!(count(&db), 1);
    // The client is not left inside anything: its next transaction opens
    // and commits.
    db.in_transaction(|tx| tx.add(&mut sample(3)))?;
    assert_eq!(count(&*hosted), 2);
    Ok(())
}

#[test]
fn a_client_leaving_mid_transaction_rolls_back() -> TestResult {
    let (server, _, _) = open_server();
    let other = remote(&server);
    {
        let mut c = RawConn::open(server.local_addr());
        assert_eq!(
            c.request("BEGIN", "/root", "", b"").map(|r| r.status),
            Some(200)
        );
        let body = serde_json::to_vec(&serde_json::json!({"FirstName":"Gone","Email":"gone@x"}))?;
        assert_eq!(
            c.request("POST", "/root/Sample", "", &body)
                .map(|r| r.status),
            Some(201)
        );
        // Dropped without END.
    }
    // The rollback runs when the server sees the connection close; the next
    // write waits for it, and the count is then 0.
    other.add(&mut sample(1))?;
    assert_eq!(count(&other), 1);
    assert!(other
        .get_where::<Sample>("Email = ?", &params!["gone@x"])?
        .is_none());
    Ok(())
}

#[test]
fn a_server_keeps_a_table_on_another_server() -> TestResult {
    use std::sync::Arc;
    let (far, far_client, _) = open_server();
    let sqlite = Arc::new(burrow_sqlite::SqliteEngine::memory()?);
    let near_client = Arc::new(
        burrow_core::Database::builder(model())
            .default_engine(sqlite)
            .place::<Secret>(Arc::new(burrow_http::RemoteEngine::connect(&far.url())?))
            .open()?,
    );
    let near = burrow_http::Server::builder(near_client, "root")
        .no_auth()
        .bind("127.0.0.1:0")?;
    let db = remote(&near);
    let id = db.add(&mut Secret {
        id: 0,
        note: "kept far away".into(),
    })?;
    db.add(&mut sample(1))?;
    assert_eq!(far_client.retrieve::<Secret>(id)?.note, "kept far away");
    assert_eq!(far_client.count::<Sample>("", &[])?, 0);
    assert_eq!(db.retrieve::<Secret>(id)?.note, "kept far away");
    assert_eq!(db.count::<Secret>("Note LIKE ?", &params!["kept%"])?, 1);
    Ok(())
}

#[test]
fn a_filter_nesting_past_the_servers_depth_is_refused_before_it_is_sent() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    for i in 0..3 {
        db.add(&mut sample(i))?;
    }
    // Each NOT is one level as written, two once written for the server
    // (`NOT (…)`): 30 travel (60 levels), 40 would reach 80.
    let nots = |n: usize| format!("{}ID = 2", "NOT ".repeat(n));
    let rows: Vec<Sample> = db.select(&Query::filter(nots(30), params![]))?;
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [2]);
    let e = db
        .select::<Sample>(&Query::filter(nots(40), params![]))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadInput, "{e}");
    assert!(e.to_string().contains("nests 80"), "{e}");
    let e = db.count::<Sample>(&nots(40), &[]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadInput, "{e}");
    // The server saw none of them: the table is as it was.
    assert_eq!(count(&db), 3);
    Ok(())
}
