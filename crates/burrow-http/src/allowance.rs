//! A server-wide budget of bytes that requests take while they hold memory
//! and give back when done: request bodies in flight
//! ([`crate::web::Limits::max_body_bytes_in_flight`]) and parsed batches
//! ([`crate::ServerBuilder::batch_bytes_in_flight`]).

use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct Allowance {
    used: AtomicUsize,
    max: usize,
}

impl Allowance {
    pub(crate) fn new(max: usize) -> Allowance {
        Allowance {
            used: AtomicUsize::new(0),
            max,
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Bytes taken and not yet given back.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Takes `n` bytes, unless fewer are left; nothing is taken then.
    pub(crate) fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken before.
    pub(crate) fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod test {
    use super::Allowance;

    #[test]
    fn takes_only_what_is_left() {
        let a = Allowance::new(1000);
        assert!(a.try_take(600));
        assert!(!a.try_take(401));
        assert!(!a.try_take(usize::MAX));
        assert_eq!(a.used(), 600);
        assert!(a.try_take(400));
        a.give_back(1000);
        assert_eq!(a.used(), 0);
    }
}
