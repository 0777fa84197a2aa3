//! The ORM cache on both sides of HTTP: hits, invalidation by writes
//! through it, and the bound on staleness for writes made elsewhere (the
//! cache in front of an in-process engine is tested in `burrow`'s
//! `tests/cache.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_core::{Database, Orm, OrmCache, RowOps};

use burrow_http::RemoteEngine;

use crate::common::*;

/// Reads `id` until its first name is `want`, checking on the way that no
/// read started after `written + ttl` returns something else. Returns the
/// number of stale reads seen (all within the timeout).
fn wait_fresh(db: &Database, id: i64, want: &str, written: Instant, ttl: Duration) -> usize {
    let mut stale = 0;
    let deadline = written + ttl + Duration::from_secs(5);
    loop {
        let started = Instant::now();
        let got = db.retrieve::<Sample>(id).expect("retrieve").first_name;
        if got == want {
            return stale;
        }
        assert!(
            started < written + ttl,
            "a read started {:?} after the write still saw {got:?}",
            started - written
        );
        stale += 1;
        assert!(Instant::now() < deadline, "never saw the write");
        std::thread::yield_now();
    }
}

#[test]
fn client_cache_is_never_stale_past_its_timeout() -> TestResult {
    let (server, _, _) = open_server();
    let ttl = Duration::from_millis(300);
    let a_engine = Arc::new(
        RemoteEngine::builder(&server.url())
            .cache(OrmCache::new().table::<Sample>(ttl))
            .connect()?,
    );
    let a = Database::open(model(), a_engine.clone())?;
    let b = remote(&server);
    let mut s = sample(1);
    a.add(&mut s)?;
    // Written through a: cached at once, and correct.
    assert_eq!(a.retrieve::<Sample>(1)?, s);
    let before = server.internal_state();
    for _ in 0..100 {
        a.retrieve::<Sample>(1)?;
    }
    assert_eq!(server.internal_state(), before);
    // Written through b: a sees it within the timeout, never later.
    s.first_name = "Changed by b".into();
    b.update(&mut s)?;
    let written = Instant::now();
    wait_fresh(&a, 1, "Changed by b", written, ttl);
    // Written through a: seen at once.
    s.first_name = "Changed by a".into();
    a.update_fields(&mut s, &["FirstName"])?;
    assert_eq!(a.retrieve::<Sample>(1)?.first_name, "Changed by a");
    a.delete::<Sample>(1)?;
    assert!(a.get::<Sample>(1)?.is_none());
    // A rolled-back transaction leaves nothing in the cache.
    {
        let tx = a.transaction()?;
        tx.add(&mut sample(2))?;
    }
    assert!(a.get::<Sample>(2)?.is_none());
    // Explicit flush.
    a.add(&mut sample(3))?;
    b.delete::<Sample>(3)?;
    a_engine.cache().flush();
    assert!(a.get::<Sample>(3)?.is_none());
    Ok(())
}

#[test]
fn server_cache_is_invalidated_by_writes_through_the_server() -> TestResult {
    let ttl = Duration::from_millis(300);
    let (client, engine) = hosted();
    let server = burrow_http::Server::builder(client.clone(), "root")
        .no_auth()
        .cache(OrmCache::new().table::<Sample>(ttl))
        .bind("127.0.0.1:0")?;
    let db = remote(&server);
    let mut s = sample(1);
    db.add(&mut s)?;
    assert_eq!(db.retrieve::<Sample>(1)?, s);
    assert!(server
        .cache()
        .get(<Sample as burrow_core::Record>::table(), 1)
        .is_some());
    s.first_name = "Via server".into();
    db.update(&mut s)?;
    assert_eq!(db.retrieve::<Sample>(1)?.first_name, "Via server");
    // A write that bypasses the server (in-process, on its engine) shows up
    // once the entry expires.
    s.first_name = "Behind its back".into();
    engine.update(<Sample as burrow_core::Record>::table(), &s, None)?;
    let written = Instant::now();
    wait_fresh(&db, 1, "Behind its back", written, ttl);
    // CacheFlush empties it at once.
    s.first_name = "Flushed".into();
    engine.update(<Sample as burrow_core::Record>::table(), &s, None)?;
    let r = raw(
        server.local_addr(),
        "GET",
        "/root/CacheFlush/Sample",
        "",
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(db.retrieve::<Sample>(1)?.first_name, "Flushed");
    Ok(())
}
