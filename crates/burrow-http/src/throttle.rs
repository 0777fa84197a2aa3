//! Bounds on logins: how many password checks run at once, and how failed
//! attempts slow down the next ones, per user name and per client address.
//!
//! An Argon2 check holds about 19 MiB for tens of milliseconds, so
//! unbounded concurrent logins are a way to exhaust memory; and a login that
//! answers as fast as a guess can be sent invites guessing. Failures are
//! counted per user name (known or not, so that a lockout does not tell
//! which names exist) and per address; past [`LoginLimits::free_failures`],
//! each one doubles a wait during which the next attempt is refused at once
//! (429, `Retry-After`) without a password check.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::web::AddrKey;

/// Bounds on logins; see the module documentation.
#[derive(Debug, Clone)]
pub struct LoginLimits {
    /// Password checks running at once, server-wide.
    pub max_checks: usize,
    /// How long a login waits for a free check before 503.
    pub check_wait: Duration,
    /// Failed attempts (per user name, per address) answered without delay.
    pub free_failures: u32,
    /// The wait after the first failure past the free ones; it doubles with
    /// each further failure.
    pub first_delay: Duration,
    /// The longest wait.
    pub max_delay: Duration,
    /// User names and addresses whose failures are remembered; past it,
    /// the oldest are forgotten, and new ones share one count.
    pub max_tracked: usize,
}

impl Default for LoginLimits {
    /// 4 checks at once (76 MiB), 2 s of waiting for one; 5 free failures,
    /// then 1 s doubling up to 60 s; 10,000 names and addresses remembered.
    fn default() -> Self {
        LoginLimits {
            max_checks: 4,
            check_wait: Duration::from_secs(2),
            free_failures: 5,
            first_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_tracked: 10_000,
        }
    }
}

/// Why a login was not even tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Too many recent failures for this name or address: try after this.
    Throttled(Duration),
    /// Every password check is taken, for longer than the wait.
    Busy,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// A user name, case folded, by its SHA-256: a name is as long as a
    /// client makes it (up to a body's limit), and a table of 10,000 long
    /// names kept for minutes would be a way to fill memory without a login.
    User([u8; 32]),
    /// An address, IPv6 by its /64 as connections are counted: a client
    /// commonly holds a whole /64, and could otherwise fail from each address
    /// of it in turn.
    Addr(AddrKey),
    /// Every name and address that did not fit in the table.
    Overflow,
}

struct Failures {
    count: u32,
    last: Instant,
    until: Instant,
}

/// The failures remembered, and when stale ones were last dropped.
struct Remembered {
    map: HashMap<Key, Failures>,
    pruned: Instant,
}

/// Password checks running, and logins waiting for a place.
#[derive(Default)]
struct Checks {
    running: usize,
    waiting: usize,
}

/// The login bounds' state, one per server.
pub(crate) struct Throttle {
    limits: LoginLimits,
    failures: Mutex<Remembered>,
    checks: Mutex<Checks>,
    freed: Condvar,
}

/// One running password check; dropping it frees the place.
pub(crate) struct CheckPermit<'a>(&'a Throttle);

impl Drop for CheckPermit<'_> {
    fn drop(&mut self) {
        self.0
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .running -= 1;
        self.0.freed.notify_one();
    }
}

impl Throttle {
    pub(crate) fn new(limits: LoginLimits) -> Self {
        Throttle {
            limits,
            failures: Mutex::new(Remembered {
                map: HashMap::new(),
                pruned: Instant::now(),
            }),
            checks: Mutex::new(Checks::default()),
            freed: Condvar::new(),
        }
    }

    fn keys(user: &str, addr: Option<IpAddr>) -> [Option<Key>; 2] {
        let mut name = Sha256::new();
        let mut buf = [0u8; 4];
        for c in user.chars().flat_map(char::to_lowercase) {
            name.update(c.encode_utf8(&mut buf).as_bytes());
        }
        [
            Some(Key::User(name.finalize().into())),
            addr.map(|a| Key::Addr(AddrKey::of(a))),
        ]
    }

    /// Whether a login for `user` from `addr` may be tried now.
    pub(crate) fn admit(&self, user: &str, addr: Option<IpAddr>) -> Result<(), Refused> {
        let now = Instant::now();
        let remembered = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let map = &remembered.map;
        // A name or address that found no room shares the overflow count.
        let full = map.len() >= self.limits.max_tracked;
        let wait = Self::keys(user, addr)
            .into_iter()
            .flatten()
            .filter_map(|k| {
                map.get(&k)
                    .or_else(|| map.get(&Key::Overflow).filter(|_| full))
            })
            .map(|f| f.until.saturating_duration_since(now))
            .max()
            .unwrap_or_default();
        if wait.is_zero() {
            Ok(())
        } else {
            Err(Refused::Throttled(wait))
        }
    }

    /// A place for one password check, waited for at most
    /// [`LoginLimits::check_wait`]. At most 8 logins per place wait: each
    /// holds a thread while it does, so a flood is refused at once.
    pub(crate) fn check(&self) -> Result<CheckPermit<'_>, Refused> {
        let max = self.limits.max_checks.max(1);
        let deadline = Instant::now() + self.limits.check_wait;
        let mut c = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        if c.running >= max && c.waiting >= max * 8 {
            return Err(Refused::Busy);
        }
        c.waiting += 1;
        while c.running >= max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                c.waiting -= 1;
                return Err(Refused::Busy);
            }
            c = self
                .freed
                .wait_timeout(c, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        c.waiting -= 1;
        c.running += 1;
        Ok(CheckPermit(self))
    }

    /// Counts a failed login.
    pub(crate) fn failed(&self, user: &str, addr: Option<IpAddr>) {
        let l = &self.limits;
        let now = Instant::now();
        let mut remembered = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let Remembered { map, pruned } = &mut *remembered;
        for key in Self::keys(user, addr).into_iter().flatten() {
            let key = if map.contains_key(&key) || map.len() < l.max_tracked {
                key
            } else {
                // Full: forget what has stopped mattering, else share a
                // count. At most once a second: under a flood of failures
                // from many addresses, a scan per failure would hold the lock.
                if now.duration_since(*pruned) >= Duration::from_secs(1) {
                    map.retain(|_, f| now.duration_since(f.last) < l.max_delay);
                    *pruned = now;
                }
                if map.len() < l.max_tracked {
                    key
                } else {
                    Key::Overflow
                }
            };
            let f = map.entry(key).or_insert(Failures {
                count: 0,
                last: now,
                until: now,
            });
            // A failure long after the last one starts the count again.
            if now.duration_since(f.last) > l.max_delay {
                f.count = 0;
            }
            f.count = f.count.saturating_add(1);
            f.last = now;
            if f.count > l.free_failures {
                let doublings = (f.count - l.free_failures - 1).min(30);
                let delay = l
                    .first_delay
                    .saturating_mul(1 << doublings)
                    .min(l.max_delay);
                f.until = now + delay;
            }
        }
    }

    /// Forgets the failures of `user` and `addr` after a successful login.
    pub(crate) fn succeeded(&self, user: &str, addr: Option<IpAddr>) {
        let mut remembered = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        for key in Self::keys(user, addr).into_iter().flatten() {
            remembered.map.remove(&key);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn limits() -> LoginLimits {
        LoginLimits {
            max_checks: 2,
            check_wait: Duration::from_millis(50),
            free_failures: 2,
            first_delay: Duration::from_secs(10),
            max_delay: Duration::from_secs(40),
            max_tracked: 3,
        }
    }

    #[test]
    fn failures_past_the_free_ones_are_throttled_per_name_and_address() {
        let t = Throttle::new(limits());
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        for _ in 0..2 {
            assert_eq!(t.admit("Ann", Some(a)), Ok(()));
            t.failed("Ann", Some(a));
        }
        assert_eq!(t.admit("ann", Some(a)), Ok(()));
        t.failed("ann", Some(a));
        // The name is throttled from any address, the address for any name.
        let Err(Refused::Throttled(w)) = t.admit("ANN", Some(b)) else {
            panic!("not throttled by name");
        };
        assert!(w > Duration::from_secs(9) && w <= Duration::from_secs(10));
        assert!(matches!(
            t.admit("bob", Some(a)),
            Err(Refused::Throttled(_))
        ));
        assert_eq!(t.admit("bob", Some(b)), Ok(()));
        // Each further failure doubles the wait, up to the longest.
        t.failed("ann", None);
        let Err(Refused::Throttled(w)) = t.admit("ann", None) else {
            panic!("not throttled");
        };
        assert!(w > Duration::from_secs(19));
        for _ in 0..5 {
            t.failed("ann", None);
        }
        let Err(Refused::Throttled(w)) = t.admit("ann", None) else {
            panic!("not throttled");
        };
        assert!(w <= Duration::from_secs(40));
        t.succeeded("ann", Some(a));
        assert_eq!(t.admit("ann", Some(a)), Ok(()));
    }

    #[test]
    fn the_table_is_bounded_and_overflow_shares_one_count() {
        let t = Throttle::new(limits());
        for i in 0..50u8 {
            for _ in 0..3 {
                t.failed(&format!("user{i}"), Some(IpAddr::from([127, 0, 1, i])));
            }
        }
        assert!(t.failures.lock().unwrap().map.len() <= 4);
        // Names that did not fit are throttled together.
        assert!(matches!(
            t.admit("user49", None),
            Err(Refused::Throttled(_))
        ));
    }

    #[test]
    fn long_names_cost_a_digest_and_ipv6_counts_per_64() {
        let t = Throttle::new(limits());
        let long = "N".repeat(1 << 20);
        for _ in 0..3 {
            t.failed(&long, None);
        }
        assert!(matches!(
            t.admit(&long.to_lowercase(), None),
            Err(Refused::Throttled(_))
        ));
        let kept: usize = t
            .failures
            .lock()
            .unwrap()
            .map
            .keys()
            .map(|k| match k {
                Key::User(d) => d.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(kept, 32);
        // Another address of the same /64 is the same client.
        let t = Throttle::new(limits());
        for i in 0..3u16 {
            t.failed(
                &format!("u{i}"),
                Some(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, i])),
            );
        }
        assert!(matches!(
            t.admit(
                "fresh",
                Some(IpAddr::from([0x2001, 0xdb8, 0, 1, 9, 9, 9, 9]))
            ),
            Err(Refused::Throttled(_))
        ));
        assert_eq!(
            t.admit(
                "fresh",
                Some(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]))
            ),
            Ok(())
        );
    }

    #[test]
    fn checks_at_once_are_bounded() {
        let t = Throttle::new(limits());
        let first = t.check().expect("a place");
        let second = t.check().expect("a place");
        assert_eq!(t.check().err(), Some(Refused::Busy));
        // The waiter gave its place in the queue back.
        assert_eq!(t.checks.lock().unwrap().waiting, 0);
        drop(first);
        let third = t.check().expect("a place freed");
        drop((second, third));
    }
}
