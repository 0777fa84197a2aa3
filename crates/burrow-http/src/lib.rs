//! Burrow over HTTP: a server that hosts a [`burrow_core::Database`] and speaks
//! the mORMot REST protocol, and [`RemoteEngine`], the client side, which
//! makes a remote server one more storage engine.
//!
//! ```no_run
//! use std::sync::Arc;
//! use burrow_core::{Database, Model, Orm};
//! use burrow_http::{RemoteEngine, Server};
//! # fn engine() -> Arc<dyn burrow_core::Storage> { unimplemented!() }
//! # fn main() -> burrow_core::Result<()> {
//! // The server: a model and its engines, at /root.
//! let hosted = Arc::new(Database::open(Model::new(), engine())?);
//! let server = Server::builder(hosted, "root").no_auth().bind("127.0.0.1:0")?;
//!
//! // A client: the same Orm API, over HTTP.
//! let remote = Database::open(Model::new(), Arc::new(RemoteEngine::connect(&server.url())?))?;
//! # Ok(())
//! # }
//! ```
//!
//! - [`Server`], [`ServerBuilder`], [`Limits`], [`Execution`]: the REST
//!   server (`server.rs`: its handler, where calls run, transactions;
//!   `rest.rs`: the routes; `batch.rs`: batch bodies, read by burrow-core's
//!   streaming [`burrow_core::json::Reader`]; `select.rs`: the SELECT subset
//!   it accepts over `GET /{root}`).
//! - [`web`]: the HTTP/1.1 server core the REST server is a handler of, and
//!   that an application can put its own [`web::Handler`] on (connections,
//!   pipelining, limits, `Date`, TLS, shutdown).
//! - [`Auth`], [`Group`], [`Rights`]: access control (`auth.rs`).
//! - [`RemoteEngine`], [`RemoteBuilder`], [`RemoteError`]: the client
//!   (`remote/`: connections and their pool, retries, logins, URLs, batch
//!   bodies, transactions, the row calls; `remote/mod.rs` lists its files).
//! - The ORM cache ([`burrow_core::OrmCache`]) is the core's: the server
//!   answers retrieves by ID from one ([`ServerBuilder::cache`]), the client
//!   keeps rows in one ([`RemoteBuilder::cache`]).
//!
//! The protocol is documented message by message in `docs/protocol.md`.

#![forbid(unsafe_code)]

mod admin;
mod allowance;
mod auth;
mod batch;
#[doc(hidden)]
pub mod fuzzing;
mod remote;
mod rest;
mod select;
mod server;
mod spin;
mod throttle;
#[cfg(feature = "tls")]
mod tls;
pub mod web;

pub use auth::{
    mormot_password_hash, mormot_private_key, mormot_proof, Auth, Group, Rights, UriSignature,
    METHOD_BOUND_NONCE,
};
pub use remote::{RemoteBuilder, RemoteEngine, RemoteError};
pub use server::{Execution, Server, ServerBuilder, TxLimits};
pub use throttle::LoginLimits;
pub use web::Limits;
