//! Keeping a thread off one processor for a while: where two threads hand
//! work to each other and each keeps a processor busy (a scan worker and the
//! thread consuming its rows, a server writing a long answer and a client on
//! the same machine reading it), the scheduler may wake one on the other's
//! processor and leave a second one idle. A thread is held off that one
//! processor, not tied to another, and gets back the set it had when the
//! returned guard drops, so the process's own affinity (`taskset`, a
//! cgroup's processors) is kept. Linux only; elsewhere nothing is changed.

/// The processors a thread had, given back when dropped.
pub struct Away(imp::Saved);

impl Drop for Away {
    fn drop(&mut self) {
        imp::restore(&self.0);
    }
}

/// The processor the calling thread runs on, when the system says.
pub fn current() -> Option<usize> {
    imp::current()
}

/// Holds the calling thread off processor `cpu` while the value returned
/// lives; `None`, and nothing changed, where that would leave it no
/// processor, `cpu` is not one of its processors, or the system refuses.
pub fn keep_off(cpu: usize) -> Option<Away> {
    imp::keep_off(cpu).map(Away)
}

/// The processor that received the last packet of a TCP connection
/// (`SO_INCOMING_CPU`). On loopback that is the processor the peer sent
/// from: a server answering a client on its own machine learns where the
/// client runs.
#[cfg(unix)]
pub fn incoming_cpu(socket: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
    imp::incoming_cpu(socket)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod imp {
    use std::mem::{size_of, MaybeUninit};
    use std::os::fd::{AsRawFd, BorrowedFd};

    pub type Saved = libc::cpu_set_t;

    pub fn current() -> Option<usize> {
        // SAFETY: no arguments; -1 on failure.
        usize::try_from(unsafe { libc::sched_getcpu() }).ok()
    }

    pub fn restore(had: &Saved) {
        // SAFETY: a set read by `sched_getaffinity`, for this thread (0).
        // Should it fail, the thread stays off that one processor: it still
        // runs, only placed less freely.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), had) };
    }

    pub fn keep_off(cpu: usize) -> Option<Saved> {
        let mut had = MaybeUninit::<libc::cpu_set_t>::zeroed();
        // SAFETY: `had` is a zeroed `cpu_set_t` of the size passed, filled by
        // the call for this thread (0); the `CPU_*` calls read and write within
        // a set, and `cpu` is checked against the set's size first.
        unsafe {
            if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), had.as_mut_ptr()) != 0 {
                return None;
            }
            let had = had.assume_init();
            if cpu >= libc::CPU_SETSIZE as usize
                || !libc::CPU_ISSET(cpu, &had)
                || libc::CPU_COUNT(&had) < 2
            {
                return None;
            }
            let mut off = had;
            libc::CPU_CLR(cpu, &mut off);
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &off) != 0 {
                return None;
            }
            Some(had)
        }
    }

    pub fn incoming_cpu(socket: BorrowedFd<'_>) -> Option<usize> {
        let mut cpu: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: an open descriptor (borrowed for the call), an `int` and
        // its size for the kernel to fill.
        let r = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_INCOMING_CPU,
                (&mut cpu as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return None;
        }
        usize::try_from(cpu).ok()
    }
}

/// Elsewhere the scheduler places threads alone.
#[cfg(not(target_os = "linux"))]
mod imp {
    pub type Saved = ();
    pub fn current() -> Option<usize> {
        None
    }
    pub fn restore(_: &Saved) {}
    pub fn keep_off(_: usize) -> Option<Saved> {
        None
    }
    #[cfg(unix)]
    pub fn incoming_cpu(_: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(unsafe_code)]
mod test {
    use std::mem::{size_of, MaybeUninit};

    /// The processors this thread may run on.
    fn processors() -> Vec<usize> {
        let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
        // SAFETY: a zeroed set of the size passed, filled for this thread.
        let set = unsafe {
            assert_eq!(
                libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), set.as_mut_ptr()),
                0
            );
            set.assume_init()
        };
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `i` is within the set.
            .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
            .collect()
    }

    /// Limits this thread to `cpu`.
    fn only(cpu: usize) {
        let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
        // SAFETY: a zeroed set of the size passed; `cpu` is one of this
        // thread's processors.
        unsafe {
            let set = set.assume_init_mut();
            libc::CPU_SET(cpu, set);
            assert_eq!(
                libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set),
                0
            );
        }
    }

    /// Held off one processor for as long as the guard lives, then given back
    /// exactly the set it had; never left with none.
    #[test]
    fn a_thread_is_held_off_one_processor_and_gets_its_set_back() {
        // In a thread of its own: the test harness's threads keep theirs.
        std::thread::spawn(|| {
            let had = processors();
            let first = had[0];
            if had.len() > 1 {
                let away = super::keep_off(first).expect("held off");
                let during = processors();
                assert!(!during.contains(&first), "{during:?}");
                assert_eq!(during.len(), had.len() - 1);
                drop(away);
                assert_eq!(processors(), had);
            }
            // A processor it may not run on anyway: nothing to do.
            assert!(super::keep_off(libc::CPU_SETSIZE as usize).is_none());
            assert!(super::keep_off(usize::MAX).is_none());
            assert_eq!(processors(), had);
            // Its only processor: kept.
            only(first);
            assert!(super::keep_off(first).is_none());
            assert_eq!(processors(), vec![first]);
        })
        .join()
        .expect("the test thread ran");
    }

    /// On loopback, a connection's incoming processor is the one its peer
    /// sent from.
    #[test]
    fn a_loopback_connection_reports_the_processor_its_peer_sent_from() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let cpu = processors()[0];
            only(cpu);
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            client.write_all(&(cpu as u64).to_le_bytes()).unwrap();
            let mut done = [0u8; 1];
            let _ = client.read(&mut done);
        });
        let (mut server, _) = listener.accept().unwrap();
        let mut sent_from = [0u8; 8];
        server.read_exact(&mut sent_from).unwrap();
        assert_eq!(
            super::incoming_cpu(server.as_fd()),
            Some(u64::from_le_bytes(sent_from) as usize)
        );
        server.write_all(b".").unwrap();
    }
}
