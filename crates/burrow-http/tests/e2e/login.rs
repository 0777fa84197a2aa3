//! Logins are bounded: failed attempts slow down the next ones per user name
//! and per client address, and an unknown name gets the same answer as a
//! wrong password.

use std::time::Duration;

use burrow_http::{LoginLimits, Server};

use crate::common::*;

fn login(addr: std::net::SocketAddr, user: &str, password: &str) -> Raw {
    raw(
        addr,
        "POST",
        "/root/auth",
        "",
        format!(r#"{{"userName":"{user}","password":"{password}"}}"#).as_bytes(),
    )
}

fn server(limits: LoginLimits) -> Server {
    let (client, _) = hosted();
    Server::builder(client, "root")
        .auth(auth().login_limits(limits))
        .bind("127.0.0.1:0")
        .expect("bind")
}

#[test]
fn failed_logins_are_throttled_by_name_and_address() -> TestResult {
    let server = server(LoginLimits {
        free_failures: 2,
        first_delay: Duration::from_secs(30),
        ..LoginLimits::default()
    });
    let addr = server.local_addr();
    assert_eq!(login(addr, "ann", "ann-secret").status, 200);
    // An unknown name and a wrong password look the same.
    let unknown = login(addr, "nobody", "x");
    let wrong = login(addr, "ann", "x");
    assert_error(&unknown, 401);
    assert_error(&wrong, 401);
    assert_eq!(unknown.json(), wrong.json());
    // The third failure from this address starts the waits: then even the
    // right password is not checked, for any name, until the wait is over.
    assert_error(&login(addr, "ann", "y"), 401);
    for (user, password) in [
        ("ann", "ann-secret"),
        ("bob", "bob-secret"),
        ("nobody", "x"),
    ] {
        let r = login(addr, user, password);
        assert_error(&r, 429);
        let wait: u64 = r.header("Retry-After").ok_or("no Retry-After")?.parse()?;
        assert!((1..=30).contains(&wait), "{wait}");
    }
    // Signed mORMot logins count and wait the same way.
    let r = raw(
        addr,
        "GET",
        "/root/auth?username=bob&password=00&clientnonce=00",
        "",
        b"",
    );
    assert_error(&r, 429);
    Ok(())
}

#[test]
fn a_successful_login_clears_the_count() -> TestResult {
    let server = server(LoginLimits {
        free_failures: 2,
        first_delay: Duration::from_secs(30),
        ..LoginLimits::default()
    });
    let addr = server.local_addr();
    for _ in 0..2 {
        assert_error(&login(addr, "bob", "wrong"), 401);
        assert_eq!(login(addr, "bob", "bob-secret").status, 200);
    }
    assert_error(&login(addr, "bob", "wrong"), 401);
    assert_eq!(login(addr, "bob", "bob-secret").status, 200);
    Ok(())
}
