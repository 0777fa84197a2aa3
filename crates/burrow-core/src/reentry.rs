//! Calls into an engine from a row callback of that engine's own read, on
//! the same thread. A read hands each row to the caller's code while it
//! holds its lock; when that code calls the same engine again and the call
//! needs the same lock (a write, or a read with nowhere else to run), the
//! thread would wait for itself forever. An engine that holds a lock across
//! callbacks marks it with [`Holding`] and asks [`holding`] before it waits
//! for that lock: the nested call then fails at once with [`nested`]'s
//! error instead.
//!
//! The marks are per thread, a few addresses on a small stack; a lock is
//! known by the address of the engine's lock object, which only ever decides
//! whether to refuse, never what a call sees.

use std::cell::Cell;

use crate::error::Error;

/// Locks marked at once on one thread; deeper marks are not recorded (a
/// chain of callbacks through this many engines is not a real program).
const DEPTH: usize = 8;

struct Marks {
    count: Cell<usize>,
    held: [Cell<usize>; DEPTH],
}

thread_local! {
    static MARKS: Marks = const {
        Marks {
            count: Cell::new(0),
            held: [const { Cell::new(0) }; DEPTH],
        }
    };
}

/// A lock this thread holds while callbacks run, from [`Holding::new`] until
/// dropped. Dropped before the lock it marks is released (declare it after
/// the guard, or as a field before it), so that no other thread can take
/// the lock while it is still marked here.
#[must_use = "the mark ends when this is dropped"]
pub struct Holding {
    /// Whether the mark was recorded (not past [`DEPTH`]).
    recorded: bool,
    /// Keeps the mark on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Holding {
    /// Marks the lock at `lock` as held by this thread.
    #[inline]
    pub fn new<T: ?Sized>(lock: &T) -> Holding {
        let at = std::ptr::from_ref(lock).cast::<()>() as usize;
        let recorded = MARKS.with(|m| {
            let n = m.count.get();
            let room = m.held.get(n);
            if let Some(slot) = room {
                slot.set(at);
                m.count.set(n + 1);
            }
            room.is_some()
        });
        Holding {
            recorded,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Holding {
    #[inline]
    fn drop(&mut self) {
        if self.recorded {
            // Marks end in the order they were made: each is a guard on the
            // stack of the call that holds the lock.
            MARKS.with(|m| m.count.set(m.count.get().saturating_sub(1)));
        }
    }
}

/// Whether this thread holds the lock at `lock` (marked by a live [`Holding`]).
#[inline]
pub fn holding<T: ?Sized>(lock: &T) -> bool {
    held(lock) > 0
}

/// How many live [`Holding`] marks of this thread are on `lock` (a pool's
/// connections, say, several of which one thread may hold at once).
#[inline]
pub fn held<T: ?Sized>(lock: &T) -> usize {
    let at = std::ptr::from_ref(lock).cast::<()>() as usize;
    MARKS.with(|m| {
        let n = m.count.get();
        m.held[..n].iter().filter(|c| c.get() == at).count()
    })
}

/// The error of a call refused because its own thread holds the lock it
/// needs, inside a row callback of a read of `engine`.
#[cold]
pub fn nested(engine: &'static str) -> Error {
    Error::BadInput(format!(
        "a call to the {engine} engine from inside a row callback of its own read on the \
         same thread: the read holds the lock this call needs, and it would wait for \
         itself forever. Nothing was done: collect the rows first (select), then make \
         the calls"
    ))
}

#[cfg(test)]
mod test {
    use super::{holding, Holding};

    #[test]
    fn marks_nest_and_end_in_order() {
        let (a, b) = (1u8, 2u8);
        assert!(!holding(&a));
        {
            let _ha = Holding::new(&a);
            assert!(holding(&a) && !holding(&b));
            {
                let _hb = Holding::new(&b);
                assert!(holding(&a) && holding(&b));
                let _ha2 = Holding::new(&a);
                assert_eq!((super::held(&a), super::held(&b)), (2, 1));
            }
            assert!(holding(&a) && !holding(&b));
        }
        assert!(!holding(&a));
    }

    #[test]
    fn another_thread_sees_none_of_the_marks() {
        static LOCK: u8 = 0;
        let _h = Holding::new(&LOCK);
        assert!(holding(&LOCK));
        let seen = std::thread::spawn(|| holding(&LOCK))
            .join()
            .expect("joined");
        assert!(!seen);
    }

    #[test]
    fn marks_past_the_depth_are_not_recorded_and_do_not_unbalance() {
        let locks = [0u8; 12];
        let marks: Vec<Holding> = locks.iter().map(Holding::new).collect();
        assert!(holding(&locks[0]) && holding(&locks[7]));
        assert!(!holding(&locks[8]), "past the depth: not recorded");
        drop(marks);
        assert!(!holding(&locks[0]));
        assert_eq!(super::MARKS.with(|m| m.count.get()), 0);
    }
}
