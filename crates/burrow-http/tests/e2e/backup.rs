//! Backups over HTTP: administrators only, into the configured folder only,
//! a consistent copy that opens as an engine, and a failed one that leaves
//! the server serving.

use std::path::Path;
use std::time::{Duration, Instant};

use burrow_core::{Batch, Orm};
use burrow_http::{Auth, Group, Rights, Server};
use burrow_sqlite::{SqliteEngine, SqliteOptions};

use crate::common::*;

const OPS: &str = "Authorization: Bearer tok-ops\r\n";
const BOB: &str = "Authorization: Bearer tok-bob\r\n";

fn admin_auth() -> Auth {
    Auth::new()
        .group(Group::new("ops").all_tables(Rights::READ).admin(true))
        .group(Group::new("writers").all_tables(Rights::ALL))
        .user("ops", "ops-secret", "ops")
        .and_then(|a| a.user("bob", "bob-secret", "writers"))
        .and_then(|a| a.token("tok-ops", "ops"))
        .and_then(|a| a.token("tok-bob", "bob"))
        .expect("auth")
}

fn server(folder: &Path, rows: usize) -> Server {
    let (server, client) =
        server_with(|b| b.auth(admin_auth()).backup_folder(folder.to_path_buf()));
    let mut batch = Batch::new();
    for i in 0..rows {
        batch.add(sample(i));
    }
    client.send(&mut batch).expect("fill");
    server
}

/// Polls a job until it is no longer running (bounded).
fn finished(server: &Server, id: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = raw(
            server.local_addr(),
            "GET",
            &format!("/root/_backup/{id}"),
            OPS,
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if v["state"] != "running" {
            return v;
        }
        assert!(Instant::now() < deadline, "backup {id} still running: {v}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn start(server: &Server, query: &str, headers: &str) -> Raw {
    raw(
        server.local_addr(),
        "POST",
        &format!("/root/_backup?{query}"),
        headers,
        b"",
    )
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_administrator_backs_up_into_the_folder_and_the_copy_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("backups");
    let server = server(&folder, 500);

    let r = start(&server, "file=full.db", OPS);
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["id"].as_u64().expect("id");
    let job = finished(&server, id);
    assert_eq!(job["state"], "done", "{job}");
    assert!(job["bytes"].as_u64().expect("bytes") > 0);

    let r = start(&server, "file=full.db.gz&gzip=1", OPS);
    assert_eq!(r.status, 202, "{}", r.text());
    let gz = finished(&server, r.json()["id"].as_u64().expect("id"));
    assert_eq!(gz["state"], "done", "{gz}");
    assert_eq!(gz["gzip"], true);

    for file in ["full.db", "full.db.gz"] {
        let engine = SqliteEngine::open_backup(folder.join(file), SqliteOptions::memory())
            .expect("the backup opens");
        let db = burrow_core::Database::open(model(), std::sync::Arc::new(engine)).expect("db");
        assert_eq!(count(&db), 500, "{file}");
    }
    let list = raw(server.local_addr(), "GET", "/root/_backup", OPS, b"").json();
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");

    // A backup never replaces a file.
    let again = start(&server, "file=full.db", OPS);
    assert_error(&again, 409);
    assert_eq!(entries(&folder), ["full.db", "full.db.gz"]);
}

#[test]
fn only_administrators_may_back_up_and_only_into_the_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("backups");
    let server = server(&folder, 10);

    assert_error(&start(&server, "file=a.db", ""), 401);
    assert_error(&start(&server, "file=a.db", BOB), 403);
    assert_error(
        &raw(server.local_addr(), "GET", "/root/_backup", BOB, b""),
        403,
    );
    for trick in [
        "file=../a.db",
        "file=%2e%2e%2fa.db",
        "file=..",
        "file=.a.db",
        "file=%2Ftmp%2Fa.db",
        "file=sub%2Fa.db",
        "file=a%00.db",
        "file=",
        "",
    ] {
        assert_error(&start(&server, trick, OPS), 400);
    }
    assert_error(&start(&server, "file=a.db&table=NoSuchTable", OPS), 400);
    assert!(entries(&folder).is_empty());
    assert_eq!(entries(dir.path()), ["backups"]);
    assert_error(
        &raw(server.local_addr(), "GET", "/root/_backup/99", OPS, b""),
        404,
    );
    assert_error(
        &raw(server.local_addr(), "DELETE", "/root/_backup", OPS, b""),
        405,
    );
}

#[test]
fn a_backup_that_cannot_be_written_fails_clearly_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("backups");
    let server = server(&folder, 10);
    // The folder disappears after the server started: the backup's file
    // cannot be made.
    std::fs::remove_dir(&folder).expect("remove folder");
    let r = start(&server, "file=lost.db", OPS);
    assert_eq!(r.status, 202, "{}", r.text());
    let job = finished(&server, r.json()["id"].as_u64().expect("id"));
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["error"].as_str().expect("error");
    assert!(error.contains("lost.db"), "{error}");

    let r = raw(server.local_addr(), "GET", "/root/Sample/1", OPS, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    std::fs::create_dir(&folder).expect("folder again");
    let r = start(&server, "file=found.db", OPS);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        finished(&server, r.json()["id"].as_u64().expect("id"))["state"],
        "done"
    );
}

#[test]
fn backups_need_a_folder_and_authentication() {
    let (server, _) = server_with(|b| b.auth(admin_auth()));
    assert_error(&start(&server, "file=a.db", OPS), 404);
    let dir = tempfile::tempdir().expect("tempdir");
    let (open, _) = server_with(|b| b.no_auth().backup_folder(dir.path().to_path_buf()));
    assert_error(&start(&open, "file=a.db", ""), 403);
    assert!(entries(dir.path()).is_empty());
}
