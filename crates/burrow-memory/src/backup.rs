//! Backups of a live engine, and engines opened from them.
//!
//! A backup is the engine's own file format (the persistence file), for one
//! committed state, written as a save is: beside the target, synced, renamed
//! into place. Its contents are taken as a save takes them (under the read
//! lock, the rows shared rather than copied: readers go on, and writers wait
//! only while the table's row index is copied, not while the rows are
//! encoded, compressed or written). The gzip variant wraps that file in a
//! gzip stream; the file inside keeps its own checksum.

use std::io::{self, Read, Write};
use std::path::Path;

use burrow_core::{Error, Result};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::options::FileFormat;
use crate::persist::{self, io_err};
use crate::{MemoryEngine, MemoryOptions};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl MemoryEngine {
    /// Writes the engine's data, as committed at one moment, to `path` in
    /// the engine's file format (what [`MemoryOptions::format`] says), and
    /// returns its size. Waits for an open transaction to end, as
    /// [`MemoryEngine::flush`] does; other readers go on, writers wait only
    /// while the table's row index is copied. `path` appears whole or not at all; a path
    /// that cannot be written is an [`Error::Io`] naming it.
    pub fn backup(&self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let parts = self.backup_parts()?;
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        persist::write_atomic(path, &parts)?;
        Ok(parts.iter().map(|p| p.len() as u64).sum())
    }

    /// As [`MemoryEngine::backup`], inside a gzip stream (level 1).
    pub fn backup_gz(&self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let parts = self.backup_parts()?;
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        for p in &parts {
            gz.write_all(p)
                .map_err(|e| io_err(path, "cannot compress", e))?;
        }
        let gz = gz
            .finish()
            .map_err(|e| io_err(path, "cannot compress", e))?;
        persist::write_atomic(path, &[&gz])?;
        Ok(gz.len() as u64)
    }

    fn backup_parts(&self) -> Result<Vec<Vec<u8>>> {
        let frozen = {
            let g = self.read(None)?;
            Self::freeze(&g)
        };
        let snapshot = self.snapshot(frozen)?;
        Ok(match self.options.format {
            FileFormat::Binary => {
                let (header, stored) =
                    persist::binary_file(&snapshot.bytes, self.options.zstd_level)?;
                vec![header, stored]
            }
            FileFormat::Json => vec![snapshot.bytes],
        })
    }

    /// Opens an engine holding the data of `backup` (a persistence file or
    /// backup, plain or gzip), read and checked whole first: a truncated or
    /// corrupted one (gzip stream cut short or failing its CRC, the file's own
    /// length or checksum wrong) is an [`Error::BadInput`] naming it, and
    /// nothing is loaded or written.
    ///
    /// With a file in `options`, that file is not read: the backup's data
    /// replaces it at the next save ([`MemoryEngine::flush`], a commit with
    /// [`MemoryOptions::save_on_commit`], or drop). The backup itself is never
    /// written.
    pub fn open_backup(backup: impl AsRef<Path>, options: MemoryOptions) -> Result<MemoryEngine> {
        let backup = backup.as_ref();
        let file = std::fs::read(backup).map_err(|e| io_err(backup, "cannot read", e))?;
        let file = if file.starts_with(&GZIP_MAGIC) {
            let mut out = Vec::with_capacity(file.len() * 4);
            // The decoder checks the CRC-32 and length at the end of the
            // stream; a stream cut short ends in an error, never a short file.
            let mut gz = GzDecoder::new(file.as_slice());
            gz.read_to_end(&mut out).map_err(|e| {
                refused(
                    backup,
                    &if e.kind() == io::ErrorKind::UnexpectedEof {
                        "truncated: the gzip stream ends early".to_owned()
                    } else {
                        format!("corrupted gzip stream: {e}")
                    },
                )
            })?;
            if !gz.into_inner().is_empty() {
                return Err(refused(backup, "bytes after the end of the gzip stream"));
            }
            out
        } else {
            file
        };
        let tables = persist::parse_file(backup, &file).map_err(|e| match &e {
            Error::Engine { source, .. } => match source.downcast_ref::<persist::FileError>() {
                Some(f) => refused(backup, f.reason()),
                None => e,
            },
            _ => e,
        })?;
        let engine = MemoryEngine::with_tables(options, tables);
        if engine.options.path.is_some() {
            // Unlike a loaded file, the data differs from the file's: the
            // next save must write it.
            engine
                .state
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .generation = 1;
        }
        Ok(engine)
    }
}

/// Backups over a server's admin interface: the snapshot is taken at once,
/// so progress goes from nothing to all in one unit.
impl burrow_core::OnlineBackup for MemoryEngine {
    fn backup_to(
        &self,
        path: &Path,
        gzip: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64> {
        progress(0, 1);
        let bytes = if gzip {
            self.backup_gz(path)?
        } else {
            self.backup(path)?
        };
        progress(1, 1);
        Ok(bytes)
    }
}

fn refused(backup: &Path, why: &str) -> Error {
    Error::BadInput(format!(
        "backup {} refused, nothing restored: {why}",
        backup.display()
    ))
}
