//! The PostgreSQL tests need TFB's database (`apps/tfb/setup-db.sh`): without
//! `BURROW_TFB_PG_URL` they are compiled as ignored, so the summary counts
//! them as such instead of as passed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(burrow_tfb_pg)");
    println!("cargo::rerun-if-env-changed=BURROW_TFB_PG_URL");
    if std::env::var_os("BURROW_TFB_PG_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=burrow_tfb_pg");
    }
}
