//! Batches over the wire: one `PUT /{root}/Batch` request, its body encoded
//! in mORMot's batch form (runs of adds as `SIMPLE@Table` arrays), streamed
//! while it is encoded when the server runs it in its own transaction, and
//! its results read back; the cache copies the rows while the server works.

use burrow_core::json::{self, JsonDialect};
use burrow_core::{BatchItem, BatchOp, BatchResult, Error, OwnedRow, Result, Table};

use super::conn::Body;
use super::reply::Reply;
use super::{Link, ENGINE};

/// A batch body larger than this, of a batch the server runs in its own
/// transaction, is sent in pieces of about this size, each as soon as it is
/// encoded: the server receives one while the next is made, and the client's
/// memory stays this small, already touched, where a body of megabytes would
/// fault in page after page.
const PIECE: usize = 64 * 1024;

impl Link<'_> {
    /// Sends `items` as one batch request (`own_transaction`: see
    /// [`Link::write_batch`]), reads the results into `results`, and keeps
    /// the cache right, its copies of the rows made while the server works.
    pub(super) fn batch(
        &self,
        items: &[BatchItem<'_>],
        results: &mut Vec<BatchResult>,
        stop_on_error: bool,
        own_transaction: Option<bool>,
    ) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let apply = |results: &mut Vec<BatchResult>, waiting: &mut dyn FnMut()| {
            let r = self.send_batch(items, stop_on_error, own_transaction, waiting)?;
            self.batch_results(items, &r, results)
        };
        self.scope()
            .apply_batch(items, results, own_transaction.is_some(), apply)
    }

    /// Sends a batch request for `items` (see [`Link::write_batch`]), and
    /// runs `waiting` once it is sent, while the server works.
    fn send_batch(
        &self,
        items: &[BatchItem<'_>],
        stop_on_error: bool,
        own_transaction: Option<bool>,
        waiting: &mut dyn FnMut(),
    ) -> Result<Reply> {
        let write =
            |out: &mut Vec<u8>,
             piece: &mut dyn FnMut(&mut Vec<u8>, bool) -> std::io::Result<()>| {
                self.write_batch(items, stop_on_error, own_transaction, out, piece)
            };
        // The server parses a large batch and applies it at once (see
        // `crate::batch::parse_and_run`, and `parse_and_run_in_tx` inside a
        // transaction of the client's), so a body sent while it is encoded
        // (measured first, then encoded again piece by piece) never needs
        // its whole encoding in memory: in the benchmark, Batch went from
        // about 0.47 to 0.50-0.55 of in-process.
        let mut whole = Vec::with_capacity(PIECE + PIECE / 8);
        // First the length: a body that fits in one piece is kept whole;
        // past that, it is only measured, then made again while it is sent.
        let mut len = 0;
        let mut streamed = false;
        let _ = write(&mut whole, &mut |out, last| {
            if last && !streamed {
                return Ok(());
            }
            streamed = true;
            len += out.len();
            out.clear();
            Ok(())
        });
        let pieces = |sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>| {
            let mut out = Vec::with_capacity(PIECE + PIECE / 8);
            write(&mut out, &mut |out, _| {
                sink(out)?;
                out.clear();
                Ok(())
            })
        };
        let body = if streamed {
            Body::Streamed(len, &pieces)
        } else {
            Body::Bytes(&whole)
        };
        self.call_with("PUT", "Batch", body, waiting, None)
    }

    /// Writes the body of a batch request for `items` into `body`, handing
    /// it to `piece` whenever it holds [`PIECE`] bytes or more, and at the
    /// end (`true`); `piece` empties it. With `own_transaction`
    /// (`Some(rollback_on_error)`) the server runs the batch in one
    /// transaction. The same items always make the same bytes.
    fn write_batch(
        &self,
        items: &[BatchItem<'_>],
        stop_on_error: bool,
        own_transaction: Option<bool>,
        body: &mut Vec<u8>,
        piece: &mut dyn FnMut(&mut Vec<u8>, bool) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        body.extend_from_slice(b"[\"stopOnError\",");
        body.extend_from_slice(if stop_on_error { b"true" } else { b"false" });
        if let Some(rollback_on_error) = own_transaction {
            body.extend_from_slice(b",\"automaticTransactionPerRow\",");
            body.extend_from_slice(itoa::Buffer::new().format(items.len()).as_bytes());
            if rollback_on_error {
                body.extend_from_slice(b",\"rollbackOnError\",true");
            }
        }
        let mut simple = json::SimpleWriter::new();
        // `,"SIMPLE@Table",` as last written: runs of adds repeat it.
        let mut simple_verb: (Option<&Table>, Vec<u8>) = (None, Vec::new());
        for item in items {
            body.push(b',');
            let verb = |body: &mut Vec<u8>, verb: &[u8]| {
                body.push(b'"');
                body.extend_from_slice(verb);
                body.push(b'@');
                body.extend_from_slice(item.table.name.as_bytes());
                body.extend_from_slice(b"\",");
            };
            match item.op {
                BatchOp::Add { id: None, row } => {
                    if !simple_verb.0.is_some_and(|t| std::ptr::eq(t, item.table)) {
                        simple_verb.1.clear();
                        verb(&mut simple_verb.1, b"SIMPLE");
                        simple_verb.0 = Some(item.table);
                    }
                    body.extend_from_slice(&simple_verb.1);
                    simple.write(body, row, JsonDialect::Exact);
                }
                BatchOp::Add { id: Some(id), row } => {
                    verb(body, b"POST");
                    let mut r = OwnedRow::from_fields(row);
                    r.id = id;
                    json::write_fields(body, &r, None, true, JsonDialect::Exact);
                }
                BatchOp::Update { row, fields } => {
                    verb(body, b"PUT");
                    json::write_fields(body, row, fields, true, JsonDialect::Exact);
                }
                BatchOp::Delete { id } => {
                    verb(body, b"DELETE");
                    body.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
                }
            }
            if body.len() >= PIECE {
                piece(body, false)?;
            }
        }
        body.push(b']');
        piece(body, true)
    }

    /// Reads the answer to a batch request for `items` into `results`.
    fn batch_results(
        &self,
        items: &[BatchItem<'_>],
        r: &Reply,
        results: &mut Vec<BatchResult>,
    ) -> Result<()> {
        if r.status != 200 {
            let err = r.error(Some(items[0].table));
            let index = serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v.get("index").and_then(|i| i.as_u64()));
            return Err(match index {
                Some(index) => Error::Batch {
                    index: index as usize,
                    source: Box::new(err),
                },
                None => err,
            });
        }
        // The common answer is all numbers: read it without a JSON tree.
        if let Some(nums) = integers(&r.body, items.len()) {
            if nums.len() != items.len() {
                return Err(mismatch());
            }
            results.reserve(items.len());
            for (item, n) in items.iter().zip(nums) {
                results.push(match item.op {
                    BatchOp::Add { .. } => BatchResult::Added(n),
                    _ if n == 404 => BatchResult::Missing,
                    _ => BatchResult::Done,
                });
            }
        } else {
            let arr: Vec<serde_json::Value> = serde_json::from_slice(&r.body)
                .map_err(|e| Error::engine(ENGINE, format!("invalid batch results: {e}")))?;
            if arr.len() != items.len() {
                return Err(mismatch());
            }
            for (item, v) in items.iter().zip(arr) {
                results.push(match (&item.op, v) {
                    (_, serde_json::Value::Object(o)) => {
                        let status =
                            o.get("errorCode").and_then(|c| c.as_u64()).unwrap_or(500) as u16;
                        let text = o
                            .get("errorText")
                            .and_then(|t| t.as_str())
                            .unwrap_or("")
                            .to_owned();
                        let reply = Reply {
                            status,
                            body: serde_json::json!({ "errorText": text })
                                .to_string()
                                .into_bytes(),
                            location: None,
                        };
                        BatchResult::Failed(Box::new(reply.error(Some(item.table))))
                    }
                    (BatchOp::Add { .. }, v) => BatchResult::Added(
                        v.as_i64()
                            .ok_or_else(|| Error::engine(ENGINE, "a batch add without its ID"))?,
                    ),
                    (_, v) if v.as_u64() == Some(404) => BatchResult::Missing,
                    _ => BatchResult::Done,
                });
            }
        }
        Ok(())
    }
}

/// A compact array of integers (`[1,2,200]`, as Burrow and mORMot servers
/// write batch results), `None` for anything else.
fn integers(body: &[u8], hint: usize) -> Option<Vec<i64>> {
    let inner = body.trim_ascii().strip_prefix(b"[")?.strip_suffix(b"]")?;
    let mut out = Vec::with_capacity(hint);
    if inner.is_empty() {
        return Some(out);
    }
    let mut i = 0;
    loop {
        let neg = inner.get(i) == Some(&b'-');
        i += usize::from(neg);
        let start = i;
        let mut v: i64 = 0;
        while let Some(d) = inner
            .get(i)
            .map(|c| c.wrapping_sub(b'0'))
            .filter(|d| *d < 10)
        {
            // At most 18 digits: always within an i64.
            if i - start == 18 {
                return None;
            }
            v = v * 10 + i64::from(d);
            i += 1;
        }
        if i == start {
            return None;
        }
        out.push(if neg { -v } else { v });
        match inner.get(i) {
            None => return Some(out),
            Some(b',') => i += 1,
            Some(_) => return None,
        }
    }
}

fn mismatch() -> Error {
    Error::engine(ENGINE, "the batch results do not match its items")
}

#[cfg(test)]
mod test {
    use super::integers;

    #[test]
    fn batch_results_as_integers() {
        assert_eq!(integers(b"[]", 0), Some(vec![]));
        assert_eq!(
            integers(b" [1,200,-3,404,999999999999999999]\n", 5),
            Some(vec![1, 200, -3, 404, 999_999_999_999_999_999])
        );
        for other in [
            &b"[1,]"[..],
            b"[,1]",
            b"[1 ,2]",
            b"[1.5]",
            b"[-]",
            b"[1000000000000000000]",
            b"[\"OK\"]",
            b"[{\"errorCode\":409}]",
            b"1,2",
        ] {
            assert_eq!(
                integers(other, 1),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
