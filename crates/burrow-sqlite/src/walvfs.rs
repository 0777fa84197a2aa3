//! A VFS over SQLite's own that writes a transaction's log frames in one
//! system call where SQLite makes two per page.
//!
//! SQLite writes each frame of its write-ahead log as a 24-byte header, then
//! the page: a one-row commit is two `pwrite`s, a 10,000-row commit about
//! 530, and those calls are most of what a commit costs beyond the B-tree
//! work when nothing waits for the disk. Here the log's writes gather in a
//! buffer while they follow each other in the file, and go out as one write
//!
//! - when a commit frame is complete (its header says so: the log's format
//!   keeps the database's size in pages there for a commit, zero otherwise),
//!   so that a commit is in the operating system when SQLite's commit
//!   returns, as without this VFS: a process that dies then loses nothing;
//! - before any other use of the log file (a read, a sync, a truncation, its
//!   size, a lock, a file control, its close), so that SQLite never sees
//!   the file other than it wrote it;
//! - when the next write is not right after the last, or the buffer is full.
//!
//! Nothing else changes: the main database file, journals and the shared
//! memory index go straight to the VFS below, and a log whose page size this
//! connection has not seen written (a log left by an earlier process, until
//! it restarts) is written through as it comes. Another connection reads
//! only frames a commit made visible in the index, and a commit is written
//! out before it updates the index.
//!
//! Unsafe throughout: a VFS is SQLite's C interface, its files raw memory
//! SQLite allocates at the size this VFS asks for.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

use rusqlite::ffi;

/// Bytes a log write gathers at most before it goes out.
const CAP: usize = 256 * 1024;
/// Bytes handed to the VFS below in one write: its Unix writer takes at
/// most 128 KiB - 1 at a time (it masks the length to 17 bits).
const PIECE: usize = 64 * 1024;
/// The log's header, before its first frame.
const LOG_HEADER: i64 = 32;
/// A frame's header, before its page.
const FRAME_HEADER: i64 = 24;

/// The name of the VFS that gathers a transaction's log writes (see the
/// [module](self)) over `below` (SQLite's default when `None`), registered
/// on first use; `None` when `below` is not a VFS of this build. Open the
/// connection that writes a database in WAL mode through it.
pub fn over(below: Option<&str>) -> Option<&'static str> {
    /// The VFS below (`None`: the default) and this one's name over it.
    type Made = Vec<(Option<String>, &'static str)>;
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    let made = MADE.get_or_init(|| Mutex::new(Vec::new()));
    let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
    let key = below.map(str::to_owned);
    if let Some((_, name)) = made.iter().find(|(k, _)| *k == key) {
        return Some(name);
    }
    let below_c = below.map(CString::new).transpose().ok()?;
    // SAFETY: a NUL-terminated name, or null for the default VFS.
    let real =
        unsafe { ffi::sqlite3_vfs_find(below_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())) };
    if real.is_null() {
        return None;
    }
    // SAFETY: `real` is a registered VFS, which SQLite never frees.
    let real_ref = unsafe { &*real };
    let below_name = unsafe { CStr::from_ptr(real_ref.zName) }.to_string_lossy();
    let name: &'static str = Box::leak(format!("burrow-log-{below_name}").into_boxed_str());
    let name_c: &'static CStr = Box::leak(CString::new(name).ok()?.into_boxed_c_str());
    let mut vfs = *real_ref;
    vfs.zName = name_c.as_ptr();
    vfs.pNext = std::ptr::null_mut();
    vfs.szOsFile = c_int::try_from(std::mem::size_of::<File>()).ok()? + real_ref.szOsFile;
    vfs.xOpen = Some(open);
    let shim: &'static mut Shim = Box::leak(Box::new(Shim { vfs, real }));
    // SAFETY: the VFS lives for the rest of the process.
    let rc = unsafe { ffi::sqlite3_vfs_register(&mut shim.vfs, 0) };
    if rc != ffi::SQLITE_OK {
        return None;
    }
    made.push((key, name));
    Some(name)
}

/// This VFS: SQLite's `sqlite3_vfs` first, so that SQLite's pointer to it
/// is a pointer to this; every method but `xOpen` is the one below, which
/// finds what it needs in the copied `pAppData`.
#[repr(C)]
struct Shim {
    vfs: ffi::sqlite3_vfs,
    real: *mut ffi::sqlite3_vfs,
}

/// An open file: SQLite's `sqlite3_file` first, then the log's buffer (null
/// for any other file), then the file of the VFS below.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    log: *mut Log,
    /// Keeps the file below aligned for any of its fields.
    _align: [u64; 0],
}

/// A log file's writes not yet made.
struct Log {
    buf: Vec<u8>,
    /// Where in the file `buf` starts.
    at: i64,
    /// The log's page size, once this connection has written its header.
    page: i64,
    /// Where the last commit frame seen ends, until it is written out.
    commit_end: Option<i64>,
}

/// The file of the VFS below.
unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    f.cast::<u8>().add(std::mem::size_of::<File>()).cast()
}

unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    &*(*real(f)).pMethods
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    f: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let shim = &*vfs.cast::<Shim>();
    let file = f.cast::<File>();
    let inner = real(f);
    (*inner).pMethods = std::ptr::null();
    let rc = match (*shim.real).xOpen {
        Some(x) => x(shim.real, name, inner, flags, out_flags),
        None => ffi::SQLITE_CANTOPEN,
    };
    // A file the VFS below left methods on is closed through this one, even
    // when the open failed.
    if (*inner).pMethods.is_null() {
        (*file).base.pMethods = std::ptr::null();
        (*file).log = std::ptr::null_mut();
        return rc;
    }
    (*file).base.pMethods = &METHODS;
    (*file).log = if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_WAL != 0 {
        Box::into_raw(Box::new(Log {
            buf: Vec::new(),
            at: 0,
            page: 0,
            commit_end: None,
        }))
    } else {
        std::ptr::null_mut()
    };
    rc
}

/// Writes out what the log's buffer holds (nothing for another file).
unsafe fn flush(f: *mut ffi::sqlite3_file) -> c_int {
    let log = (*f.cast::<File>()).log;
    if log.is_null() {
        return ffi::SQLITE_OK;
    }
    flush_log(f, &mut *log)
}

unsafe fn flush_log(f: *mut ffi::sqlite3_file, log: &mut Log) -> c_int {
    if log.buf.is_empty() {
        return ffi::SQLITE_OK;
    }
    let rc = write_below(f, &log.buf, log.at);
    // Gone either way: on an error SQLite fails the transaction, and a log's
    // frames past its last commit are never read.
    log.buf.clear();
    log.commit_end = None;
    rc
}

unsafe fn write_below(f: *mut ffi::sqlite3_file, data: &[u8], at: i64) -> c_int {
    let Some(x) = methods(f).xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let mut at = at;
    for piece in data.chunks(PIECE) {
        // A piece is at most 64 KiB: it fits a C int.
        let rc = x(real(f), piece.as_ptr().cast(), piece.len() as c_int, at);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        at += piece.len() as i64;
    }
    ffi::SQLITE_OK
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

unsafe extern "C" fn write(
    f: *mut ffi::sqlite3_file,
    data: *const c_void,
    amt: c_int,
    at: i64,
) -> c_int {
    let log = (*f.cast::<File>()).log;
    let len = usize::try_from(amt).unwrap_or(0);
    let data = std::slice::from_raw_parts(data.cast::<u8>(), len);
    if log.is_null() {
        return write_below(f, data, at);
    }
    let log = &mut *log;
    if at == 0 && data.len() >= LOG_HEADER as usize {
        // The log's header (a new log, or one restarted): its page size.
        let page = i64::from(be32(&data[8..12]));
        log.page = if (512..=65_536).contains(&page) && page.count_ones() == 1 {
            page
        } else {
            0
        };
    }
    if log.page == 0 {
        let rc = flush_log(f, log);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        return write_below(f, data, at);
    }
    let frame = FRAME_HEADER + log.page;
    let commit = at >= LOG_HEADER
        && (at - LOG_HEADER) % frame == 0
        && data.len() >= FRAME_HEADER as usize
        && be32(&data[4..8]) != 0;
    let end_of_buf = log.at + log.buf.len() as i64;
    if !log.buf.is_empty() && (at != end_of_buf || log.buf.len() + data.len() > CAP) {
        let rc = flush_log(f, log);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if commit {
        log.commit_end = Some(at + frame);
    }
    if log.buf.is_empty() {
        log.at = at;
    }
    log.buf.extend_from_slice(data);
    match log.commit_end {
        Some(end) if log.at + log.buf.len() as i64 >= end => flush_log(f, log),
        _ => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn close(f: *mut ffi::sqlite3_file) -> c_int {
    let flushed = flush(f);
    let log = (*f.cast::<File>()).log;
    if !log.is_null() {
        drop(Box::from_raw(log));
        (*f.cast::<File>()).log = std::ptr::null_mut();
    }
    let rc = match methods(f).xClose {
        Some(x) => x(real(f)),
        None => ffi::SQLITE_OK,
    };
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        rc
    }
}

/// Runs `then` on the file below once the log's buffer is written out.
macro_rules! after_flush {
    ($f:expr, $method:ident, $($arg:expr),*) => {{
        let rc = flush($f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        match methods($f).$method {
            Some(x) => x(real($f), $($arg),*),
            None => ffi::SQLITE_IOERR,
        }
    }};
}

unsafe extern "C" fn read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    at: i64,
) -> c_int {
    after_flush!(f, xRead, buf, amt, at)
}

unsafe extern "C" fn truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    after_flush!(f, xTruncate, size)
}

unsafe extern "C" fn sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    after_flush!(f, xSync, flags)
}

unsafe extern "C" fn file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    after_flush!(f, xFileSize, size)
}

unsafe extern "C" fn lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    after_flush!(f, xLock, level)
}

unsafe extern "C" fn unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    after_flush!(f, xUnlock, level)
}

unsafe extern "C" fn check_reserved(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    after_flush!(f, xCheckReservedLock, out)
}

unsafe extern "C" fn file_control(f: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    after_flush!(f, xFileControl, op, arg)
}

unsafe extern "C" fn sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    methods(f).xSectorSize.map_or(4096, |x| x(real(f)))
}

unsafe extern "C" fn device(f: *mut ffi::sqlite3_file) -> c_int {
    methods(f).xDeviceCharacteristics.map_or(0, |x| x(real(f)))
}

unsafe extern "C" fn shm_map(
    f: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    match methods(f).xShmMap {
        Some(x) if methods(f).iVersion >= 2 => x(real(f), page, size, extend, out),
        _ => ffi::SQLITE_IOERR_SHMMAP,
    }
}

unsafe extern "C" fn shm_lock(
    f: *mut ffi::sqlite3_file,
    at: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    match methods(f).xShmLock {
        Some(x) if methods(f).iVersion >= 2 => x(real(f), at, n, flags),
        _ => ffi::SQLITE_IOERR_SHMLOCK,
    }
}

unsafe extern "C" fn shm_barrier(f: *mut ffi::sqlite3_file) {
    if let Some(x) = methods(f).xShmBarrier.filter(|_| methods(f).iVersion >= 2) {
        x(real(f));
    }
}

unsafe extern "C" fn shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    match methods(f).xShmUnmap {
        Some(x) if methods(f).iVersion >= 2 => x(real(f), delete),
        _ => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn fetch(
    f: *mut ffi::sqlite3_file,
    at: i64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let rc = flush(f);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(f).xFetch {
        Some(x) if methods(f).iVersion >= 3 => x(real(f), at, amt, out),
        _ => {
            *out = std::ptr::null_mut();
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn unfetch(f: *mut ffi::sqlite3_file, at: i64, p: *mut c_void) -> c_int {
    match methods(f).xUnfetch {
        Some(x) if methods(f).iVersion >= 3 => x(real(f), at, p),
        _ => ffi::SQLITE_OK,
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

#[cfg(test)]
mod test {
    use super::over;
    use rusqlite::{Connection, OpenFlags};

    fn through_log_vfs(path: &std::path::Path) -> Connection {
        let vfs = over(None).expect("the default VFS is there");
        let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;")
            .unwrap();
        c
    }

    fn totals(c: &Connection) -> (i64, i64) {
        c.query_row("SELECT count(*), coalesce(sum(n), 0) FROM t", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    }

    /// Commits `rows` rows of about 200 bytes each in one transaction.
    fn commit(c: &Connection, rows: i64) {
        let tx = c.unchecked_transaction().unwrap();
        for i in 0..rows {
            tx.execute(
                "INSERT INTO t (n, pad) VALUES (?1, ?2)",
                rusqlite::params![i, "x".repeat(200)],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }

    #[test]
    fn a_commit_is_in_the_file_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let w = through_log_vfs(&path);
        w.execute_batch("CREATE TABLE t (n INTEGER, pad TEXT)")
            .unwrap();
        // Another connection, on SQLite's own VFS, reads the log through a
        // handle of its own: it sees a commit only once it is in the file.
        let r = Connection::open(&path).unwrap();
        let mut want = (0, 0);
        // One row (one frame), then far more than the buffer holds; then
        // the same after the log restarts from its start.
        for (round, rows) in [1i64, 5_000, 3, 1, 5_000].into_iter().enumerate() {
            commit(&w, rows);
            want = (want.0 + rows, want.1 + rows * (rows - 1) / 2);
            assert_eq!(totals(&r), want, "round {round}");
            if round == 2 {
                w.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
            }
        }
        drop(w);
        assert_eq!(totals(&Connection::open(&path).unwrap()), want);
    }

    #[test]
    fn a_log_another_connection_began_is_written_as_it_comes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        // The log's header is written by the first connection: the second
        // does not know its page size, and writes what it is given.
        let first = Connection::open(&path).unwrap();
        first
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; \
                 CREATE TABLE t (n INTEGER, pad TEXT)",
            )
            .unwrap();
        commit(&first, 10);
        let second = through_log_vfs(&path);
        commit(&second, 2_000);
        let want = (2_010, 45 + 2_000 * 1_999 / 2);
        assert_eq!(totals(&first), want);
        drop((first, second));
        assert_eq!(totals(&Connection::open(&path).unwrap()), want);
    }

    #[test]
    fn no_vfs_of_an_unknown_name() {
        assert!(over(Some("no-such-vfs")).is_none());
        assert_eq!(over(None), over(None));
    }
}
