//! Calls that must not wait for a lock: a server runs a short call on its
//! event loop only if it finds every lock it needs free at once, and else
//! runs it again on a thread that may wait.
//!
//! An engine honours this where a call of its own (outside a transaction)
//! would wait for a lock: it checks [`waits_refused`] and, when set, takes
//! the lock only if it is free now, answering [`refuse`]'s error otherwise,
//! before doing anything. Calls through an open transaction never wait for
//! other callers' transactions (the transaction holds the locks) and are not
//! refused.

use std::cell::Cell;
use std::time::Duration;

use crate::error::Error;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Wait,
    Refuse,
    Refused,
}

thread_local! {
    static MODE: Cell<Mode> = const { Cell::new(Mode::Wait) };
}

/// Runs `f` with waits refused on this thread; returns its result and
/// whether some call refused to wait (the result is then that of a request
/// cut short, to be discarded, and nothing was done that a second run would
/// do twice).
pub fn without_waiting<R>(f: impl FnOnce() -> R) -> (R, bool) {
    /// Puts the caller's mode back, panic or not; a refusal inside a scope
    /// within another is the outer one's too.
    struct Restore(Mode);
    impl Drop for Restore {
        fn drop(&mut self) {
            let refused = MODE.get() == Mode::Refused;
            MODE.set(match self.0 {
                Mode::Refuse if refused => Mode::Refused,
                m => m,
            });
        }
    }
    let outer = MODE.replace(Mode::Refuse);
    let restore = Restore(outer);
    let r = f();
    let refused = MODE.get() == Mode::Refused;
    drop(restore);
    (r, refused)
}

/// Whether a call on this thread must not wait for a lock now.
#[inline]
pub fn waits_refused() -> bool {
    MODE.get() != Mode::Wait
}

/// Records that a call refused to wait, and returns the error it answers
/// with ([`Error::Busy`], having waited for nothing). Without
/// [`without_waiting`] around it, this only makes the error.
#[cold]
pub fn refuse(engine: &'static str) -> Error {
    if MODE.get() == Mode::Refuse {
        MODE.set(Mode::Refused);
    }
    Error::Busy {
        engine,
        waited: Duration::ZERO,
    }
}

/// The guard of a lock taken without waiting (`try_lock`, `try_read`,
/// `try_write`), or [`refuse`] if it was held. A poisoned lock is taken:
/// engines keep their state consistent across a panic on their own.
pub fn taken_now<G>(got: std::sync::TryLockResult<G>, engine: &'static str) -> Result<G, Error> {
    match got {
        Ok(g) => Ok(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => Err(refuse(engine)),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn refusals_are_reported_inside_the_scope_only() {
        assert!(!waits_refused());
        let (r, refused) = without_waiting(|| {
            assert!(waits_refused());
            7
        });
        assert_eq!((r, refused), (7, false));
        let ((), refused) = without_waiting(|| {
            let e = refuse("x");
            assert!(matches!(e, Error::Busy { waited, .. } if waited.is_zero()));
        });
        assert!(refused);
        assert!(!waits_refused());
        let _ = refuse("x");
        let (_, refused) = without_waiting(|| ());
        assert!(!refused, "a refusal outside a scope leaks into none");
    }
}
