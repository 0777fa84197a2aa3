//! HTTPS: the server with a certificate, the client trusting its CA.
//!
//! The fixtures in `tls/` are a test CA and a certificate it signed for
//! `localhost` and `127.0.0.1`, valid until 2126, made with:
//!
//! ```text
//! openssl ecparam -name prime256v1 -genkey -noout -out ca.key
//! openssl req -x509 -new -key ca.key -sha256 -days 36500 -subj "/CN=Burrow test CA" \
//!   -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
//! openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out server.key
//! openssl req -new -key server.key -subj "/CN=localhost" -out leaf.csr
//! openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -days 36500 -sha256 -out server.pem \
//!   -extfile <(printf "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
//! ```

use burrow_core::ErrorKind;
use burrow_http::RemoteEngine;

#[cfg(feature = "tls")]
mod with_tls {
    use super::*;
    use crate::common::*;
    use burrow_core::{Batch, BatchResult, Orm};

    const CA: &[u8] = include_bytes!("tls/ca.pem");
    const CERT: &[u8] = include_bytes!("tls/server.pem");
    const KEY: &[u8] = include_bytes!("tls/server.key");

    fn https_server() -> (burrow_http::Server, std::sync::Arc<burrow_core::Database>) {
        server_with(|b| b.no_auth().tls(CERT, KEY))
    }

    fn trusting(url: &str) -> burrow_core::Result<RemoteEngine> {
        RemoteEngine::builder(url).tls_roots(CA).connect()
    }

    #[test]
    fn the_orm_works_over_https() -> TestResult {
        let (server, hosted) = https_server();
        assert!(server.url().starts_with("https://127.0.0.1:"));
        let c = remote_engine(trusting(&server.url())?);
        let mut a = sample(1);
        let id = c.add(&mut a)?;
        assert_eq!(c.retrieve::<Sample>(id)?, a);
        a.first_name = "Changed".into();
        c.update(&mut a)?;
        assert_eq!(hosted.retrieve::<Sample>(id)?, a);
        // A body larger than one TLS record, and a batch.
        let mut b = Batch::new();
        for i in 2..300 {
            let mut s = sample(i);
            s.data = vec![i as u8; 700];
            b.add(s);
        }
        let r = c.send(&mut b)?;
        assert_eq!(r.len(), 298);
        assert!(r.iter().all(|x| matches!(x, BatchResult::Added(_))));
        assert_eq!(c.count::<Sample>("", &[])?, 299);
        assert_eq!(c.retrieve::<Sample>(250)?.data, vec![250u8; 700]);
        assert!(c.delete::<Sample>(id)?);
        // "localhost" is in the certificate too.
        let by_name = server.url().replace("127.0.0.1", "localhost");
        assert_eq!(
            remote_engine(trusting(&by_name)?).count::<Sample>("", &[])?,
            298
        );
        Ok(())
    }

    #[test]
    fn an_untrusted_certificate_or_a_plain_client_is_refused() -> TestResult {
        let (server, hosted) = https_server();
        // The public web roots do not know the test CA.
        let e = RemoteEngine::connect(&server.url()).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
        // Plain HTTP to the TLS port gets no HTTP answer.
        let plain = server.url().replace("https://", "http://");
        assert!(RemoteEngine::connect(&plain).is_err());
        let mut raw = RawConn::open(server.local_addr());
        raw.send(b"GET /root/Sample/1 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(raw.read().is_none());
        // Neither disturbed the server.
        let c = remote_engine(trusting(&server.url())?);
        c.add(&mut sample(7))?;
        assert_eq!(hosted.count::<Sample>("", &[])?, 1);
        Ok(())
    }

    #[test]
    fn a_bad_certificate_or_key_is_refused_at_bind() {
        let (client, _) = hosted();
        for (cert, key) in [
            (&b"not a certificate"[..], KEY),
            (
                CERT,
                &b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"[..],
            ),
            (CA, KEY),
        ] {
            let e = burrow_http::Server::builder(client.clone(), "root")
                .no_auth()
                .tls(cert, key)
                .bind("127.0.0.1:0")
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadInput, "{e}");
            assert!(e.to_string().contains("TLS"), "{e}");
        }
    }
}

#[test]
fn urls_other_than_http_are_refused_clearly() {
    let e = RemoteEngine::connect("ftp://127.0.0.1:1/root").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadInput);
    assert!(e.to_string().contains("http://"), "{e}");
    #[cfg(not(feature = "tls"))]
    {
        let e = RemoteEngine::connect("https://127.0.0.1:1/root").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadInput);
        assert!(e.to_string().contains("`tls` feature"), "{e}");
    }
}
