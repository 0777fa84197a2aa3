//! How a SQLite database is opened, and what each speed option risks.

use std::path::PathBuf;
use std::time::Duration;

/// `PRAGMA synchronous`: when SQLite waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Waits for the disk at every commit (and, with WAL off, at key points of
    /// it). A committed transaction survives a power cut. The default.
    #[default]
    Full,
    /// With WAL: a commit may be lost on a power cut (never on a crash of the
    /// process), but the database stays consistent. Without WAL: as `Full` minus
    /// some syncs, with a small risk of corruption on a power cut.
    Normal,
    /// Never waits for the disk. An operating-system crash or power cut can
    /// lose recent commits **and corrupt the database file**. A crash of the
    /// process alone loses nothing committed. Much faster for many small commits.
    Off,
}

/// `PRAGMA locking_mode`: whether the file is shared with other processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockingMode {
    /// Other processes may open the same file. The default.
    #[default]
    Normal,
    /// This process keeps the file locked from its first write until it closes
    /// it: no other process can read or write it meanwhile. Saves the lock and
    /// cache-check work of every transaction; no risk to the data.
    Exclusive,
}

/// Where and how to open a SQLite database. Every speed option is off by default;
/// each documents what it risks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    pub(crate) path: Option<PathBuf>,
    pub(crate) synchronous: Synchronous,
    pub(crate) locking_mode: LockingMode,
    pub(crate) wal: bool,
    pub(crate) one_process: bool,
    pub(crate) cache_size_kib: Option<u32>,
    pub(crate) busy_timeout: Duration,
    pub(crate) readers: Option<usize>,
    #[cfg(feature = "encryption")]
    pub(crate) key: Option<crate::crypt::Key>,
}

impl SqliteOptions {
    /// A database file, created if missing.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        SqliteOptions {
            path: Some(path.into()),
            ..SqliteOptions::memory()
        }
    }

    /// A private in-memory database, gone when the engine is dropped.
    pub fn memory() -> Self {
        SqliteOptions {
            path: None,
            synchronous: Synchronous::Full,
            locking_mode: LockingMode::Normal,
            wal: false,
            one_process: false,
            cache_size_kib: None,
            busy_timeout: Duration::from_secs(5),
            readers: None,
            #[cfg(feature = "encryption")]
            key: None,
        }
    }

    /// Sets `PRAGMA synchronous` (see [`Synchronous`] for the risks).
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }

    /// Sets `PRAGMA locking_mode` (see [`LockingMode`]).
    pub fn locking_mode(mut self, m: LockingMode) -> Self {
        self.locking_mode = m;
        self
    }

    /// Shorthand for [`LockingMode::Exclusive`].
    pub fn exclusive(self) -> Self {
        self.locking_mode(LockingMode::Exclusive)
    }

    /// Uses the write-ahead log instead of the rollback journal. Commits write
    /// less and readers in other processes do not block the writer. Safe with
    /// `Full`; with `Normal` a power cut may lose the last commits. The file
    /// then needs its `-wal` and `-shm` companions and must not sit on a network
    /// file system. Off by default.
    pub fn wal(mut self, on: bool) -> Self {
        self.wal = on;
        self
    }

    /// Opens the file through SQLite's `unix-excl` VFS (on Unix; elsewhere
    /// the default one): the file is locked against other processes once,
    /// at open, and the engine's own connections then lock each other in
    /// memory. A read or commit makes no locking system calls (without it,
    /// each transaction takes and drops file locks: about 4 `fcntl` and 3
    /// `stat` calls per read by ID), and WAL needs no `-shm` file. No risk
    /// to the data; the cost is that no other process can open the file
    /// while the engine has it open (it gets "database is locked").
    /// mORMot2 opens every SQLite file so on POSIX. In WAL mode it also
    /// lets the readers keep their snapshot between reads (see
    /// [`SqliteOptions::readers`]). Off by default.
    pub fn one_process(mut self, on: bool) -> Self {
        self.one_process = on;
        self
    }

    /// How many reader connections serve the reads made outside a
    /// transaction, on a file opened with [`SqliteOptions::wal`] and the
    /// normal locking mode: `0` reads everything on the one connection.
    /// Default: one per processor, at least 4, at most 8.
    ///
    /// Without readers, every call takes its turn on the engine's one
    /// connection, so threads reading at once read no faster than one. With
    /// them, a read by ID, a select, a count, a value or
    /// [`burrow_core::SqlHost::sql_select`] made on the engine (not through
    /// a transaction) runs on the writer connection when that is free at
    /// that instant (no call on it, no transaction open: its page cache is
    /// warm, so a thread reading alone reads as without readers), else on a
    /// free reader; a thread that has once found the writer taken tries a
    /// free reader first from then on (threads reading side by side then
    /// each keep a connection, instead of passing the writer's lock and
    /// cache from processor to processor at every read). A reader is
    /// opened the first time it is needed (with the key of an
    /// encrypted file: a passphrase costs its derivation again, per
    /// reader); when all are busy the caller waits, blocked, not spinning,
    /// for the first reader handed back, at most the busy timeout
    /// ([`burrow_core::Error::Busy`] after it; a row callback that reads
    /// the engine again waits for another reader, never for the one it
    /// holds). Writes, and every call made
    /// through a transaction, stay on the writer connection.
    ///
    /// What a read sees:
    /// - each statement reads the last committed state, as of its start
    ///   (a WAL snapshot): a transaction's changes appear together, at its
    ///   commit, never some without the others;
    /// - a read never sees another transaction before it commits, and
    ///   never waits for one: a read on the engine while a transaction is
    ///   open returns at once, with the state before it (without readers
    ///   it waits for that transaction to end);
    /// - a thread that has a transaction open sees its own changes only
    ///   through that transaction ([`burrow_core::EngineTx`]); a read made
    ///   on the engine, even from the same thread, sees the committed state;
    /// - a table opened or altered through the engine is seen by every
    ///   reader from then on.
    ///
    /// With [`SqliteOptions::one_process`], a reader keeps its read
    /// transaction (its WAL snapshot) open between reads, for as long as
    /// nothing is committed: before each use it compares the header of the
    /// WAL index, which every commit rewrites, with the one it read before
    /// the snapshot began, and begins another when they differ. A read then
    /// takes no lock at all: by ID, one thread reads about 1.3× as fast as on
    /// the writer, and two threads twice as fast as one (each beginning its
    /// own transaction, they shared the WAL index's locks at every read and
    /// reached 1.1–1.6×). What a read sees is as above. A kept snapshot
    /// keeps the log from starting again, so every commit made through a
    /// `SqliteEngine` of this process on the file ends the idle readers'
    /// snapshots, and checkpoints as SQLite's auto-checkpoint does (at
    /// 1,000 frames, or the size a `PRAGMA wal_autocheckpoint` asks through
    /// [`crate::SqliteEngine::with_connection`]); from that size on, until
    /// the log starts again, readers end their transaction after each read,
    /// as without kept snapshots, and a log twice that size is checkpointed
    /// waiting up to 100 ms (or the busy timeout, if shorter) for the reads
    /// under way. With reads by ID, the `-wal` file stays near two to three
    /// times the auto-checkpoint size (8–12 MB at the default), however
    /// many threads read; a read longer than the wait (a long scan) holds
    /// the log as it does without kept snapshots, and the next waiting
    /// checkpoint comes once the log has doubled. A commit made around the engines (another
    /// connection of this process) is seen by the next read all the same,
    /// but ends no snapshot. A thread whose reads by ID follow writes reads
    /// on the writer (a reader's page cache starts empty after a commit, the
    /// writer's is warm); two reads by ID with no commit between them move
    /// it to a reader. Scans (selects, counts, SQL) are not moved to a
    /// reader so: they gain little from skipping a transaction, and a
    /// reader's cold cache would cost them more (a scan that finds the
    /// writer taken runs on a free reader, as before). Without `one_process`, another process's commits would end
    /// no snapshot here, so each read begins its own.
    ///
    /// Readers open the file read-only (through `unix-excl`,
    /// [`SqliteOptions::one_process`], read-write with `PRAGMA query_only`:
    /// that VFS hands a read-only handle's locks to the system, where they
    /// would replace the process's one lock on the file), so no read can
    /// write. They do not see the writer's `temp` schema: SQL that names a
    /// table exposed from another engine, or a temporary table made through
    /// [`crate::SqliteEngine::with_connection`], runs on the writer.
    ///
    /// In memory, and on a file in rollback-journal mode, there are no
    /// readers: a private in-memory database is one connection's, and in
    /// rollback mode a reading connection holds a lock that keeps the writer
    /// from committing until it is done, so readers would delay writes
    /// rather than run beside them. [`LockingMode::Exclusive`] keeps the
    /// file to the writer alone, so it has none either.
    pub fn readers(mut self, n: usize) -> Self {
        self.readers = Some(n);
        self
    }

    /// Sets the page cache size in KiB (SQLite's default is 2,000 KiB). No risk;
    /// costs memory.
    pub fn cache_size_kib(mut self, kib: u32) -> Self {
        self.cache_size_kib = Some(kib);
        self
    }

    /// How long a call waits for a lock before failing: another process's
    /// lock on the file ("database is locked"), or another transaction of
    /// this engine ([`burrow_core::Error::Busy`]). Default 5 s.
    pub fn busy_timeout(mut self, t: Duration) -> Self {
        self.busy_timeout = t;
        self
    }

    /// Opens (or creates) the file encrypted with AES-256, its key derived
    /// from `passphrase` (PBKDF2-HMAC-SHA512, 256,000 iterations, a random
    /// salt kept in the file: tens of milliseconds at each open). An empty
    /// passphrase, or one that reads as SQLCipher's raw-key form `x'…'`, is
    /// refused at open. See [`crate::Key`] and the crate's "Encryption" section.
    #[cfg(feature = "encryption")]
    pub fn passphrase(self, passphrase: impl Into<String>) -> Self {
        self.key(crate::Key::passphrase(passphrase))
    }

    /// Opens (or creates) the file encrypted with AES-256 under this raw
    /// 256-bit key, used as is (no derivation: opening costs nothing extra;
    /// the key must come from a good random source or a KDF of your own).
    #[cfg(feature = "encryption")]
    pub fn raw_key(self, key: [u8; 32]) -> Self {
        self.key(crate::Key::raw(key))
    }

    /// Opens (or creates) the file encrypted under `key`.
    #[cfg(feature = "encryption")]
    pub fn key(mut self, key: crate::Key) -> Self {
        self.key = Some(key);
        self
    }
}
