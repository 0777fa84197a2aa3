//! The read statements, stepped through SQLite's C API.
//!
//! rusqlite reads a cell with four calls into SQLite (the column count, the
//! type, the text, its length), and each of the last three checks the
//! statement, enters and leaves the connection's mutex and checks for a
//! failed allocation. Taking the cell's value object once and reading its
//! parts from it costs about a third of that: callgrind counted 290 → 100
//! instructions per text cell, a fifth of a server's whole work answering a
//! list. rusqlite does not hand out a statement's handle, so the statements
//! whose rows are read cell by cell (by ID, and the table reads) are prepared
//! here; they are kept as [`crate::hot::Hot`]'s statements are, under its
//! contract.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use burrow_core::Result;
use rusqlite::types::ValueRef as SqlValue;
use rusqlite::{ffi, Connection};

use crate::eng;

/// One prepared statement of a connection, read cell by cell through
/// SQLite's C API and finalized when dropped. Only the engine prepares one
/// (see [`crate::KeptConnection`]): it keeps the connection boxed, alive
/// longer than the statement, and used by one thread at a time.
pub struct RawStmt {
    stmt: NonNull<ffi::sqlite3_stmt>,
    db: *mut ffi::sqlite3,
    /// Whether some parameters may still point into values bound in place
    /// by an earlier run, which are gone: they are cleared before anything
    /// else binds to or steps the statement (see [`InPlace`]).
    stale: bool,
    /// The columns of the current row, read once per step: every cell read
    /// checks its column against it, and asking SQLite for each cell cost
    /// 36 instructions a row of seven (callgrind), on both sides of a scan.
    columns: usize,
}

/// SQLite's error `rc`, with the connection's message for it.
fn failure(db: *mut ffi::sqlite3, rc: c_int) -> rusqlite::Error {
    // SAFETY: `db` is a live connection; SQLite's message is copied before
    // any other call on it.
    let msg = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        (!m.is_null()).then(|| CStr::from_ptr(m).to_string_lossy().into_owned())
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), msg)
}

impl RawStmt {
    /// Prepares `sql`, one statement, on `conn`. Not public: the statement
    /// must not outlive the connection, which only its owner can promise.
    pub(crate) fn prepare(conn: &Connection, sql: &str) -> rusqlite::Result<RawStmt> {
        let len = c_int::try_from(sql.len()).map_err(|_| {
            rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_TOOBIG), None)
        })?;
        let mut stmt = std::ptr::null_mut();
        let mut tail = std::ptr::null();
        // SAFETY: the handle is live for the call; SQLite reads `len` bytes of
        // `sql` and writes the two out-pointers.
        let (db, rc) = unsafe {
            let db = conn.handle();
            let rc = ffi::sqlite3_prepare_v3(db, sql.as_ptr().cast(), len, 0, &mut stmt, &mut tail);
            (db, rc)
        };
        if rc != ffi::SQLITE_OK {
            return Err(failure(db, rc));
        }
        let Some(stmt) = NonNull::new(stmt) else {
            return Err(rusqlite::Error::InvalidQuery);
        };
        let raw = RawStmt {
            stmt,
            db,
            stale: false,
            columns: 0,
        };
        // What SQLite left unread after the statement: only blanks (or a
        // `;`) may follow, as rusqlite's own prepare requires.
        let used = (tail as usize).wrapping_sub(sql.as_ptr() as usize);
        let rest = sql.get(used..).unwrap_or("");
        if !rest
            .trim_matches(|c: char| c.is_whitespace() || c == ';')
            .is_empty()
        {
            return Err(rusqlite::Error::MultipleStatement);
        }
        Ok(raw)
    }

    /// The connection the statement was prepared on.
    pub(crate) fn db(&self) -> *mut ffi::sqlite3 {
        self.db
    }

    fn ptr(&self) -> *mut ffi::sqlite3_stmt {
        self.stmt.as_ptr()
    }

    /// Whether the statement writes nothing.
    pub fn readonly(&self) -> bool {
        // SAFETY: the statement is live.
        unsafe { ffi::sqlite3_stmt_readonly(self.ptr()) != 0 }
    }

    /// How many parameters the statement takes.
    pub fn parameter_count(&self) -> usize {
        // SAFETY: the statement is live.
        let n = unsafe { ffi::sqlite3_bind_parameter_count(self.ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// The names of the statement's result columns (`?` where SQLite has
    /// none it can give).
    pub fn column_names(&self) -> Vec<String> {
        let p = self.ptr();
        // SAFETY: the statement is live; each name is copied before the next
        // call, as SQLite keeps it only until then.
        unsafe {
            let n = ffi::sqlite3_column_count(p);
            (0..n)
                .map(|i| {
                    let name = ffi::sqlite3_column_name(p, i);
                    if name.is_null() {
                        "?".to_owned()
                    } else {
                        CStr::from_ptr(name).to_string_lossy().into_owned()
                    }
                })
                .collect()
        }
    }

    /// Binds `v` at the 1-based parameter `at`. Text and blobs are copied by
    /// SQLite, as rusqlite binds them.
    #[inline]
    pub fn bind_sql(&mut self, at: usize, v: SqlValue<'_>) -> rusqlite::Result<()> {
        self.clear_stale();
        // SAFETY: SQLite copies the text and blobs before the call returns.
        unsafe { self.bind_with(at, v, ffi::SQLITE_TRANSIENT()) }
    }

    /// Sets every parameter to NULL if some may point into values bound in
    /// place by an earlier run.
    #[inline]
    fn clear_stale(&mut self) {
        if self.stale {
            // SAFETY: the statement is live, and not running: every run ends
            // with a reset (`Rows`, `InPlace`).
            unsafe {
                ffi::sqlite3_clear_bindings(self.ptr());
            }
            self.stale = false;
        }
    }

    /// Binds `v` at the 1-based parameter `at`, its text and blobs handed to
    /// SQLite with `keep` (copied, or read in place).
    ///
    /// # Safety
    /// With `SQLITE_STATIC`, the bytes of `v` must stay valid until the
    /// binding is replaced or cleared.
    #[inline]
    unsafe fn bind_with(
        &mut self,
        at: usize,
        v: SqlValue<'_>,
        keep: ffi::sqlite3_destructor_type,
    ) -> rusqlite::Result<()> {
        let i = c_int::try_from(at).map_err(|_| rusqlite::Error::InvalidParameterCount(at, 0))?;
        let p = self.ptr();
        // SAFETY: the statement is live and not being stepped by anyone else
        // (the owner has exclusive access); the caller answers for the bytes.
        let rc = unsafe {
            match v {
                SqlValue::Null => ffi::sqlite3_bind_null(p, i),
                SqlValue::Integer(n) => ffi::sqlite3_bind_int64(p, i, n),
                SqlValue::Real(f) => ffi::sqlite3_bind_double(p, i, f),
                SqlValue::Text(t) => ffi::sqlite3_bind_text64(
                    p,
                    i,
                    t.as_ptr().cast(),
                    t.len() as ffi::sqlite3_uint64,
                    keep,
                    ffi::SQLITE_UTF8 as u8,
                ),
                SqlValue::Blob(b) => ffi::sqlite3_bind_blob64(
                    p,
                    i,
                    b.as_ptr().cast(),
                    b.len() as ffi::sqlite3_uint64,
                    keep,
                ),
            }
        };
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(failure(self.db, rc))
        }
    }

    /// Runs a statement that returns no rows, its values bound by `bind` in
    /// place: SQLite reads their text and blobs where they are while it
    /// steps (`SQLITE_STATIC`) instead of copying each into memory of its
    /// own first. That copy, a `malloc` and a `memcpy` per value, was half
    /// the cost of binding and a sixth of a multi-row insert (callgrind).
    /// The values borrow for `'v`, which outlives the call. `bind` binds the
    /// parameters in order from the first, and must bind every one, else the
    /// statement is not run (an error): then no parameter can point into an
    /// earlier run's values while SQLite reads them. Those pointers are left in the
    /// statement after the call, unread: clearing the bindings of a
    /// multi-row insert touches every parameter once more (2% of the
    /// instructions of a batch, and as many cache misses as binding them,
    /// callgrind), so the statement is marked instead, and cleared before it
    /// is next bound or run by any other path.
    pub fn execute_in_place<'v>(
        &mut self,
        bind: impl FnOnce(&mut InPlace<'_, 'v>) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<usize> {
        // Marked before the first binding: a panic in `bind` may leave some.
        self.stale = true;
        let mut run = InPlace {
            stmt: self,
            next: 1,
            values: PhantomData,
        };
        bind(&mut run)?;
        if run.next != run.stmt.parameter_count() + 1 {
            return Err(rusqlite::Error::InvalidParameterCount(
                run.next - 1,
                run.stmt.parameter_count(),
            ));
        }
        // Every parameter holds a value of this run: none of an earlier one
        // is left to read.
        run.stmt.stale = false;
        // Reset once, by the run's drop.
        let done = run.stmt.run_once();
        run.stmt.stale = true;
        done
    }

    /// Runs the statement, handing each row to `out`; the statement is reset
    /// afterwards (also on an error or a panic in `out`), so it holds no read
    /// open once this returns.
    pub fn each(&mut self, mut out: impl FnMut(&RawStmt) -> Result<()>) -> Result<()> {
        let mut rows = self.rows();
        while let Some(row) = rows.next_row().map_err(eng)? {
            out(row)?;
        }
        Ok(())
    }

    /// Runs the statement for its first row only, handed to `out`: whether
    /// there was one. Reset afterwards, as by [`RawStmt::each`].
    pub fn first(&mut self, out: impl FnOnce(&RawStmt) -> Result<()>) -> Result<bool> {
        let mut rows = self.rows();
        match rows.next_row().map_err(eng)? {
            Some(row) => out(row).map(|()| true),
            None => Ok(false),
        }
    }

    /// The statement's rows, one step at a time; it is reset when they are
    /// dropped (also on an error or a panic), so that it holds no read open.
    pub fn rows(&mut self) -> Rows<'_> {
        self.clear_stale();
        Rows(self)
    }

    /// Runs a statement that returns no rows, as rusqlite's `raw_execute`
    /// does: the rows it changed.
    pub fn execute(&mut self) -> rusqlite::Result<usize> {
        self.rows().0.run_once()
    }

    /// Steps a statement that returns no rows once: the rows it changed. The
    /// caller resets it.
    fn run_once(&mut self) -> rusqlite::Result<usize> {
        if self.step()? {
            return Err(rusqlite::Error::ExecuteReturnedResults);
        }
        // SAFETY: the connection is live.
        let n = unsafe { ffi::sqlite3_changes64(self.db) };
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The columns of the current row.
    #[inline]
    pub fn column_count(&self) -> usize {
        self.columns
    }

    fn step(&mut self) -> rusqlite::Result<bool> {
        self.columns = 0;
        // SAFETY: the statement is live; the owner has exclusive access.
        match unsafe { ffi::sqlite3_step(self.ptr()) } {
            ffi::SQLITE_ROW => {
                // SAFETY: the statement is live and on a row.
                let n = unsafe { ffi::sqlite3_data_count(self.ptr()) };
                self.columns = usize::try_from(n).unwrap_or(0);
                Ok(true)
            }
            ffi::SQLITE_DONE => Ok(false),
            rc => Err(failure(self.db, rc)),
        }
    }

    /// The value of cell `col` of the current row, its column checked
    /// against the row's own count: a statement SQLite prepared again after
    /// a schema change may have another than when it was first.
    ///
    /// The statement is on a row (cells are read only from `each`/`first`,
    /// between a step that returned a row and the next step or reset, which
    /// need `&mut self` and so end any borrow of a cell). The value object is
    /// "unprotected" in SQLite's terms: it is read without the connection's
    /// mutex, which is safe because the connection runs in multi-thread mode
    /// (no mutex) and only the holder of the statement uses it.
    #[inline(always)]
    fn value(&self, col: usize) -> rusqlite::Result<*mut ffi::sqlite3_value> {
        if col >= self.column_count() {
            return Err(rusqlite::Error::InvalidColumnIndex(col));
        }
        // SAFETY: see above; `col` is in range.
        Ok(unsafe { ffi::sqlite3_column_value(self.ptr(), col as c_int) })
    }

    /// The text of `v`, a value of the current row that holds text.
    ///
    /// # Safety
    /// `v` comes from [`RawStmt::value`] on `self`; the text it points to
    /// stays valid until the next step or reset, which the borrow of `self`
    /// rules out.
    #[inline(always)]
    unsafe fn text_of(&self, v: *mut ffi::sqlite3_value) -> rusqlite::Result<&[u8]> {
        // SAFETY: the caller's contract.
        unsafe {
            let t = ffi::sqlite3_value_text(v);
            if t.is_null() {
                return Err(failure(self.db, ffi::SQLITE_NOMEM));
            }
            let n = ffi::sqlite3_value_bytes(v);
            Ok(std::slice::from_raw_parts(t, n.max(0) as usize))
        }
    }

    /// Cell `col` of the current row as text, if SQLite holds text there:
    /// [`RawStmt::cell`] for the one type a typed field asks for, without
    /// making and matching the general value (a whole-table read calls it for
    /// nearly every cell).
    #[inline(always)]
    pub fn text_cell(&self, col: usize) -> rusqlite::Result<Option<&[u8]>> {
        let v = self.value(col)?;
        // SAFETY: `v` is a value of this row, from `value`.
        unsafe {
            if ffi::sqlite3_value_type(v) != ffi::SQLITE_TEXT {
                return Ok(None);
            }
            self.text_of(v).map(Some)
        }
    }

    /// Cell `col` of the current row as an integer, if SQLite holds one
    /// there (see [`RawStmt::text_cell`]).
    #[inline(always)]
    pub fn int_cell(&self, col: usize) -> rusqlite::Result<Option<i64>> {
        let v = self.value(col)?;
        // SAFETY: `v` is a value of this row, from `value`.
        Ok(unsafe {
            (ffi::sqlite3_value_type(v) == ffi::SQLITE_INTEGER).then(|| ffi::sqlite3_value_int64(v))
        })
    }

    /// Cell `col` (0-based) of the current row.
    #[inline]
    pub fn cell(&self, col: usize) -> rusqlite::Result<SqlValue<'_>> {
        let v = self.value(col)?;
        // SAFETY: `v` is a value of this row, from `value`; blobs, as text,
        // stay valid until the next step or reset.
        unsafe {
            Ok(match ffi::sqlite3_value_type(v) {
                ffi::SQLITE_INTEGER => SqlValue::Integer(ffi::sqlite3_value_int64(v)),
                ffi::SQLITE_FLOAT => SqlValue::Real(ffi::sqlite3_value_double(v)),
                ffi::SQLITE_TEXT => SqlValue::Text(self.text_of(v)?),
                ffi::SQLITE_BLOB => {
                    let n = ffi::sqlite3_value_bytes(v).max(0) as usize;
                    if n == 0 {
                        SqlValue::Blob(&[])
                    } else {
                        let b = ffi::sqlite3_value_blob(v);
                        if b.is_null() {
                            return Err(failure(self.db, ffi::SQLITE_NOMEM));
                        }
                        SqlValue::Blob(std::slice::from_raw_parts(b.cast(), n))
                    }
                }
                _ => SqlValue::Null,
            })
        }
    }
}

impl Drop for RawStmt {
    fn drop(&mut self) {
        // SAFETY: the statement is live and dropped once; its connection
        // outlives it (the owner's contract).
        unsafe {
            ffi::sqlite3_finalize(self.ptr());
        }
    }
}

/// A statement whose values are being bound in place, for one run (see
/// [`RawStmt::execute_in_place`]), one parameter after the other. Only that
/// call makes one, and it lends it out by `&mut`, so it cannot be forgotten:
/// its drop, which resets the statement, always runs before the values it
/// points to may go.
pub struct InPlace<'s, 'v> {
    stmt: &'s mut RawStmt,
    /// The parameter the next value is bound to.
    next: usize,
    /// Invariant in `'v`: the values' lifetime cannot be shortened.
    values: PhantomData<fn(&'v ()) -> &'v ()>,
}

impl<'v> InPlace<'_, 'v> {
    /// Binds `v` to the next parameter, without a copy.
    #[inline]
    pub fn bind(&mut self, v: SqlValue<'v>) -> rusqlite::Result<()> {
        // SAFETY: the text and blobs live for `'v`, beyond this run. The
        // statement is marked stale for good before the run ends, so the
        // pointer is never read after it (see `execute_in_place`).
        unsafe { self.bind_next(v, ffi::SQLITE_STATIC()) }
    }
}

impl InPlace<'_, '_> {
    /// Binds `v` to the next parameter as [`InPlace::bind`] does, but copied
    /// by SQLite: for a value that lives shorter than the run.
    #[inline]
    pub fn bind_copy(&mut self, v: SqlValue<'_>) -> rusqlite::Result<()> {
        // SAFETY: SQLite copies the text and blobs before the call returns.
        unsafe { self.bind_next(v, ffi::SQLITE_TRANSIENT()) }
    }

    /// # Safety
    /// As [`RawStmt::bind_with`].
    #[inline(always)]
    unsafe fn bind_next(
        &mut self,
        v: SqlValue<'_>,
        keep: ffi::sqlite3_destructor_type,
    ) -> rusqlite::Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.stmt.bind_with(self.next, v, keep)? };
        self.next += 1;
        Ok(())
    }
}

impl Drop for InPlace<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the statement is live. The reset ends the run, also one a
        // panic left stepping; the bindings stay, marked stale.
        unsafe {
            ffi::sqlite3_reset(self.stmt.ptr());
        }
        self.stmt.stale = true;
        self.stmt.columns = 0;
    }
}

/// A statement being stepped (see [`RawStmt::rows`]): reset when dropped.
pub struct Rows<'a>(&'a mut RawStmt);

impl Rows<'_> {
    /// The next row, or `None` at the end.
    #[inline]
    pub fn next_row(&mut self) -> rusqlite::Result<Option<&RawStmt>> {
        Ok(if self.0.step()? { Some(self.0) } else { None })
    }
}

impl Drop for Rows<'_> {
    fn drop(&mut self) {
        // SAFETY: the statement is live. A reset ends its read; the error it
        // returns repeats the last step's, already reported.
        unsafe {
            ffi::sqlite3_reset(self.0.ptr());
        }
        self.0.columns = 0;
    }
}

/// Kept statements beyond this are dropped all at once: an engine's reads
/// per table are a handful of texts, so only ad-hoc queries ever reach it.
pub(crate) const KEPT_MAX: usize = 256;

/// Bytes of SQL text kept at most (a statement's compiled form grows with
/// its text): the SQL host keeps the SELECTs clients send, and 256 long
/// ones must not hold hundreds of megabytes.
const KEPT_BYTES: usize = 4 << 20;

/// Statements kept by SQL text, for one connection. rusqlite's statement
/// cache costs a SipHash of the SQL, an LRU update and a
/// `sqlite3_clear_bindings` on every use, about an eighth of a read by ID
/// counted with callgrind; a map with a fast hash costs a fraction of that.
#[derive(Default)]
pub(crate) struct Kept {
    stmts: Vec<RawStmt>,
    /// The text of each statement in `stmts`.
    texts: Vec<Box<str>>,
    by_sql: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// The statement used last. A per-row loop runs one statement over and
    /// over, and comparing its text costs less than hashing it: a lookup fell
    /// from about 200 instructions to 80 (callgrind, the engine benchmark's
    /// insert).
    last: Option<usize>,
    /// The length of the texts in `texts`.
    bytes: usize,
}

impl Kept {
    /// The kept statement of `sql` on `conn` (always the same connection),
    /// prepared on first use. Its parameters keep their last bindings: bind
    /// every one before running it.
    pub(crate) fn get(&mut self, conn: &Connection, sql: &str) -> rusqlite::Result<&mut RawStmt> {
        if let Some(at) = self.last {
            if *self.texts[at] == *sql {
                return Ok(&mut self.stmts[at]);
            }
        }
        let at = match self.by_sql.get(sql) {
            Some(&at) => at,
            None => {
                let stmt = RawStmt::prepare(conn, sql)?;
                if self.stmts.len() >= KEPT_MAX || self.bytes + sql.len() > KEPT_BYTES {
                    self.last = None;
                    self.by_sql.clear();
                    self.texts.clear();
                    self.stmts.clear();
                    self.bytes = 0;
                }
                self.bytes += sql.len();
                self.by_sql.insert(sql.into(), self.stmts.len());
                self.texts.push(sql.into());
                self.stmts.push(stmt);
                self.stmts.len() - 1
            }
        };
        self.last = Some(at);
        Ok(&mut self.stmts[at])
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stmts.len()
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use burrow_core::Error;

    fn conn() -> Connection {
        let c = Connection::open_in_memory().expect("open");
        c.execute_batch(
            "CREATE TABLE t (a, b); INSERT INTO t VALUES (1, 'one'), (2.5, x'00ff'), (NULL, '');",
        )
        .expect("fill");
        c
    }

    /// The two cells of each row `sql` reads from `c`, as `cell` gives them.
    fn two_cells(c: &Connection, sql: &str) -> Vec<(String, String)> {
        let mut seen = Vec::new();
        RawStmt::prepare(c, sql)
            .expect("prepare")
            .each(|r| {
                let own = |v: SqlValue<'_>| format!("{v:?}");
                seen.push((own(r.cell(0).map_err(eng)?), own(r.cell(1).map_err(eng)?)));
                assert!(matches!(
                    r.cell(2),
                    Err(rusqlite::Error::InvalidColumnIndex(2))
                ));
                Ok(())
            })
            .expect("read");
        seen
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn cells_read_as_sqlite_holds_them() {
        let c = conn();
        let want = [
            ("Integer(1)", "Text([111, 110, 101])"),
            ("Real(2.5)", "Blob([0, 255])"),
            ("Null", "Text([])"),
        ];
        assert_eq!(
            two_cells(&c, "SELECT a, b FROM t ORDER BY rowid"),
            owned(&want)
        );
    }

    /// Values bound in place are never read after the call returns: a run
    /// that binds fewer parameters than the statement has is refused; any
    /// other binding or run first clears what is left, so
    /// an unbound parameter reads NULL, not the bytes of a freed buffer; the
    /// same after a binding that failed, or a panic in `bind`.
    #[test]
    fn bindings_in_place_are_never_read_after_the_call() {
        let c = conn();
        let mut s = RawStmt::prepare(&c, "INSERT INTO t VALUES (?, ?)").expect("prepare");
        {
            let text = String::from("in place");
            let blob = vec![7u8, 8];
            let n = s
                .execute_in_place(|run| {
                    run.bind(SqlValue::Blob(&blob))?;
                    run.bind(SqlValue::Text(text.as_bytes()))
                })
                .expect("insert");
            assert_eq!(n, 1);
        }
        s.execute_in_place(|_| Ok(()))
            .expect_err("nothing bound: refused");
        s.execute_in_place(|run| run.bind(SqlValue::Integer(1)))
            .expect_err("one of two bound: refused");
        let text = String::from("dropped");
        let e = s
            .execute_in_place(|run| {
                run.bind(SqlValue::Text(text.as_bytes()))?;
                run.bind(SqlValue::Integer(2))?;
                run.bind(SqlValue::Integer(3))
            })
            .expect_err("there is no third parameter");
        assert!(matches!(e, rusqlite::Error::SqliteFailure(..)), "{e}");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.execute_in_place(|run| {
                run.bind(SqlValue::Text(text.as_bytes()))?;
                panic!("a panic while binding");
            });
        }));
        assert!(panicked.is_err());
        drop(text);
        // Only the second parameter bound, through the copying path.
        s.bind_sql(2, SqlValue::Integer(9)).expect("bind");
        s.execute().expect("insert");
        s.execute().expect("insert again, as bound");
        let rows = two_cells(&c, "SELECT a, b FROM t WHERE rowid > 3 ORDER BY rowid");
        let want = [
            (
                "Blob([7, 8])",
                "Text([105, 110, 32, 112, 108, 97, 99, 101])",
            ),
            ("Null", "Integer(9)"),
            ("Null", "Integer(9)"),
        ];
        assert_eq!(rows, owned(&want));
    }

    /// Dates are written out before anything is bound, each to its own
    /// parameter, in order; a date-time repeated (a batch's stamp) reads the
    /// same as one written for itself.
    #[test]
    fn dates_bound_in_place_keep_their_order() {
        use burrow_core::chrono::{NaiveDate, TimeZone, Utc};
        use burrow_core::ValueRef;
        let c = Connection::open_in_memory().expect("open");
        c.execute_batch("CREATE TABLE d (a, b, c, d, e, f)")
            .expect("create");
        let mut s =
            RawStmt::prepare(&c, "INSERT INTO d VALUES (?, ?, ?, ?, ?, ?)").expect("prepare");
        let day = NaiveDate::from_ymd_opt(2024, 2, 29).expect("a date");
        let t1 = Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap();
        let t2 = Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 58).unwrap();
        let mut dates = crate::DateTexts::default();
        for _ in 0..2 {
            let values = [
                ValueRef::DateTime(t1),
                ValueRef::Text("x".into()),
                ValueRef::DateTime(t1),
                ValueRef::Date(day),
                ValueRef::DateTime(t2),
                ValueRef::Currency(burrow_core::Currency::from_scaled(15_000)),
            ];
            crate::execute_in_place(&mut s, &values, &mut dates).expect("insert");
        }
        let rows: Vec<String> = c
            .prepare("SELECT a || '|' || b || '|' || c || '|' || d || '|' || e || '|' || f FROM d")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let want = "2025-01-02T03:04:05|x|2025-01-02T03:04:05|2024-02-29|1999-12-31T23:59:58|15000";
        assert_eq!(rows, [want, want]);
    }

    #[test]
    fn a_statement_is_reset_after_a_failed_row_and_rebinds() {
        let c = conn();
        let mut s = RawStmt::prepare(&c, "SELECT b FROM t WHERE a = ?").expect("prepare");
        s.bind_sql(1, SqlValue::Integer(1)).expect("bind");
        let e = s
            .each(|_| Err(Error::BadInput("stop".into())))
            .expect_err("the callback's error");
        assert!(matches!(e, Error::BadInput(_)), "{e}");
        // A statement left mid-read would keep the table locked.
        c.execute_batch("CREATE TABLE u (x); DROP TABLE u;")
            .expect("nothing is left reading");
        s.bind_sql(1, SqlValue::Real(2.5)).expect("bind");
        let mut got = None;
        let found = s
            .first(|r| {
                got = Some(format!("{:?}", r.cell(0).map_err(eng)?));
                Ok(())
            })
            .expect("read");
        assert!(found);
        assert_eq!(got.as_deref(), Some("Blob([0, 255])"));
    }

    #[test]
    fn one_statement_only_and_errors_carry_sqlite_s_message() {
        let c = conn();
        assert!(matches!(
            RawStmt::prepare(&c, "SELECT 1; DELETE FROM t"),
            Err(rusqlite::Error::MultipleStatement)
        ));
        RawStmt::prepare(&c, "SELECT 1; ").expect("a trailing semicolon is one statement");
        let e = RawStmt::prepare(&c, "SELECT nope FROM t")
            .err()
            .expect("an unknown column");
        assert!(e.to_string().contains("nope"), "{e}");
        let mut s = RawStmt::prepare(&c, "SELECT a FROM t").expect("prepare");
        assert!(s.readonly());
        assert_eq!(s.parameter_count(), 0);
        assert_eq!(s.column_names(), ["a"]);
        assert_eq!(
            c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
                .expect("count"),
            3
        );
        let mut kept = Kept::default();
        let a = kept.get(&c, "SELECT a FROM t").expect("kept") as *const RawStmt;
        let b = kept.get(&c, "SELECT a FROM t").expect("kept again") as *const RawStmt;
        assert_eq!(a, b, "one statement per text");
        s.each(|_| Ok(())).expect("read");
    }

    #[test]
    fn kept_texts_are_bounded_in_bytes() {
        let c = conn();
        let mut kept = Kept::default();
        // SELECTs of about 1 MiB each (a long string literal): only a few
        // fit at once, and a statement dropped is prepared again on use.
        let long = |i: usize| format!("SELECT '{}', {i}", "x".repeat(1 << 20));
        for i in 0..20 {
            kept.get(&c, &long(i)).expect("prepare");
            assert!(kept.bytes <= KEPT_BYTES, "{} bytes kept", kept.bytes);
            assert!(kept.len() <= KEPT_BYTES / (1 << 20));
        }
        let again = kept.get(&c, &long(3)).expect("prepared again");
        let mut n = None;
        again
            .first(|r| {
                n = Some(format!("{:?}", r.cell(1).map_err(eng)?));
                Ok(())
            })
            .expect("read");
        assert_eq!(n.as_deref(), Some("Integer(3)"));
    }
}
