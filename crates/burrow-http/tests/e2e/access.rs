//! Access control: 401 without credentials, 403 without the right, and no
//! data in either answer.

use burrow_core::{ErrorKind, Orm};
use burrow_http::{
    mormot_password_hash, mormot_private_key, mormot_proof, RemoteEngine, Server, UriSignature,
};

use crate::common::*;

#[test]
fn a_server_needs_an_explicit_choice() {
    let (client, _) = hosted();
    assert!(Server::builder(client, "root").bind("127.0.0.1:0").is_err());
}

#[test]
fn unauthenticated_requests_get_401_and_no_data() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    let addr = server.local_addr();
    for (m, path, body) in [
        ("GET", "/root/Sample/1", &b""[..]),
        ("GET", "/root/Sample", b""),
        ("GET", "/root", b"SELECT * FROM Sample"),
        ("POST", "/root/Sample", br#"{"FirstName":"x"}"#),
        ("DELETE", "/root/Sample/1", b""),
        ("PUT", "/root/Batch", br#"["DELETE@Sample",1]"#),
        ("BEGIN", "/root", b""),
    ] {
        let r = raw(addr, m, path, "", body);
        assert_error(&r, 401);
        assert!(!r.text().contains("user1@example.com"));
    }
    let r = raw(
        addr,
        "GET",
        "/root/Sample/1",
        "Authorization: Bearer wrong\r\n",
        b"",
    );
    assert_error(&r, 401);
    let r = raw(
        addr,
        "GET",
        "/root/Sample/1?session_signature=000000010000000000000000",
        "",
        b"",
    );
    assert_error(&r, 401);
    // The time is public, as for mORMot clients.
    assert_eq!(raw(addr, "GET", "/root/timestamp", "", b"").status, 200);
    assert_eq!(hosted.count::<Sample>("", &[])?, 1);
    Ok(())
}

#[test]
fn credentials_are_checked_before_the_body_is_read() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    let addr = server.local_addr();
    // A large body announced without credentials: refused from the head,
    // without waiting for (or holding) the body.
    let mut c = RawConn::open(addr);
    let t = std::time::Instant::now();
    c.send(
        b"PUT /root/Batch HTTP/1.1\r\nContent-Length: 60000000\r\nExpect: 100-continue\r\n\r\n[",
    );
    let r = c.read().expect("an answer");
    assert_error(&r, 401);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    assert!(c.read().is_none(), "closed rather than read the body");
    // Two Authorization headers: which one counts is not guessed.
    let r = raw(
        addr,
        "GET",
        "/root/Sample",
        "Authorization: Bearer tok-ann\r\nAuthorization: Bearer wrong\r\n",
        b"",
    );
    assert_error(&r, 400);
    // With valid credentials, 100 Continue and then the body.
    let mut c = RawConn::open(addr);
    let body = br#"{"FirstName":"x","Email":"x@x"}"#;
    c.send(
        format!(
            "POST /root/Sample HTTP/1.1\r\nAuthorization: Bearer tok-ann\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    assert_eq!(c.read().map(|r| r.status), Some(100));
    c.send(body);
    assert_eq!(c.read().map(|r| r.status), Some(201));
    assert_eq!(hosted.count::<Sample>("", &[])?, 1);
    Ok(())
}

#[test]
fn bearer_tokens_and_rights() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    hosted.add(&mut Secret {
        id: 0,
        note: "launch codes".into(),
    })?;
    let addr = server.local_addr();
    let ann = "Authorization: Bearer tok-ann\r\n";
    assert_eq!(
        raw(addr, "GET", "/root/Secret/1", ann, b"").json()["Note"],
        "launch codes"
    );

    // bob logs in for a token, and may only read Sample.
    let bob = remote_engine(
        RemoteEngine::builder(&server.url())
            .login_bearer("bob", "bob-secret")
            .connect()?,
    );
    assert_eq!(bob.retrieve::<Sample>(1)?.email, "user1@example.com");
    assert_eq!(bob.count::<Sample>("", &[])?, 1);
    let e = bob.add(&mut sample(2)).unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    assert_eq!(e.kind(), ErrorKind::Denied);
    let e = bob.get::<Secret>(1).unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    assert_eq!(e.kind(), ErrorKind::Denied);
    assert!(bob.delete::<Sample>(1).is_err());
    assert!(bob.count::<Secret>("", &[]).is_err());
    let mut b = burrow_core::Batch::new();
    b.add(sample(3));
    assert!(bob.send(&mut b).is_err());
    let e = RemoteEngine::builder(&server.url())
        .login_bearer("bob", "wrong")
        .connect()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    let e = RemoteEngine::builder(&server.url())
        .login("bob", "wrong")
        .connect()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");

    // Raw: 403 bodies carry no data, and SQL on an unreadable table is refused.
    let token_reply = raw(
        addr,
        "POST",
        "/root/auth",
        "",
        br#"{"userName":"bob","password":"bob-secret"}"#,
    );
    let token = token_reply.json()["result"]
        .as_str()
        .map(str::to_owned)
        .expect("a token");
    let h = format!("Authorization: Bearer {token}\r\n");
    let r = raw(addr, "GET", "/root", &h, b"SELECT * FROM Secret");
    assert_error(&r, 403);
    assert!(!r.text().contains("launch"));
    let r = raw(addr, "GET", "/root/Secret/1", &h, b"");
    assert_error(&r, 403);
    assert!(!r.text().contains("launch"));
    assert_eq!(hosted.count::<Sample>("", &[])?, 1);
    Ok(())
}

#[test]
fn mormot_signed_sessions() -> TestResult {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut sample(1))?;
    // Through the client's implementation of the scheme…
    let ann = remote_engine(
        RemoteEngine::builder(&server.url())
            .login("ann", "ann-secret")
            .connect()?,
    );
    ann.add(&mut sample(2))?;
    assert_eq!(ann.count::<Sample>("", &[])?, 2);
    let tx = ann.transaction()?;
    tx.delete::<Sample>(2)?;
    tx.commit()?;
    assert!(RemoteEngine::builder(&server.url())
        .login("ann", "nope")
        .connect()
        .is_err());

    // …and by hand, step by step as a mORMot client does it.
    let addr = server.local_addr();
    let nonce = raw(addr, "GET", "/root/auth?username=bob", "", b"").json()["result"]
        .as_str()
        .map(str::to_owned)
        .expect("a nonce");
    let hash = mormot_password_hash("bob-secret");
    let proof = mormot_proof("root", &nonce, "cnonce", "bob", &hash);
    let r = raw(
        addr,
        "GET",
        &format!("/root/auth?username=bob&password={proof}&clientnonce=cnonce"),
        "",
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let key = r.json()["result"]
        .as_str()
        .map(str::to_owned)
        .expect("a key");
    assert_eq!(r.json()["logonname"], "bob");
    let id: u32 = key
        .split('+')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("an id");
    let private = mormot_private_key(&key, &hash);
    let sign = |url: &str, ts: u32| {
        let ts = format!("{ts:08x}");
        let s = UriSignature::Sha256.sign(private, ts.as_bytes(), &[url.as_bytes()]);
        format!("/{url}?session_signature={id:08x}{ts}{s:08x}")
    };
    let r = raw(addr, "GET", &sign("root/Sample/1", 1000), "", b"");
    assert_eq!(r.json()["Email"], "user1@example.com");
    // Tampered URI, stale timestamp, unknown session.
    let bad = sign("root/Sample/1", 1001).replace("Sample/1", "Sample/2");
    assert_error(&raw(addr, "GET", &bad, "", b""), 401);
    assert_error(&raw(addr, "GET", &sign("root/Sample/1", 10), "", b""), 401);
    // Reader rights apply to the session too.
    let r = raw(addr, "DELETE", &sign("root/Sample/1", 1002), "", b"");
    assert_error(&r, 403);
    assert_eq!(hosted.count::<Sample>("", &[])?, 1);
    let e = remote_engine(
        RemoteEngine::builder(&server.url())
            .login("bob", "bob-secret")
            .connect()?,
    )
    .delete::<Sample>(1)
    .unwrap_err();
    assert_ne!(e.kind(), ErrorKind::NotFound);
    Ok(())
}

/// A server with access control holding one `Secret` row, and bob's bearer
/// header (bob may read `Sample` only).
fn with_a_secret(
) -> Result<(Server, std::sync::Arc<burrow_core::Database>, String), Box<dyn std::error::Error>> {
    let (server, hosted) = server_with(|b| b.auth(auth()));
    hosted.add(&mut Secret {
        id: 0,
        note: "launch codes".into(),
    })?;
    let bob = bob_token(server.local_addr());
    Ok((server, hosted, bob))
}

/// The answers about a table a client may not use say no more than 403:
/// an unknown field there would otherwise be a 400 naming it, and a known
/// one would not.
#[test]
fn a_table_without_the_right_reveals_none_of_its_fields() -> TestResult {
    let (server, hosted, bob) = with_a_secret()?;
    let addr = server.local_addr();
    for (m, path, body) in [
        ("GET", "/root", &b"SELECT Nope FROM Secret"[..]),
        ("GET", "/root", b"SELECT Note FROM Secret"),
        ("GET", "/root", b"SELECT * FROM Secret WHERE Nope = 1"),
        ("GET", "/root", b"SELECT * FROM Secret ORDER BY Nope"),
        ("GET", "/root/Secret?select=Nope", b""),
        ("GET", "/root/Secret?where=Nope%3D1", b""),
        ("GET", "/root/Secret/1/Nope", b""),
        // Batches: bob may write to no table, readable or not.
        ("PUT", "/root/Batch", br#"["POST@Secret",{"Nope":1}]"#),
        ("PUT", "/root/Batch", br#"["POST@Secret",{"Note":1}]"#),
        ("PUT", "/root/Secret/Batch", br#"["POST",{"Nope":1}]"#),
        ("PUT", "/root/Batch", br#"{"Secret":["POST",{"Nope":1}]}"#),
        ("PUT", "/root/Batch", br#"["POST@Sample",{"Nope":1}]"#),
    ] {
        let r = raw(addr, m, path, &bob, body);
        assert_error(&r, 403);
        assert!(!r.text().contains("Nope"), "{m} {path}: {}", r.text());
    }
    // On a table bob may read, a wrong field is his to know about.
    let r = raw(addr, "GET", "/root", &bob, b"SELECT Nope FROM Sample");
    assert_error(&r, 400);
    assert_eq!(hosted.count::<Sample>("", &[])?, 0);
    assert_eq!(hosted.count::<Secret>("", &[])?, 1);
    Ok(())
}

/// Table names cannot be probed: under access control a name the model does
/// not hold gets the answer of a table the client may not use, 401 before a
/// login and 403 after, on every route that names a table; only a client
/// holding a right on every table learns that a name is unknown.
#[test]
fn unknown_tables_answer_as_forbidden_ones() -> TestResult {
    let (server, hosted, bob) = with_a_secret()?;
    let addr = server.local_addr();
    let ann = "Authorization: Bearer tok-ann\r\n";
    let routes = |table: &str| -> Vec<(&'static str, String, Vec<u8>)> {
        vec![
            ("GET", format!("/root/{table}"), vec![]),
            ("GET", format!("/root/{table}/1"), vec![]),
            ("GET", format!("/root/{table}/1/Note"), vec![]),
            (
                "POST",
                format!("/root/{table}"),
                br#"{"Note":"x"}"#.to_vec(),
            ),
            (
                "PUT",
                format!("/root/{table}/1"),
                br#"{"Note":"x"}"#.to_vec(),
            ),
            ("DELETE", format!("/root/{table}/1"), vec![]),
            (
                "GET",
                "/root".into(),
                format!("SELECT * FROM {table}").into_bytes(),
            ),
            (
                "PUT",
                format!("/root/{table}/Batch"),
                br#"["POST",{"Note":"x"}]"#.to_vec(),
            ),
            (
                "PUT",
                "/root/Batch".into(),
                format!(r#"["POST@{table}",{{"Note":"x"}}]"#).into_bytes(),
            ),
            (
                "PUT",
                "/root/Batch".into(),
                format!(r#"{{"{table}":["POST",{{"Note":"x"}}]}}"#).into_bytes(),
            ),
            ("GET", format!("/root/CacheFlush/{table}"), vec![]),
        ]
    };
    for (known, unknown) in routes("Secret").into_iter().zip(routes("Nope")) {
        for (who, status) in [("", 401), (bob.as_str(), 403)] {
            let a = raw(addr, known.0, &known.1, who, &known.2);
            let b = raw(addr, unknown.0, &unknown.1, who, &unknown.2);
            assert_error(&a, status);
            assert_error(&b, status);
            assert_eq!(a.text(), b.text(), "{} {}", unknown.0, unknown.1);
        }
        // ann may do anything anywhere: an unknown name is hers to know.
        let r = raw(addr, unknown.0, &unknown.1, ann, &unknown.2);
        assert_error(&r, 400);
        assert!(r.text().contains("Nope"), "{}", r.text());
    }
    assert_eq!(hosted.count::<Secret>("", &[])?, 1);
    Ok(())
}

/// A client that may only delete rows of a table it may not read learns
/// nothing of the table's fields from a batch: an add or an update there is
/// refused with 403 as soon as its verb is read, before the row's fields
/// would be checked (an unknown one would otherwise be a 400 naming it).
#[test]
fn a_delete_only_client_learns_no_field_from_a_batch() -> TestResult {
    use burrow_http::{Auth, Group, Rights};
    let auth = Auth::new()
        .group(Group::new("cleaner").table::<Secret>(Rights {
            delete: true,
            ..Rights::NONE
        }))
        .user("dee", "dee-secret", "cleaner")
        .and_then(|a| a.token("tok-dee", "dee"))?;
    let (server, hosted) = server_with(|b| b.auth(auth));
    let id = hosted.add(&mut Secret {
        id: 0,
        note: "launch codes".into(),
    })?;
    let addr = server.local_addr();
    let dee = "Authorization: Bearer tok-dee\r\n";
    for body in [
        r#"["POST@Secret",{"Nope":1}]"#,
        r#"["POST@Secret",{"Note":1}]"#,
        r#"["PUT@Secret",{"ID":1,"Nope":1}]"#,
        r#"["SIMPLE@Secret",[1,2,3]]"#,
        r#"["u01@Secret",[1,"x"]]"#,
        r#"["i07@Secret",["x"]]"#,
        r#"{"Secret":["POST",{"Nope":1}]}"#,
    ] {
        for path in ["/root/Batch", "/root/Secret/Batch"] {
            let body = if path == "/root/Batch" {
                body.to_owned()
            } else {
                body.replace("@Secret", "")
            };
            let r = raw(addr, "PUT", path, dee, body.as_bytes());
            assert_error(&r, 403);
            assert!(!r.text().contains("Nope"), "{body}: {}", r.text());
            assert!(!r.text().contains("field"), "{body}: {}", r.text());
        }
    }
    // What dee may do, dee does.
    let r = raw(
        addr,
        "PUT",
        "/root/Batch",
        dee,
        format!(r#"["DELETE@Secret",{id}]"#).as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(hosted.count::<Secret>("", &[])?, 0);
    Ok(())
}

#[test]
fn flushing_the_server_cache_needs_the_right_to_write_the_table() -> TestResult {
    let ttl = std::time::Duration::from_secs(600);
    let (server, hosted) = server_with(|b| {
        b.auth(auth())
            .cache(burrow_core::OrmCache::new().table::<Sample>(ttl))
    });
    hosted.add(&mut sample(1))?;
    let addr = server.local_addr();
    let bob = bob_token(addr);
    let cached = || {
        server
            .cache()
            .get(<Sample as burrow_core::Record>::table(), 1)
            .is_some()
    };
    assert_eq!(raw(addr, "GET", "/root/Sample/1", &bob, b"").status, 200);
    assert!(cached());
    // bob only reads: no flush of a table, of one row, or of everything.
    for path in [
        "/root/CacheFlush/Sample",
        "/root/CacheFlush/Sample/1",
        "/root/CacheFlush/Secret",
        "/root/CacheFlush",
    ] {
        assert_error(&raw(addr, "GET", path, &bob, b""), 403);
        assert!(cached(), "{path} flushed the cache");
    }
    assert_error(&raw(addr, "GET", "/root/CacheFlush/Sample", "", b""), 401);
    // ann may write to every table.
    let ann = "Authorization: Bearer tok-ann\r\n";
    assert_eq!(
        raw(addr, "GET", "/root/CacheFlush/Sample/1", ann, b"").status,
        200
    );
    assert!(!cached());
    assert_eq!(raw(addr, "GET", "/root/Sample/1", &bob, b"").status, 200);
    assert!(cached());
    assert_eq!(raw(addr, "GET", "/root/CacheFlush", ann, b"").status, 200);
    assert!(!cached());
    Ok(())
}
