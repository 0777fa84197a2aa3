//! The index from a row's ID to its slot.
//!
//! IDs given by the engine are consecutive, so most tables hold a dense range
//! of them: those are found by position in a vector of slots (one load, no
//! hash, 4 bytes per ID), which also makes an insert an append. A table whose
//! IDs are sparse (explicit IDs far apart, or most rows deleted) switches to a
//! hash map; a rebuild (compaction) picks the form again.

use foldhash::fast::RandomState;
use hashbrown::HashMap;

/// No row holds this ID.
const NONE: u32 = u32::MAX;

/// Dense while the vector would hold at most this many entries per ID stored
/// (plus a little), so that it never costs much more memory than the map.
const SPARSE: usize = 4;
const SLACK: usize = 1024;

pub enum IdIndex {
    /// `slots[id - base]` is the slot of `id`, or `NONE`.
    Dense {
        base: i64,
        slots: Vec<u32>,
        len: usize,
    },
    Hashed(HashMap<i64, u32, RandomState>),
}

impl Default for IdIndex {
    fn default() -> Self {
        IdIndex::Dense {
            base: 1,
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl IdIndex {
    #[inline]
    pub fn get(&self, id: i64) -> Option<u32> {
        match self {
            IdIndex::Dense { base, slots, .. } => slots
                .get(offset(*base, id)?)
                .copied()
                .filter(|&s| s != NONE),
            IdIndex::Hashed(m) => m.get(&id).copied(),
        }
    }

    /// Maps `id` to `slot` unless `id` is already there; returns whether it
    /// was added.
    #[inline]
    pub fn add(&mut self, id: i64, slot: u32) -> bool {
        if let IdIndex::Dense { base, slots, len } = self {
            if let Some(at) = offset(*base, id) {
                if at < slots.len() {
                    if slots[at] != NONE {
                        return false;
                    }
                    slots[at] = slot;
                    *len += 1;
                    return true;
                }
                if at <= (*len + 1) * SPARSE + SLACK {
                    slots.resize(at, NONE);
                    slots.push(slot);
                    *len += 1;
                    return true;
                }
            }
            self.make_hashed();
        }
        match self {
            IdIndex::Hashed(m) => match m.entry(id) {
                hashbrown::hash_map::Entry::Occupied(_) => false,
                hashbrown::hash_map::Entry::Vacant(v) => {
                    v.insert(slot);
                    true
                }
            },
            IdIndex::Dense { .. } => unreachable!("converted above"),
        }
    }

    pub fn remove(&mut self, id: i64) {
        match self {
            IdIndex::Dense { base, slots, len } => {
                if let Some(s) = offset(*base, id).and_then(|at| slots.get_mut(at)) {
                    if *s != NONE {
                        *s = NONE;
                        *len -= 1;
                    }
                }
            }
            IdIndex::Hashed(m) => {
                m.remove(&id);
            }
        }
    }

    /// Makes room for `n` more IDs.
    pub fn reserve(&mut self, n: usize) {
        match self {
            IdIndex::Dense { slots, .. } => slots.reserve(n),
            IdIndex::Hashed(m) => m.reserve(n),
        }
    }

    /// Empties it, in the form that suits `ids`, which are about to be added.
    pub fn reset(&mut self, ids: impl Iterator<Item = i64>) {
        let (mut n, mut lo, mut hi) = (0usize, i64::MAX, i64::MIN);
        for id in ids {
            n += 1;
            lo = lo.min(id);
            hi = hi.max(id);
        }
        *self = if n == 0 {
            IdIndex::default()
        } else {
            match usize::try_from(hi.abs_diff(lo)) {
                Ok(span) if span < n * SPARSE + SLACK => IdIndex::Dense {
                    base: lo,
                    slots: Vec::with_capacity(span + 1),
                    len: 0,
                },
                _ => IdIndex::Hashed(HashMap::with_capacity_and_hasher(n, RandomState::default())),
            }
        };
    }

    fn make_hashed(&mut self) {
        if let IdIndex::Dense { base, slots, len } = self {
            let mut m = HashMap::with_capacity_and_hasher(*len * 2, RandomState::default());
            for (at, &s) in slots.iter().enumerate() {
                if s != NONE {
                    m.insert(*base + at as i64, s);
                }
            }
            *self = IdIndex::Hashed(m);
        }
    }
}

/// Where `id` sits in a dense index starting at `base`, if at or after it.
#[inline]
fn offset(base: i64, id: i64) -> Option<usize> {
    usize::try_from(id.checked_sub(base)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ix: &IdIndex, want: &std::collections::HashMap<i64, u32>, probes: &[i64]) {
        for &id in probes {
            assert_eq!(ix.get(id), want.get(&id).copied(), "ID {id}");
        }
    }

    #[test]
    fn dense_and_hashed_answer_alike() {
        let mut ix = IdIndex::default();
        let mut want = std::collections::HashMap::new();
        for id in 1..=3000i64 {
            assert!(ix.add(id, id as u32 * 2));
            want.insert(id, id as u32 * 2);
        }
        assert!(matches!(ix, IdIndex::Dense { .. }));
        assert!(!ix.add(17, 0), "a second row with one ID");
        for id in (1..=3000).step_by(3) {
            ix.remove(id);
            want.remove(&id);
        }
        ix.remove(99_999);
        assert!(ix.add(1, 5), "a removed ID can be mapped again");
        want.insert(1, 5);
        let probes: Vec<i64> = (-5..3100).chain([i64::MIN, i64::MAX, 1 << 40]).collect();
        check(&ix, &want, &probes);
        // Far beyond the range, and below its base: the map takes over.
        assert!(ix.add(1 << 40, 7));
        want.insert(1 << 40, 7);
        assert!(matches!(ix, IdIndex::Hashed(_)));
        assert!(ix.add(-3, 8));
        want.insert(-3, 8);
        assert!(!ix.add(2, 0));
        check(&ix, &want, &probes);
        // A rebuild picks the form again, whatever the order of the IDs.
        let mut sorted: Vec<i64> = want.keys().copied().filter(|&id| id < 10_000).collect();
        sorted.sort_unstable();
        ix.reset(sorted.iter().rev().copied());
        assert!(matches!(ix, IdIndex::Dense { .. }));
        for &id in &sorted {
            assert!(ix.add(id, want[&id]));
        }
        want.retain(|&id, _| id < 10_000);
        check(&ix, &want, &probes);
        let spread = [1i64, 1 << 20, 1 << 40];
        ix.reset(spread.iter().copied());
        assert!(matches!(ix, IdIndex::Hashed(_)));
        ix.reset(std::iter::empty());
        assert_eq!(ix.get(1), None);
    }

    #[test]
    fn extreme_ids_stay_correct() {
        let mut ix = IdIndex::default();
        assert!(ix.add(i64::MAX, 1));
        assert!(ix.add(i64::MIN, 2));
        assert!(ix.add(0, 3));
        assert_eq!(ix.get(i64::MAX), Some(1));
        assert_eq!(ix.get(i64::MIN), Some(2));
        assert_eq!(ix.get(0), Some(3));
        assert_eq!(ix.get(1), None);
    }
}
