//! The files: a compact binary form (zstd-compressed) and a JSON form, both
//! checksummed, written to a temporary file, synced and renamed over the old one.
//! The binary layout is specified in `docs/memory-format.md`.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use burrow_core::datetime::{format_date, format_datetime};
use burrow_core::{Error, FieldKind, Result, Value, ValueRef};

use crate::arena::Arena;
use crate::layout::{Layout, SlotSpec};
use crate::table::{next_after, Stored, TableData};
use crate::ENGINE;

/// The first bytes of a binary file.
pub const MAGIC: [u8; 8] = *b"\x89BMEM\r\n\x1a";
/// The binary format version this build writes and the newest it reads.
pub const VERSION: u16 = 1;
/// The length of the binary header.
pub const HEADER_LEN: usize = 36;
/// The JSON format's name, in its `format` member.
const JSON_FORMAT: &str = "burrow-memory";
const JSON_CRC: &[u8] = b",\"crc32\":\"";

/// The `next_id` of a table that has no ID left to give (`i64::MAX` was given).
const NO_ID_LEFT: i64 = i64::MIN;

/// The next ID of a table read from a file: the stored one, and above its last row.
fn read_next_id(stored: i64, last: Option<&Stored>) -> Option<i64> {
    if stored == NO_ID_LEFT {
        return None;
    }
    next_after(Some(stored.max(1)), last.map_or(0, |r| r.id))
}

const COMPRESSION_NONE: u8 = 0;
const COMPRESSION_ZSTD: u8 = 1;

/// A persistence file that cannot be loaded, and why. Nothing of it was loaded.
#[derive(Debug)]
pub struct FileError {
    path: PathBuf,
    reason: String,
}

impl FileError {
    fn new(path: &Path, reason: impl Into<String>) -> Self {
        FileError {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is wrong with it.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory engine file {} refused, nothing loaded: {}",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for FileError {}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::engine(ENGINE, FileError::new(path, reason))
}

/// A table read from a file, waiting for `ensure_table` to claim it (its rows
/// are in the file's layout, already validated).
#[derive(Clone)]
pub struct FileTable {
    pub name: String,
    /// `None` when no ID is left to give.
    pub next_id: Option<i64>,
    pub layout: Layout,
    /// Unique and indexed flags, per field.
    pub flags: Vec<(bool, bool)>,
    /// In ascending ID order (once [`FileTable::sort`] ran, for one taken
    /// from a live table).
    pub rows: Vec<Stored>,
}

impl FileTable {
    /// Puts the rows in ascending ID order, if they are not.
    pub fn sort(&mut self) {
        if !self.rows.is_sorted_by_key(|r| r.id) {
            self.rows.sort_unstable_by_key(|r| r.id);
        }
    }
}

/// A table as the writers see it.
pub trait Source {
    fn name(&self) -> &str;
    /// `None` when no ID is left to give.
    fn next_id(&self) -> Option<i64>;
    fn layout(&self) -> &Layout;
    fn flags(&self, i: usize) -> (bool, bool);
    fn row_count(&self) -> usize;
    /// Calls `f` with every row in ascending ID order.
    fn rows(&self, f: &mut dyn FnMut(i64, &[u8]));
}

impl Source for FileTable {
    fn name(&self) -> &str {
        &self.name
    }
    fn next_id(&self) -> Option<i64> {
        self.next_id
    }
    fn layout(&self) -> &Layout {
        &self.layout
    }
    fn flags(&self, i: usize) -> (bool, bool) {
        self.flags[i]
    }
    fn row_count(&self) -> usize {
        self.rows.len()
    }
    fn rows(&self, f: &mut dyn FnMut(i64, &[u8])) {
        for r in &self.rows {
            f(r.id, &r.data);
        }
    }
}

impl Source for TableData {
    fn name(&self) -> &str {
        TableData::name(self)
    }
    fn next_id(&self) -> Option<i64> {
        self.meta.next_id
    }
    fn layout(&self) -> &Layout {
        &self.layout
    }
    fn flags(&self, i: usize) -> (bool, bool) {
        self.flags[i]
    }
    fn row_count(&self) -> usize {
        self.live
    }
    fn rows(&self, f: &mut dyn FnMut(i64, &[u8])) {
        if self.ordered() {
            for r in self.rows.iter().flatten() {
                f(r.id, &r.data);
            }
        } else {
            let mut v: Vec<&Stored> = self.rows.iter().flatten().collect();
            v.sort_unstable_by_key(|r| r.id);
            for r in v {
                f(r.id, &r.data);
            }
        }
    }
}

/// How a table's fields are named in files.
fn kind_code(kind: FieldKind) -> u8 {
    match kind {
        FieldKind::I32 => 1,
        FieldKind::I64 => 2,
        FieldKind::U32 => 3,
        FieldKind::F64 => 4,
        FieldKind::Bool => 5,
        FieldKind::Currency => 6,
        FieldKind::Text => 7,
        FieldKind::Blob => 8,
        FieldKind::Date => 9,
        FieldKind::DateTime => 10,
        FieldKind::Json => 11,
        _ => 12,
    }
}

fn kind_of_code(code: u8) -> Option<FieldKind> {
    Some(match code {
        1 => FieldKind::I32,
        2 => FieldKind::I64,
        3 => FieldKind::U32,
        4 => FieldKind::F64,
        5 => FieldKind::Bool,
        6 => FieldKind::Currency,
        7 => FieldKind::Text,
        8 => FieldKind::Blob,
        9 => FieldKind::Date,
        10 => FieldKind::DateTime,
        11 => FieldKind::Json,
        12 => FieldKind::Reference(""),
        _ => return None,
    })
}

fn kind_of_name(name: &str) -> Option<FieldKind> {
    (1..=12).filter_map(kind_of_code).find(|k| k.name() == name)
}

fn target(layout: &Layout, i: usize) -> String {
    let s = &layout.slots[i];
    match (s.kind, &s.target) {
        (_, Some(t)) => t.clone(),
        (FieldKind::Reference(t), None) => t.to_owned(),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------- binary

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The uncompressed payload of a binary file.
pub fn binary_payload(tables: &[&dyn Source]) -> Vec<u8> {
    let size: usize = tables
        .iter()
        .map(|t| t.row_count() * (t.layout().var_base + 24) + 256)
        .sum();
    let mut out = Vec::with_capacity(size);
    put_varint(&mut out, tables.len() as u64);
    for t in tables {
        let layout = t.layout();
        put_str(&mut out, t.name());
        out.extend_from_slice(&t.next_id().unwrap_or(NO_ID_LEFT).to_le_bytes());
        put_varint(&mut out, layout.len() as u64);
        for (i, s) in layout.slots.iter().enumerate() {
            put_str(&mut out, &s.name);
            let code = kind_code(s.kind);
            out.push(code);
            if code == 12 {
                put_str(&mut out, &target(layout, i));
            }
            let (unique, indexed) = t.flags(i);
            out.push(u8::from(s.nullable) | u8::from(unique) << 1 | u8::from(indexed) << 2);
        }
        put_varint(&mut out, t.row_count() as u64);
        let mut prev = 0i64;
        t.rows(&mut |id, data| {
            let delta = id.wrapping_sub(prev);
            put_varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
            prev = id;
            put_varint(&mut out, data.len() as u64);
            out.extend_from_slice(data);
        });
    }
    out
}

/// A whole binary file: header and (compressed) payload.
pub fn binary_file(payload: &[u8], zstd_level: Option<i32>) -> Result<(Vec<u8>, Vec<u8>)> {
    let (code, stored) = match zstd_level {
        Some(level) => (
            COMPRESSION_ZSTD,
            zstd::bulk::compress(payload, level)
                .map_err(|e| Error::engine(ENGINE, format!("zstd compression failed: {e}")))?,
        ),
        None => (COMPRESSION_NONE, payload.to_vec()),
    };
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.push(code);
    h.push(0);
    h.extend_from_slice(&(stored.len() as u64).to_le_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h);
    crc.update(&stored);
    h.extend_from_slice(&crc.finalize().to_le_bytes());
    debug_assert_eq!(h.len(), HEADER_LEN);
    Ok((h, stored))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.b.len() - self.pos < n {
            return Err(format!("payload ends early at byte {}", self.b.len()));
        }
        self.pos += n;
        Ok(&self.b[self.pos - n..self.pos])
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("bad varint before byte {}", self.pos))
    }

    fn len(&mut self) -> std::result::Result<usize, String> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= self.b.len() - self.pos)
            .ok_or_else(|| format!("length {v} past the end of the payload"))
    }

    fn count(&mut self) -> std::result::Result<usize, String> {
        // Every counted item takes at least one byte.
        self.len()
    }

    fn i64(&mut self) -> std::result::Result<i64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(a))
    }

    fn str(&mut self) -> std::result::Result<&'a str, String> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| "a name is not UTF-8".to_owned())
    }
}

fn read_binary(path: &Path, file: &[u8]) -> Result<Vec<FileTable>> {
    let bad = |r: String| refuse(path, r);
    if file.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
            file.len()
        )));
    }
    let (h, stored) = file.split_at(HEADER_LEN);
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version == 0 || version > VERSION {
        return Err(bad(format!(
            "format version {version}, this build reads versions 1 to {VERSION}"
        )));
    }
    let u64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&h[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let (stored_len, raw_len) = (u64_at(12), u64_at(20));
    if stored.len() as u64 != stored_len {
        return Err(bad(format!(
            "truncated or extended: the header announces {stored_len} payload bytes, the file holds {}",
            stored.len()
        )));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[..32]);
    crc.update(stored);
    let want = u32::from_le_bytes([h[32], h[33], h[34], h[35]]);
    if crc.finalize() != want {
        return Err(bad("checksum mismatch: the file is corrupted".into()));
    }
    let raw_len = usize::try_from(raw_len).map_err(|_| bad("payload too large".into()))?;
    let payload = match h[10] {
        COMPRESSION_NONE => std::borrow::Cow::Borrowed(stored),
        COMPRESSION_ZSTD => {
            // The announced size is no allocation to trust: a crafted header
            // (its checksum recomputed) could ask for any amount, and the
            // process would abort. The buffer grows with what the frame
            // really holds, up to one byte past the announced size.
            let mut out = Vec::with_capacity(raw_len.min(stored.len().saturating_mul(8)));
            zstd::stream::read::Decoder::with_buffer(stored)
                .and_then(|d| {
                    d.take((raw_len as u64).saturating_add(1))
                        .read_to_end(&mut out)
                })
                .map_err(|e| bad(format!("zstd decompression failed: {e}")))?;
            std::borrow::Cow::Owned(out)
        }
        c => return Err(bad(format!("unknown compression code {c}"))),
    };
    if payload.len() != raw_len {
        return Err(bad(format!(
            "payload of {} bytes, the header announces {raw_len}",
            payload.len()
        )));
    }
    parse_payload(&payload).map_err(bad)
}

fn parse_payload(payload: &[u8]) -> std::result::Result<Vec<FileTable>, String> {
    let mut r = Reader { b: payload, pos: 0 };
    let ntables = r.count()?;
    let mut tables: Vec<FileTable> = Vec::with_capacity(ntables);
    for _ in 0..ntables {
        let name = r.str()?.to_owned();
        if tables.iter().any(|t| t.name.eq_ignore_ascii_case(&name)) {
            return Err(format!("table {name} appears twice"));
        }
        let next_id = r.i64()?;
        let nfields = r.count()?;
        let mut specs = Vec::with_capacity(nfields);
        let mut flags = Vec::with_capacity(nfields);
        for _ in 0..nfields {
            let fname = r.str()?.to_owned();
            let code = r.u8()?;
            let kind = kind_of_code(code)
                .ok_or_else(|| format!("table {name}, field {fname}: unknown kind code {code}"))?;
            let target = if code == 12 {
                Some(r.str()?.to_owned())
            } else {
                None
            };
            let f = r.u8()?;
            if f > 7 {
                return Err(format!("table {name}, field {fname}: unknown flags {f:#x}"));
            }
            specs.push(SlotSpec {
                name: fname,
                kind,
                target,
                nullable: f & 1 != 0,
            });
            flags.push((f & 2 != 0, f & 4 != 0));
        }
        let layout = Layout::new(&name, specs).map_err(|e| e.to_string())?;
        let nrows = r.count()?;
        let mut rows = Vec::with_capacity(nrows);
        let mut arena = Arena::default();
        let mut prev = 0i64;
        for n in 0..nrows {
            let z = r.varint()?;
            let id = prev.wrapping_add((z >> 1) as i64 ^ -((z & 1) as i64));
            if n > 0 && id <= prev {
                return Err(format!("table {name}: IDs out of order at ID {id}"));
            }
            prev = id;
            let len = r.len()?;
            let data = r.take(len)?;
            layout
                .validate(data)
                .map_err(|e| format!("table {name}, ID {id}: {e}"))?;
            rows.push(Stored {
                id,
                data: arena.alloc(data).map_err(|e| e.to_string())?,
            });
        }
        let next_id = read_next_id(next_id, rows.last());
        tables.push(FileTable {
            name,
            next_id,
            layout,
            flags,
            rows,
        });
    }
    if r.pos != payload.len() {
        return Err(format!(
            "{} unexpected bytes after the last table",
            payload.len() - r.pos
        ));
    }
    Ok(tables)
}

// ---------------------------------------------------------------- JSON

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn json_value(out: &mut Vec<u8>, v: &ValueRef<'_>) {
    match v {
        ValueRef::Null => out.extend_from_slice(b"null"),
        ValueRef::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        ValueRef::Real(f) if f.is_finite() => {
            let _ = serde_json::to_writer(&mut *out, f);
        }
        ValueRef::Real(f) => json_str(out, if *f > 0.0 { "inf" } else { "-inf" }),
        ValueRef::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        ValueRef::Currency(c) => json_str(out, &c.to_string()),
        ValueRef::Date(d) => json_str(out, &format_date(*d)),
        ValueRef::DateTime(t) => json_str(out, &format_datetime(*t)),
        ValueRef::Text(t) => json_str(out, t),
        ValueRef::Blob(b) => {
            let mut s = String::with_capacity(b.len() * 2);
            for x in b.iter() {
                s.push_str(&format!("{x:02x}"));
            }
            json_str(out, &s);
        }
    }
}

/// A whole JSON file: one document, rows one per line, a CRC-32 of everything
/// before its `"crc32"` member at the end.
pub fn json_file(tables: &[&dyn Source]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"format\":\"");
    out.extend_from_slice(JSON_FORMAT.as_bytes());
    out.extend_from_slice(format!("\",\"version\":{VERSION},\"tables\":[").as_bytes());
    for (n, t) in tables.iter().enumerate() {
        let layout = t.layout();
        out.extend_from_slice(if n == 0 {
            b"\n{\"name\":"
        } else {
            b",\n{\"name\":"
        });
        json_str(&mut out, t.name());
        out.extend_from_slice(
            format!(
                ",\"next_id\":{},\"fields\":[",
                t.next_id().unwrap_or(NO_ID_LEFT)
            )
            .as_bytes(),
        );
        for (i, s) in layout.slots.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            json_str(&mut out, &s.name);
            out.extend_from_slice(b",\"kind\":");
            json_str(&mut out, s.kind.name());
            if matches!(s.kind, FieldKind::Reference(_)) {
                out.extend_from_slice(b",\"table\":");
                json_str(&mut out, &target(layout, i));
            }
            let (unique, indexed) = t.flags(i);
            out.extend_from_slice(
                format!(
                    ",\"nullable\":{},\"unique\":{unique},\"indexed\":{indexed}}}",
                    s.nullable
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"],\"rows\":[");
        let mut first = true;
        let mut err = None;
        t.rows(&mut |id, data| {
            out.extend_from_slice(if first { b"\n[" } else { b",\n[" });
            first = false;
            out.extend_from_slice(id.to_string().as_bytes());
            for i in 0..layout.len() {
                out.push(b',');
                match layout.get(data, i) {
                    Ok(v) => json_value(&mut out, &v),
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
            out.push(b']');
        });
        if let Some(e) = err {
            return Err(e);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]");
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(JSON_CRC);
    out.extend_from_slice(format!("{crc:08x}\"}}\n").as_bytes());
    Ok(out)
}

#[derive(serde::Deserialize)]
struct JsonDoc {
    format: String,
    version: u16,
    tables: Vec<JsonTable>,
}

#[derive(serde::Deserialize)]
struct JsonTable {
    name: String,
    next_id: i64,
    fields: Vec<JsonField>,
    rows: Vec<Vec<serde_json::Value>>,
}

#[derive(serde::Deserialize)]
struct JsonField {
    name: String,
    kind: String,
    #[serde(default)]
    table: Option<String>,
    nullable: bool,
    unique: bool,
    indexed: bool,
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn json_cell(kind: FieldKind, v: &serde_json::Value) -> std::result::Result<Value, String> {
    use serde_json::Value as J;
    Ok(match (kind, v) {
        (_, J::Null) => Value::Null,
        (FieldKind::F64, J::Number(n)) => Value::Real(n.as_f64().ok_or("bad number")?),
        (FieldKind::F64, J::String(s)) if s == "inf" => Value::Real(f64::INFINITY),
        (FieldKind::F64, J::String(s)) if s == "-inf" => Value::Real(f64::NEG_INFINITY),
        // Written as strings; a number typed in by hand is read exactly too.
        (FieldKind::Currency, J::Number(n)) => Value::Currency(
            n.to_string()
                .parse()
                .map_err(|_| format!("{n} is not an amount with at most 4 decimals"))?,
        ),
        (_, J::Number(n)) => {
            Value::Int(n.as_i64().ok_or_else(|| format!("{n} is not an integer"))?)
        }
        (_, J::Bool(b)) => Value::Bool(*b),
        (FieldKind::Blob, J::String(s)) => Value::Blob(hex(s).ok_or("bad hex blob")?),
        (_, J::String(s)) => Value::Text(s.clone()),
        (_, other) => return Err(format!("unexpected JSON {other}")),
    })
}

fn read_json(path: &Path, file: &[u8]) -> Result<Vec<FileTable>> {
    let bad = |r: String| refuse(path, r);
    let end = file.trim_ascii_end();
    let at = end
        .windows(JSON_CRC.len())
        .rposition(|w| w == JSON_CRC)
        .ok_or_else(|| bad("truncated: no checksum at the end of the JSON".into()))?;
    let tail = &end[at + JSON_CRC.len()..];
    let want = tail
        .strip_suffix(b"\"}")
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad("truncated: the JSON does not end with its checksum".into()))?;
    if crc32fast::hash(&end[..at]) != want {
        return Err(bad("checksum mismatch: the file is corrupted".into()));
    }
    let doc: JsonDoc =
        serde_json::from_slice(file).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    if doc.format != JSON_FORMAT {
        return Err(bad(format!("format {:?}, not {JSON_FORMAT:?}", doc.format)));
    }
    if doc.version == 0 || doc.version > VERSION {
        return Err(bad(format!(
            "format version {}, this build reads versions 1 to {VERSION}",
            doc.version
        )));
    }
    let mut tables: Vec<FileTable> = Vec::with_capacity(doc.tables.len());
    let mut buf = Vec::new();
    for jt in doc.tables {
        let name = jt.name;
        if tables.iter().any(|t| t.name.eq_ignore_ascii_case(&name)) {
            return Err(bad(format!("table {name} appears twice")));
        }
        let mut specs = Vec::with_capacity(jt.fields.len());
        let mut flags = Vec::with_capacity(jt.fields.len());
        for f in jt.fields {
            let kind = kind_of_name(&f.kind).ok_or_else(|| {
                bad(format!(
                    "table {name}, field {}: unknown kind {:?}",
                    f.name, f.kind
                ))
            })?;
            specs.push(SlotSpec {
                name: f.name,
                kind,
                target: f.table,
                nullable: f.nullable,
            });
            flags.push((f.unique, f.indexed));
        }
        let layout = Layout::new(&name, specs)?;
        let mut rows = Vec::with_capacity(jt.rows.len());
        let mut arena = Arena::default();
        let mut prev: Option<i64> = None;
        for cells in jt.rows {
            let id = cells
                .first()
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| bad(format!("table {name}: a row without an integer ID")))?;
            if prev.is_some_and(|p| id <= p) {
                return Err(bad(format!("table {name}: IDs out of order at ID {id}")));
            }
            prev = Some(id);
            if cells.len() != layout.len() + 1 {
                return Err(bad(format!(
                    "table {name}, ID {id}: {} values for {} fields",
                    cells.len() - 1,
                    layout.len()
                )));
            }
            let values = layout
                .slots
                .iter()
                .zip(&cells[1..])
                .map(|(s, c)| json_cell(s.kind, c))
                .collect::<std::result::Result<Vec<Value>, String>>()
                .map_err(|e| bad(format!("table {name}, ID {id}: {e}")))?;
            layout
                .encode(&mut buf, |i| Ok(values[i].as_ref()))
                .map_err(|e| bad(format!("table {name}, ID {id}: {e}")))?;
            rows.push(Stored {
                id,
                data: arena.alloc(&buf).map_err(|e| bad(e.to_string()))?,
            });
        }
        let next_id = read_next_id(jt.next_id, rows.last());
        tables.push(FileTable {
            name,
            next_id,
            layout,
            flags,
            rows,
        });
    }
    Ok(tables)
}

// ---------------------------------------------------------------- files

/// The temporary file a save writes before renaming it over `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

pub fn io_err(path: &Path, what: &str, e: io::Error) -> Error {
    Error::Io(io::Error::new(
        e.kind(),
        format!("{what} {}: {e}", path.display()),
    ))
}

/// Reads the tables of `path`; `Ok(None)` when there is no such file. A file
/// that starts with `{` is JSON, any other binary.
pub fn load(path: &Path) -> Result<Option<Vec<FileTable>>> {
    let file = match fs::read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "cannot read", e)),
    };
    parse_file(path, &file).map(Some)
}

/// Reads the tables of `file`, the contents of `path` (named in errors).
pub fn parse_file(path: &Path, file: &[u8]) -> Result<Vec<FileTable>> {
    if file.starts_with(&MAGIC) {
        read_binary(path, file)
    } else if file.first() == Some(&b'{') {
        read_json(path, file)
    } else {
        Err(refuse(
            path,
            if file.is_empty() {
                "empty file (truncated)".to_owned()
            } else {
                "not a memory engine file (unknown magic)".to_owned()
            },
        ))
    }
}

/// Writes `parts` to `path` safely: into the temporary file beside it, synced,
/// renamed over `path`, and the folder synced so that the rename is durable. A
/// crash at any point leaves either the old file or the new one at `path`.
pub fn write_atomic(path: &Path, parts: &[&[u8]]) -> Result<()> {
    let tmp = temp_path(path);
    let write = || -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&tmp, "cannot write", e));
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(path, "cannot replace", e));
    }
    sync_dir(path).map_err(|e| io_err(path, "cannot sync the folder of", e))
}

#[cfg(unix)]
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_path: &Path) -> io::Result<()> {
    // Windows has no directory handle to sync; its rename is journaled by NTFS.
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip() {
        let mut out = Vec::new();
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        for v in values {
            put_varint(&mut out, v);
        }
        let mut r = Reader { b: &out, pos: 0 };
        for v in values {
            assert_eq!(r.varint().unwrap(), v);
        }
        assert!(r.varint().is_err(), "past the end");
        let mut r = Reader {
            b: &[0xff; 11],
            pos: 0,
        };
        assert!(r.varint().is_err(), "too long");
    }

    #[test]
    fn kinds_have_stable_codes_and_names() {
        for code in 1..=12 {
            let k = kind_of_code(code).unwrap();
            assert_eq!(kind_code(k), code);
            assert_eq!(kind_of_name(k.name()).map(kind_code), Some(code));
        }
        assert!(kind_of_code(0).is_none() && kind_of_code(13).is_none());
    }

    #[test]
    fn a_header_only_file_with_a_valid_checksum_is_refused() {
        // An empty payload that claims a table: decompressed fine, parsed short.
        let mut payload = Vec::new();
        put_varint(&mut payload, 1);
        let (h, stored) = binary_file(&payload, Some(1)).unwrap();
        let mut file = h;
        file.extend_from_slice(&stored);
        let e = read_binary(Path::new("x.bmem"), &file).err().unwrap();
        assert!(e.to_string().contains("x.bmem"), "{e}");
        assert!(e.to_string().contains("past the end"), "{e}");
    }

    /// Found by the `memory_load` fuzz target: a zstd file whose header
    /// announces an enormous payload (checksum recomputed) aborted the
    /// process on allocating it; it is refused.
    #[test]
    fn an_announced_size_is_not_allocated_before_decompression() {
        let mut payload = Vec::new();
        put_varint(&mut payload, 0);
        let (mut h, stored) = binary_file(&payload, Some(1)).unwrap();
        h[20..28].copy_from_slice(&0x6622_0000_0000_0000u64.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[..32]);
        crc.update(&stored);
        h[32..36].copy_from_slice(&crc.finalize().to_le_bytes());
        let mut file = h;
        file.extend_from_slice(&stored);
        let e = read_binary(Path::new("x.bmem"), &file).err().unwrap();
        assert!(e.to_string().contains("the header announces"), "{e}");
    }
}
