//! The wire as a mORMot client sees it, and every kind of bad request.

use std::io::Read;

use burrow_core::json::{from_timelog, to_timelog};
use burrow_core::Orm;

use crate::common::*;

const MORMOT: &str = "User-Agent: Mozilla/5.0 (Linux x64; mORMot) TRestHttpClient\r\nAccept: */*\r\nContent-Type: application/json\r\n";

#[test]
fn mormot_client_messages() -> TestResult {
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let mut c = RawConn::open(addr);
    let ts = c
        .request("GET", "/root/timestamp", MORMOT, b"")
        .expect("response");
    assert_eq!(ts.status, 200);
    assert!(ts
        .header("Content-Type")
        .is_some_and(|t| t.starts_with("text/plain")));
    let t = from_timelog(ts.text().parse()?).expect("a TimeLog");
    assert!((burrow_core::chrono::Utc::now() - t).num_seconds().abs() < 5);
    assert!(ts.header("Server").is_some() && ts.header("Date").is_some());
    let state0: u64 = ts.header("Server-InternalState").expect("state").parse()?;

    let body = br#"{"FirstName":"Jean","Email":"jean@x","Amount":12.5,"BirthDate":"1970-01-02T00:00:00","Data":"","LastChange":135654243328,"CreatedAt":135654243328}"#;
    let r = c
        .request("POST", "/root/Sample", MORMOT, body)
        .expect("response");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("Location"), Some("Sample/1"));
    assert!(r.body.is_empty());
    let state1: u64 = r.header("Server-InternalState").expect("state").parse()?;
    assert!(state1 > state0);

    let r = c
        .request("GET", "/root/Sample/1", MORMOT, b"")
        .expect("response");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["ID"], 1);
    assert_eq!(v["Amount"], 12.5);
    assert_eq!(v["BirthDate"], "1970-01-02");
    assert_eq!(v["LastChange"], 135654243328i64);
    assert_eq!(
        from_timelog(135654243328).map(to_timelog),
        Some(135654243328)
    );

    let r = c
        .request(
            "PUT",
            "/root/Sample/1",
            MORMOT,
            br#"{"FirstName":"Jacques"}"#,
        )
        .expect("response");
    assert_eq!((r.status, r.body.len()), (200, 0));
    let r = c
        .request(
            "GET",
            "/root/Sample?select=ID,FirstName&where=FirstName%3D%27Jacques%27%20order%20by%20ID",
            MORMOT,
            b"",
        )
        .expect("response");
    assert_eq!(
        r.json(),
        serde_json::json!({"fieldCount":2,"values":["ID","FirstName",1,"Jacques"],"rowCount":1})
    );
    assert!(r.body.ends_with(b"\n"));
    // Expanded for other clients; empty lists are compact.
    let r = c
        .request("GET", "/root/Sample?select=ID,FirstName", "", b"")
        .expect("response");
    assert_eq!(
        r.json(),
        serde_json::json!([{"ID":1,"FirstName":"Jacques"}])
    );
    let r = c
        .request("GET", "/root/Sample?where=ID%3D2", "", b"")
        .expect("response");
    assert_eq!(r.json()["rowCount"], 0);

    let r = c
        .request("GET", "/root", MORMOT, b"SELECT Count(*) FROM Sample")
        .expect("response");
    assert_eq!(r.json()["values"], serde_json::json!(["Count(*)", 1]));
    let r = c
        .request("GET", "/root", "", b"SELECT Count(*) FROM Sample")
        .expect("response");
    assert_eq!(r.json(), serde_json::json!([{"Count(*)":1}]));
    let r = c
        .request(
            "GET",
            "/root",
            "",
            b"SELECT ID,FirstName FROM Sample WHERE FirstName=:('Jacques'): LIMIT 1",
        )
        .expect("response");
    assert_eq!(
        r.json(),
        serde_json::json!([{"ID":1,"FirstName":"Jacques"}])
    );

    assert_eq!(
        c.request("BEGIN", "/root/Sample", MORMOT, b"")
            .map(|r| r.status),
        Some(200)
    );
    let batch = br#"{Sample:["automaticTransactionPerRow",1000,"POST",{"FirstName":"A","Email":"a@x"},"SIMPLE",["B","b@x",1,"","","",""],"PUT",{"RowID":1,"FirstName":"Jack"},"DELETE",99]}"#;
    let r = c
        .request("PUT", "/root/Sample/Batch", MORMOT, batch)
        .expect("response");
    assert_eq!(
        r.json(),
        serde_json::json!([2, 3, 200, 200]),
        "{}",
        r.text()
    );
    assert_eq!(
        c.request("END", "/root", MORMOT, b"").map(|r| r.status),
        Some(200)
    );
    let r = c
        .request(
            "PUT",
            "/root/Batch",
            MORMOT,
            br#"["DELETE@Sample",2,"u01@Sample",[3,"Bee"]]"#,
        )
        .expect("response");
    assert_eq!(r.json(), serde_json::json!([200, 200]));
    assert_eq!(remote(&server).retrieve::<Sample>(3)?.first_name, "Bee");

    let r = c
        .request("DELETE", "/root/Sample/1", MORMOT, b"")
        .expect("response");
    assert_eq!((r.status, r.body.len()), (200, 0));
    let r = c
        .request("DELETE", "/root/Sample/1", MORMOT, b"")
        .expect("response");
    assert_eq!(r.status, 200, "mORMot clients get 200 for a missing ID");
    let r = c
        .request("GET", "/root/Sample/1", MORMOT, b"")
        .expect("response");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        serde_json::json!({"errorCode":404,"errorText":"Not Found"})
    );
    Ok(())
}

#[test]
fn every_bad_request_is_a_4xx_that_changes_nothing() -> TestResult {
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    db.add(&mut sample(1))?;
    let before: Sample = db.retrieve(1)?;
    // A second client with a keep-alive connection, used between the bad requests.
    let mut keep = RawConn::open(addr);
    let cases: Vec<(&str, &str, &[u8], u16)> = vec![
        ("POST", "/root/Sample", b"{\"FirstName\":", 400),
        ("POST", "/root/Sample", b"[1,2]", 400),
        ("POST", "/root/Nope", b"{}", 400),
        ("POST", "/root/Sample", br#"{"Nope":1}"#, 400),
        ("POST", "/root/Sample", br#"{"Amount":"lots"}"#, 400),
        ("POST", "/root/Sample", br#"{"Amount":1.23456}"#, 400),
        ("POST", "/root/Sample", b"{\"FirstName\":\"\xff\xfe\"}", 400),
        ("PUT", "/root/Sample/1", br#"{"FirstName":1}"#, 400),
        ("PUT", "/root/Sample/abc", br#"{"FirstName":"x"}"#, 400),
        ("PUT", "/root/Sample/-1", br#"{"FirstName":"x"}"#, 400),
        ("PUT", "/root/Sample/1", br#"{"ID":2,"FirstName":"x"}"#, 400),
        ("PUT", "/root/Sample/1", br#"{}"#, 400),
        ("DELETE", "/root/Sample/0", b"", 400),
        ("DELETE", "/root/Sample?where=1%3D1", b"", 400),
        ("DELETE", "/root/Sample", b"", 400),
        (
            "GET",
            "/root/Sample?where=ID%3D1%3B%20DROP%20TABLE%20Sample",
            b"",
            400,
        ),
        (
            "GET",
            "/root/Sample?where=FirstName%3D(SELECT%201)",
            b"",
            400,
        ),
        ("GET", "/root/Sample?select=Nope", b"", 400),
        ("GET", "/root/Sample?results=x", b"", 400),
        (
            "GET",
            "/root",
            b"SELECT * FROM Sample WHERE ID=1 UNION SELECT * FROM Secret",
            400,
        ),
        ("GET", "/root", b"DELETE FROM Sample", 403),
        ("GET", "/root", b"\xff\xfe", 400),
        (
            "PUT",
            "/root/Sample/Batch",
            br#"{Sample:["POST",{"FirstName":"x","Email":"new@x"},"PUT",{"FirstName":"no id"}]}"#,
            400,
        ),
        (
            "PUT",
            "/root/Sample/Batch",
            br#"["POST",{"FirstName":"x"},"DELETE""#,
            400,
        ),
        ("GET", "/other/Sample/1", b"", 404),
        ("PATCH", "/root/Sample/1", b"{}", 405),
        ("END", "/root", b"", 400),
    ];
    for (m, path, body, status) in cases {
        let r = raw(addr, m, path, "", body);
        assert_error(&r, status);
        let k = keep
            .request("GET", "/root/Sample/1", "", b"")
            .expect("the other connection survives");
        assert_eq!(k.status, 200);
    }
    assert_eq!(count(&db), 1);
    assert_eq!(db.retrieve::<Sample>(1)?, before);

    // A truncated body: the client promises more than it sends, then leaves.
    let mut c = RawConn::open(addr);
    c.send(b"POST /root/Sample HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"FirstName\":\"x\"");
    drop(c);
    // Malformed heads and oversized requests close only their own connection.
    let mut c = RawConn::open(addr);
    c.send(b"GARBAGE\r\n\r\n");
    assert_error(&c.read().expect("an answer"), 400);
    let mut c = RawConn::open(addr);
    let huge = format!(
        "GET /root/Sample/1 HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    c.send(huge.as_bytes());
    assert_error(&c.read().expect("an answer"), 413);
    let mut c = RawConn::open(addr);
    c.send(b"POST /root/Sample HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n");
    assert_error(&c.read().expect("an answer"), 413);
    let mut c = RawConn::open(addr);
    c.send(b"POST /root/Sample HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_error(&c.read().expect("an answer"), 411);
    assert_eq!(
        keep.request("GET", "/root/Sample/1", "", b"")
            .map(|r| r.status),
        Some(200)
    );
    assert_eq!(count(&db), 1);
    Ok(())
}

/// WHERE clauses past the parser's bounds (nesting, comparisons, bound
/// values) get a 400 that says which bound, from every route that takes
/// one, and change nothing.
#[test]
fn oversized_where_clauses_get_400_naming_the_bound() -> TestResult {
    use burrow_core::filter::{MAX_WHERE_DEPTH, MAX_WHERE_TERMS, MAX_WHERE_VALUES};
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    db.add(&mut sample(1))?;
    let ors = vec!["ID=1"; MAX_WHERE_TERMS + 1].join(" OR ");
    let values = vec!["1"; MAX_WHERE_VALUES + 1].join(",");
    let deep = format!(
        "{}ID=1{}",
        "(".repeat(MAX_WHERE_DEPTH + 1),
        ")".repeat(MAX_WHERE_DEPTH + 1)
    );
    let url = |w: &str| {
        let w = w
            .replace(' ', "%20")
            .replace('=', "%3D")
            .replace('(', "%28")
            .replace(')', "%29");
        format!("/root/Sample?where={w}")
    };
    let sql = |w: &str| format!("SELECT * FROM Sample WHERE {w}").into_bytes();
    let in_list = format!("ID IN ({values})");
    let cases: Vec<(&str, String, Vec<u8>, &str)> = vec![
        ("GET", url(&ors), vec![], "comparisons"),
        ("DELETE", url(&ors), vec![], "comparisons"),
        ("GET", url(&deep), vec![], "nest deeper"),
        ("GET", "/root".into(), sql(&ors), "comparisons"),
        ("GET", "/root".into(), sql(&in_list), "values"),
        ("GET", "/root".into(), sql(&deep), "nest deeper"),
    ];
    for (m, path, body, says) in cases {
        let r = raw(addr, m, &path, "", &body);
        assert_error(&r, 400);
        assert!(
            r.text().contains(says),
            "{m} {}: {}",
            &path[..40.min(path.len())],
            r.text()
        );
    }
    // At the bounds, the same clauses run.
    let ok = vec!["ID=1"; MAX_WHERE_TERMS].join(" OR ");
    assert_eq!(raw(addr, "GET", &url(&ok), "", b"").status, 200);
    let ok = vec!["1"; MAX_WHERE_VALUES].join(",");
    let r = raw(addr, "GET", "/root", "", &sql(&format!("ID IN ({ok})")));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(count(&db), 1);
    Ok(())
}

/// Requests that name columns or sort keys over and over, or send a SELECT
/// past its bound, cost no more than their first mention: a repeated column
/// is a 400, a repeated sort key changes nothing, a huge SELECT is a 413.
#[test]
fn repeated_columns_and_sort_keys_are_bounded() -> TestResult {
    let (server, _, _) = open_server();
    let addr = server.local_addr();
    let db = remote(&server);
    for i in 0..3 {
        db.add(&mut sample(i))?;
    }
    let stars = vec!["*"; 5_000].join(",");
    for (path, body) in [
        (format!("/root/Sample?select={stars}&results=10"), vec![]),
        (
            "/root".into(),
            format!("SELECT {stars} FROM Sample LIMIT 1").into_bytes(),
        ),
        ("/root/Sample?select=ID,FirstName,ID".into(), vec![]),
    ] {
        let r = raw(addr, "GET", &path, "", &body);
        assert_error(&r, 400);
        assert!(r.text().contains("listed twice"), "{}", r.text());
    }
    let keys = vec!["FirstName"; 1_000].join(",");
    let once = raw(
        addr,
        "GET",
        "/root/Sample?select=ID&sort=FirstName",
        "",
        b"",
    );
    let many = raw(
        addr,
        "GET",
        &format!("/root/Sample?select=ID&sort={keys}"),
        "",
        b"",
    );
    assert_eq!((once.status, many.status), (200, 200), "{}", many.text());
    assert_eq!(once.body, many.body);
    let huge = format!("SELECT ID FROM Sample WHERE {}", "ID=1 OR ".repeat(200_000));
    assert_error(&raw(addr, "GET", "/root", "", huge.as_bytes()), 413);
    Ok(())
}

#[test]
fn pipelined_requests_are_answered_in_order() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    for i in 0..3 {
        db.add(&mut sample(i))?;
    }
    let mut c = RawConn::open(server.local_addr());
    let mut all = Vec::new();
    for id in [3, 1, 2, 9] {
        all.extend_from_slice(
            format!("GET /root/Sample/{id} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
    }
    c.send(&all);
    let ids: Vec<serde_json::Value> = (0..4)
        .map(|_| c.read().expect("a response").json()["ID"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            serde_json::json!(3),
            serde_json::json!(1),
            serde_json::json!(2),
            serde_json::Value::Null
        ]
    );
    Ok(())
}

#[test]
fn large_responses_are_gzipped_when_accepted() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    let mut b = burrow_core::Batch::new();
    b.add_all((0..200).map(sample));
    db.send(&mut b)?;
    let r = raw(
        server.local_addr(),
        "GET",
        "/root/Sample",
        "Accept-Encoding: gzip, deflate\r\n",
        b"",
    );
    assert_eq!(r.header("Content-Encoding"), Some("gzip"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut text)?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    assert_eq!(v.as_array().map(Vec::len), Some(200));
    let plain = raw(server.local_addr(), "GET", "/root/Sample", "", b"");
    assert!(plain.header("Content-Encoding").is_none());
    assert!(plain.body.len() > r.body.len() * 3);
    Ok(())
}

#[test]
fn blob_fields_read_raw() -> TestResult {
    let (server, _, _) = open_server();
    let db = remote(&server);
    db.add(&mut sample(3))?;
    let r = raw(server.local_addr(), "GET", "/root/Sample/1/Data", "", b"");
    assert_eq!(r.header("Content-Type"), Some("application/octet-stream"));
    assert_eq!(r.body, vec![3, 0, 255, 10]);
    Ok(())
}
