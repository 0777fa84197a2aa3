//! The server's answers, read: a response's status, body and `Location`,
//! the [`Error`] an error status stands for (as the server reported it, a
//! type mismatch or a busy engine kept as such), and the shapes of the
//! bodies the row calls read (an object, a one-cell list).

use std::time::Duration;

use burrow_core::{json, Error, OwnedRow, Result, Table};

use super::ENGINE;

/// An error status a server answered, with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// The HTTP status.
    pub status: u16,
    /// The server's `errorText` (or body).
    pub text: String,
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.text)
    }
}

impl std::error::Error for RemoteError {}

/// A response read by the client.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Vec<u8>,
    pub(super) location: Option<String>,
}

/// What a record's conversions say they expected (`burrow-core`'s
/// `FieldType` impls and JSON readers), for rebuilding a server's
/// [`Error::TypeMismatch`].
const KNOWN_EXPECTATIONS: [&str; 14] = [
    "i64",
    "i32",
    "u32",
    "f64",
    "bool",
    "currency",
    "text",
    "blob",
    "date",
    "date-time",
    "JSON",
    "JSON text",
    "reference ID",
    "a value (the field is not nullable)",
];

impl Reply {
    pub(super) fn text(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| {
                v.get("errorText")
                    .and_then(|t| t.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }

    /// How long the server waited for another transaction, when it answered
    /// that an engine was busy.
    fn waited(&self) -> Option<Duration> {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()?
            .get("waited")?
            .as_u64()
            .map(Duration::from_millis)
    }

    /// A type mismatch the server reported, as it reported it.
    fn mismatch(&self) -> Option<Error> {
        let v = serde_json::from_slice::<serde_json::Value>(&self.body).ok()?;
        let member = |name: &str| v.get(name).and_then(|m| m.as_str());
        let expected = member("expected")?;
        Some(Error::TypeMismatch {
            at: member("at")?.to_owned(),
            // The error holds a static text: one of the expectations a
            // record's conversion states, else a general one.
            expected: KNOWN_EXPECTATIONS
                .iter()
                .find(|k| **k == expected)
                .copied()
                .unwrap_or("a value of the field's type"),
            found: member("found")?.to_owned(),
        })
    }

    /// The error this reply stands for (a status other than 2xx).
    pub(super) fn error(&self, table: Option<&Table>) -> Error {
        if self.status == 400 {
            if let Some(e) = self.mismatch() {
                return e;
            }
        }
        let text = self.text();
        match self.status {
            409 => {
                let v = serde_json::from_slice::<serde_json::Value>(&self.body).ok();
                let member = |name: &str| {
                    v.as_ref()
                        .and_then(|v| v.get(name)?.as_str())
                        .map(str::to_owned)
                };
                Error::UniqueViolation {
                    table: member("table")
                        .or_else(|| table.map(|t| t.name.to_owned()))
                        .unwrap_or_default(),
                    // A server that sends no detail (a mORMot one) has its
                    // whole text kept.
                    detail: member("detail").unwrap_or(text),
                }
            }
            401 | 403 | 429 => Error::Denied {
                status: self.status,
                reason: text,
            },
            503 => match self.waited() {
                Some(waited) => Error::Busy {
                    engine: ENGINE,
                    waited,
                },
                None => Error::engine(
                    ENGINE,
                    RemoteError {
                        status: self.status,
                        text,
                    },
                ),
            },
            400 | 404 | 405 | 411 | 413 => Error::BadInput(format!(
                "the server refused the request ({}): {text}",
                self.status
            )),
            _ => Error::engine(
                ENGINE,
                RemoteError {
                    status: self.status,
                    text,
                },
            ),
        }
    }
}

/// A row the server sent as one object, read as every record is.
pub(super) fn parse_object(table: &'static Table, body: &[u8]) -> Result<OwnedRow> {
    json::read_row(table, body)
        .map(|(row, _)| row)
        .map_err(|e| match e {
            Error::BadInput(m) => {
                Error::engine(ENGINE, format!("the server sent an invalid object: {m}"))
            }
            e => e,
        })
}

/// Whether an update or a delete found its row (200) or not (404).
pub(super) fn found(table: &Table, r: Reply) -> Result<bool> {
    match r.status {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(r.error(Some(table))),
    }
}

/// The first cell of a one-column list, in either form.
pub(super) fn first_cell(body: &[u8]) -> Result<Option<serde_json::Value>> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Error::engine(ENGINE, format!("invalid list: {e}")))?;
    Ok(match v {
        serde_json::Value::Object(mut o) => {
            let n = o.get("fieldCount").and_then(|n| n.as_u64()).unwrap_or(1) as usize;
            match o.remove("values") {
                Some(serde_json::Value::Array(mut vals)) if vals.len() > n => {
                    Some(vals.swap_remove(n))
                }
                _ => None,
            }
        }
        serde_json::Value::Array(mut rows) if !rows.is_empty() => match rows.swap_remove(0) {
            serde_json::Value::Object(o) => o.into_iter().next().map(|(_, v)| v),
            _ => None,
        },
        _ => None,
    })
}
