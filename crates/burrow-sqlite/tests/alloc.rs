//! The per-row paths allocate nothing that can be reused: adds, updates,
//! deletes and reads into an existing record make no heap allocation on the Rust
//! side once the statements are prepared (SQLite's own page cache is not counted).
//! Its own test binary, and the counting allocator counts only the calls of
//! the thread being measured: the engine runs on the caller's thread, and the
//! test harness's own thread may allocate at any moment (it did, on a loaded
//! machine).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use burrow_core::chrono::{DateTime, NaiveDate, Utc};
use burrow_core::{Currency, Database, Model, Orm};
use burrow_derive::Record;
use burrow_sqlite::SqliteEngine;

struct Counting;

thread_local! {
    // `const`: reading it never allocates, so the allocator may use it.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left.
    let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Record, Debug, Clone, PartialEq)]
#[burrow(crate = "burrow_core")]
struct Sample {
    id: i64,
    first_name: String,
    last_name: String,
    amount: Currency,
    birth_date: NaiveDate,
    #[burrow(modified)]
    last_change: DateTime<Utc>,
    #[burrow(created)]
    created_at: DateTime<Utc>,
}

fn allocations(f: impl FnOnce() -> burrow_core::Result<()>) -> burrow_core::Result<usize> {
    let before = ALLOCS.with(Cell::get);
    f()?;
    Ok(ALLOCS.with(Cell::get) - before)
}

#[test]
fn per_row_paths_do_not_allocate() -> burrow_core::Result<()> {
    let db = Database::open(
        Model::new().with::<Sample>(),
        Arc::new(SqliteEngine::memory()?),
    )?;
    let mut rec = Sample {
        id: 0,
        first_name: "Salvador".into(),
        last_name: "Dali".into(),
        amount: Currency::from_scaled(12_345),
        birth_date: NaiveDate::from_ymd_opt(1904, 5, 11).expect("date"),
        last_change: DateTime::UNIX_EPOCH,
        created_at: DateTime::UNIX_EPOCH,
    };
    let mut read = rec.clone();
    // Warm up: the first call of each path prepares what it keeps.
    db.add(&mut rec)?;
    db.update(&mut rec)?;
    db.retrieve_into(rec.id, &mut read)?;
    db.delete::<Sample>(rec.id)?;

    let n = allocations(|| {
        for _ in 0..1_000 {
            db.add(&mut rec)?;
        }
        Ok(())
    })?;
    assert_eq!(n, 0, "allocations in 1,000 adds");
    let n = allocations(|| {
        for _ in 0..1_000 {
            db.update(&mut rec)?;
        }
        Ok(())
    })?;
    assert_eq!(n, 0, "allocations in 1,000 updates");
    let ids = rec.id - 999..=rec.id;
    let n = allocations(|| {
        for id in ids.clone() {
            assert!(db.retrieve_into(id, &mut read)?);
        }
        Ok(())
    })?;
    assert_eq!(n, 0, "allocations in 1,000 reads into one record");
    assert_eq!(read.first_name, "Salvador");
    let n = allocations(|| {
        for id in ids.clone() {
            assert!(db.delete::<Sample>(id)?);
        }
        Ok(())
    })?;
    assert_eq!(n, 0, "allocations in 1,000 deletes");
    Ok(())
}
