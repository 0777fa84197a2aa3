//! Row bytes carved out of shared chunks.
//!
//! Every write stores a new row byte string; one heap allocation per row made
//! the allocator the largest single cost of an insert. An [`Arena`] instead
//! copies rows into 64 KiB chunks, and each row keeps its chunk alive through a
//! reference count ([`RowBytes`], 16 bytes, the size of the `Box<[u8]>` it
//! replaces). A chunk is freed when its last row is: the bytes of replaced and
//! deleted rows stay until then, so tables count them ([`Arena::garbage`]) and
//! repack into a fresh arena when half of what they hold is garbage.
//!
//! No crate fits: `bytes::Bytes` shares buffers the same way but is twice the
//! size per row with a call through a vtable on every drop, and the bump
//! arenas (`bumpalo`, `typed-arena`) free only all at once.
//!
//! The engine's only `unsafe` is here: writing a chunk while rows already in
//! it are shared, and reading those rows back.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::sync::Arc;

use burrow_core::{Error, Result};

/// The size of a chunk. Rows over a quarter of it get a chunk of their own, so
/// at most a quarter of a chunk is left unused at its end.
const CHUNK: usize = 64 * 1024;

/// Bytes written once, then only read; left uninitialised until written, as
/// zeroing a chunk cost as much as filling it.
struct Chunk(Box<[UnsafeCell<MaybeUninit<u8>>]>);

// SAFETY: a chunk's bytes are written only by the `Arena` that holds it as its
// current chunk, through `&mut Arena`, and only past every range already handed
// out as a `RowBytes`; a range is never written again once handed out. Shared
// access reads only handed-out ranges, so no byte is read and written at once.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn new(len: usize) -> Arc<Chunk> {
        let bytes: Box<[MaybeUninit<u8>]> = Box::new_uninit_slice(len);
        // SAFETY: `UnsafeCell<T>` has the layout of `T` (it is
        // `repr(transparent)`), so the allocation is a valid
        // `[UnsafeCell<MaybeUninit<u8>>]` of the same length, freed with the
        // same layout.
        let cells =
            unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<MaybeUninit<u8>>]) };
        Arc::new(Chunk(cells))
    }

    /// Copies `bytes` in at `at`.
    ///
    /// # Safety
    /// No `RowBytes` covers any of `at..at + bytes.len()`, and no other thread
    /// writes there.
    unsafe fn write(&self, at: usize, bytes: &[u8]) {
        let dst = &self.0[at..at + bytes.len()];
        // SAFETY: in bounds (the slice above is checked); the caller promises
        // nothing else reads or writes this range now.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                UnsafeCell::raw_get(dst.as_ptr()).cast::<u8>(),
                bytes.len(),
            )
        }
    }
}

/// One row's bytes, in a chunk it shares with its neighbours. A clone shares
/// them too: the range is never written again.
#[derive(Clone)]
pub struct RowBytes {
    chunk: Arc<Chunk>,
    at: u32,
    len: u32,
}

impl Deref for RowBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        let cells = &self.chunk.0[self.at as usize..self.at as usize + self.len as usize];
        // SAFETY: the range was written (so initialised) before this handle was
        // made and is never written again (see `Chunk`);
        // `UnsafeCell<MaybeUninit<u8>>` has the layout of `u8`.
        unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), cells.len()) }
    }
}

impl std::fmt::Debug for RowBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Where a table's new rows go.
#[derive(Default)]
pub struct Arena {
    current: Option<Arc<Chunk>>,
    used: usize,
    /// Bytes handed out since the arena was made.
    stored: usize,
    /// Bytes of rows the table has let go of since then.
    garbage: usize,
}

impl Arena {
    /// A copy of `bytes`. Fails only for a row of 4 GiB or more.
    #[inline]
    pub fn alloc(&mut self, bytes: &[u8]) -> Result<RowBytes> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| Error::BadInput("a row of the memory engine cannot reach 4 GiB".into()))?;
        Ok(self.put(bytes, len))
    }

    /// A copy of a row, in this arena.
    pub fn copy(&mut self, row: &RowBytes) -> RowBytes {
        self.put(row, row.len)
    }

    #[inline]
    fn put(&mut self, bytes: &[u8], len: u32) -> RowBytes {
        self.stored += bytes.len();
        if bytes.len() > CHUNK / 4 {
            let chunk = Chunk::new(bytes.len());
            // SAFETY: the chunk is new and not shared yet.
            unsafe { chunk.write(0, bytes) };
            return RowBytes { chunk, at: 0, len };
        }
        if self.current.is_none() || self.used + bytes.len() > CHUNK {
            self.current = Some(Chunk::new(CHUNK));
            self.used = 0;
        }
        let Some(chunk) = &self.current else {
            unreachable!("a chunk was just set")
        };
        let at = self.used;
        // SAFETY: every range handed out from this chunk ends at or before
        // `used`, and only this arena (borrowed mutably) writes to it.
        unsafe { chunk.write(at, bytes) };
        self.used += bytes.len();
        RowBytes {
            chunk: Arc::clone(chunk),
            at: at as u32,
            len,
        }
    }

    /// Counts rows of `bytes` in all that the table took from elsewhere (a
    /// file, a version's layout) as held, so that garbage is weighed against them.
    pub fn held(&mut self, bytes: usize) {
        self.stored += bytes;
    }

    /// Notes that the table let go of a row of `len` bytes.
    #[inline]
    pub fn release(&mut self, len: usize) {
        self.garbage += len;
    }

    /// Notes that a row the table let go of is back (a rollback).
    #[inline]
    pub fn restore(&mut self, len: usize) {
        self.garbage = self.garbage.saturating_sub(len);
    }

    /// Whether at least half of what the arena handed out is garbage, and
    /// enough of it (1 MiB) to be worth copying the rest.
    pub fn wants_repack(&self) -> bool {
        self.garbage > (1 << 20) && self.garbage * 2 > self.stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_bytes_across_chunks_and_after_the_arena_is_gone() {
        let mut arena = Arena::default();
        let rows: Vec<(Vec<u8>, RowBytes)> = (0..5_000usize)
            .map(|i| {
                let bytes: Vec<u8> = (0..(i * 7) % 300).map(|j| (i + j) as u8).collect();
                let r = arena.alloc(&bytes).unwrap();
                (bytes, r)
            })
            .collect();
        let big = vec![9u8; CHUNK];
        let big_row = arena.alloc(&big).unwrap();
        let after = arena.alloc(b"after").unwrap();
        drop(arena);
        for (bytes, r) in &rows {
            assert_eq!(&**r, bytes.as_slice());
        }
        assert_eq!(&*big_row, big.as_slice());
        assert_eq!(&*after, b"after");
        assert_eq!(&*Arena::default().alloc(&[]).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn repack_is_wanted_once_half_is_garbage() {
        let mut arena = Arena::default();
        let row = vec![1u8; 1000];
        for _ in 0..4_000 {
            arena.alloc(&row).unwrap();
        }
        arena.release(1000 * 1_500);
        assert!(!arena.wants_repack());
        arena.release(1000 * 600);
        assert!(arena.wants_repack());
    }
}
