//! Records, servers and raw HTTP helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_http::{Auth, RemoteEngine, Server, ServerBuilder};
use burrow_sqlite::SqliteEngine;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Sample")]
pub struct Sample {
    pub id: i64,
    pub first_name: String,
    #[burrow(unique)]
    pub email: String,
    pub amount: Currency,
    pub birth_date: Option<NaiveDate>,
    pub data: Vec<u8>,
    #[burrow(modified)]
    pub last_change: DateTime<Utc>,
    #[burrow(created)]
    pub created_at: DateTime<Utc>,
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Secret")]
pub struct Secret {
    pub id: i64,
    pub note: String,
}

#[derive(Record, Debug, Clone, PartialEq, Default)]
#[burrow(crate = "burrow_core", table = "Counter")]
pub struct Counter {
    pub id: i64,
    pub value: i64,
}

pub fn model() -> Model {
    Model::new()
        .with::<Sample>()
        .with::<Secret>()
        .with::<Counter>()
}

pub fn sample(i: usize) -> Sample {
    Sample {
        first_name: format!("First{i}"),
        email: format!("user{i}@example.com"),
        amount: Currency::from_scaled(i as i64 * 12_345 - 500),
        birth_date: NaiveDate::from_ymd_opt(
            1950 + (i % 50) as i32,
            1 + (i % 12) as u32,
            1 + (i % 28) as u32,
        ),
        data: vec![i as u8, 0, 255, 10],
        ..Sample::default()
    }
}

/// The hosted client (in-memory SQLite) and its engine.
pub fn hosted() -> (Arc<Database>, Arc<SqliteEngine>) {
    let engine = Arc::new(SqliteEngine::memory().expect("sqlite"));
    let client = Arc::new(Database::open(model(), engine.clone()).expect("client"));
    (client, engine)
}

/// A server without access control over a fresh hosted client.
pub fn open_server() -> (Server, Arc<Database>, Arc<SqliteEngine>) {
    let (client, engine) = hosted();
    let server = Server::builder(client.clone(), "root")
        .no_auth()
        .bind("127.0.0.1:0")
        .expect("bind");
    (server, client, engine)
}

pub fn server_with(f: impl FnOnce(ServerBuilder) -> ServerBuilder) -> (Server, Arc<Database>) {
    let (client, _) = hosted();
    let server = f(Server::builder(client.clone(), "root"))
        .bind("127.0.0.1:0")
        .expect("bind");
    (server, client)
}

/// A remote Orm on `server`.
pub fn remote(server: &Server) -> Database {
    Database::open(
        model(),
        Arc::new(RemoteEngine::connect(&server.url()).expect("connect")),
    )
    .expect("open")
}

pub fn remote_engine(e: RemoteEngine) -> Database {
    Database::open(model(), Arc::new(e)).expect("open")
}

/// A test auth: group "admin" (everything), "reader" (read Sample only),
/// users ann (admin) and bob (reader), token "tok-ann".
pub fn auth() -> Auth {
    use burrow_http::{Group, Rights};
    Auth::new()
        .group(Group::new("admin").all_tables(Rights::ALL))
        .group(Group::new("reader").table::<Sample>(Rights::READ))
        .user("ann", "ann-secret", "admin")
        .and_then(|a| a.user("bob", "bob-secret", "reader"))
        .and_then(|a| a.token("tok-ann", "ann"))
        .expect("auth")
}

/// bob's bearer header (reader of Sample only), from a login.
pub fn bob_token(addr: SocketAddr) -> String {
    let r = raw(
        addr,
        "POST",
        "/root/auth",
        "",
        br#"{"userName":"bob","password":"bob-secret"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let token = r.json()["result"].as_str().expect("a token").to_owned();
    format!("Authorization: Bearer {token}\r\n")
}

/// One raw HTTP response.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A raw keep-alive connection.
pub struct RawConn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    pub fn open(addr: SocketAddr) -> RawConn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        RawConn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads one response; `None` when the server closed the connection.
    pub fn read(&mut self) -> Option<Raw> {
        self.read_for(false)
    }

    /// Reads the answer to a `HEAD`: a head only.
    pub fn read_head(&mut self) -> Option<Raw> {
        self.read_for(true)
    }

    fn read_for(&mut self, head_only: bool) -> Option<Raw> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut r = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = r.parse(&self.buf) {
                let status = r.code.unwrap_or(0);
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                if head_only {
                    self.buf.drain(..head);
                    return Some(Raw {
                        status,
                        headers,
                        body: Vec::new(),
                    });
                }
                if headers.iter().any(|(n, v)| {
                    n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")
                }) {
                    self.buf.drain(..head);
                    let body = self.read_chunked()?;
                    return Some(Raw {
                        status,
                        headers,
                        body,
                    });
                }
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                while self.buf.len() < head + len {
                    if !self.fill() {
                        return None;
                    }
                }
                let body = self.buf[head..head + len].to_vec();
                self.buf.drain(..head + len);
                return Some(Raw {
                    status,
                    headers,
                    body,
                });
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// A chunked body (no trailers), its chunks joined; `None` if cut short.
    fn read_chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let (start, size) = loop {
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) => {
                        if !self.fill() {
                            return None;
                        }
                    }
                    Err(_) => panic!("a malformed chunk"),
                }
            };
            let end = start + size as usize + 2;
            while self.buf.len() < end {
                if !self.fill() {
                    return None;
                }
            }
            assert_eq!(&self.buf[end - 2..end], b"\r\n", "a chunk's end");
            body.extend_from_slice(&self.buf[start..end - 2]);
            self.buf.drain(..end);
            if size == 0 {
                return Some(body);
            }
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Sends a request and reads its response.
    pub fn request(&mut self, method: &str, path: &str, headers: &str, body: &[u8]) -> Option<Raw> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\n{headers}Content-Length: {}\r\n\r\n",
            body.len()
        );
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        self.send(&bytes);
        self.read()
    }
}

/// Sends one request on a new connection.
pub fn raw(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> Raw {
    RawConn::open(addr)
        .request(method, path, headers, body)
        .expect("a response")
}

/// Asserts a JSON error body with this status.
pub fn assert_error(r: &Raw, status: u16) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["errorCode"], status, "{}", r.text());
    assert!(v["errorText"].is_string(), "{}", r.text());
}

pub fn count(c: &impl Orm) -> u64 {
    c.count::<Sample>("", &[]).expect("count")
}
