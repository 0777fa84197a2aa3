//! Access control: users, groups and their rights per table, and the ways a
//! client proves who it is.
//!
//! - **Rights** belong to groups: read, create, update and delete, per table,
//!   with a default for tables not named. A SQL SELECT needs the read right on
//!   its table; SQL that writes is always refused.
//! - **Passwords** are kept as Argon2id hashes (the `argon2` crate, default
//!   parameters: 19 MiB, 2 passes), checked when a client logs in, never on
//!   every request.
//! - **mORMot's signed sessions** (`TRestServerAuthenticationDefault`): the
//!   client asks `GET /{root}/auth?username=…` for a server nonce, answers with
//!   `SHA-256(root + nonce + clientnonce + user + SHA-256("salt" + password))`,
//!   and gets `"{session}+{key}"`; every later URI then ends with
//!   `session_signature=` + hex8(session) + hex8(timestamp) +
//!   hex8(crc32(crc32(privatekey, timestamp), uri)). To check the answer, the
//!   server must hold `SHA-256("salt" + password)` for each user, which is as
//!   good as the password *for this scheme*: a mORMot server holds the same.
//!   It is kept only while the scheme is enabled.
//! - **Bearer tokens**: configured ones ([`Auth::token`]), or issued by
//!   `POST /{root}/auth` with `{"userName":…,"password":…}` after an Argon2
//!   check; sent as `Authorization: Bearer …`. Only their SHA-256 is kept.
//! - **Logins are bounded** ([`LoginLimits`], `throttle.rs`): a few password
//!   checks at once, and failed attempts per user name and per client
//!   address slowed down. An unknown user name costs the same Argon2 check
//!   as a known one, so the time of an answer does not tell which names
//!   exist.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use burrow_core::{Error, Record, Result};
use sha2::{Digest, Sha256};

use crate::throttle::{LoginLimits, Refused, Throttle};

/// What a group may do on a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights {
    /// Retrieve, list, count, SQL SELECT.
    pub read: bool,
    /// Add.
    pub create: bool,
    /// Update.
    pub update: bool,
    /// Delete.
    pub delete: bool,
}

impl Rights {
    /// Nothing.
    pub const NONE: Rights = Rights {
        read: false,
        create: false,
        update: false,
        delete: false,
    };
    /// Reads only.
    pub const READ: Rights = Rights {
        read: true,
        ..Rights::NONE
    };
    /// Everything.
    pub const ALL: Rights = Rights {
        read: true,
        create: true,
        update: true,
        delete: true,
    };
}

/// A group of users sharing rights.
#[derive(Debug, Clone)]
pub struct Group {
    name: String,
    default: Rights,
    tables: Vec<(String, Rights)>,
    admin: bool,
}

impl Group {
    /// A group with no right on any table.
    pub fn new(name: impl Into<String>) -> Self {
        Group {
            name: name.into(),
            default: Rights::NONE,
            tables: Vec::new(),
            admin: false,
        }
    }

    /// Makes the group's users administrators of the server: they may start
    /// backups over HTTP (see [`crate::ServerBuilder::backup_folder`]).
    /// Table rights are given apart.
    pub fn admin(mut self, on: bool) -> Self {
        self.admin = on;
        self
    }

    /// The rights on every table not given its own.
    pub fn all_tables(mut self, rights: Rights) -> Self {
        self.default = rights;
        self
    }

    /// The rights on the table of `T`.
    pub fn table<T: Record>(self, rights: Rights) -> Self {
        self.table_named(T::TABLE_NAME, rights)
    }

    /// The rights on the table called `name`.
    pub fn table_named(mut self, name: impl Into<String>, rights: Rights) -> Self {
        let name = name.into();
        self.tables.retain(|(t, _)| !t.eq_ignore_ascii_case(&name));
        self.tables.push((name, rights));
        self
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rights on the table called `table`.
    pub fn rights(&self, table: &str) -> Rights {
        self.tables
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(table))
            .map_or(self.default, |(_, r)| *r)
    }
}

struct User {
    id: i64,
    name: String,
    group: usize,
    /// The Argon2id PHC string.
    phc: String,
    /// `SHA-256("salt" + password)` in lower-case hex, for mORMot's scheme.
    mormot: Option<String>,
}

struct Session {
    user: usize,
    private_key: u32,
    last_timestamp: u32,
    expires: Instant,
}

struct Token {
    user: usize,
    expires: Option<Instant>,
}

/// Who made a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Principal {
    /// Authentication is off: every right.
    Anyone,
    /// A user, by index.
    User(usize),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    /// 401: no or invalid credentials.
    Unauthenticated(&'static str),
    /// 429: too many failed logins for this name or address; retry after.
    Throttled(Duration),
    /// 503: every password check is taken.
    Busy,
}

impl From<Refused> for Denied {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Throttled(wait) => Denied::Throttled(wait),
            Refused::Busy => Denied::Busy,
        }
    }
}

/// Users, groups, rights and the enabled authentication schemes.
pub struct Auth {
    groups: Vec<Group>,
    users: Vec<User>,
    tokens: Mutex<HashMap<[u8; 32], Token>>,
    sessions: Mutex<HashMap<u32, Session>>,
    mormot: bool,
    bearer: bool,
    session_ttl: Duration,
    secret: [u8; 32],
    throttle: Throttle,
    /// The Argon2 hash an unknown user name is checked against (made on
    /// first use: it costs what a check does).
    decoy: OnceLock<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("groups", &self.groups)
            .field(
                "users",
                &self.users.iter().map(|u| &u.name).collect::<Vec<_>>(),
            )
            .field("mormot", &self.mormot)
            .field("bearer", &self.bearer)
            .finish_non_exhaustive()
    }
}

impl Default for Auth {
    fn default() -> Self {
        Auth::new()
    }
}

/// The Argon2id PHC string of `password`, with a random salt.
fn argon2_hash(password: &str) -> Result<String> {
    let mut raw = [0u8; 16];
    random(&mut raw);
    let salt = SaltString::encode_b64(&raw)
        .map_err(|e| Error::BadInput(format!("cannot make a salt: {e}")))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| Error::BadInput(format!("cannot hash the password: {e}")))?
        .to_string())
}

/// Fills `buf` from the operating system's random source.
pub(crate) fn random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        // No OS randomness: fall back to hashing the time and a counter,
        // which is unpredictable enough for nonces but flagged in debug builds.
        debug_assert!(false, "no OS random source");
        let mut h = Sha256::new();
        h.update(format!("{:?}{:?}", Instant::now(), std::thread::current().id()).as_bytes());
        let d = h.finalize();
        for (b, x) in buf.iter_mut().zip(d.iter().cycle()) {
            *b = *x;
        }
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

/// Constant-time equality, so that a comparison leaks no prefix length.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// mORMot's client-side password hash: `SHA-256("salt" + password)`, hex.
pub fn mormot_password_hash(password: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"salt");
    h.update(password.as_bytes());
    hex(&h.finalize())
}

/// mORMot's default URI signature (`suaCRC32`):
/// `crc32(crc32(private_key, timestamp), uri)`.
pub fn mormot_signature(private_key: u32, timestamp: &[u8], uri: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(private_key);
    h.update(timestamp);
    let mut h = crc32fast::Hasher::new_with_initial(h.finalize());
    h.update(uri);
    h.finalize()
}

/// The private key both sides derive from the session key and the password hash.
pub fn mormot_private_key(session_key: &str, password_hash: &str) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(session_key.as_bytes());
    let mut h = crc32fast::Hasher::new_with_initial(h.finalize());
    h.update(password_hash.as_bytes());
    h.finalize()
}

/// The proof a mORMot client sends to log in.
pub fn mormot_proof(
    root: &str,
    server_nonce: &str,
    client_nonce: &str,
    user: &str,
    password_hash: &str,
) -> String {
    let mut h = Sha256::new();
    for part in [root, server_nonce, client_nonce, user, password_hash] {
        h.update(part.as_bytes());
    }
    hex(&h.finalize())
}

/// How many 256 ms ticks a signature's timestamp may run behind the latest
/// one seen on its session (requests sent in parallel arrive out of order).
const TIMESTAMP_SLACK: u32 = 40;

impl Auth {
    /// No user yet; mORMot's signed sessions and bearer tokens enabled,
    /// sessions lasting 60 minutes after their last use.
    pub fn new() -> Self {
        let mut secret = [0u8; 32];
        random(&mut secret);
        Auth {
            groups: Vec::new(),
            users: Vec::new(),
            tokens: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            mormot: true,
            bearer: true,
            session_ttl: Duration::from_secs(3600),
            secret,
            throttle: Throttle::new(LoginLimits::default()),
            decoy: OnceLock::new(),
        }
    }

    /// Adds (or replaces) a group.
    pub fn group(mut self, group: Group) -> Self {
        self.groups.retain(|g| g.name != group.name);
        self.groups.push(group);
        self
    }

    /// Adds a user of an existing group; the password is hashed with Argon2id.
    pub fn user(mut self, name: &str, password: &str, group: &str) -> Result<Self> {
        let group = self
            .groups
            .iter()
            .position(|g| g.name == group)
            .ok_or_else(|| Error::BadInput(format!("no group {group:?}")))?;
        if self.users.iter().any(|u| u.name.eq_ignore_ascii_case(name)) || name.is_empty() {
            return Err(Error::BadInput(format!(
                "user name {name:?} is empty or taken"
            )));
        }
        let phc = argon2_hash(password)?;
        self.users.push(User {
            id: self.users.len() as i64 + 1,
            name: name.to_owned(),
            group,
            phc,
            mormot: Some(mormot_password_hash(password)),
        });
        Ok(self)
    }

    /// Accepts `Authorization: Bearer {token}` as the user `user` (who must
    /// exist). Only the token's SHA-256 is kept.
    pub fn token(self, token: &str, user: &str) -> Result<Self> {
        let u = self
            .user_index(user)
            .ok_or_else(|| Error::BadInput(format!("no user {user:?}")))?;
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                sha256(token.as_bytes()),
                Token {
                    user: u,
                    expires: None,
                },
            );
        Ok(self)
    }

    /// Enables or disables mORMot's signed-session scheme. Disabling it drops
    /// the password hashes it needs.
    pub fn mormot_sessions(mut self, on: bool) -> Self {
        self.mormot = on;
        self
    }

    /// Enables or disables bearer tokens (configured and issued).
    pub fn bearer_tokens(mut self, on: bool) -> Self {
        self.bearer = on;
        self
    }

    /// Bounds password checks and slows down failed logins.
    pub fn login_limits(mut self, limits: LoginLimits) -> Self {
        self.throttle = Throttle::new(limits);
        self
    }

    /// How long a session or an issued token lasts after its last use.
    pub fn session_timeout(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// Called when the server is built.
    pub(crate) fn seal(&mut self) {
        if !self.mormot {
            for u in &mut self.users {
                u.mormot = None;
            }
        }
    }

    /// A hash no password matches, checked for unknown user names.
    fn decoy(&self) -> &str {
        self.decoy.get_or_init(|| {
            let mut pw = [0u8; 32];
            random(&mut pw);
            argon2_hash(&hex(&pw)).unwrap_or_default()
        })
    }

    fn user_index(&self, name: &str) -> Option<usize> {
        self.users
            .iter()
            .position(|u| u.name.eq_ignore_ascii_case(name))
    }

    /// Whether `who` is an authenticated administrator.
    pub(crate) fn is_admin(&self, who: Principal) -> bool {
        match who {
            Principal::Anyone => false,
            Principal::User(u) => self.groups[self.users[u].group].admin,
        }
    }

    /// The rights of `who` on `table`.
    pub(crate) fn rights(&self, who: Principal, table: &str) -> Rights {
        match who {
            Principal::Anyone => Rights::ALL,
            Principal::User(u) => self.groups[self.users[u].group].rights(table),
        }
    }

    /// The server nonce of the current five-minute period (`back` periods ago).
    fn nonce(&self, back: u64) -> String {
        let period = burrow_core::chrono::Utc::now().timestamp().max(0) as u64 / 300 - back;
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(period.to_le_bytes());
        hex(&h.finalize())
    }

    /// `GET /{root}/auth?username=…` (first step): the server nonce.
    pub(crate) fn mormot_nonce(&self) -> Option<String> {
        self.mormot.then(|| self.nonce(0))
    }

    /// `GET /{root}/auth?username=…&password=…&clientnonce=…`: checks the proof
    /// and opens a session; returns the response body.
    pub(crate) fn mormot_login(
        &self,
        root: &str,
        user: &str,
        proof: &str,
        client_nonce: &str,
        addr: Option<IpAddr>,
    ) -> std::result::Result<String, Denied> {
        if !self.mormot {
            return Err(Denied::Unauthenticated("mORMot sessions are disabled"));
        }
        self.throttle.admit(user, addr)?;
        let known = self
            .user_index(user)
            .and_then(|u| Some((u, self.users[u].mormot.as_deref()?)));
        // An unknown name is checked against a hash of nothing, the same work.
        let (name, hash) = known.map_or((user, ""), |(u, h)| (self.users[u].name.as_str(), h));
        let ok = (0..2).any(|back| {
            let want = mormot_proof(root, &self.nonce(back), client_nonce, name, hash);
            same(want.as_bytes(), proof.to_ascii_lowercase().as_bytes())
        });
        let Some((u, hash)) = known.filter(|_| ok) else {
            self.throttle.failed(user, addr);
            return Err(Denied::Unauthenticated("invalid user name or password"));
        };
        self.throttle.succeeded(user, addr);
        let mut rnd = [0u8; 16];
        crate::auth::random(&mut rnd);
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        let id = loop {
            let mut b = [0u8; 4];
            random(&mut b);
            let id = u32::from_le_bytes(b) & 0x7fff_ffff;
            if id > 1 && !sessions.contains_key(&id) {
                break id;
            }
        };
        let key = format!("{id}+{}", hex(&rnd));
        sessions.insert(
            id,
            Session {
                user: u,
                private_key: mormot_private_key(&key, hash),
                last_timestamp: 0,
                expires: now + self.session_ttl,
            },
        );
        let user = &self.users[u];
        let mut body = Vec::new();
        body.extend_from_slice(b"{\"result\":");
        burrow_core::json::write_str(&mut body, &key);
        body.extend_from_slice(format!(",\"logonid\":{},\"logonname\":", user.id).as_bytes());
        burrow_core::json::write_str(&mut body, &user.name);
        body.extend_from_slice(b",\"logondisplay\":");
        burrow_core::json::write_str(&mut body, &user.name);
        body.extend_from_slice(
            format!(
                ",\"logongroup\":{},\"timeout\":{},\"server\":\"Burrow\",\"version\":\"{}\"}}",
                user.group + 1,
                (self.session_ttl.as_secs() / 60).max(1),
                env!("CARGO_PKG_VERSION")
            )
            .as_bytes(),
        );
        Ok(String::from_utf8(body).unwrap_or_default())
    }

    /// `POST /{root}/auth` with `{"userName":…,"password":…}`: checks the
    /// password against its Argon2 hash and issues a bearer token.
    pub(crate) fn bearer_login(
        &self,
        user: &str,
        password: &str,
        addr: Option<IpAddr>,
    ) -> std::result::Result<String, Denied> {
        if !self.bearer {
            return Err(Denied::Unauthenticated("bearer tokens are disabled"));
        }
        self.throttle.admit(user, addr)?;
        let u = self.user_index(user);
        let phc = match u {
            Some(u) => self.users[u].phc.as_str(),
            None => self.decoy(),
        };
        let ok = {
            let _check = self.throttle.check()?;
            PasswordHash::new(phc).is_ok_and(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
        };
        let Some(u) = u.filter(|_| ok) else {
            self.throttle.failed(user, addr);
            return Err(Denied::Unauthenticated("invalid user name or password"));
        };
        self.throttle.succeeded(user, addr);
        let mut rnd = [0u8; 32];
        crate::auth::random(&mut rnd);
        let token = hex(&rnd);
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        tokens.retain(|_, t| t.expires.is_none_or(|e| e > now));
        tokens.insert(
            sha256(token.as_bytes()),
            Token {
                user: u,
                expires: Some(now + self.session_ttl),
            },
        );
        Ok(token)
    }

    /// Closes a mORMot session (`GET /{root}/auth?session=…`), if `who` owns it.
    pub(crate) fn close_session(&self, id: u32, who: Principal) {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if sessions
            .get(&id)
            .is_some_and(|s| Principal::User(s.user) == who)
        {
            sessions.remove(&id);
        }
    }

    /// Identifies the sender of a request from its bearer token or its signed
    /// URI (`target` as sent, with its leading `/`).
    pub(crate) fn identify(
        &self,
        target: &str,
        bearer: Option<&str>,
    ) -> std::result::Result<Principal, Denied> {
        let now = Instant::now();
        if let Some(token) = bearer {
            if !self.bearer {
                return Err(Denied::Unauthenticated("bearer tokens are disabled"));
            }
            let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let t = tokens
                .get_mut(&sha256(token.as_bytes()))
                .filter(|t| t.expires.is_none_or(|e| e > now))
                .ok_or(Denied::Unauthenticated("invalid or expired bearer token"))?;
            if let Some(e) = &mut t.expires {
                *e = now + self.session_ttl;
            }
            return Ok(Principal::User(t.user));
        }
        let uri = target.strip_prefix('/').unwrap_or(target);
        let at = uri
            .rfind("session_signature=")
            .filter(|&p| p > 0 && matches!(uri.as_bytes()[p - 1], b'?' | b'&'))
            .ok_or(Denied::Unauthenticated("authentication required"))?;
        if !self.mormot {
            return Err(Denied::Unauthenticated("mORMot sessions are disabled"));
        }
        let sig = &uri[at + "session_signature=".len()..];
        let bad = Denied::Unauthenticated("invalid session signature");
        // Hexadecimal digits only: other text could cut a character at the
        // slices below, and `from_str_radix` alone would take a `+`.
        let Some(sig) = sig
            .get(..24)
            .filter(|s| s.bytes().all(|c| c.is_ascii_hexdigit()))
        else {
            return Err(bad);
        };
        let hex8 = |s: &str| u32::from_str_radix(s, 16).ok();
        let (id, ts, sign) = (
            hex8(&sig[..8]).ok_or(bad.clone())?,
            hex8(&sig[8..16]).ok_or(bad.clone())?,
            hex8(&sig[16..24]).ok_or(bad.clone())?,
        );
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let s = sessions
            .get_mut(&id)
            .filter(|s| s.expires > now)
            .ok_or(Denied::Unauthenticated("unknown or expired session"))?;
        let signed = &uri.as_bytes()[..at - 1];
        if mormot_signature(s.private_key, &sig.as_bytes()[8..16], signed) != sign {
            return Err(bad);
        }
        if ts.wrapping_add(TIMESTAMP_SLACK) < s.last_timestamp {
            return Err(Denied::Unauthenticated("replayed session signature"));
        }
        s.last_timestamp = s.last_timestamp.max(ts);
        s.expires = now + self.session_ttl;
        Ok(Principal::User(s.user))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn an_unknown_name_costs_a_password_check() {
        let auth = Auth::new()
            .group(Group::new("g").all_tables(Rights::ALL))
            .user("ann", "secret", "g")
            .expect("auth");
        assert!(auth.decoy.get().is_none());
        assert_eq!(
            auth.bearer_login("nobody", "secret", None),
            Err(Denied::Unauthenticated("invalid user name or password"))
        );
        // The unknown name was checked against a hash, as a known one is.
        assert!(auth
            .decoy
            .get()
            .is_some_and(|h| h.starts_with("$argon2id$")));
        assert!(auth.bearer_login("ANN", "secret", None).is_ok());
    }

    #[test]
    fn crc_chaining_is_zlib_crc32() {
        let mut whole = crc32fast::Hasher::new();
        whole.update(b"abcdef");
        let mut first = crc32fast::Hasher::new();
        first.update(b"abc");
        let mut rest = crc32fast::Hasher::new_with_initial(first.finalize());
        rest.update(b"def");
        assert_eq!(rest.finalize(), whole.finalize());
        // zlib's crc32(0, "123456789") check value.
        let mut h = crc32fast::Hasher::new();
        h.update(b"123456789");
        assert_eq!(h.finalize(), 0xCBF4_3926);
    }

    /// Found by the `signature` fuzz target: a signature whose first 24
    /// bytes end on a character boundary but cut one at byte 8 panicked.
    #[test]
    fn a_signature_that_is_not_hexadecimal_is_refused_not_a_panic() {
        let auth = Auth::new().mormot_sessions(true);
        for sig in [
            "\u{fffd}\u{fffd}\u{fffd}000a00000e?s12345678",
            "+0000001+0000002+0000003",
        ] {
            let target = format!("/root/Sample?session_signature={sig}");
            assert_eq!(
                auth.identify(&target, None),
                Err(Denied::Unauthenticated("invalid session signature"))
            );
        }
    }

    #[test]
    fn mormot_hash_is_sha256_of_salt_and_password() {
        assert_eq!(
            mormot_password_hash("synopse"),
            hex(&sha256(b"saltsynopse"))
        );
    }
}
