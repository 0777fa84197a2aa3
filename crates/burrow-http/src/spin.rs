//! When one side of a connection polls for the other's next message before
//! its thread sleeps. Waking a sleeping thread costs tens of microseconds on
//! a machine like a small VM, most of a small call's round trip on loopback:
//! a message that comes within a short budget is read by a thread that never
//! slept. The client polls for answers, the server for the next request.

use std::time::Duration;

/// One connection's polling budget and how its recent waits went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spin {
    pub(crate) budget: Duration,
    /// Messages in a row that came later than the budget.
    late: u32,
    /// Waits since polling stopped.
    skipped: u32,
}

/// Late messages in a row after which a connection stops polling: its peer
/// is far away or slow, and polling would only spend a core.
const LATE: u32 = 8;
/// While stopped, one wait in this many polls again, to notice when
/// messages come quickly again.
const PROBE_EVERY: u32 = 32;

impl Spin {
    pub(crate) fn new(budget: Duration) -> Spin {
        Spin {
            budget,
            late: 0,
            skipped: 0,
        }
    }

    /// Whether this wait polls first.
    pub(crate) fn try_now(&mut self) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        if self.late < LATE {
            return true;
        }
        self.skipped += 1;
        if self.skipped < PROBE_EVERY {
            return false;
        }
        self.skipped = 0;
        true
    }

    /// Records whether a polled wait saw its message within the budget.
    pub(crate) fn seen(&mut self, in_time: bool) {
        self.late = if in_time {
            0
        } else {
            self.late.saturating_add(1)
        };
    }
}

#[cfg(test)]
mod test {
    use super::{Spin, LATE, PROBE_EVERY};
    use std::time::Duration;

    #[test]
    fn polling_stops_after_late_messages_and_probes_now_and_then() {
        let mut spin = Spin::new(Duration::from_micros(50));
        for _ in 0..LATE {
            assert!(spin.try_now());
            spin.seen(false);
        }
        let polled: Vec<bool> = (0..2 * PROBE_EVERY).map(|_| spin.try_now()).collect();
        assert_eq!(polled.iter().filter(|p| **p).count(), 2);
        assert!(polled[PROBE_EVERY as usize - 1]);
        // A message in time on a probe: polling is back for every wait.
        spin.seen(true);
        assert!((0..PROBE_EVERY).all(|_| spin.try_now()));
        // Zero never polls.
        assert!(!Spin::new(Duration::ZERO).try_now());
    }
}
