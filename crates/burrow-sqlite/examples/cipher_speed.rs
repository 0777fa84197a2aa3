//! What SQLCipher's settings cost, on raw connections (no ORM), each beside
//! the same work on a plain file in the same run: one-row commits and bulk
//! inserts, `synchronous=OFF`, exclusive locking, as the benchmark's
//! `sqlite-file-off-exc` rows.
//!
//! `cargo run --release -p burrow-sqlite --features encryption --example cipher_speed [rows] [rounds]`

#![allow(missing_docs)]

use std::time::Instant;

use burrow_sqlite::rusqlite::Connection;

const DDL: &str = "CREATE TABLE Sample (ID INTEGER PRIMARY KEY, FirstName TEXT, LastName TEXT, \
                   Amount REAL, BirthDate TEXT, LastChange TEXT, CreatedAt TEXT)";
const INSERT: &str =
    "INSERT INTO Sample (FirstName,LastName,Amount,BirthDate,LastChange,CreatedAt) \
                      VALUES (?,?,?,?,?,?)";

fn open(path: &std::path::Path, pragmas: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.execute_batch(pragmas)?;
    conn.execute_batch(
        "PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=DELETE;",
    )?;
    conn.execute_batch(DDL)?;
    Ok(conn)
}

fn insert(conn: &Connection, i: usize) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(INSERT)?;
    st.execute((
        format!("Salvador{i}"),
        format!("Dali{i}"),
        i as f64 * 1.01,
        "1904-05-11",
        "2026-11-24T20:00:00",
        "2026-11-24T20:00:00",
    ))?;
    Ok(())
}

/// Rows per second: (one commit per row, one transaction for all).
fn measure(dir: &std::path::Path, pragmas: &str, rows: usize) -> rusqlite::Result<(f64, f64)> {
    let path = dir.join("direct.db");
    let _ = std::fs::remove_file(&path);
    let conn = open(&path, pragmas)?;
    let t = Instant::now();
    for i in 0..rows {
        insert(&conn, i)?;
    }
    let direct = rows as f64 / t.elapsed().as_secs_f64();
    drop(conn);
    let path = dir.join("bulk.db");
    let _ = std::fs::remove_file(&path);
    let conn = open(&path, pragmas)?;
    let t = Instant::now();
    conn.execute_batch("BEGIN")?;
    for i in 0..rows {
        insert(&conn, i)?;
    }
    conn.execute_batch("COMMIT")?;
    let bulk = rows as f64 / t.elapsed().as_secs_f64();
    Ok((direct, bulk))
}

fn main() -> rusqlite::Result<()> {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let key = "PRAGMA key=\"x'2DD29CA851E7B56E4697B0E1F08507293D761A05CE4D1B628663F411A8086D99'\";";
    let configs: Vec<(&str, String)> = vec![
        ("plain", String::new()),
        ("aes default (sha512, 4 KiB)", key.into()),
        (
            "aes hmac sha256",
            format!("{key} PRAGMA cipher_hmac_algorithm=HMAC_SHA256;"),
        ),
        (
            "aes hmac sha1",
            format!("{key} PRAGMA cipher_hmac_algorithm=HMAC_SHA1;"),
        ),
        ("aes no hmac", format!("{key} PRAGMA cipher_use_hmac=OFF;")),
        (
            "aes sha256, 1 KiB pages",
            format!(
                "{key} PRAGMA cipher_hmac_algorithm=HMAC_SHA256; PRAGMA cipher_page_size=1024;"
            ),
        ),
        (
            "aes sha256, 8 KiB pages",
            format!(
                "{key} PRAGMA cipher_hmac_algorithm=HMAC_SHA256; PRAGMA cipher_page_size=8192;"
            ),
        ),
    ];
    let dir = tempfile_dir();
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); configs.len()];
    // Alternating configurations within each round, so that drifts of the
    // machine touch them all alike.
    for _ in 0..rounds {
        for (i, (_, p)) in configs.iter().enumerate() {
            results[i].push(measure(&dir, p, rows)?);
        }
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base_d = med(results[0].iter().map(|r| r.0).collect());
    let base_b = med(results[0].iter().map(|r| r.1).collect());
    println!("{rows} rows, median of {rounds} rounds; ratio to plain in brackets");
    println!("{:<30} {:>18} {:>18}", "config", "commits/s", "bulk rows/s");
    for ((name, _), r) in configs.iter().zip(results) {
        let d = med(r.iter().map(|r| r.0).collect());
        let b = med(r.iter().map(|r| r.1).collect());
        println!(
            "{name:<30} {:>10.0} ({:.2}) {:>10.0} ({:.2})",
            d,
            d / base_d,
            b,
            b / base_b
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("burrow-cipher-speed-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("a temporary folder");
    d
}
