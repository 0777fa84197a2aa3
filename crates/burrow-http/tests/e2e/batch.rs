//! Large batch bodies, which the server parses on a second thread while it
//! applies the rows already read: every outcome must be the one of a body
//! parsed whole before anything runs, and a malformed body, however late its
//! fault, changes nothing.

use burrow_core::{Batch, BatchResult, Error, ErrorKind, Orm};
use burrow_http::{Auth, Group, Rights};

use crate::common::*;

/// Rows per body: a body of several hundred kilobytes, well past the size
/// from which the server overlaps parsing and applying, and several of the
/// parts it hands from one thread to the other.
const ROWS: usize = 6000;

/// `"POST@Sample",{…}` for row `i`, with a long name to make the body large.
fn post(i: usize) -> String {
    format!(
        r#""POST@Sample",{{"FirstName":"{:0>80}","Email":"big{i}@example.com"}}"#,
        i
    )
}

/// A batch array: `settings` first, then the rows, then `tail`.
fn body(settings: &str, rows: impl Iterator<Item = String>, tail: &str) -> Vec<u8> {
    let mut b = format!("[{settings}");
    for r in rows {
        if b.len() > 1 {
            b.push(',');
        }
        b.push_str(&r);
    }
    b.push_str(tail);
    b.push(']');
    assert!(b.len() > 512 * 1024);
    b.into_bytes()
}

#[test]
fn large_batches_from_the_client() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    // One transaction (the default covers every row).
    let mut b = Batch::new();
    b.add_all((0..ROWS).map(sample));
    let r = db.send(&mut b)?;
    assert_eq!(
        r.iter().map(|r| r.id()).collect::<Vec<_>>(),
        (1..=ROWS as i64).map(Some).collect::<Vec<_>>()
    );
    assert_eq!(count(&db), ROWS as u64);
    assert_eq!(server.batches_run_ahead(), 1, "applied while parsed");
    for id in [1, 1000, 1001, ROWS as i64] {
        let got: Sample = db.retrieve(id)?;
        let mut want = sample(id as usize - 1);
        want.id = id;
        want.last_change = got.last_change;
        want.created_at = got.created_at;
        assert_eq!(got, want);
    }

    // A duplicate late in a batch that rolls back on error: nothing stays.
    let late = ROWS - 10;
    let rows =
        |dup: usize| (ROWS..2 * ROWS).map(move |i| sample(if i == ROWS + dup { 7 } else { i }));
    let mut b = Batch::new().rollback_on_error(true);
    b.add_all(rows(late));
    let e = db.send(&mut b).unwrap_err();
    assert!(
        matches!(e, Error::Batch { index, .. } if index == late),
        "{e}"
    );
    assert_eq!(count(&db), ROWS as u64);

    // Without a transaction, the failure is reported per row and the rest
    // is written.
    let mut b = Batch::new().auto_transaction_rows(0);
    b.add_all(rows(late));
    let r = db.send(&mut b)?;
    assert!(
        matches!(r[late], BatchResult::Failed(ref e) if e.kind() == ErrorKind::UniqueViolation)
    );
    assert_eq!(r.iter().filter(|r| r.id().is_some()).count(), ROWS - 1);
    assert_eq!(count(&db), 2 * ROWS as u64 - 1);
    // Neither of the last two ran ahead to the end: the first was undone,
    // the second commits row by row.
    assert_eq!(server.batches_run_ahead(), 1);
    Ok(())
}

/// Every verb form, in many parts: adds, adds with an ID, partial updates
/// and deletes of rows 1..=ROWS.
fn mixed(first_new: usize) -> Result<Batch, burrow_core::Error> {
    let mut b = Batch::new();
    for i in 0..ROWS {
        match i % 4 {
            0 => b.add(sample(first_new + i)),
            1 => b.add_with_id(sample(first_new + i), (10 * first_new + i) as i64),
            2 => {
                let mut s = sample(i);
                s.id = i as i64 + 1;
                s.first_name = format!("Changed{i}");
                b.update_fields(s, &["FirstName"])?;
            }
            _ => b.delete::<Sample>(i as i64 + 1),
        }
    }
    Ok(b)
}

#[test]
fn large_mixed_batches_run_ahead_and_in_a_transaction() -> TestResult {
    for in_tx in [false, true] {
        let (server, hosted, _) = open_server();
        let db = remote(&server);
        let mut b = Batch::new();
        b.add_all((0..ROWS).map(sample));
        db.send(&mut b)?;
        let before = server.batches_run_ahead();
        let mut b = mixed(ROWS)?;
        let r = if in_tx {
            let tx = db.transaction()?;
            let r = tx.send(&mut b)?;
            tx.commit()?;
            r
        } else {
            db.send(&mut b)?
        };
        let ahead = server.batches_run_ahead() - before;
        assert_eq!(ahead, 1, "in_tx {in_tx}");
        assert_eq!(r.len(), ROWS);
        assert_eq!(r[1].id(), Some(10 * ROWS as i64 + 1));
        assert!(matches!(r[2], BatchResult::Done) && matches!(r[3], BatchResult::Done));
        assert_eq!(count(&db), ROWS as u64 + ROWS as u64 / 2 - ROWS as u64 / 4);
        assert_eq!(hosted.retrieve::<Sample>(3)?.first_name, "Changed2");
        assert_eq!(hosted.get::<Sample>(4)?, None);
        assert_eq!(
            hosted.retrieve::<Sample>(10 * ROWS as i64 + 1)?.email,
            sample(ROWS + 1).email
        );
    }
    Ok(())
}

#[test]
fn a_large_malformed_body_changes_nothing() -> TestResult {
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    db.add(&mut sample(1))?;
    let tx = r#""automaticTransactionPerRow",100000"#;
    let cases: Vec<Vec<u8>> = vec![
        // Faults in the last row, after thousands of good ones.
        body(tx, (0..ROWS).map(post), r#","POST@Sample",{"FirstName":1}"#),
        body(tx, (0..ROWS).map(post), r#","POST@Sample",{"Nope":"x"}"#),
        body(tx, (0..ROWS).map(post), r#","POST@Nope",{}"#),
        body(tx, (0..ROWS).map(post), r#","SIMPLE@Sample",["a"]"#),
        body(
            tx,
            (0..ROWS).map(post),
            r#","POST@Sample",{"FirstName":"x"} x"#,
        ),
        body(
            r#""rollbackOnError",true"#,
            (0..ROWS).map(post),
            r#","POST@Sample",{"Amount":"lots"}"#,
        ),
        // Without a transaction too.
        body("", (0..ROWS).map(post), r#","POST@Sample",{"FirstName":1}"#),
    ];
    for b in cases {
        let r = raw(addr, "PUT", "/root/Batch", "", &b);
        assert_error(&r, 400);
        assert_eq!(count(&db), 1);
    }
    // Cut short: the closing bracket never comes.
    let mut b = body(tx, (0..ROWS).map(post), "");
    b.pop();
    let r = raw(addr, "PUT", "/root/Batch", "", &b);
    assert_error(&r, 400);
    assert_eq!(count(&db), 1);
    // The same bodies, well formed, are written.
    let r = raw(
        addr,
        "PUT",
        "/root/Batch",
        "",
        &body(tx, (0..ROWS).map(post), ""),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().as_array().map(Vec::len), Some(ROWS));
    assert_eq!(count(&db), ROWS as u64 + 1);
    Ok(())
}

/// Inside a remote transaction, writes run while the body is parsed: a body
/// found malformed (or a write refused) after some ran fails the
/// transaction, which can then only end rolled back; found before any ran,
/// the transaction goes on.
#[test]
fn a_large_body_that_fails_late_fails_its_transaction() -> TestResult {
    let auth = Auth::new()
        .group(Group::new("writer").table::<Sample>(Rights::ALL))
        .user("wes", "wes-secret", "writer")
        .and_then(|a| a.token("tok-wes", "wes"))?;
    let (server, hosted) = server_with(|b| b.auth(auth));
    let addr = server.local_addr();
    let wes = "Authorization: Bearer tok-wes\r\n";
    hosted.add(&mut sample(1))?;
    let late_faults = [
        (400, r#","POST@Sample",{"FirstName":1}"#),
        (400, r#","POST@Sample",{"FirstName":"x"} x"#),
        // Secret: wes may not write to it.
        (403, r#","POST@Secret",{"Note":"x"}"#),
    ];
    for (status, tail) in late_faults {
        let mut c = RawConn::open(addr);
        assert_eq!(req(&mut c, "BEGIN", "/root/Sample", wes, b"")?.status, 200);
        let r = req(
            &mut c,
            "PUT",
            "/root/Batch",
            wes,
            &body("", (0..ROWS).map(post), tail),
        )?;
        assert_error(&r, status);
        // Nothing more goes through it, and END cannot commit it.
        let r = req(
            &mut c,
            "POST",
            "/root/Sample",
            wes,
            br#"{"FirstName":"after"}"#,
        )?;
        assert_error(&r, 400);
        assert!(r.text().contains("rolled back"), "{}", r.text());
        assert_error(&req(&mut c, "END", "/root/Sample", wes, b"")?, 400);
        assert_eq!(hosted.count::<Sample>("", &[])?, 1);
        // The connection goes on, without a transaction.
        assert_eq!(req(&mut c, "GET", "/root/Sample/1", wes, b"")?.status, 200);
    }
    // A fault in the first rows, before any write: the transaction goes on.
    let mut c = RawConn::open(addr);
    assert_eq!(req(&mut c, "BEGIN", "/root/Sample", wes, b"")?.status, 200);
    let early = format!(r#""POST@Sample",{{"FirstName":1}},{}"#, post(0));
    let r = req(
        &mut c,
        "PUT",
        "/root/Batch",
        wes,
        &body(&early, (1..ROWS).map(post), ""),
    )?;
    assert_error(&r, 400);
    let r = req(
        &mut c,
        "PUT",
        "/root/Batch",
        wes,
        &body("", (0..ROWS).map(post), ""),
    )?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(req(&mut c, "END", "/root/Sample", wes, b"")?.status, 200);
    assert_eq!(hosted.count::<Sample>("", &[])?, ROWS as u64 + 1);
    Ok(())
}

fn req(c: &mut RawConn, m: &str, path: &str, h: &str, b: &[u8]) -> Result<Raw, &'static str> {
    c.request(m, path, h, b)
        .ok_or("the server closed the connection")
}

#[test]
fn settings_met_late_in_a_large_body_still_apply_to_it_all() -> TestResult {
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    // One transaction, then a late `stopOnError` with a duplicate after it:
    // the rows before the duplicate stay, the ones after it never run.
    let dup = ROWS - 100;
    let rows = (0..ROWS).map(|i| post(if i == dup { 3 } else { i }));
    let b = body(
        r#""automaticTransactionPerRow",100000"#,
        rows,
        r#","stopOnError",true"#,
    );
    let r = raw(addr, "PUT", "/root/Batch", "", &b);
    assert!(r.status >= 400, "{}", r.text());
    assert_eq!(r.json()["index"], dup, "{}", r.text());
    assert_eq!(count(&db), dup as u64);

    // A late `automaticTransactionPerRow` of 0 leaves every row on its own:
    // a failed row no longer stops or undoes the others.
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    let rows = (0..ROWS).map(|i| post(if i == dup { 3 } else { i }));
    let b = body(
        r#""automaticTransactionPerRow",100000,"rollbackOnError",true"#,
        rows,
        r#","rollbackOnError",false,"automaticTransactionPerRow",0"#,
    );
    let r = raw(addr, "PUT", "/root/Batch", "", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()[dup]["errorCode"].is_number(), "{}", r.json()[dup]);
    assert_eq!(count(&db), ROWS as u64 - 1);

    // A commit every 1000 rows, stopping at the first failure: the chunks
    // before it stay, and so do the rows of its own chunk before it.
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    let rows = (0..ROWS).map(|i| post(if i == 1500 { 3 } else { i }));
    let b = body(
        r#""automaticTransactionPerRow",1000,"stopOnError",true"#,
        rows,
        "",
    );
    let r = raw(addr, "PUT", "/root/Batch", "", &b);
    assert_eq!(r.json()["index"], 1500, "{}", r.text());
    assert_eq!(count(&db), 1500);
    Ok(())
}

#[test]
fn every_right_is_checked_before_a_large_batch_writes() -> TestResult {
    let auth = Auth::new()
        .group(
            Group::new("writer")
                .table::<Sample>(Rights::ALL)
                // A table wes may write to, though not add to: his adds to
                // it are refused as they come, not when its name is read.
                .table::<Secret>(Rights {
                    read: true,
                    update: true,
                    ..Rights::NONE
                }),
        )
        .user("wes", "wes-secret", "writer")
        .and_then(|a| a.token("tok-wes", "wes"))?;
    let (server, hosted) = server_with(|b| b.auth(auth));
    let addr = server.local_addr();
    let wes = "Authorization: Bearer tok-wes\r\n";
    let tx = r#""automaticTransactionPerRow",100000"#;
    let secret = r#","POST@Secret",{"Note":"x"}"#;
    // A write wes may not make, late in the body: nothing is written.
    let r = raw(
        addr,
        "PUT",
        "/root/Batch",
        wes,
        &body(tx, (0..ROWS).map(post), secret),
    );
    assert_error(&r, 403);
    assert_eq!(hosted.count::<Sample>("", &[])?, 0);
    // A malformed body is reported as such, even past a refused write.
    let tail = format!("{secret},\"POST@Sample\",{{\"FirstName\":1}}");
    let r = raw(
        addr,
        "PUT",
        "/root/Batch",
        wes,
        &body(tx, (0..ROWS).map(post), &tail),
    );
    assert_error(&r, 400);
    assert_eq!(hosted.count::<Sample>("", &[])?, 0);
    let r = raw(
        addr,
        "PUT",
        "/root/Batch",
        wes,
        &body(tx, (0..ROWS).map(post), ""),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(hosted.count::<Sample>("", &[])?, ROWS as u64);
    Ok(())
}

#[test]
fn large_batches_at_once_all_apply() -> TestResult {
    let (server, _, _) = open_server();
    // One parser thread: a body arriving while it is busy is parsed on its
    // own request's thread instead of waiting in line.
    let sent: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let db = remote(&server);
                s.spawn(move || -> burrow_core::Result<usize> {
                    let mut b = Batch::new();
                    b.add_all((t * ROWS..(t + 1) * ROWS).map(sample));
                    Ok(db.send(&mut b)?.iter().filter(|r| r.id().is_some()).count())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("sender"))
            .collect::<burrow_core::Result<_>>()
    })?;
    assert_eq!(sent, [ROWS; 3]);
    assert_eq!(count(&remote(&server)), 3 * ROWS as u64);
    assert!((1..=3).contains(&server.batches_run_ahead()));
    Ok(())
}

/// `"POST@Sample",{}` is 17 bytes, and parses to a write with a value for
/// every field of the table: what parsed batches hold is bounded
/// server-wide, counted as they are parsed. A batch that alone would pass
/// the bound is a 413, whichever way it is parsed, and writes nothing.
#[test]
fn what_parsed_batches_hold_is_bounded() -> TestResult {
    let (server, hosted) = server_with(|b| b.no_auth().batch_bytes_in_flight(4 << 20));
    let db = &*hosted;
    let addr = server.local_addr();
    let empty = |n: usize| {
        let rows = vec![r#""POST@Sample",{}"#; n].join(",");
        format!("[{rows}]").into_bytes()
    };
    // Rows that can all be written: each e-mail address is unique.
    let fitting = |from: usize, n: usize| {
        let rows: Vec<String> = (from..from + n)
            .map(|i| format!(r#""POST@Sample",{{"Email":"{i}@e"}}"#))
            .collect();
        format!("[{}]", rows.join(",")).into_bytes()
    };
    // 200 KB, parsed whole; 400 KB, parsed on the parser thread while its
    // writes would run.
    for rows in [12_000, 24_000] {
        let r = raw(addr, "PUT", "/root/Batch", "", &empty(rows));
        assert_error(&r, 413);
        assert!(r.text().contains("smaller batches"), "{}", r.text());
        assert_eq!(count(db), 0);
    }
    // Inside a transaction, writes run as the body is parsed: the ones
    // that ran before the bound was passed fail the transaction, as a late
    // fault in a body does. With the server's parser thread still busy
    // (finishing the body before), the body is parsed whole here first and
    // refused before any write ran, which leaves the transaction going on.
    // Either way the answer says which, and the transaction's end agrees.
    let mut c = RawConn::open(addr);
    assert_eq!(req(&mut c, "BEGIN", "/root", "", b"")?.status, 200);
    let r = req(&mut c, "PUT", "/root/Batch", "", &empty(24_000))?;
    assert_error(&r, 413);
    assert!(r.text().contains("smaller batches"), "{}", r.text());
    let end = req(&mut c, "END", "/root", "", b"")?;
    if r.text().contains("rolled back: end it") {
        assert_error(&end, 400);
    } else {
        assert_eq!(end.status, 200, "{}", end.text());
    }
    assert_eq!(count(db), 0);
    // A small one, refused before any write ran, leaves it going on.
    assert_eq!(req(&mut c, "BEGIN", "/root", "", b"")?.status, 200);
    assert_error(&req(&mut c, "PUT", "/root/Batch", "", &empty(12_000))?, 413);
    let r = req(&mut c, "PUT", "/root/Batch", "", &fitting(0, 2_000))?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(req(&mut c, "END", "/root", "", b"")?.status, 200);
    assert_eq!(count(db), 2_000);
    // Batches that fit run, and give back what they held.
    let r = raw(addr, "PUT", "/root/Batch", "", &fitting(2_000, 8_000));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(count(db), 10_000);
    let start = std::time::Instant::now();
    while server.batch_bytes_in_flight() != 0 {
        assert!(
            start.elapsed().as_secs() < 10,
            "batch memory never given back"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(())
}
