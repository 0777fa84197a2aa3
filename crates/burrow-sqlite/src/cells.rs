//! A scanned row's values as a virtual table's cursor holds them, and the
//! copy that hands a scan worker's chunk of them to the cursor.
//!
//! A scan worker ([`crate::scan`]) fills rows into buffers of its own and
//! copies each full chunk into a buffer the cursor has finished with. The
//! copy bypasses the caches (non-temporal stores on x86-64). A buffer the
//! cursor has read is still in its processor's caches. An ordinary write to
//! such a line waits until that processor gives the line up. Where the two
//! processors share no cache, the worker then ran 2.5 times slower: 6.0–6.4 ms
//! for 10,000 rows against 2.4–2.5 ms (`ext-sqlite-mem` All Virtual; the
//! reads' figures are in `docs/external.md`). A streamed copy does not wait
//! for the other processor, and the engine's read writes only into the
//! worker's own lines, which stay in its own cache.
#![allow(unsafe_code)]

/// A value of a scanned row, as [`Cell::get`] shows it; text and blobs are
/// ranges of the chunk's byte buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Held {
    Null,
    Int(i64),
    Real(f64),
    Text(usize, usize),
    Blob(usize, usize),
}

/// What a [`Cell`] holds.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Kind {
    Null,
    Int,
    Real,
    Text,
    Blob,
}

/// One value of a scanned row in the form a chunk keeps it: three words
/// with every byte written (no padding and no unused payload, as an enum's
/// would leave), so that a chunk can be copied as plain bytes, 16 at a time
/// ([`copy_chunk`]).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Cell {
    kind: Kind,
    a: u64,
    b: u64,
}

const _: () = assert!(std::mem::size_of::<Cell>() == 3 * std::mem::size_of::<u64>());

impl Cell {
    /// The value held.
    #[inline]
    pub fn get(&self) -> Held {
        // A range was made from two `usize`s, so it fits one again.
        let (a, b) = (self.a as usize, self.b as usize);
        match self.kind {
            Kind::Null => Held::Null,
            Kind::Int => Held::Int(i64::from_ne_bytes(self.a.to_ne_bytes())),
            Kind::Real => Held::Real(f64::from_bits(self.a)),
            Kind::Text => Held::Text(a, b),
            Kind::Blob => Held::Blob(a, b),
        }
    }
}

impl From<Held> for Cell {
    #[inline]
    fn from(v: Held) -> Self {
        let (kind, a, b) = match v {
            Held::Null => (Kind::Null, 0, 0),
            Held::Int(i) => (Kind::Int, u64::from_ne_bytes(i.to_ne_bytes()), 0),
            Held::Real(f) => (Kind::Real, f.to_bits(), 0),
            Held::Text(a, b) => (Kind::Text, a as u64, b as u64),
            Held::Blob(a, b) => (Kind::Blob, a as u64, b as u64),
        };
        Cell { kind, a, b }
    }
}

/// A chunk's cells and the bytes their text and blobs point into.
pub type Buffers = (Vec<Cell>, Vec<u8>);

/// Replaces what `to` holds with a copy of `cells` and `bytes`, written past
/// the caches where the processor can (see the module's doc), and visible to
/// another thread once `to` is sent to it.
pub fn copy_chunk(cells: &[Cell], bytes: &[u8], to: &mut Buffers) {
    copy_words(cells, &mut to.0);
    copy_words(bytes, &mut to.1);
    // Streamed stores are not ordered with the release of the channel's
    // send that hands `to` over: the fence orders them before it.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of every x86-64 processor.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

/// A type whose every byte is written in every value, so that its values
/// can be read as plain bytes, in lanes of any width.
///
/// # Safety
/// The type has no padding, and no variant leaves bytes unwritten.
unsafe trait Plain: Copy {}
// SAFETY: three 8-byte fields, checked above to fill the whole size; `kind`
// is a `u64` discriminant.
unsafe impl Plain for Cell {}
// SAFETY: one byte, always written.
unsafe impl Plain for u8 {}

#[cfg(target_arch = "x86_64")]
fn copy_words<T: Plain>(from: &[T], to: &mut Vec<T>) {
    to.clear();
    to.reserve(from.len());
    // SAFETY: `to` has room for `from.len()` values, which is the size of
    // `from` in bytes, and does not overlap `from` (a distinct `&mut`).
    // Every byte of `from` is written (`Plain`), so it reads as bytes; the
    // values written are copies of valid ones, so `to` holds valid values up
    // to `set_len`.
    unsafe {
        stream_bytes(
            from.as_ptr().cast::<u8>(),
            to.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(from),
        );
        to.set_len(from.len());
    }
}

/// Copies `len` bytes from `src` to `dst` with streamed stores.
///
/// `movntdq` needs its target aligned to 16 bytes: the bytes before the
/// first such address (none at an allocator's usual alignment) and a last
/// part lane are copied as usual, 16-byte lanes halve the stores of a
/// word-by-word copy.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and the two do not
/// overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_bytes(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    const LANE: usize = std::mem::size_of::<__m128i>();
    let head = dst.align_offset(LANE).min(len);
    let lanes = (len - head) / LANE;
    let streamed = head + lanes * LANE;
    // SAFETY: the caller's contract covers every offset below `len`; each
    // streamed lane starts `head` plus a multiple of 16 bytes into `dst`,
    // aligned as `_mm_stream_si128` requires (SSE2, part of every x86-64).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        for l in 0..lanes {
            let at = head + l * LANE;
            let lane = _mm_loadu_si128(src.add(at).cast::<__m128i>());
            _mm_stream_si128(dst.add(at).cast::<__m128i>(), lane);
        }
        std::ptr::copy_nonoverlapping(src.add(streamed), dst.add(streamed), len - streamed);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn copy_words<T: Plain>(from: &[T], to: &mut Vec<T>) {
    to.clear();
    to.extend_from_slice(from);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_chunk_holds_the_same_values_and_nothing_of_its_buffers_before() {
        let held = [
            Held::Int(-7),
            Held::Null,
            Held::Real(-0.5),
            Held::Text(3, 11),
            Held::Blob(11, 12),
            Held::Int(i64::MIN),
            Held::Real(f64::MAX),
        ];
        let cells: Vec<Cell> = held.iter().copied().map(Cell::from).collect();
        let bytes: Vec<u8> = (0..=250).collect();
        // A buffer handed back holds an older chunk, longer than this one.
        let mut to: Buffers = (vec![Cell::from(Held::Int(99)); 40], vec![0xEE; 600]);
        copy_chunk(&cells, &bytes, &mut to);
        assert_eq!(to.0.iter().map(Cell::get).collect::<Vec<_>>(), held);
        assert_eq!(to.1, bytes);
        // Lengths that leave a part lane are copied to their last byte.
        for n in [0, 1, 7, 9, 15, 16, 17, 33] {
            copy_chunk(&cells[..n.min(cells.len())], &bytes[..n], &mut to);
            assert_eq!(to.1, &bytes[..n]);
            assert_eq!(to.0.len(), n.min(cells.len()));
        }
        // So is a target that does not start on a lane.
        #[cfg(target_arch = "x86_64")]
        for offset in 0..16 {
            for n in [0, 5, 15, 16, 17, 31, 200] {
                let mut backing = vec![0u8; 240];
                // SAFETY: `offset + n` is within `backing`, apart from `bytes`.
                unsafe { stream_bytes(bytes.as_ptr(), backing.as_mut_ptr().add(offset), n) };
                assert_eq!(&backing[offset..offset + n], &bytes[..n]);
                assert!(backing[..offset]
                    .iter()
                    .chain(&backing[offset + n..])
                    .all(|&b| b == 0));
            }
        }
    }
}
