//! End-to-end tests: a real server on 127.0.0.1:0, the HTTP client and raw
//! sockets. No test depends on sleeps for its correctness; every wait is a
//! bounded loop.

mod common;

mod access;
mod answers;
mod backup;
mod batch;
mod cache;
mod concurrency;
mod login;
mod orm;
mod retry;
mod signatures;
mod stall;
mod tls;
mod tx_limits;
mod wire;
