//! TLS to PostgreSQL by the URL's `sslmode` (feature `tls`).
#![allow(missing_docs)]

#[cfg(feature = "tls")]
mod tls;

/// Without the feature there is nothing to run: said in the summary as an
/// ignored test rather than as zero tests.
#[cfg(not(feature = "tls"))]
#[test]
#[ignore = "needs the tls feature: cargo test -p burrow-sql --features tls --test pg_tls"]
fn tls_to_postgres_needs_the_tls_feature() {}
