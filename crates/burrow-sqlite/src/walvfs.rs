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
//! - when the connection takes or gives up any lock of the log's shared
//!   index (on the database file). SQLite makes no call on the log when a
//!   transaction that spilled frames rolls back; those frames would stay in
//!   the buffer after the write lock is given up, and another connection
//!   could commit frames at the same place, which a later write of the
//!   buffer would overwrite. Written out before the lock goes, they are in
//!   the file as SQLite alone would have left them: past the log's last
//!   commit, where nothing reads them. A connection in exclusive locking
//!   mode takes no such locks, and no other connection writes the log
//!   while it holds the file.
//!
//! Only appends gather. Bytes written again (a page changed again after the
//! cache spilled it, checksums rewritten at commit, a commit frame's header
//! among them) go straight through, after what came before them. Nothing
//! else changes: the main database file, journals and the shared memory
//! index go straight to the VFS below; a log whose page size this
//! connection has not seen written (a log left by an earlier process, until
//! it restarts) is written through as it comes, and so is the log of a
//! database file without power-safe overwrites, where SQLite pads a commit
//! to a sector with copies of its last frame split around a sync (the sync
//! would leave the frame cut by it half written while the index showed it).
//! Another connection reads
//! only frames a commit made visible in the index, and a commit is written
//! out before it updates the index.
//!
//! Unsafe throughout: a VFS is SQLite's C interface, its files raw memory
//! SQLite allocates at the size this VFS asks for.
#![allow(unsafe_code)]

use std::collections::HashMap;
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
    /// A main database file's name as SQLite passed it (null for another
    /// file): the key of [`mains`].
    name: usize,
    /// For a main database file, the buffer of the log its connection has
    /// open (null when none): written out at every lock of the log's index.
    /// Set and cleared by that connection's opening and closing of its log,
    /// so read without a lock.
    paired: *mut Log,
    /// Keeps the file below aligned for any of its fields.
    _align: [u64; 0],
}

/// A log file's writes not yet made.
struct Log {
    buf: Vec<u8>,
    /// Where in the file `buf` starts.
    at: i64,
    /// Where this connection's writes to the log end, since it last wrote
    /// the log's header: a write before it rewrites bytes already written.
    end: i64,
    /// The log's page size, once this connection has written its header.
    page: i64,
    /// Where the last commit frame seen ends, until it is written out.
    commit_end: Option<i64>,
    /// The main database file of the same connection.
    main: *mut File,
    /// The log's own file, which SQLite does not move while it is open.
    file: *mut ffi::sqlite3_file,
}

/// The main database files open through this VFS, by the address of the
/// name SQLite opened them with, which is where that connection's pager
/// keeps its file names: the log's name, opened later by the same pager,
/// leads back to it (`sqlite3_filename_database`). Each pairs a connection's
/// two files: an address is unique while its pager lives, and a pager closes
/// its log before its database file.
fn mains() -> std::sync::MutexGuard<'static, HashMap<usize, usize>> {
    static MAINS: OnceLock<Mutex<HashMap<usize, usize>>> = OnceLock::new();
    MAINS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
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
    // Read through the pointer: SQLite may write the VFS's `pNext` meanwhile.
    let below = std::ptr::addr_of!((*vfs.cast::<Shim>()).real).read();
    let file = f.cast::<File>();
    let inner = real(f);
    (*inner).pMethods = std::ptr::null();
    let rc = match (*below).xOpen {
        Some(x) => x(below, name, inner, flags, out_flags),
        None => ffi::SQLITE_CANTOPEN,
    };
    // A file the VFS below left methods on is closed through this one, even
    // when the open failed.
    (*file).log = std::ptr::null_mut();
    (*file).name = 0;
    (*file).paired = std::ptr::null_mut();
    if (*inner).pMethods.is_null() {
        (*file).base.pMethods = std::ptr::null();
        return rc;
    }
    // A file below without shared memory (a version-1 VFS, or one with no
    // `xShmMap`, as `unix-none`) is shown without it: SQLite then refuses
    // WAL mode on it rather than failing at each use.
    (*file).base.pMethods = if methods(f).iVersion >= 2 && methods(f).xShmMap.is_some() {
        &METHODS
    } else {
        &NO_SHM_METHODS
    };
    if rc != ffi::SQLITE_OK || name.is_null() {
        return rc;
    }
    if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        (*file).name = name as usize;
        mains().insert(name as usize, file as usize);
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        // A log whose database file did not open through this VFS is not
        // gathered: nothing would write it out at its locks. Nor is one
        // whose commits SQLite pads to a sector with copies of their last
        // frame, split around a sync, which it does when the database file
        // (not the log: SQLite asks the database file, once, as it opens
        // the log) has no power-safe overwrites: such a log is written as
        // it comes.
        let mains = mains();
        let main = ffi::sqlite3_filename_database(name) as usize;
        let main = mains.get(&main).map(|&m| m as *mut File);
        let powersafe =
            |m: *mut File| device(m.cast()) & ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE != 0;
        if let Some(main) = main.filter(|&m| powersafe(m)) {
            let log = Box::into_raw(Box::new(Log {
                buf: Vec::new(),
                at: 0,
                end: 0,
                page: 0,
                commit_end: None,
                main,
                file: f,
            }));
            (*file).log = log;
            (*main).paired = log;
        }
    }
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
    let written = log.at + log.buf.len() as i64;
    // Gone either way: on an error SQLite fails the transaction, and a log's
    // frames past its last commit are never read.
    log.buf.clear();
    // A commit frame cut by this flush is written out when its end comes.
    if log.commit_end.is_some_and(|e| e <= written) || rc != ffi::SQLITE_OK {
        log.commit_end = None;
    }
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
        log.end = 0;
    }
    let rewrite = at < log.end;
    log.end = log.end.max(at + len as i64);
    // A log begun by another connection, and bytes written again (a page
    // changed again within the transaction, checksums rewritten at its
    // commit, a commit frame's header among them) go straight through,
    // after what came before them.
    if log.page == 0 || rewrite {
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
        log.commit_end = Some(log.commit_end.map_or(at + frame, |e| e.max(at + frame)));
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
    let file = f.cast::<File>();
    let log = (*file).log;
    if !log.is_null() {
        // The database file is open while its log is: unpair under the
        // lock, in case it is not.
        let mains = mains();
        let main = (*log).main;
        if mains.values().any(|&m| m == main as usize) && (*main).paired == log {
            (*main).paired = std::ptr::null_mut();
        }
        drop(mains);
        drop(Box::from_raw(log));
        (*file).log = std::ptr::null_mut();
    }
    if (*file).name != 0 {
        let mut mains = mains();
        if mains.get(&(*file).name) == Some(&(file as usize)) {
            mains.remove(&(*file).name);
        }
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
    // Before any lock of the index goes or comes, the connection's log
    // writes go out (see the module): nothing of a rolled-back transaction
    // waits in the buffer once the write lock is free. A lock given up is
    // given up even when that write fails (SQLite ignores what an unlock
    // returns, and would hold the lock): what goes out there is never a
    // commit, which went out with its last write, but frames past the
    // log's last commit, which nothing reads, and the buffer is let go
    // either way.
    let paired = (*f.cast::<File>()).paired;
    if !paired.is_null() {
        let rc = flush_log((*paired).file, &mut *paired);
        if rc != ffi::SQLITE_OK && flags & ffi::SQLITE_SHM_UNLOCK == 0 {
            return rc;
        }
    }
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

/// The methods of a file whose VFS below has no shared memory.
static NO_SHM_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    xShmMap: None,
    ..ALL_METHODS
};

static METHODS: ffi::sqlite3_io_methods = ALL_METHODS;

const ALL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
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
    use super::{mains, over, File};
    use rusqlite::ffi;
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

    /// Rows in the database a process killed now would leave: the file and
    /// its log copied, then opened (SQLite recovers the log).
    fn after_a_kill(dir: &std::path::Path) -> i64 {
        let copy = dir.join("copy");
        std::fs::create_dir_all(&copy).unwrap();
        for name in ["log.db", "log.db-wal"] {
            let _ = std::fs::remove_file(copy.join(name));
            if dir.join(name).exists() {
                std::fs::copy(dir.join(name), copy.join(name)).unwrap();
            }
        }
        let c = Connection::open(copy.join("log.db")).unwrap();
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_transaction_that_spilled_is_whole_in_the_file_at_its_commit() {
        // A cache of 20 pages spills mid-transaction; pages changed again
        // after the spill make SQLite rewrite the frames' checksums at
        // commit, the commit frame's header among them.
        for sync in ["OFF", "NORMAL"] {
            let dir = tempfile::tempdir().unwrap();
            let w = through_log_vfs(&dir.path().join("log.db"));
            w.execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA cache_size=20; \
                 PRAGMA wal_autocheckpoint=0; CREATE TABLE t (n INTEGER, pad TEXT); \
                 CREATE INDEX t_pad ON t (pad)"
            ))
            .unwrap();
            for round in 1..=3 {
                let tx = w.unchecked_transaction().unwrap();
                for i in 0..3_000 {
                    tx.execute(
                        "INSERT INTO t (n, pad) VALUES (?1, ?2)",
                        rusqlite::params![i, format!("{:0200}", (i * 7_919 + round) % 100_000)],
                    )
                    .unwrap();
                }
                tx.commit().unwrap();
                assert_eq!(after_a_kill(dir.path()), round * 3_000, "{sync}");
            }
        }
    }

    #[test]
    fn a_rolled_back_spill_never_lands_on_another_connection_s_commit() {
        // `exclusive`: A holds the file in exclusive locking mode while it
        // rolls back, and goes back to normal locking before B writes.
        for (sync, exclusive) in [
            ("OFF", false),
            ("NORMAL", false),
            ("FULL", false),
            ("OFF", true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log.db");
            let a = through_log_vfs(&path);
            a.execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA cache_size=20; \
                 PRAGMA wal_autocheckpoint=0; CREATE TABLE t (n INTEGER, pad TEXT)"
            ))
            .unwrap();
            commit(&a, 10);
            for round in 1..=3i64 {
                // With the log checkpointed, A's rollback reads its pages
                // back from the database file, not from the log.
                a.execute_batch("PRAGMA wal_checkpoint").unwrap();
                if exclusive {
                    a.execute_batch("PRAGMA locking_mode=EXCLUSIVE").unwrap();
                }
                // A's cache spills frames into the log past its last commit
                // (fewer than the buffer holds), then A rolls back: SQLite
                // makes no call on the log for that.
                let tx = a.unchecked_transaction().unwrap();
                for i in 0..400 {
                    tx.execute(
                        "INSERT INTO t (n, pad) VALUES (?1, ?2)",
                        rusqlite::params![-i, "y".repeat(200)],
                    )
                    .unwrap();
                }
                drop(tx);
                if exclusive {
                    a.execute_batch("PRAGMA locking_mode=NORMAL").unwrap();
                    totals(&a);
                }
                // B (open only now: a connection to a log keeps a shared
                // lock on the file) commits its frames where A's were.
                let b = Connection::open(&path).unwrap();
                b.execute_batch("PRAGMA wal_autocheckpoint=0").unwrap();
                commit(&b, 500);
                drop(b);
                // A reads the log, then writes it, then closes it; whatever
                // A held back must not land on B's frames.
                let what = format!("synchronous {sync}, exclusive {exclusive}, round {round}");
                assert_eq!(totals(&a).0, 10 + round * 500, "{what}");
                a.execute("INSERT INTO t (n) VALUES (0)", []).unwrap();
                a.execute("DELETE FROM t WHERE pad IS NULL", []).unwrap();
            }
            drop(a);
            let check = Connection::open(&path).unwrap();
            let ok: String = check
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(ok, "ok", "{sync}, {exclusive}");
            let want = (10 + 3 * 500, 45 + 3 * 500 * 499 / 2);
            assert_eq!(totals(&check), want, "{sync}, {exclusive}");
        }
    }

    /// Writes to the logs of files opened through [`failing_vfs`] fail
    /// while this is set.
    static FAIL_LOG_WRITES: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// A VFS over SQLite's default whose log files' writes fail on demand
    /// (a full disk), for this module's tests only.
    fn failing_vfs() -> &'static str {
        use std::ffi::{c_char, c_int, c_void};
        use std::sync::atomic::Ordering;
        use std::sync::OnceLock;
        /// The default VFS's methods of a log file, and the same but for
        /// its write.
        static LOG_METHODS: OnceLock<(usize, usize)> = OnceLock::new();
        static DEFAULT: OnceLock<usize> = OnceLock::new();
        unsafe extern "C" fn write(
            f: *mut ffi::sqlite3_file,
            data: *const c_void,
            amt: c_int,
            at: i64,
        ) -> c_int {
            if FAIL_LOG_WRITES.load(Ordering::SeqCst) {
                return ffi::SQLITE_IOERR_WRITE;
            }
            let real = LOG_METHODS.get().expect("set at open").0 as *const ffi::sqlite3_io_methods;
            (*real).xWrite.expect("unix writes")(f, data, amt, at)
        }
        unsafe extern "C" fn open(
            _vfs: *mut ffi::sqlite3_vfs,
            name: *const c_char,
            f: *mut ffi::sqlite3_file,
            flags: c_int,
            out: *mut c_int,
        ) -> c_int {
            let below = *DEFAULT.get().expect("set at registration") as *mut ffi::sqlite3_vfs;
            let rc = (*below).xOpen.expect("unix opens")(below, name, f, flags, out);
            if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_WAL != 0 {
                let (real, patched) = *LOG_METHODS.get_or_init(|| {
                    let real = (*f).pMethods;
                    let mut m = *real;
                    m.xWrite = Some(write);
                    (real as usize, Box::leak(Box::new(m)) as *const _ as usize)
                });
                assert_eq!((*f).pMethods as usize, real);
                (*f).pMethods = patched as *const ffi::sqlite3_io_methods;
            }
            rc
        }
        static NAME: OnceLock<&'static str> = OnceLock::new();
        NAME.get_or_init(|| {
            // SAFETY: the default VFS, registered for the life of the
            // process; the copy is leaked, so it lives as long.
            unsafe {
                let default = ffi::sqlite3_vfs_find(std::ptr::null());
                DEFAULT.get_or_init(|| default as usize);
                let mut vfs = *default;
                vfs.zName = c"burrow-test-failing-log".as_ptr();
                vfs.pNext = std::ptr::null_mut();
                vfs.xOpen = Some(open);
                assert_eq!(ffi::sqlite3_vfs_register(Box::leak(Box::new(vfs)), 0), 0);
            }
            "burrow-test-failing-log"
        })
    }

    #[test]
    fn a_log_write_failing_as_the_write_lock_goes_still_lets_it_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let vfs = over(Some(failing_vfs())).unwrap();
        let a = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), vfs).unwrap();
        a.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=20; \
             PRAGMA wal_autocheckpoint=0; CREATE TABLE t (n INTEGER, pad TEXT); \
             INSERT INTO t (n) VALUES (1); PRAGMA wal_checkpoint",
        )
        .unwrap();
        // A spills frames it holds back, then rolls back while the disk
        // refuses them: they go at the write lock's release, and fail.
        let tx = a.unchecked_transaction().unwrap();
        for i in 0..400 {
            tx.execute(
                "INSERT INTO t (n, pad) VALUES (?1, ?2)",
                rusqlite::params![i, "y".repeat(200)],
            )
            .unwrap();
        }
        FAIL_LOG_WRITES.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(tx);
        FAIL_LOG_WRITES.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(a.is_autocommit());
        // The write lock is free: another connection writes at once.
        let b = Connection::open(&path).unwrap();
        b.busy_timeout(std::time::Duration::from_millis(200))
            .unwrap();
        b.execute("INSERT INTO t (n) VALUES (2)", []).unwrap();
        assert_eq!(totals(&a), (2, 3));
        a.execute("INSERT INTO t (n) VALUES (3)", []).unwrap();
        assert_eq!(totals(&b), (3, 6));
    }

    #[test]
    fn a_log_padded_to_sectors_is_written_as_it_comes() {
        // Without power-safe overwrites (which SQLite asks of the database
        // file, not of its log) a commit is padded with copies of its last
        // frame, split around a sync: such a log is not gathered.
        for psow in [0, 1] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log.db");
            let uri = format!("file:{}?psow={psow}", path.display());
            let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI;
            let w = Connection::open_with_flags_and_vfs(uri, flags, over(None).unwrap()).unwrap();
            w.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; \
                 CREATE TABLE t (n INTEGER, pad TEXT)",
            )
            .unwrap();
            // SAFETY: the connection is open; its main file's name is the
            // one its pager opened the file with, the key of `mains`.
            let key = unsafe { ffi::sqlite3_db_filename(w.handle(), c"main".as_ptr()) } as usize;
            let main = *mains().get(&key).expect("the database file opened here");
            // SAFETY: the file stays open while `w` is.
            let gathered = unsafe { !(*(main as *const File)).paired.is_null() };
            assert_eq!(gathered, psow == 1, "psow={psow}");
            let r = Connection::open(&path).unwrap();
            for i in 0..20 {
                w.execute("INSERT INTO t (n) VALUES (?1)", [i]).unwrap();
                assert_eq!(totals(&r), (i + 1, i * (i + 1) / 2));
            }
        }
    }

    #[test]
    fn a_vfs_below_without_shared_memory_keeps_its_rollback_journal() {
        // `unix-none` has version-3 methods but no shared memory: SQLite
        // refuses WAL mode on it, through this VFS as without it.
        let vfs = over(Some("unix-none")).expect("SQLite's unix build has unix-none");
        let dir = tempfile::tempdir().unwrap();
        let c = Connection::open_with_flags_and_vfs(
            dir.path().join("log.db"),
            OpenFlags::default(),
            vfs,
        )
        .unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        c.execute_batch("CREATE TABLE t (n INTEGER, pad TEXT); INSERT INTO t (n) VALUES (1)")
            .unwrap();
        assert_eq!(totals(&c), (1, 1));
    }

    #[test]
    fn no_vfs_of_an_unknown_name() {
        assert!(over(Some("no-such-vfs")).is_none());
        assert_eq!(over(None), over(None));
    }
}
