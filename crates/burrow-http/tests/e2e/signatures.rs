//! mORMot's signed sessions, hardened: SHA-256 by default and named in the
//! login answer, CRC-32 only when asked for, nothing unsigned after the
//! signature, signatures of Burrow's client bound to the method, and a
//! login answered once.

use std::net::SocketAddr;

use burrow_core::Orm;
use burrow_http::{
    mormot_password_hash, mormot_private_key, mormot_proof, RemoteEngine, UriSignature,
    METHOD_BOUND_NONCE,
};

use crate::common::*;

/// A session opened by hand, as a mORMot client opens it.
struct Session {
    addr: SocketAddr,
    id: u32,
    key: u32,
    algo: UriSignature,
    answer: serde_json::Value,
}

impl Session {
    fn login_url(addr: SocketAddr, user: &str, password: &str, cnonce: &str) -> String {
        let nonce = raw(addr, "GET", &format!("/root/auth?username={user}"), "", b"").json()
            ["result"]
            .as_str()
            .map(str::to_owned)
            .expect("a nonce");
        let hash = mormot_password_hash(password);
        let proof = mormot_proof("root", &nonce, cnonce, user, &hash);
        format!("/root/auth?username={user}&password={proof}&clientnonce={cnonce}")
    }

    fn open(addr: SocketAddr, cnonce: &str) -> Session {
        let r = raw(
            addr,
            "GET",
            &Self::login_url(addr, "ann", "ann-secret", cnonce),
            "",
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let answer = r.json();
        let key = answer["result"].as_str().expect("a key").to_owned();
        let algo = answer["algo"]
            .as_str()
            .map_or(Some(UriSignature::Crc32), UriSignature::from_name)
            .expect("a known form");
        Session {
            addr,
            id: key
                .split('+')
                .next()
                .and_then(|s| s.parse().ok())
                .expect("an id"),
            key: mormot_private_key(&key, &mormot_password_hash("ann-secret")),
            algo,
            answer,
        }
    }

    /// `url` (without its `/`) signed at `ts`, over `signed` (the URL, or
    /// the method, a space and the URL).
    fn sign(&self, url: &str, ts: u32, method: Option<&str>) -> String {
        let ts = format!("{ts:08x}");
        let s = match method {
            Some(m) => self.algo.sign(
                self.key,
                ts.as_bytes(),
                &[m.as_bytes(), b" ", url.as_bytes()],
            ),
            None => self.algo.sign(self.key, ts.as_bytes(), &[url.as_bytes()]),
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("/{url}{sep}session_signature={:08x}{ts}{s:08x}", self.id)
    }

    fn send(&self, method: &str, target: &str) -> Raw {
        raw(self.addr, method, target, "", b"")
    }
}

#[test]
fn sessions_sign_with_sha256_by_default_and_say_so() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    let s = Session::open(server.local_addr(), "cnonce");
    assert_eq!(s.answer["algo"], "sha256");
    assert!(s.answer.get("binding").is_none());
    let r = s.send("GET", &s.sign("root/Sample/1", 1000, None));
    assert_eq!(r.json()["Email"], "user1@example.com");
    // The same URL signed with CRC-32 is not accepted.
    let crc = Session {
        algo: UriSignature::Crc32,
        ..s
    };
    assert_error(
        &crc.send("GET", &crc.sign("root/Sample/1", 1001, None)),
        401,
    );
    Ok(())
}

#[test]
fn crc32_signatures_are_an_explicit_choice_on_both_sides() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth().uri_signature(UriSignature::Crc32)));
    hosted.add(&mut sample(1))?;
    // mORMot's own server names no form for CRC-32, and its clients default to it.
    let s = Session::open(server.local_addr(), "cnonce");
    assert!(s.answer.get("algo").is_none(), "{}", s.answer);
    let r = s.send("GET", &s.sign("root/Sample/1", 1000, None));
    assert_eq!(r.json()["Email"], "user1@example.com");
    // Burrow's client refuses it unless told otherwise.
    let e = RemoteEngine::builder(&server.url())
        .login("ann", "ann-secret")
        .connect()
        .expect_err("a CRC-32 server is refused");
    assert!(e.to_string().contains("weak_signatures"), "{e}");
    let ann = remote_engine(
        RemoteEngine::builder(&server.url())
            .login("ann", "ann-secret")
            .weak_signatures(true)
            .connect()?,
    );
    assert_eq!(ann.count::<Sample>("", &[])?, 1);
    Ok(())
}

#[test]
fn nothing_may_follow_the_signature() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    hosted.add(&mut sample(2))?;
    let s = Session::open(server.local_addr(), "cnonce");
    let signed = s.sign("root/Sample", 1000, None);
    assert_eq!(s.send("GET", &signed).status, 200);
    for tail in ["&where=ID%3D2", "&", "0", "%00", "&session_signature="] {
        let r = s.send("GET", &format!("{signed}{tail}"));
        assert_error(&r, 401);
    }
    Ok(())
}

#[test]
fn a_bound_signature_is_good_for_its_method_only() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    let s = Session::open(server.local_addr(), &format!("{METHOD_BOUND_NONCE}abc"));
    assert_eq!(s.answer["binding"], "method");
    let get = s.sign("root/Sample/1", 1000, Some("GET"));
    assert_eq!(s.send("GET", &get).json()["Email"], "user1@example.com");
    // The observed GET, sent again as a DELETE: refused, the row stays.
    assert_error(&s.send("DELETE", &get), 401);
    // Unbound, the scheme cannot tell.
    assert_error(&s.send("GET", &s.sign("root/Sample/1", 1001, None)), 401);
    assert_eq!(hosted.count::<Sample>("", &[])?, 1);
    let delete = s.sign("root/Sample/1", 1002, Some("DELETE"));
    assert_eq!(s.send("DELETE", &delete).status, 200);
    assert_eq!(hosted.count::<Sample>("", &[])?, 0);
    Ok(())
}

#[test]
fn a_login_opens_one_session() -> TestResult {
    let (server, _) = server_with(|b| b.auth(auth()));
    let addr = server.local_addr();
    let url = Session::login_url(addr, "ann", "ann-secret", "cnonce");
    assert_eq!(raw(addr, "GET", &url, "", b"").status, 200);
    // The same answer, observed and sent again.
    assert_error(&raw(addr, "GET", &url, "", b""), 401);
    // A new client nonce makes a new login.
    let again = Session::login_url(addr, "ann", "ann-secret", "cnonce2");
    assert_eq!(raw(addr, "GET", &again, "", b"").status, 200);
    Ok(())
}

#[test]
fn a_signature_far_behind_the_sessions_clock_is_a_replay() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    let s = Session::open(server.local_addr(), "cnonce");
    assert_eq!(
        s.send("GET", &s.sign("root/Sample/1", 5000, None)).status,
        200
    );
    // Out of order by a few seconds (parallel requests): accepted.
    assert_eq!(
        s.send("GET", &s.sign("root/Sample/1", 4980, None)).status,
        200
    );
    // A minute behind: refused.
    assert_error(&s.send("GET", &s.sign("root/Sample/1", 4760, None)), 401);
    Ok(())
}
