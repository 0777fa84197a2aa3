//! Marks which external database servers the tests can reach: a test of a
//! server whose URL is not set is compiled as ignored, so the summary counts
//! it as such instead of as passed.

fn main() {
    for (var, cfg) in [
        ("BURROW_POSTGRES_URL", "burrow_postgres"),
        ("BURROW_MARIADB_URL", "burrow_mariadb"),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo::rerun-if-env-changed={var}");
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
