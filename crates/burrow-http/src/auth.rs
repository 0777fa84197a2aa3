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
//!   `session_signature=` + hex8(session) + hex8(timestamp) + hex8(signature)
//!   where the signature is a hash of the session's private key, the
//!   timestamp and the URI ([`UriSignature`]: SHA-256 by default, announced
//!   to mORMot 2 clients in the login answer; CRC-32 only when asked for).
//!   To check the answer, the server must hold `SHA-256("salt" + password)`
//!   for each user, which is as good as the password *for this scheme*: a
//!   mORMot server holds the same. It is kept only while the scheme is
//!   enabled.
//! - **Replays** of a signed URI are refused once its timestamp is more than
//!   [`TIMESTAMP_SLACK`] ticks behind the session's clock (the client's
//!   clock as last seen, carried forward by the server's); a login answer
//!   opens one session only (a replayed login is refused). Burrow's own
//!   client also binds each signature to the request's method (see
//!   [`METHOD_BOUND_NONCE`]).
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

use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
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
    /// Signatures cover the method too (a Burrow client asked for it).
    bound: bool,
    /// The client's clock minus the server's, in ticks, as far ahead as a
    /// verified signature has shown it; `None` before the first one.
    clock: Option<i64>,
    expires: Instant,
}

struct Token {
    user: usize,
    expires: Option<Instant>,
}

/// Bearer tokens by their SHA-256, and the size at which an issue next
/// drops the expired ones.
#[derive(Default)]
struct Tokens {
    map: HashMap<[u8; 32], Token>,
    prune_at: usize,
}

impl Tokens {
    /// Adds an issued token, first dropping the expired ones once the table
    /// has doubled since they were last dropped: a scan at every login,
    /// under the lock every request's authentication takes, grew with every
    /// token still held (up to an hour of logins). Expired tokens left
    /// meanwhile are refused all the same, and at most double the table.
    fn issue(&mut self, hash: [u8; 32], token: Token, now: Instant) {
        if self.map.len() >= self.prune_at {
            self.map.retain(|_, t| t.expires.is_none_or(|e| e > now));
            self.prune_at = (2 * self.map.len()).max(1024);
        }
        self.map.insert(hash, token);
    }
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
    tokens: Mutex<Tokens>,
    sessions: Mutex<HashMap<u32, Session>>,
    /// The logins already answered (their proof's hash), until their
    /// server nonce expires.
    used_logins: Mutex<UsedLogins>,
    signature: UriSignature,
    mormot: bool,
    bearer: bool,
    session_ttl: Duration,
    secret: [u8; 32],
    throttle: Throttle,
    /// The Argon2 hash an unknown user name is checked against (made on
    /// first use: it costs what a check does).
    decoy: OnceLock<String>,
    /// Argon2's working memory (19 MiB a check), kept between checks: freed
    /// and allocated again, glibc ends up serving it from arenas it never
    /// gives back (a login flood left a server at 300–600 MB). Kept here,
    /// there is one per check ever run at once, at most
    /// [`LoginLimits::max_checks`].
    argon_memory: Mutex<Vec<Vec<Block>>>,
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
            .field("signature", &self.signature)
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

/// Whether `password` matches the Argon2 PHC string `phc`, computed in
/// `memory` (grown to the hash's cost, and kept for the next check).
fn argon2_verify(memory: &mut Vec<Block>, phc: &str, password: &[u8]) -> bool {
    /// 64 MiB: the hashes checked here are made by [`argon2_hash`] (19 MiB).
    const MAX_BLOCKS: usize = 64 * 1024;
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Ok(algorithm), Ok(params), Some(hash), Some(salt)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
        parsed.hash,
        parsed.salt,
    ) else {
        return false;
    };
    let Ok(version) = parsed.version.map(Version::try_from).transpose() else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let blocks = params.block_count();
    if blocks > MAX_BLOCKS {
        return false;
    }
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut out = [0u8; 64];
    let Some(out) = out.get_mut(..hash.len()) else {
        return false;
    };
    Argon2::new(algorithm, version.unwrap_or_default(), params)
        .hash_password_into_with_memory(password, salt, out, &mut memory[..blocks])
        .is_ok()
        && same(out, hash.as_bytes())
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

/// How a mORMot session's URIs are signed: the 32-bit `session_signature`
/// hash of the session's private key, the timestamp and the URI. The server
/// uses one for all sessions ([`Auth::uri_signature`]) and names it in its
/// login answer (`"algo"`), which mORMot 2 clients follow.
///
/// Every form is cut to 32 bits and keyed by a 32-bit private key, so none
/// resists an offline search of 2³² keys from one observed URI: it keeps
/// honest clients apart and stops tampering in flight, not a determined
/// eavesdropper. Over an untrusted network, use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UriSignature {
    /// mORMot's historical form (`suaCRC32`),
    /// `crc32(crc32(key, timestamp), uri)`, the only one mORMot 1 and
    /// SynCrossPlatform clients know. CRC-32 is linear: **one observed
    /// signed URI gives back the private key**, after which any request of
    /// that session can be forged. Enable it only for such clients, on a
    /// network no one else can read.
    Crc32,
    /// `suaSHA256`: SHA-256 of the key (4 bytes, little-endian), the
    /// timestamp and the URI, its eight 32-bit words xor-ed together. No
    /// shortcut to the key is known. The default.
    #[default]
    Sha256,
    /// `suaSHA512`: as [`UriSignature::Sha256`], with SHA-512.
    Sha512,
}

impl UriSignature {
    /// The name in a login answer's `"algo"` (mORMot's: the enumeration's
    /// name without `sua`, in lower case).
    pub fn name(self) -> &'static str {
        match self {
            UriSignature::Crc32 => "crc32",
            UriSignature::Sha256 => "sha256",
            UriSignature::Sha512 => "sha512",
        }
    }

    /// The form called `name` in a login answer.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            UriSignature::Crc32,
            UriSignature::Sha256,
            UriSignature::Sha512,
        ]
        .into_iter()
        .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// The signature of `parts` (concatenated: the URI, or for a session
    /// bound to methods, the method, a space and the URI) at `timestamp`
    /// (its 8 hexadecimal digits, as sent).
    pub fn sign(self, private_key: u32, timestamp: &[u8], parts: &[&[u8]]) -> u32 {
        fn folded<D: Digest>(private_key: u32, timestamp: &[u8], parts: &[&[u8]]) -> u32 {
            let mut h = D::new();
            h.update(private_key.to_le_bytes());
            h.update(timestamp);
            for p in parts {
                h.update(p);
            }
            h.finalize().chunks_exact(4).fold(0, |acc, w| {
                acc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]])
            })
        }
        match self {
            UriSignature::Crc32 => {
                let mut h = crc32fast::Hasher::new_with_initial(private_key);
                h.update(timestamp);
                let mut h = crc32fast::Hasher::new_with_initial(h.finalize());
                for p in parts {
                    h.update(p);
                }
                h.finalize()
            }
            UriSignature::Sha256 => folded::<Sha256>(private_key, timestamp, parts),
            UriSignature::Sha512 => folded::<sha2::Sha512>(private_key, timestamp, parts),
        }
    }
}

/// A client nonce starting with this asks for a session whose signatures
/// also cover the request's method (`METHOD uri`), so that a signed `GET`
/// cannot be replayed as a `DELETE`. The nonce is part of the login proof,
/// so no one can add or strip it; the server confirms with
/// `"binding":"method"` in its answer. Burrow's client asks for it; a
/// mORMot client never sends it.
pub const METHOD_BOUND_NONCE: &str = "method-bound.";

/// How many 256 ms ticks a signature's timestamp may lag behind its
/// session's clock (requests sent in parallel arrive out of order): a
/// captured signed URI can be replayed for at most about 10 s.
pub(crate) const TIMESTAMP_SLACK: i64 = 40;

/// How long a server nonce lasts, in seconds (the previous one is accepted
/// too).
const NONCE_PERIOD: u64 = 300;

/// Sessions one user may hold at once; a login beyond closes the user's
/// least recently used one.
const SESSIONS_PER_USER: usize = 1024;

/// Logins remembered to refuse their replay; a login beyond, with none
/// expired, is refused with 503.
const USED_LOGINS: usize = 1 << 16;

/// The proofs of the logins answered while their server nonce is valid.
#[derive(Default)]
struct UsedLogins {
    seen: std::collections::HashSet<[u8; 32]>,
    order: std::collections::VecDeque<(Instant, [u8; 32])>,
}

impl UsedLogins {
    /// Records `proof`; false if it was already used, or if the table is
    /// full of logins not yet expired.
    fn first_use(&mut self, proof: [u8; 32], now: Instant, valid: Duration) -> Option<bool> {
        while let Some(&(until, p)) = self.order.front() {
            if until > now {
                break;
            }
            self.seen.remove(&p);
            self.order.pop_front();
        }
        if self.seen.contains(&proof) {
            return Some(false);
        }
        if self.seen.len() >= USED_LOGINS {
            return None;
        }
        self.seen.insert(proof);
        self.order.push_back((now + valid, proof));
        Some(true)
    }
}

/// The server's clock in mORMot's ticks (milliseconds ÷ 256).
fn server_ticks() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    (START.get_or_init(Instant::now).elapsed().as_millis() >> 8) as i64
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

impl Auth {
    /// No user yet; mORMot's signed sessions and bearer tokens enabled,
    /// sessions lasting 60 minutes after their last use.
    pub fn new() -> Self {
        let mut secret = [0u8; 32];
        random(&mut secret);
        Auth {
            groups: Vec::new(),
            users: Vec::new(),
            tokens: Mutex::new(Tokens::default()),
            sessions: Mutex::new(HashMap::new()),
            used_logins: Mutex::new(UsedLogins::default()),
            signature: UriSignature::default(),
            mormot: true,
            bearer: true,
            session_ttl: Duration::from_secs(3600),
            secret,
            throttle: Throttle::new(LoginLimits::default()),
            decoy: OnceLock::new(),
            argon_memory: Mutex::new(Vec::new()),
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
            .map
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

    /// How mORMot sessions sign their URIs (default: SHA-256, which mORMot 2
    /// clients follow; [`UriSignature::Crc32`] only for older clients, with
    /// the risk its documentation gives).
    pub fn uri_signature(mut self, signature: UriSignature) -> Self {
        self.signature = signature;
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
        let period =
            burrow_core::chrono::Utc::now().timestamp().max(0) as u64 / NONCE_PERIOD - back;
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
        let now = Instant::now();
        // A proof stays valid as long as its server nonce (two periods):
        // one session per proof, so a replayed login opens nothing.
        match self
            .used_logins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first_use(
                sha256(proof.to_ascii_lowercase().as_bytes()),
                now,
                Duration::from_secs(2 * NONCE_PERIOD),
            ) {
            Some(true) => {}
            Some(false) => return Err(Denied::Unauthenticated("this login was already used")),
            None => return Err(Denied::Busy),
        }
        let mut rnd = [0u8; 16];
        crate::auth::random(&mut rnd);
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, s| s.expires > now);
        let mine = sessions.iter().filter(|(_, s)| s.user == u);
        if mine.clone().count() >= SESSIONS_PER_USER {
            let oldest = mine.min_by_key(|(_, s)| s.expires).map(|(&id, _)| id);
            if let Some(id) = oldest {
                sessions.remove(&id);
            }
        }
        let id = loop {
            let mut b = [0u8; 4];
            random(&mut b);
            let id = u32::from_le_bytes(b) & 0x7fff_ffff;
            if id > 1 && !sessions.contains_key(&id) {
                break id;
            }
        };
        let key = format!("{id}+{}", hex(&rnd));
        let bound = client_nonce.starts_with(METHOD_BOUND_NONCE);
        sessions.insert(
            id,
            Session {
                user: u,
                private_key: mormot_private_key(&key, hash),
                bound,
                clock: None,
                expires: now + self.session_ttl,
            },
        );
        drop(sessions);
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
                ",\"logongroup\":{},\"timeout\":{},\"server\":\"Burrow\",\"version\":\"{}\"",
                user.group + 1,
                (self.session_ttl.as_secs() / 60).max(1),
                env!("CARGO_PKG_VERSION")
            )
            .as_bytes(),
        );
        // mORMot's server names every form but its historical default.
        if self.signature != UriSignature::Crc32 {
            body.extend_from_slice(b",\"algo\":\"");
            body.extend_from_slice(self.signature.name().as_bytes());
            body.push(b'"');
        }
        if bound {
            body.extend_from_slice(b",\"binding\":\"method\"");
        }
        body.push(b'}');
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
            let mut memory = self
                .argon_memory
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()
                .unwrap_or_default();
            let ok = argon2_verify(&mut memory, phc, password.as_bytes());
            self.argon_memory
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(memory);
            ok
        };
        let Some(u) = u.filter(|_| ok) else {
            self.throttle.failed(user, addr);
            return Err(Denied::Unauthenticated("invalid user name or password"));
        };
        self.throttle.succeeded(user, addr);
        let mut rnd = [0u8; 32];
        crate::auth::random(&mut rnd);
        let token = hex(&rnd);
        let now = Instant::now();
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .issue(
                sha256(token.as_bytes()),
                Token {
                    user: u,
                    expires: Some(now + self.session_ttl),
                },
                now,
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
        method: &str,
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
                .map
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
        // Exactly 24 hexadecimal digits: nothing may follow unsigned, and
        // other text could cut a character at the slices below
        // (`from_str_radix` alone would take a `+`).
        if sig.len() != 24 || !sig.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad);
        }
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
        let timestamp = &sig.as_bytes()[8..16];
        let want = if s.bound {
            self.signature
                .sign(s.private_key, timestamp, &[method.as_bytes(), b" ", signed])
        } else {
            self.signature.sign(s.private_key, timestamp, &[signed])
        };
        if want != sign {
            return Err(bad);
        }
        // The session's clock is the client's, as far ahead as a signature
        // has shown it, moving on with the server's: a timestamp far behind
        // it is an old request sent again.
        let ahead = i64::from(ts) - server_ticks();
        if s.clock.is_some_and(|clock| ahead < clock - TIMESTAMP_SLACK) {
            return Err(Denied::Unauthenticated("replayed session signature"));
        }
        s.clock = Some(s.clock.map_or(ahead, |clock| clock.max(ahead)));
        s.expires = now + self.session_ttl;
        Ok(Principal::User(s.user))
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use argon2::password_hash::PasswordVerifier;

    /// Expired tokens are dropped once the table has doubled, not at every
    /// issue: the table stays within twice the live tokens (and 1,024), and
    /// an issue scans it only that often.
    #[test]
    fn expired_tokens_are_dropped_as_the_table_doubles() {
        let now = Instant::now();
        let mut tokens = Tokens::default();
        let token = |expires| Token { user: 0, expires };
        let mut scans = 0;
        for i in 0..10_000u32 {
            let before = tokens.map.len();
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&i.to_le_bytes());
            // Every other token has expired already.
            let expires = if i % 2 == 0 {
                now
            } else {
                now + Duration::from_secs(60)
            };
            tokens.issue(hash, token(Some(expires)), now);
            // A scan drops expired tokens: the table does not grow.
            scans += usize::from(tokens.map.len() <= before);
            let live = tokens
                .map
                .values()
                .filter(|t| t.expires > Some(now))
                .count();
            assert!(tokens.map.len() <= (2 * live).max(1024) + 1, "{i}");
        }
        assert!(scans < 20, "{scans} scans for 10,000 issues");
        let live = tokens
            .map
            .values()
            .filter(|t| t.expires > Some(now))
            .count();
        assert_eq!(live, 5_000);
    }

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

    /// Checks run in memory kept between them: one working area for
    /// checks run one at a time, the same answers as the argon2 crate's own.
    #[test]
    fn password_checks_reuse_their_memory() {
        let auth = Auth::new()
            .group(Group::new("g").all_tables(Rights::ALL))
            .user("ann", "secret", "g")
            .expect("auth");
        for _ in 0..3 {
            assert!(auth.bearer_login("ann", "secret", None).is_ok());
        }
        assert!(auth.bearer_login("ann", "wrong", None).is_err());
        let kept = auth.argon_memory.lock().expect("lock");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].len(), Params::default().block_count());
        drop(kept);
        let phc = &auth.users[0].phc;
        let parsed = PasswordHash::new(phc).expect("a PHC string");
        for pw in ["secret", "wrong", ""] {
            assert_eq!(
                argon2_verify(&mut Vec::new(), phc, pw.as_bytes()),
                Argon2::default()
                    .verify_password(pw.as_bytes(), &parsed)
                    .is_ok(),
                "{pw}"
            );
        }
        assert!(!argon2_verify(
            &mut Vec::new(),
            "$argon2id$v=19$m=1000000,t=2,p=1$c2FsdHNhbHQ$aGFzaA",
            b"x"
        ));
        assert!(!argon2_verify(&mut Vec::new(), "not a hash", b"x"));
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
                auth.identify("GET", &target, None),
                Err(Denied::Unauthenticated("invalid session signature"))
            );
        }
    }

    /// mORMot 2's `ComputeSignatureAlgo`: the key's 4 bytes, the timestamp's
    /// 8 digits and the URI hashed, the digest's 32-bit words xor-ed
    /// (values from an independent implementation, Python's hashlib/zlib).
    #[test]
    fn signatures_match_mormots_formulas() {
        let sign = |a: UriSignature| a.sign(0x1234_5678, b"0000abcd", &[b"root/Sample/1"]);
        assert_eq!(sign(UriSignature::Sha256), 0x5e6e_adf5);
        assert_eq!(sign(UriSignature::Sha512), 0x54c8_bd7c);
        assert_eq!(sign(UriSignature::Crc32), 0x200c_2f54);
        // Parts are hashed as one text.
        assert_eq!(
            UriSignature::Sha256.sign(0x1234_5678, b"0000abcd", &[b"root/", b"Sample/1"]),
            0x5e6e_adf5
        );
        for a in [
            UriSignature::Crc32,
            UriSignature::Sha256,
            UriSignature::Sha512,
        ] {
            assert_eq!(UriSignature::from_name(a.name()), Some(a));
        }
        assert_eq!(
            UriSignature::from_name("SHA256"),
            Some(UriSignature::Sha256)
        );
        assert_eq!(UriSignature::from_name("md5"), None);
    }

    /// Access control with one user, ann ("secret"), as a server seals it.
    fn sealed_ann() -> Auth {
        let mut auth = Auth::new()
            .group(Group::new("g").all_tables(Rights::ALL))
            .user("ann", "secret", "g")
            .expect("auth");
        auth.seal();
        auth
    }

    /// A signed URI captured and sent again once the session's clock has
    /// moved on by more than the slack is refused, however idle the client.
    #[test]
    fn a_captured_signature_expires_with_time() {
        let auth = sealed_ann();
        let hash = mormot_password_hash("secret");
        let proof = mormot_proof("root", &auth.nonce(0), "cn", "ann", &hash);
        let body = auth
            .mormot_login("root", "ann", &proof, "cn", None)
            .expect("a login");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let session = v["result"].as_str().expect("a key");
        let id: u32 = session
            .split('+')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("an id");
        let key = mormot_private_key(session, &hash);
        let sign = UriSignature::Sha256.sign(key, b"00001000", &[b"root/Sample/1"]);
        let target = format!("/root/Sample/1?session_signature={id:08x}00001000{sign:08x}");
        assert_eq!(auth.identify("GET", &target, None), Ok(Principal::User(0)));
        assert_eq!(auth.identify("GET", &target, None), Ok(Principal::User(0)));
        // The server's clock runs on by the slack and one tick.
        if let Some(s) = auth.sessions.lock().expect("lock").get_mut(&id) {
            s.clock = s.clock.map(|c| c + TIMESTAMP_SLACK + 1);
        }
        assert_eq!(
            auth.identify("GET", &target, None),
            Err(Denied::Unauthenticated("replayed session signature"))
        );
    }

    #[test]
    fn a_user_holds_a_bounded_number_of_sessions() {
        let auth = sealed_ann();
        let hash = mormot_password_hash("secret");
        for i in 0..SESSIONS_PER_USER + 10 {
            let cnonce = format!("cn{i}");
            let proof = mormot_proof("root", &auth.nonce(0), &cnonce, "ann", &hash);
            auth.mormot_login("root", "ann", &proof, &cnonce, None)
                .expect("a login");
        }
        assert_eq!(auth.sessions.lock().expect("lock").len(), SESSIONS_PER_USER);
    }

    #[test]
    fn mormot_hash_is_sha256_of_salt_and_password() {
        assert_eq!(
            mormot_password_hash("synopse"),
            hex(&sha256(b"saltsynopse"))
        );
    }
}
