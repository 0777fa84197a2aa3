//! The logins: mORMot's signed sessions (a nonce exchange, then every URI
//! signed with the session's key and a timestamp) and bearer tokens (given,
//! or obtained with a password), and what each adds to a request.

use std::sync::{OnceLock, PoisonError};
use std::time::Instant;

use burrow_core::json;
use burrow_core::{Error, Result};

use super::{RemoteEngine, ENGINE};
use crate::auth::{mormot_password_hash, mormot_private_key, mormot_proof, mormot_signature};
use crate::web::wire::percent_encode;

pub(super) enum Credentials {
    None,
    Bearer(String),
    Session { hexa8: String, private_key: u32 },
}

impl Credentials {
    /// Signs `uri` (the root and the path, with its query) when logged in
    /// to a session.
    pub(super) fn sign(&self, uri: &mut String) {
        if let Credentials::Session { hexa8, private_key } = self {
            let ts = hex8(ticks());
            let sign = mormot_signature(*private_key, ts.as_bytes(), uri.as_bytes());
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
    pub(super) fn login_mormot(&self, user: &str, password: &str) -> Result<()> {
        let mut q = String::from("auth?username=");
        percent_encode(user, &mut q);
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let nonce = result_of(&r.body)?;
        let mut rnd = [0u8; 16];
        crate::auth::random(&mut rnd);
        let cnonce: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let hash = mormot_password_hash(password);
        let proof = mormot_proof(&self.root, &nonce, &cnonce, user, &hash);
        let q = format!("{q}&password={proof}&clientnonce={cnonce}");
        let r = self.call("GET", &q, b"")?;
        if r.status != 200 {
            return Err(r.error(None));
        }
        let key = result_of(&r.body)?;
        let id: u32 = key
            .split('+')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::engine(ENGINE, format!("unexpected session key {key:?}")))?;
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Credentials::Session {
            hexa8: hex8(id),
            private_key: mormot_private_key(&key, &hash),
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
