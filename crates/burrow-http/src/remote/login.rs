//! The logins: mORMot's signed sessions (a nonce exchange, then every URI
//! signed with the session's key and a timestamp) and bearer tokens (given,
//! or obtained with a password), and what each adds to a request.
//!
//! A session signs with the form the server names in its login answer
//! (`"algo"`; none named is mORMot's CRC-32, refused unless the builder
//! allows it: one observed URI gives its key away), and asks for
//! signatures bound to the method ([`METHOD_BOUND_NONCE`]), which a Burrow
//! server grants and a mORMot server ignores.

use std::sync::{OnceLock, PoisonError};
use std::time::Instant;

use burrow_core::json;
use burrow_core::{Error, Result};

use super::{RemoteEngine, ENGINE};
use crate::auth::{
    mormot_password_hash, mormot_private_key, mormot_proof, UriSignature, METHOD_BOUND_NONCE,
};
use crate::web::wire::percent_encode;

pub(super) enum Credentials {
    None,
    Bearer(String),
    Session {
        hexa8: String,
        private_key: u32,
        algo: UriSignature,
        /// Signatures cover the method (the server said so).
        bound: bool,
    },
}

impl Credentials {
    /// Signs `uri` (the root and the path, with its query) when logged in
    /// to a session.
    pub(super) fn sign(&self, method: &str, uri: &mut String) {
        if let Credentials::Session {
            hexa8,
            private_key,
            algo,
            bound,
        } = self
        {
            let ts = hex8(ticks());
            let sign = if *bound {
                algo.sign(
                    *private_key,
                    ts.as_bytes(),
                    &[method.as_bytes(), b" ", uri.as_bytes()],
                )
            } else {
                algo.sign(*private_key, ts.as_bytes(), &[uri.as_bytes()])
            };
            uri.push(if uri.contains('?') { '&' } else { '?' });
            uri.push_str("session_signature=");
            uri.push_str(hexa8);
            uri.push_str(&ts);
            uri.push_str(&hex8(sign));
        }
    }

    /// The `Authorization` header line of a bearer token, if any.
    pub(super) fn write_header(&self, out: &mut Vec<u8>) {
        if let Credentials::Bearer(t) = self {
            out.extend_from_slice(b"Authorization: Bearer ");
            out.extend_from_slice(t.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

fn ticks() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    // mORMot's timestamp: milliseconds / 256, from some origin.
    ((start.elapsed().as_millis() as u64 + (1 << 20)) >> 8) as u32
}

fn hex8(v: u32) -> String {
    format!("{v:08x}")
}

impl RemoteEngine {
    pub(super) fn login_mormot(&self, user: &str, password: &str, weak: bool) -> Result<()> {
        let mut q = String::from("auth?username=");
        percent_encode(user, &mut q);
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let nonce = result_of(&r.body)?;
        let mut rnd = [0u8; 16];
        crate::auth::random(&mut rnd);
        let mut cnonce = String::from(METHOD_BOUND_NONCE);
        cnonce.extend(rnd.iter().map(|b| format!("{b:02x}")));
        let hash = mormot_password_hash(password);
        let proof = mormot_proof(&self.root, &nonce, &cnonce, user, &hash);
        let q = format!("{q}&password={proof}&clientnonce={cnonce}");
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let answer: serde_json::Value = serde_json::from_slice(&r.body)
            .map_err(|_| Error::engine(ENGINE, "unexpected authentication answer"))?;
        let field = |name: &str| answer.get(name).and_then(|v| v.as_str());
        let key = field("result")
            .ok_or_else(|| Error::engine(ENGINE, "unexpected authentication answer"))?;
        let id: u32 = key
            .split('+')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::engine(ENGINE, format!("unexpected session key {key:?}")))?;
        let algo = match field("algo") {
            None => UriSignature::Crc32,
            Some(name) => UriSignature::from_name(name)
                .ok_or_else(|| Error::engine(ENGINE, format!("unknown signature form {name:?}")))?,
        };
        if algo == UriSignature::Crc32 && !weak {
            return Err(Error::engine(
                ENGINE,
                "the server signs sessions with CRC-32, whose key one observed request \
                 gives away; allow it with RemoteBuilder::weak_signatures(true), or log in \
                 with login_bearer over TLS",
            ));
        }
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Credentials::Session {
            hexa8: hex8(id),
            private_key: mormot_private_key(key, &hash),
            algo,
            bound: field("binding") == Some("method"),
        };
        Ok(())
    }

    pub(super) fn login_bearer(&self, user: &str, password: &str) -> Result<()> {
        let mut body = b"{\"userName\":".to_vec();
        json::write_str(&mut body, user);
        body.extend_from_slice(b",\"password\":");
        json::write_str(&mut body, password);
        body.push(b'}');
        let r = self.call("POST", "auth", &body)?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let token = result_of(&r.body)?;
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Credentials::Bearer(token);
        Ok(())
    }
}

fn result_of(body: &[u8]) -> Result<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("result").and_then(|r| r.as_str()).map(str::to_owned))
        .ok_or_else(|| Error::engine(ENGINE, "unexpected authentication answer"))
}
