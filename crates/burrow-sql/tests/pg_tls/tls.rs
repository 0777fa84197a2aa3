//! TLS to PostgreSQL by the URL's `sslmode`, against the server named by
//! `BURROW_POSTGRES_URL`. The checks need a server with TLS on (Debian's
//! PostgreSQL serves its "snakeoil" certificate, issued to `localhost`);
//! without one they pass after saying why.

use burrow_core::Value;
use burrow_sql::SqlEngine;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The first column of the first row of `sql` as text.
fn text(e: &SqlEngine, sql: &str) -> burrow_core::Result<String> {
    let mut out = String::new();
    e.query(sql, &[], &mut |row| {
        out = match &row[0] {
            Value::Text(t) => t.clone(),
            Value::Bool(b) => b.to_string(),
            other => format!("{other:?}"),
        };
        Ok(())
    })?;
    Ok(out)
}

fn with_query(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

const ENCRYPTED: &str = "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

#[test]
fn sslmode_is_read_as_libpq_reads_it() -> TestResult {
    let url = match std::env::var("BURROW_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => u,
        _ if std::env::var_os("CI").is_some() => {
            return Err("BURROW_POSTGRES_URL must be set in CI".into())
        }
        _ => {
            eprintln!("pg_tls: BURROW_POSTGRES_URL is not set: SKIPPED");
            return Ok(());
        }
    };
    let plain = SqlEngine::connect(&with_query(&url, "sslmode=disable"))?;
    assert_eq!(text(&plain, ENCRYPTED)?, "false");
    if text(&plain, "SHOW ssl")? != "on" {
        if std::env::var_os("CI").is_some() {
            return Err("the PostgreSQL server has TLS off (ssl = off)".into());
        }
        eprintln!("pg_tls: the server has TLS off: the TLS checks are SKIPPED");
        return Ok(());
    }
    let cert_file = text(&plain, "SHOW ssl_cert_file")?;

    // Encrypted, the certificate not checked.
    let required = SqlEngine::connect(&with_query(&url, "sslmode=require"))?;
    assert_eq!(text(&required, ENCRYPTED)?, "true");
    let preferred = SqlEngine::connect(&url)?;
    assert_eq!(text(&preferred, ENCRYPTED)?, "true");

    // Checked against the public roots, a self-signed certificate is refused.
    let err = SqlEngine::connect(&with_query(&url, "sslmode=verify-full"))
        .err()
        .ok_or("verify-full accepted a certificate no public CA signed")?;
    assert!(err.to_string().contains("certificate"), "{err}");

    // Against the server's own certificate as the root: the chain holds; the
    // name holds only for the host the certificate names.
    if std::fs::metadata(&cert_file).is_err() {
        eprintln!("pg_tls: {cert_file} is not readable here: the verify-ca checks are SKIPPED");
        return Ok(());
    }
    let root = format!("sslrootcert={cert_file}");
    let ca = SqlEngine::connect(&with_query(&url, &format!("sslmode=verify-ca&{root}")))?;
    assert_eq!(text(&ca, ENCRYPTED)?, "true");
    // Another CA's root, with each mode that checks the chain: refused.
    let other = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../burrow-http/tests/e2e/tls/ca.pem"
    );
    for mode in ["verify-ca", "verify-full", "require"] {
        let r = SqlEngine::connect(&with_query(
            &url,
            &format!("sslmode={mode}&sslrootcert={other}"),
        ));
        let err = r
            .err()
            .ok_or(format!("{mode} accepted a certificate of another CA"))?;
        assert!(err.to_string().contains("certificate"), "{mode}: {err}");
    }
    // Checks that would trust any public certificate are refused up front.
    for query in ["sslmode=verify-ca", "sslmode=require&sslrootcert=system"] {
        let r = SqlEngine::connect(&with_query(&url, query));
        assert!(matches!(r, Err(burrow_core::Error::BadInput(_))), "{query}");
    }
    if url.contains("@127.0.0.1") {
        let err = SqlEngine::connect(&with_query(&url, &format!("sslmode=verify-full&{root}")))
            .err()
            .ok_or("verify-full accepted a certificate for another name")?;
        assert!(err.to_string().contains("certificate"), "{err}");
        let named = url.replace("@127.0.0.1", "@localhost");
        let full = SqlEngine::connect(&with_query(&named, &format!("sslmode=verify-full&{root}")))?;
        assert_eq!(text(&full, ENCRYPTED)?, "true");
    }
    let missing = SqlEngine::connect(&with_query(
        &url,
        "sslmode=verify-ca&sslrootcert=/nonexistent/root.pem",
    ));
    assert!(matches!(missing, Err(burrow_core::Error::BadInput(_))));
    Ok(())
}
