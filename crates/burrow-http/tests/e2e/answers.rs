//! Large answers: a list is read and written a piece at a time, so that its
//! memory does not grow with its length, and reads the same as one written
//! whole.

use std::io::Read;
use std::sync::Arc;

use burrow_core::{Batch, Database, Orm};
use burrow_http::Server;

use crate::common::*;

fn fill(client: &Database, n: usize) {
    let mut b = Batch::new();
    b.add_all((1..=n).map(sample));
    client.send(&mut b).expect("fill");
}

fn serve(client: &Arc<Database>, piece: Option<usize>) -> Server {
    let mut b = Server::builder(client.clone(), "root").no_auth();
    if let Some(n) = piece {
        b = b.list_piece_bytes(n);
    }
    b.bind("127.0.0.1:0").expect("bind")
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

#[test]
fn a_large_list_is_written_in_bounded_pieces() {
    const ROWS: usize = 40_000;
    const PIECE: usize = 128 * 1024;
    let (client, _) = hosted();
    fill(&client, ROWS);
    let server = serve(&client, Some(PIECE));
    let r = raw(server.local_addr(), "GET", "/root/Sample", "", b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    let rows = r.json();
    assert_eq!(rows.as_array().map(Vec::len), Some(ROWS), "every row");
    assert_eq!(rows[ROWS - 1]["ID"], ROWS);
    // The list is many times a piece; what the connection held unwritten
    // at once stays near one piece (a page is sized by the rows before it).
    assert!(r.body.len() > 40 * PIECE, "{} bytes", r.body.len());
    let peak = server.peak_pending_output();
    assert!(
        peak < 4 * PIECE,
        "a connection held {peak} bytes of a {}-byte list",
        r.body.len()
    );
}

#[test]
fn a_list_read_in_pieces_reads_as_one_written_whole() {
    let (client, _) = hosted();
    fill(&client, 57);
    // One row a page, against one page for everything.
    let paged = serve(&client, Some(1));
    let whole = serve(&client, None);
    const MORMOT: &str = "User-Agent: Mozilla/5.0 (Linux x64; mORMot) TRestHttpClient\r\n";
    let cases: &[(&str, &str, &[u8])] = &[
        ("/root/Sample", "", b""),
        ("/root/Sample", MORMOT, b""),
        ("/root/Sample", "Burrow-Json: exact, compact\r\n", b""),
        ("/root/Sample?select=ID,FirstName&where=ID%3E10", "", b""),
        (
            "/root/Sample?sort=ID&dir=desc&startIndex=3&results=40",
            "",
            b"",
        ),
        ("/root/Sample?startIndex=50", "", b""),
        ("/root/Sample?where=ID%3E1000", "", b""),
        ("/root/Sample?where=ID%3E1000", MORMOT, b""),
        ("/root", "", b"SELECT * FROM Sample WHERE ID < 30"),
        (
            "/root",
            MORMOT,
            b"SELECT ID,Email FROM Sample ORDER BY ID DESC",
        ),
    ];
    for (path, headers, body) in cases {
        let a = raw(paged.local_addr(), "GET", path, headers, body);
        let b = raw(whole.local_addr(), "GET", path, headers, body);
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        assert_eq!(a.text(), b.text(), "{path} {headers}");
        // Gzipped on the fly, the same once unzipped.
        let gz = raw(
            paged.local_addr(),
            "GET",
            path,
            &format!("{headers}Accept-Encoding: gzip\r\n"),
            body,
        );
        if gz.header("Content-Encoding") == Some("gzip") {
            assert_eq!(gunzip(&gz.body), b.body, "{path} gzipped");
        } else {
            assert_eq!(gz.body, b.body, "{path}");
        }
    }
    let streamed = raw(paged.local_addr(), "GET", "/root/Sample", "", b"");
    assert_eq!(streamed.header("Transfer-Encoding"), Some("chunked"));
    // A list of exactly one page (57 rows at 100 bytes a row guessed, each
    // smaller) is written whole.
    let one_page = serve(&client, Some(5700));
    let path = "/root/Sample?select=ID";
    let r = raw(one_page.local_addr(), "GET", path, "", b"");
    assert_eq!(r.header("Transfer-Encoding"), None);
    assert_eq!(r.body, raw(whole.local_addr(), "GET", path, "", b"").body);
    // A HEAD gets the head alone, and the connection goes on.
    let mut c = RawConn::open(paged.local_addr());
    c.send(b"HEAD /root/Sample HTTP/1.1\r\nHost: t\r\n\r\nGET /root/Sample/3 HTTP/1.1\r\nHost: t\r\n\r\n");
    let head = c.read_head().expect("the HEAD's answer");
    assert_eq!(head.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(c.read().expect("the next answer").json()["ID"], 3);
    // The Burrow client reads a streamed list.
    let db = remote(&paged);
    let all = db.list::<Sample>("", &[]).expect("list");
    assert_eq!(all, client.list::<Sample>("", &[]).expect("list"));
}

#[test]
fn an_http10_client_gets_a_streamed_list_until_the_connection_closes() {
    let (client, _) = hosted();
    fill(&client, 20);
    let paged = serve(&client, Some(1));
    let whole = serve(&client, None);
    let mut c = std::net::TcpStream::connect(paged.local_addr()).expect("connect");
    std::io::Write::write_all(&mut c, b"GET /root/Sample HTTP/1.0\r\n\r\n").expect("send");
    let mut got = Vec::new();
    c.read_to_end(&mut got).expect("read to the end");
    let text = String::from_utf8(got).expect("text");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.contains("Connection: close"), "{head}");
    assert!(!head.contains("Transfer-Encoding"), "{head}");
    let want = raw(whole.local_addr(), "GET", "/root/Sample", "", b"");
    assert_eq!(body.as_bytes(), want.body);
}

#[test]
fn rows_that_exist_throughout_show_once_while_others_are_written() {
    let (client, _) = hosted();
    fill(&client, 300);
    let paged = serve(&client, Some(1));
    let mut c = RawConn::open(paged.local_addr());
    // Small pieces: most of the list is read after the writes below began.
    c.send(b"GET /root/Sample?select=ID HTTP/1.1\r\nHost: t\r\n\r\n");
    let writer = std::thread::spawn(move || {
        for i in 0..100 {
            let mut s = sample(1000 + i);
            client.add(&mut s).expect("add");
            client.delete::<Sample>(2 * i as i64 + 1).expect("delete");
        }
    });
    let r = c.read().expect("the list");
    writer.join().expect("writer");
    let ids: Vec<i64> = r
        .json()
        .as_array()
        .expect("rows")
        .iter()
        .map(|v| v["ID"].as_i64().expect("an ID"))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending, no repeat");
    for even in (2..=300).step_by(2) {
        assert!(ids.contains(&even), "row {even} existed throughout");
    }
}

#[test]
fn rows_larger_than_guessed_still_come_a_piece_at_a_time() {
    const PIECE: usize = 128 * 1024;
    let (client, _) = hosted();
    let mut b = Batch::new();
    b.add_all((1..=400).map(|i| Sample {
        data: vec![i as u8; 10_000],
        ..sample(i)
    }));
    client.send(&mut b).expect("fill");
    let server = serve(&client, Some(PIECE));
    let r = raw(server.local_addr(), "GET", "/root/Sample", "", b"");
    assert_eq!(r.json().as_array().map(Vec::len), Some(400));
    // The first page's guess (100 bytes a row) would take the whole list;
    // it ends once it holds a piece.
    let peak = server.peak_pending_output();
    assert!(r.body.len() > 30 * PIECE, "{} bytes", r.body.len());
    assert!(
        peak < 2 * PIECE,
        "a connection held {peak} bytes of a {}-byte list",
        r.body.len()
    );
}
