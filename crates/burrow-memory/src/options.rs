//! How a memory engine is opened: in memory only, or backed by a file.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The form of the persistence file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileFormat {
    /// The compact binary form, compressed with zstd (see `docs/memory-format.md`).
    #[default]
    Binary,
    /// One human-readable JSON document, one row per line, uncompressed:
    /// several times larger and slower than [`FileFormat::Binary`].
    Json,
}

/// The options of a [`crate::MemoryEngine`].
///
/// ```
/// use burrow_memory::MemoryOptions;
/// let opts = MemoryOptions::file("data/sessions.bmem").save_on_commit(true);
/// assert!(opts.path.is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The persistence file: loaded on open, written by
    /// [`crate::MemoryEngine::flush`] and when the engine is dropped. `None`
    /// keeps the data in memory only.
    pub path: Option<PathBuf>,
    /// The form the file is written in. Either form is read, whatever this says:
    /// changing it converts the file at the next save.
    pub format: FileFormat,
    /// Also save after every commit of a transaction that wrote something
    /// (the ORM's batches commit through one) and after a batch run outside a
    /// transaction. A save writes the whole data set, so this suits small
    /// tables with rare writes; single writes outside a transaction are never
    /// saved one by one.
    pub save_on_commit: bool,
    /// The zstd level of the binary form (1 = fastest; 3 = zstd's default;
    /// up to 22), or `None` to store it uncompressed.
    pub zstd_level: Option<i32>,
    /// How long a caller waits for another transaction to end before failing
    /// with [`burrow_core::Error::Busy`]: a call on the engine, a `begin`, a
    /// [`crate::MemoryEngine::flush`]. Default
    /// [`burrow_core::DEFAULT_LOCK_TIMEOUT`].
    pub lock_timeout: Duration,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            path: None,
            format: FileFormat::Binary,
            save_on_commit: false,
            zstd_level: Some(1),
            lock_timeout: burrow_core::DEFAULT_LOCK_TIMEOUT,
        }
    }
}

impl MemoryOptions {
    /// Memory only: nothing is read or written.
    pub fn memory() -> Self {
        MemoryOptions::default()
    }

    /// Backed by the binary file at `path`.
    pub fn file(path: impl AsRef<Path>) -> Self {
        MemoryOptions {
            path: Some(path.as_ref().to_owned()),
            ..MemoryOptions::default()
        }
    }

    /// Writes the file as JSON.
    pub fn json(mut self) -> Self {
        self.format = FileFormat::Json;
        self
    }

    /// Writes the file in the binary form (the default).
    pub fn binary(mut self) -> Self {
        self.format = FileFormat::Binary;
        self
    }

    /// Saves after every commit (see [`MemoryOptions::save_on_commit`]).
    pub fn save_on_commit(mut self, yes: bool) -> Self {
        self.save_on_commit = yes;
        self
    }

    /// Sets the zstd level of the binary form (`None`: uncompressed).
    pub fn zstd_level(mut self, level: Option<i32>) -> Self {
        self.zstd_level = level;
        self
    }

    /// Sets how long a caller waits for another transaction (see
    /// [`MemoryOptions::lock_timeout`]).
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }
}
