//! Batch bodies: parsing every verb form mORMot clients send, and running the
//! writes with the same transaction rules as [`burrow_core::Orm::send`].

use std::any::Any;
use std::borrow::Cow;
use std::mem::size_of;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use burrow_core::chrono::{DateTime, Utc};
use burrow_core::driver::same_engine;
use burrow_core::{
    json, AutoTime, BatchItem, BatchOp, BatchOptions, BatchResult, Database, EngineTx, Error,
    FieldKind, Fields, Model, Orm, OwnedRow, Result, Storage, Table, Transaction, Value, ValueRef,
};

use crate::allowance::Allowance;
use crate::rest::status_of;
use crate::Rights;
use burrow_core::json::Reader;

/// One field's value as read from a body: text that needed no unescaping
/// stays in the body, anything else is owned.
pub(crate) enum Cell<'a> {
    Text(&'a str),
    /// Text at these bytes of the body: a part that another thread parsed
    /// cannot borrow from it.
    Span(Range<usize>),
    Owned(Value),
}

/// A row of a parsed body: its values are [`Parsed::cells`]`[start..]`, one
/// per field of the table, so that a batch of rows makes one allocation
/// rather than several per row.
pub(crate) struct Rec {
    pub table: &'static Table,
    /// The ID (0 when none was given).
    pub id: i64,
    start: usize,
}

/// One parsed write.
pub(crate) enum Op {
    Add(Option<i64>, Rec),
    Update(Rec, Vec<usize>),
    Delete(&'static Table, i64),
}

impl Op {
    pub fn table(&self) -> &'static Table {
        match self {
            Op::Add(_, r) | Op::Update(r, _) => r.table,
            Op::Delete(t, _) => t,
        }
    }

    /// The existing row it changes: an update's or a delete's.
    pub fn changes(&self) -> Option<(&'static Table, i64)> {
        match self {
            Op::Add(..) => None,
            Op::Update(r, _) => Some((r.table, r.id)),
            Op::Delete(t, id) => Some((t, *id)),
        }
    }
}

/// Writes of a body, in order, and the values of their rows.
#[derive(Default)]
pub(crate) struct Part<'a> {
    pub ops: Vec<Op>,
    /// The values of every row, row after row.
    cells: Vec<Cell<'a>>,
}

/// How a body asks its writes to be committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `"automaticTransactionPerRow",N`: commit every N writes (0: none).
    pub auto_rows: usize,
    /// `"rollbackOnError",true` (Burrow): one transaction, undone on the first failure.
    pub rollback_on_error: bool,
    /// `"stopOnError",true` (Burrow): stop at the first failure and report it.
    pub stop_on_error: bool,
}

/// One body's share of the server's allowance for parsed batches, taken as
/// it is parsed and given back when its last holder (the request, or the
/// parser thread) drops it. A body's text can parse to many times its size:
/// `"POST",{}` is 9 bytes, and makes a write with a cell for each field of
/// its table, then a view, an item and a result for it. So the allowance
/// for bodies in flight does not bound what they become: this does.
pub(crate) struct Charge {
    pool: Arc<Allowance>,
    held: AtomicUsize,
}

impl Charge {
    pub fn new(pool: &Arc<Allowance>) -> Arc<Charge> {
        Arc::new(Charge {
            pool: pool.clone(),
            held: AtomicUsize::new(0),
        })
    }

    /// Takes `n` more bytes: a 413 when this body alone would pass the
    /// allowance (it never fits), a 503 when the other bodies in flight
    /// leave it no room now. Either way, nothing of the batch has run.
    fn take(&self, n: usize) -> Result<()> {
        let max = self.pool.max();
        if self.held.load(Ordering::Relaxed).saturating_add(n) > max {
            return Err(Error::Denied {
                status: 413,
                reason: format!(
                    "the batch parses to more than the {} MiB the server allows \
                     batches in flight; send it in smaller batches",
                    max >> 20
                ),
            });
        }
        if !self.pool.try_take(n) {
            return Err(Error::Denied {
                status: 503,
                reason: "the server holds as many parsed batches as it allows; retry later".into(),
            });
        }
        self.held.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pool.give_back(*self.held.get_mut());
    }
}

/// Bytes charged at a time: one atomic update per some hundreds of writes.
const CHARGE_STEP: usize = 64 * 1024;

/// What a parsed write holds until its batch is answered: its entry, its
/// row's cells and an update's field list, and the view, item and result
/// made for it when it runs. Text that needed unescaping is also held, at
/// most the size of the body, which the server's body allowance counts.
fn held(op: &Op) -> usize {
    const WRITE: usize = size_of::<Op>()
        + size_of::<View<'static, 'static>>()
        + size_of::<BatchItem<'static>>()
        + size_of::<BatchResult>()
        + size_of::<(&Table, i64)>();
    WRITE
        + match op {
            Op::Add(_, r) => r.table.fields.len() * size_of::<Cell<'static>>(),
            Op::Update(r, f) => {
                r.table.fields.len() * size_of::<Cell<'static>>()
                    + f.capacity() * size_of::<usize>()
            }
            Op::Delete(..) => 0,
        }
}

/// A parsed batch body: its writes, in one part or several.
pub(crate) struct Parsed<'a> {
    pub parts: Vec<Part<'a>>,
    pub settings: Settings,
    /// The body.
    text: &'a str,
}

impl Parsed<'_> {
    /// Every write, in order.
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.parts.iter().flat_map(|p| &p.ops)
    }
}

/// A row of a parsed body, as an engine reads it.
struct View<'p, 'a> {
    rec: &'p Rec,
    cells: &'p [Cell<'a>],
    /// The body.
    text: &'p str,
}

impl Fields for View<'_, '_> {
    fn table(&self) -> &'static Table {
        self.rec.table
    }

    fn id(&self) -> i64 {
        self.rec.id
    }

    fn field(&self, idx: usize) -> ValueRef<'_> {
        match self.cells.get(idx) {
            Some(Cell::Text(s)) => ValueRef::Text(Cow::Borrowed(s)),
            Some(Cell::Span(r)) => ValueRef::Text(Cow::Borrowed(&self.text[r.clone()])),
            Some(Cell::Owned(v)) => v.as_ref(),
            None => ValueRef::Null,
        }
    }
}

/// Whether an automatic time field a client left out gets the current
/// time: `Modified` always, `Created` on insert.
fn stamped(auto: AutoTime, inserting: bool) -> bool {
    match auto {
        AutoTime::Modified => true,
        AutoTime::Created => inserting,
        AutoTime::No => false,
    }
}

/// Fills the automatic time fields a client left out: `Modified` always,
/// `Created` on insert. Returns the fields to write.
pub(crate) fn stamp_missing(row: &mut OwnedRow, present: &mut Vec<usize>, inserting: bool) {
    let now = Utc::now();
    for (i, f) in row.table.fields.iter().enumerate() {
        if stamped(f.auto, inserting) && !present.contains(&i) {
            row.values[i] = Value::DateTime(now);
            present.push(i);
        }
    }
}

/// [`stamp_missing`] for a row of a parsed body.
fn stamp_cells(
    table: &Table,
    cells: &mut [Cell<'_>],
    present: &mut Vec<usize>,
    inserting: bool,
    now: DateTime<Utc>,
) {
    for (i, f) in table.fields.iter().enumerate() {
        if stamped(f.auto, inserting) && !present.contains(&i) {
            cells[i] = Cell::Owned(Value::DateTime(now));
            present.push(i);
        }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadInput(msg.into())
}

/// The field indexes whose bits are set in mORMot's hexadecimal field set
/// (byte by byte, in memory order: bit 0 of the first byte is the first field).
fn field_bits(table: &Table, hex: &str) -> Result<Vec<usize>> {
    if hex.is_empty() || hex.len() % 2 != 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad(format!("{hex:?} is not a hexadecimal field set")));
    }
    let mut out = Vec::new();
    for (byte_no, pair) in hex.as_bytes().chunks(2).enumerate() {
        let byte = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("zz"), 16)
            .map_err(|_| bad("bad field set"))?;
        for bit in 0..8 {
            if byte & (1 << bit) != 0 {
                let idx = byte_no * 8 + bit;
                if idx >= table.fields.len() {
                    return Err(bad(format!("{} has no field #{idx}", table.name)));
                }
                out.push(idx);
            }
        }
    }
    if out.is_empty() {
        return Err(bad("an empty field set"));
    }
    Ok(out)
}

/// Parses a batch body sent to `/{root}/Batch` (`default` = `None`) or
/// `/{root}/{Table}/Batch`.
///
/// The body is read in one pass: objects and arrays of values become rows of
/// typed values directly, without an intermediate JSON tree, and text stays
/// in the body.
pub(crate) fn parse<'a>(
    model: &Model,
    writable: Writable<'_>,
    default: Option<&'static Table>,
    body: &'a [u8],
    charge: &Charge,
) -> Result<Parsed<'a>> {
    let text = text_of(body)?;
    let mut parts = Vec::new();
    let (last, settings) = parse_in_parts(
        model,
        writable,
        default,
        text,
        charge,
        (usize::MAX, 0),
        &mut |p, _| {
            parts.push(p);
            Part::default()
        },
    )?;
    parts.push(last);
    Ok(Parsed {
        parts,
        settings,
        text,
    })
}

fn text_of(body: &[u8]) -> Result<&str> {
    std::str::from_utf8(body).map_err(|e| bad(format!("invalid batch: {e}")))
}

/// [`parse`] of a body's text, handing writes to `sink` as soon as they
/// are read (the first `rows.0`, then every `rows.1`), with the settings read
/// so far, and charging what they hold to `charge`. Returns the last part
/// and the settings.
pub(crate) fn parse_in_parts<'a>(
    model: &Model,
    writable: Writable<'_>,
    default: Option<&'static Table>,
    text: &'a str,
    charge: &Charge,
    rows: (usize, usize),
    sink: &mut dyn FnMut(Part<'a>, Settings) -> Part<'a>,
) -> Result<(Part<'a>, Settings)> {
    let mut r = Reader::new(text);
    let mut out = Out {
        part: Part::default(),
        settings: Settings::default(),
        limit: rows.0,
        rows: rows.1,
        sink,
        charge,
        uncharged: 0,
    };
    read_body(model, writable, default, &mut r, &mut out)
        .and_then(|()| out.charge.take(out.uncharged))
        .map_err(|e| match e {
            Error::BadInput(m) => bad(format!("invalid batch: {m}")),
            denied @ Error::Denied { .. } => denied,
            other => bad(format!("invalid batch: {other}")),
        })?;
    Ok((out.part, out.settings))
}

/// Where parsed writes go: into `part`, handed on at `limit` writes, then
/// every `rows`; what they hold is charged as they come.
struct Out<'a, 's> {
    part: Part<'a>,
    settings: Settings,
    limit: usize,
    rows: usize,
    sink: &'s mut dyn FnMut(Part<'a>, Settings) -> Part<'a>,
    charge: &'s Charge,
    /// Held by the writes read since the last charge.
    uncharged: usize,
}

impl<'a> Out<'a, '_> {
    fn push(&mut self, op: Op) -> Result<()> {
        self.uncharged += held(&op);
        if self.uncharged >= CHARGE_STEP {
            self.charge.take(std::mem::take(&mut self.uncharged))?;
        }
        self.part.ops.push(op);
        if self.part.ops.len() >= self.limit {
            let cells_per_row = self.part.cells.len() / self.part.ops.len();
            self.limit = self.rows;
            let full = std::mem::take(&mut self.part);
            self.part = (self.sink)(full, self.settings);
            // The next part likely holds rows like this one's.
            self.part.ops.reserve(self.rows);
            self.part.cells.reserve(self.rows * cells_per_row);
        }
        Ok(())
    }
}

fn read_body<'a>(
    model: &Model,
    writable: Writable<'_>,
    default: Option<&'static Table>,
    r: &mut Reader<'a>,
    out: &mut Out<'a, '_>,
) -> Result<()> {
    match r.peek() {
        Some(b'[') => items(model, writable, default, r, out)?,
        Some(b'{') => {
            r.expect(b'{')?;
            let name = match r.peek() {
                Some(b'}') => return Err(bad("an empty batch object")),
                Some(b'"') => r.string()?,
                // mORMot clients leave the key unquoted: `{Sample:[…]}`.
                _ => match r.bare_key() {
                    Some(k) => k.into(),
                    None => return r.fail("expected a table name"),
                },
            };
            let t = model
                .table(&name)
                .ok_or_else(|| unknown_table(model, writable, &name))?;
            r.expect(b':')?;
            items(model, writable, Some(t), r, out)?;
            if r.more(b'}')? {
                return Err(bad("a batch object holds one array"));
            }
        }
        _ => return r.fail("expected an array, or an object holding one array"),
    }
    r.end()
}

/// The tables a client may write to and its rights on each, when not every
/// right on every table: a batch that names another table, or a verb the
/// client may not use on a table it may not read either (an add by a client
/// that may only delete), is refused (403) as soon as the verb and the name
/// are read, before the row, so that the errors its row would get (an
/// unknown field, a wrong type) tell a client without the right nothing of
/// the table.
pub(crate) type Writable<'w> = Option<&'w [WriteRights]>;

/// A table a client may write to, and its rights there.
pub(crate) type WriteRights = (&'static Table, Rights);

fn forbidden() -> Error {
    Error::Denied {
        status: 403,
        reason: "Forbidden".into(),
    }
}

/// The error for a table name the model does not hold: a client that may
/// not write every table gets the 403 of a table it may not write, so that
/// it cannot tell the names of tables that exist from those that do not.
fn unknown_table(model: &Model, writable: Writable<'_>, name: &str) -> Error {
    match writable {
        Some(w) if w.len() < model.tables().len() => forbidden(),
        _ => Error::UnknownTable(name.to_owned()),
    }
}

/// The client's rights on `t`: `None` when it may do everything, an error
/// when `t` is not among the tables it may write. Looked up once per table a
/// batch names, not per item.
fn rights_on(writable: Writable<'_>, t: &'static Table) -> Result<Option<Rights>> {
    let Some(w) = writable else {
        return Ok(None);
    };
    w.iter()
        .find(|(x, _)| std::ptr::eq(*x, t))
        .map(|&(_, r)| Some(r))
        .ok_or_else(forbidden)
}

/// Whether rights `r` (see [`rights_on`]) let the client use `verb`.
fn allows(r: Option<Rights>, verb: &str) -> Result<()> {
    let may = r.is_none_or(|r| {
        // A client that may read the table learns nothing from its rows'
        // errors: a verb it may not use there is refused as the write
        // comes, after the body is read, as every other refused write.
        r.read
            || match verb {
                "PUT" => r.update,
                "DELETE" => r.delete,
                // mORMot's field-bit forms: `u…` updates, `i…` and bare hex add.
                v if v.starts_with('u') => r.update,
                // SIMPLE and POST add; any other verb is refused by the parser
                // after this check, for a client that may add.
                _ => r.create,
            }
    });
    if may {
        Ok(())
    } else {
        Err(forbidden())
    }
}

/// The table a verb names: `VERB@Table`, or the batch's own.
struct Tables<'m> {
    model: &'m Model,
    writable: Writable<'m>,
    default: Option<&'static Table>,
    /// The client's rights on the batch's own table, once looked up.
    default_rights: Option<Option<Rights>>,
    /// The last `@Table` met, its table and the client's rights there:
    /// batches name the same one again and again.
    last: Option<(String, &'static Table, Option<Rights>)>,
}

impl Tables<'_> {
    fn get<'w>(&mut self, word: &'w str) -> Result<(&'w str, &'static Table)> {
        let Some((verb, name)) = word.split_once('@') else {
            let t = self
                .default
                .ok_or_else(|| bad(format!("{word}: no table (use {word}@Table)")))?;
            let r = match self.default_rights {
                Some(r) => r,
                None => *self.default_rights.insert(rights_on(self.writable, t)?),
            };
            allows(r, word)?;
            return Ok((word, t));
        };
        if let Some((n, t, r)) = &self.last {
            if n == name {
                allows(*r, verb)?;
                return Ok((verb, t));
            }
        }
        let t = self
            .model
            .table(name)
            .ok_or_else(|| unknown_table(self.model, self.writable, name))?;
        let r = rights_on(self.writable, t)?;
        allows(r, verb)?;
        self.last = Some((name.to_owned(), t, r));
        Ok((verb, t))
    }
}

fn items<'a>(
    model: &Model,
    writable: Writable<'_>,
    default: Option<&'static Table>,
    r: &mut Reader<'a>,
    out: &mut Out<'a, '_>,
) -> Result<()> {
    let mut tables = Tables {
        model,
        writable,
        default,
        default_rights: None,
        last: None,
    };
    let now = Utc::now();
    // The last `SIMPLE` verb met (as written, with its table): batches of
    // adds repeat it from row to row.
    let mut last_simple: Option<(&'a str, &'static Table)> = None;
    let mut more = r.open_array()?;
    while more {
        if let Some((word, table)) = last_simple {
            if r.eat_quoted(word) {
                if !r.more(b']')? {
                    return Err(bad(format!("{word} without a value")));
                }
                let rec = simple(r, table, &mut out.part.cells)?;
                out.push(Op::Add(None, rec))?;
                more = r.more(b']')?;
                continue;
            }
        }
        let word = r.string()?;
        if !r.more(b']')? {
            return Err(bad(format!("{word} without a value")));
        }
        match &*word {
            "automaticTransactionPerRow" => out.settings.auto_rows = r.unsigned()? as usize,
            "options" => {
                r.raw()?;
            }
            "rollbackOnError" => out.settings.rollback_on_error = r.boolean()?,
            "stopOnError" => out.settings.stop_on_error = r.boolean()?,
            _ => {
                let (verb, table) = tables.get(&word)?;
                let p = &mut out.part;
                if p.ops.capacity() == 0 {
                    // Sized from the body: each row takes some tens of bytes.
                    let rows = (r.remaining() / (16 + 8 * table.fields.len()) + 1).min(out.limit);
                    p.ops.reserve(rows);
                    p.cells.reserve(rows * table.fields.len());
                }
                let op = match verb {
                    "SIMPLE" => {
                        if let Cow::Borrowed(word) = word {
                            last_simple = Some((word, table));
                        }
                        Op::Add(None, simple(r, table, &mut p.cells)?)
                    }
                    "POST" => {
                        let (rec, mut present) = object(r, table, &mut p.cells)?;
                        stamp_cells(table, &mut p.cells[rec.start..], &mut present, true, now);
                        Op::Add((rec.id > 0).then_some(rec.id), rec)
                    }
                    "PUT" => {
                        let (rec, mut present) = object(r, table, &mut p.cells)?;
                        if rec.id <= 0 {
                            return Err(bad("PUT needs an ID (or RowID) member"));
                        }
                        if present.is_empty() {
                            return Err(bad("PUT names no field"));
                        }
                        stamp_cells(table, &mut p.cells[rec.start..], &mut present, false, now);
                        Op::Update(rec, present)
                    }
                    "DELETE" => Op::Delete(
                        table,
                        r.id()?.ok_or_else(|| bad("DELETE takes a positive ID"))?,
                    ),
                    v => bits_op(r, table, v, &mut p.cells, now)?,
                };
                out.push(op)?;
            }
        }
        more = r.more(b']')?;
    }
    Ok(())
}

/// The value of field `idx`, text borrowed from the body when it can be.
#[inline(always)]
fn cell<'a>(r: &mut Reader<'a>, table: &Table, idx: usize) -> Result<Cell<'a>> {
    let kind = table.fields[idx].kind;
    if kind == FieldKind::Text {
        if let Some(s) = r.plain_string() {
            return Ok(Cell::Text(s));
        }
        if r.peek() == Some(b'"') {
            return Ok(match r.string()? {
                Cow::Borrowed(s) => Cell::Text(s),
                Cow::Owned(s) => Cell::Owned(Value::Text(s)),
            });
        }
    } else if let Some(v) = r.common(kind) {
        return Ok(Cell::Owned(v));
    }
    r.field(table, idx).map(Cell::Owned)
}

/// Appends a row of zero values (see [`json::zero_value`]).
fn zero_row(table: &'static Table, cells: &mut Vec<Cell<'_>>) -> Rec {
    let start = cells.len();
    cells.extend(
        table
            .fields
            .iter()
            .map(|f| Cell::Owned(json::zero_value(f))),
    );
    Rec {
        table,
        id: 0,
        start,
    }
}

/// `"SIMPLE",[…]`: every field's value, in declared order.
fn simple<'a>(r: &mut Reader<'a>, t: &'static Table, cells: &mut Vec<Cell<'a>>) -> Result<Rec> {
    let n = t.fields.len();
    let start = cells.len();
    let mut more = r.open_array()?;
    for idx in 0..n {
        if !more {
            return Err(bad(format!(
                "{}: {idx} value(s) given for {n} field(s)",
                t.name
            )));
        }
        cells.push(cell(r, t, idx)?);
        more = r.more(b']')?;
    }
    if more {
        return Err(bad(format!("{}: too many values", t.name)));
    }
    Ok(Rec {
        table: t,
        id: 0,
        start,
    })
}

/// An object: a row and the fields it names.
fn object<'a>(
    r: &mut Reader<'a>,
    t: &'static Table,
    cells: &mut Vec<Cell<'a>>,
) -> Result<(Rec, Vec<usize>)> {
    let mut rec = zero_row(t, cells);
    let start = rec.start;
    let mut present = Vec::with_capacity(t.fields.len());
    json::read_members(r, t, &mut rec.id, &mut present, |r, i| {
        cells[start + i] = cell(r, t, i)?;
        Ok(())
    })?;
    Ok((rec, present))
}

/// The `u{hex}`, `i{hex}` and bare `{hex}` forms.
fn bits_op<'a>(
    r: &mut Reader<'a>,
    table: &'static Table,
    v: &str,
    cells: &mut Vec<Cell<'a>>,
    now: DateTime<Utc>,
) -> Result<Op> {
    let update = v.strip_prefix('u');
    let hex = update.unwrap_or_else(|| v.strip_prefix('i').unwrap_or(v));
    let mut fields = field_bits(table, hex)?;
    if r.peek() != Some(b'[') {
        r.raw()?;
        return Err(bad(format!("{v} takes an array")));
    }
    // The values are counted before they are read: a leading extra one is
    // a forced ID.
    let mut raws = Vec::with_capacity(fields.len() + 1);
    if r.open_array()? {
        loop {
            raws.push(r.raw()?);
            if !r.more(b']')? {
                break;
            }
        }
    }
    let (id, vals) = if update.is_some() {
        let (id, vals) = raws
            .split_first()
            .ok_or_else(|| bad("an update without ID"))?;
        let id = Reader::new(id)
            .id()?
            .ok_or_else(|| bad("an update needs a positive ID"))?;
        (Some(id), vals)
    } else if raws.len() == fields.len() + 1 {
        let id = Reader::new(raws[0])
            .id()?
            .ok_or_else(|| bad("bad forced ID"))?;
        (Some(id), &raws[1..])
    } else {
        (None, &raws[..])
    };
    if vals.len() != fields.len() {
        return Err(bad(format!(
            "{}: {} value(s) given for {} field(s)",
            table.name,
            vals.len(),
            fields.len()
        )));
    }
    let mut rec = zero_row(table, cells);
    for (raw, &idx) in vals.iter().zip(&fields) {
        cells[rec.start + idx] = cell(&mut Reader::new(raw), table, idx)?;
    }
    let row_cells = &mut cells[rec.start..];
    if update.is_some() {
        rec.id = id.unwrap_or(0);
        stamp_cells(table, row_cells, &mut fields, false, now);
        Ok(Op::Update(rec, fields))
    } else {
        stamp_cells(table, row_cells, &mut fields, true, now);
        Ok(Op::Add(id, rec))
    }
}

/// The batch items of `parts` of the body `text`, in order, handed to `f`.
fn with_items<R>(parts: &[Part<'_>], text: &str, f: impl FnOnce(&[BatchItem<'_>]) -> R) -> R {
    let n = parts.iter().map(|p| p.ops.len()).sum();
    let mut views: Vec<View<'_, '_>> = Vec::with_capacity(n);
    for p in parts {
        views.extend(p.ops.iter().filter_map(|op| match op {
            Op::Add(_, rec) | Op::Update(rec, _) => Some(View {
                rec,
                cells: &p.cells[rec.start..rec.start + rec.table.fields.len()],
                text,
            }),
            Op::Delete(..) => None,
        }));
    }
    let mut rows = views.iter();
    let mut items: Vec<BatchItem<'_>> = Vec::with_capacity(n);
    for op in parts.iter().flat_map(|p| &p.ops) {
        items.push(BatchItem {
            table: op.table(),
            op: match op {
                Op::Add(id, _) => BatchOp::Add {
                    id: *id,
                    row: rows.next().expect("one view per row"),
                },
                Op::Update(_, fields) => BatchOp::Update {
                    row: rows.next().expect("one view per row"),
                    fields: Some(fields),
                },
                Op::Delete(_, id) => BatchOp::Delete { id: *id },
            },
        });
    }
    f(&items)
}

/// Runs the writes through `apply` ([`burrow_core::Orm::apply_items`] of
/// the hosted client, or of the connection's open transaction), with the
/// body's commit rules.
pub(crate) fn execute(
    p: &Parsed<'_>,
    apply: impl FnOnce(&[BatchItem<'_>], BatchOptions, bool) -> Result<Vec<BatchResult>>,
) -> Result<Vec<BatchResult>> {
    with_items(&p.parts, p.text, |items| {
        let opts = BatchOptions {
            auto_transaction_rows: p.settings.auto_rows,
            rollback_on_error: p.settings.rollback_on_error,
        };
        apply(items, opts, p.settings.stop_on_error)
    })
}

/// Writes handed from the parsing thread to the applying one at a time: the
/// first part small, so that applying starts soon, the next ones larger, to
/// make the hand-offs cheap. Multiples of the rows the SQLite engine inserts
/// per statement (200), so that part boundaries split none of its statements.
const PART_ROWS: (usize, usize) = (200, 1000);

/// The engine that holds a table.
type Route<'e> = dyn Fn(&'static Table) -> Result<&'e Arc<dyn Storage>> + 'e;

/// What [`parse_and_run`] did.
pub(crate) enum Run<'a> {
    /// The body is malformed; nothing was written.
    Invalid(Error),
    /// The writes ran, as [`execute`] runs them; the rows they changed
    /// (see [`Op::changes`]) are given back.
    Ran(Vec<(&'static Table, i64)>, Result<Vec<BatchResult>>),
    /// Nothing was written: the caller runs the body as usual.
    Parsed(Parsed<'a>),
    /// Nothing was written, and the parts are gone: the caller parses the
    /// body again and runs it as usual.
    Again,
}

/// Whether `execute` runs `rows` writes under these settings as one
/// transaction (outside an open one).
fn one_transaction(s: Settings, rows: usize) -> bool {
    s.rollback_on_error || (s.auto_rows > 0 && rows <= s.auto_rows)
}

/// A batch applied while its body is still being parsed, inside one
/// transaction that is committed only once the whole body has parsed.
struct Ahead<'e> {
    /// The one engine the batch writes to.
    engine: &'e Arc<dyn Storage>,
    /// The batch's own transaction on it: dropped uncommitted (the batch
    /// does not fit after all, or a panic on the applying thread), it rolls
    /// back.
    tx: Box<dyn EngineTx>,
    settings: Settings,
    /// One per write applied so far.
    results: Vec<BatchResult>,
}

/// Whether `part`, after `done` writes, keeps the batch one transaction on
/// `engine`, every write admitted.
fn fits<'e>(
    part: &Part<'_>,
    settings: Settings,
    done: usize,
    engine: &Arc<dyn Storage>,
    route: &Route<'e>,
    admit: &dyn Fn(&Op) -> bool,
) -> bool {
    one_transaction(settings, done + part.ops.len())
        && part
            .ops
            .iter()
            .all(|op| admit(op) && route(op.table()).is_ok_and(|e| same_engine(&**e, &**engine)))
}

enum Speculation<'e> {
    NotYet,
    On(Ahead<'e>),
    /// Stopped, its transaction undone: the batch runs as usual.
    Off,
}

impl<'e> Speculation<'e> {
    /// Applies `part` ahead, if the batch still fits: one transaction, one
    /// engine, every write admitted, no error. Otherwise undoes what ran.
    fn apply(
        &mut self,
        part: &Part<'_>,
        text: &str,
        settings: Settings,
        route: &Route<'e>,
        admit: &dyn Fn(&Op) -> bool,
    ) {
        if let Speculation::NotYet = self {
            let Some(first) = part.ops.first() else {
                return;
            };
            *self = match route(first.table()) {
                // The rights, and the one engine, are checked (below) before
                // the engine is locked: a refused batch answers without
                // waiting for it.
                Ok(engine) if fits(part, settings, 0, engine, route, admit) => {
                    match Arc::clone(engine).begin() {
                        Ok(tx) => {
                            // One result per write: no write takes fewer
                            // than 8 bytes, and the batch has at most
                            // `auto_rows`; the rest, if any, grows as it
                            // comes.
                            let mut rows = (text.len() / 8).min(1 << 20);
                            if settings.auto_rows > 0 {
                                rows = rows.min(settings.auto_rows);
                            }
                            Speculation::On(Ahead {
                                engine,
                                tx,
                                settings,
                                results: Vec::with_capacity(rows),
                            })
                        }
                        Err(_) => Speculation::Off,
                    }
                }
                _ => Speculation::Off,
            };
        } else if let Speculation::On(a) = self {
            if settings != a.settings
                || !fits(part, settings, a.results.len(), a.engine, route, admit)
            {
                self.undo();
            }
        }
        let Speculation::On(a) = self else {
            return;
        };
        let stop = settings.rollback_on_error || settings.stop_on_error;
        if with_items(std::slice::from_ref(part), text, |items| {
            a.tx.apply_batch(items, &mut a.results, stop)
        })
        .is_err()
        {
            self.undo();
        }
    }

    fn undo(&mut self) {
        // Dropping the transaction rolls it back.
        *self = Speculation::Off;
    }

    /// The outcome, once the whole body has parsed with these settings;
    /// `None` when the batch must run as usual.
    fn finish(self, settings: Settings) -> Option<Result<Vec<BatchResult>>> {
        match self {
            Speculation::On(a) if a.settings == settings => Some(a.tx.commit().map(|()| a.results)),
            _ => None,
        }
    }
}

/// What the parsing thread hands over.
enum Msg {
    Part(Part<'static>, Settings),
    /// The last part, or why the body is malformed.
    End(Result<(Part<'static>, Settings)>),
    Panicked(Box<dyn Any + Send>),
}

/// `part` without borrows from the body `text`, for another thread.
fn detach(part: Part<'_>, text: &str) -> Part<'static> {
    let base = text.as_ptr() as usize;
    let cells = part
        .cells
        .into_iter()
        .map(|c| match c {
            Cell::Text(s) => {
                let start = (s.as_ptr() as usize).wrapping_sub(base);
                let span = start..start + s.len();
                // Always true: parsed text is a slice of the body.
                if text.get(span.clone()).is_some_and(|t| std::ptr::eq(t, s)) {
                    Cell::Span(span)
                } else {
                    Cell::Owned(Value::Text(s.to_owned()))
                }
            }
            Cell::Span(r) => Cell::Span(r),
            Cell::Owned(v) => Cell::Owned(v),
        })
        .collect();
    Part {
        ops: part.ops,
        cells,
    }
}

/// Parses `body` on the `parser` thread while this one applies the writes
/// read so far, so that parsing and applying overlap. `None`: the parser
/// thread is gone, and the caller parses as usual.
///
/// Only a batch that [`execute`] would run as one transaction on one engine
/// (outside an open transaction: the caller's business) runs ahead, and its
/// transaction commits only after the whole body has parsed, so a malformed
/// body still changes nothing. Anything else (other settings, several
/// engines, a write `admit` refuses, an error) is undone and handed back
/// parsed, to run as usual; `admit` also sees every write before it runs.
/// This thread applies, through the batch's own transaction.
#[allow(clippy::too_many_arguments)]
pub(crate) fn parse_and_run<'a, 'e>(
    parser: &crate::server::Worker,
    client: &Arc<Database>,
    writable: Option<Arc<[WriteRights]>>,
    default: Option<&'static Table>,
    body: &'a Arc<Vec<u8>>,
    charge: &Arc<Charge>,
    route: &Route<'e>,
    admit: &dyn Fn(&Op) -> bool,
) -> Option<Run<'a>> {
    parse_and_run_in_parts(
        parser, client, writable, default, body, charge, route, admit, PART_ROWS,
    )
}

/// [`parse_and_run`] with parts of `rows` writes: the fuzz targets make them
/// tiny, so that small bodies run ahead too.
#[allow(clippy::too_many_arguments)]
pub(crate) fn parse_and_run_in_parts<'a, 'e>(
    parser: &crate::server::Worker,
    client: &Arc<Database>,
    writable: Option<Arc<[WriteRights]>>,
    default: Option<&'static Table>,
    body: &'a Arc<Vec<u8>>,
    charge: &Arc<Charge>,
    route: &Route<'e>,
    admit: &dyn Fn(&Op) -> bool,
    rows: (usize, usize),
) -> Option<Run<'a>> {
    // Checked here too, while the first part is parsed; if this fails, so
    // does the parse, before any part.
    let text = std::str::from_utf8(body).unwrap_or_default();
    let mut ahead = Speculation::NotYet;
    let mut parts: Vec<Part<'static>> = Vec::new();
    let mut changed = Vec::new();
    // Parts applied ahead were given back: should the batch run as usual
    // after all, the body is parsed again.
    let mut given_back = false;
    let end = drive(
        parser,
        client,
        writable,
        default,
        body,
        charge,
        rows,
        &mut |part, settings| {
            ahead.apply(&part, text, settings, route, admit);
            if let Speculation::On(_) = ahead {
                changed.extend(part.ops.iter().filter_map(Op::changes));
                given_back = true;
                Some(part)
            } else {
                parts.push(part);
                None
            }
        },
    );
    let (last, settings) = match end {
        // The speculation's drop rolls back.
        Driven::Panicked(panic) => std::panic::resume_unwind(panic),
        Driven::Lost => {
            ahead.undo();
            return None;
        }
        Driven::End(Ok(end)) => end,
        Driven::End(Err(e)) => {
            ahead.undo();
            return Some(Run::Invalid(e));
        }
    };
    if let Speculation::On(_) = ahead {
        ahead.apply(&last, text, settings, route, admit);
        changed.extend(last.ops.iter().filter_map(Op::changes));
    }
    parts.push(last);
    Some(match ahead.finish(settings) {
        Some(r) => Run::Ran(changed, r),
        None if given_back => Run::Again,
        None => Run::Parsed(Parsed {
            parts,
            settings,
            text,
        }),
    })
}

/// Parts parsed and not yet applied, at most.
const PARTS_AHEAD: usize = 16;

/// How the parsing thread's work on a body ended.
enum Driven {
    /// The last part, or why the body is malformed.
    End(Result<(Part<'static>, Settings)>),
    /// The parser thread is gone, the body not parsed.
    Lost,
    Panicked(Box<dyn Any + Send>),
}

/// Parses `body` on the `parser` thread in parts of `rows` writes, handing
/// each part (but the last, returned) to `each` on this thread as soon as
/// it is parsed. `each` gives a part back when done with it, to be filled
/// again: its memory is already touched, where a new part's faults in page
/// by page. `None`: the parser is busy with another body, nothing was
/// parsed.
#[allow(clippy::too_many_arguments)]
fn drive(
    parser: &crate::server::Worker,
    client: &Arc<Database>,
    writable: Option<Arc<[WriteRights]>>,
    default: Option<&'static Table>,
    body: &Arc<Vec<u8>>,
    charge: &Arc<Charge>,
    rows: (usize, usize),
    each: &mut dyn FnMut(Part<'static>, Settings) -> Option<Part<'static>>,
) -> Driven {
    // The parser waits once it is this far ahead (memory for 16 parts, and
    // no wait at all for bodies of up to about 10,000 rows): parts then come back to
    // be filled again, and a body's parse touches a few parts' memory
    // instead of fresh memory for all of them.
    let (tx, rx) = mpsc::sync_channel(PARTS_AHEAD);
    let (back, applied) = mpsc::channel::<Part<'static>>();
    let (client2, body2, charge2) = (client.clone(), body.clone(), charge.clone());
    let job = move || {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let text = text_of(&body2)?;
            let (last, settings) = parse_in_parts(
                client2.model(),
                writable.as_deref(),
                default,
                text,
                &charge2,
                rows,
                &mut |part, s| {
                    let _ = tx.send(Msg::Part(detach(part, text), s));
                    let mut next = applied.try_recv().unwrap_or_default();
                    next.ops.clear();
                    next.cells.clear();
                    next
                },
            )?;
            Ok((detach(last, text), settings))
        }));
        // Before the request hears the end: it then holds the body's only
        // share, and a refused batch's is back once it answers.
        drop(charge2);
        let _ = tx.send(match run {
            Ok(end) => Msg::End(end),
            Err(panic) => Msg::Panicked(panic),
        });
    };
    // A parser busy with another body would make this one wait: it is
    // parsed here instead, as usual.
    if !parser.try_send(job) {
        return Driven::Lost;
    }
    // Parts given back once the parser is done: freed on its thread.
    let mut spent = Vec::new();
    let end = loop {
        match rx.recv() {
            Ok(Msg::Part(part, settings)) => {
                if let Some(part) = each(part, settings) {
                    if let Err(mpsc::SendError(part)) = back.send(part) {
                        spent.push(part);
                    }
                }
            }
            Ok(Msg::End(end)) => break Driven::End(end),
            Ok(Msg::Panicked(panic)) => break Driven::Panicked(panic),
            Err(_) => break Driven::Lost,
        }
    };
    parser.send(move || drop(spent));
    end
}

/// What [`parse_and_run_in_tx`] did.
pub(crate) enum TxRun<E> {
    /// Every write ran through the transaction (or stopped at a failed one,
    /// as [`execute`] stops); the rows they changed are given back.
    Ran(Vec<(&'static Table, i64)>, Result<Vec<BatchResult>>),
    /// The body is malformed, or `admit` refused a write (its answer).
    /// `wrote`: writes ran before it was found, which nothing can undo
    /// alone, so the transaction was marked failed.
    Refused(std::result::Result<Error, E>, bool),
}

/// Inside a connection's open transaction: parses `body` on the `parser`
/// thread while this one applies the writes read so far through `tx`, so
/// that the rows of a large body need not all be held at once. `None`: the
/// parser is busy; nothing ran, and the caller runs the body as usual.
///
/// A failed write stops or is reported as [`execute`] does. A body found
/// malformed, or a write `admit` refuses, after writes already ran fails
/// the transaction ([`Transaction::fail`]): later calls in it fail and it
/// can only be rolled back, as in PostgreSQL after an error, so a partly
/// applied batch can never be committed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn parse_and_run_in_tx<E>(
    parser: &crate::server::Worker,
    client: &Arc<Database>,
    tx: &Transaction<'static>,
    writable: Option<Arc<[WriteRights]>>,
    default: Option<&'static Table>,
    body: &Arc<Vec<u8>>,
    charge: &Arc<Charge>,
    admit: &dyn Fn(&Op) -> std::result::Result<(), E>,
) -> Option<TxRun<E>> {
    let text = std::str::from_utf8(body).unwrap_or_default();
    let mut st = InTx {
        // One per write; no write takes fewer than 8 bytes.
        results: Vec::with_capacity((text.len() / 8).min(1 << 20)),
        changed: Vec::new(),
        wrote: false,
        passed_failures: false,
        outcome: None,
    };
    let end = drive(
        parser,
        client,
        writable,
        default,
        body,
        charge,
        PART_ROWS,
        &mut |part, s| {
            st.run(tx, text, admit, &part, s);
            Some(part)
        },
    );
    let fail = |e: std::result::Result<Error, E>, wrote: bool| {
        if wrote {
            tx.fail();
        }
        Some(TxRun::Refused(e, wrote))
    };
    let (last, settings) = match end {
        Driven::Panicked(panic) => {
            tx.fail();
            std::panic::resume_unwind(panic)
        }
        // Nothing parsed can have run: the parser never took the body.
        Driven::Lost if !st.wrote => return None,
        Driven::Lost => return fail(Ok(bad("the batch was cut short")), true),
        Driven::End(Err(e)) => return fail(Ok(e), st.wrote),
        Driven::End(Ok(end)) => end,
    };
    st.run(tx, text, admit, &last, settings);
    let InTx {
        mut results,
        changed,
        wrote,
        passed_failures,
        outcome,
    } = st;
    // Settings that arrive after the writes could have made an earlier
    // failure stop the batch, and the writes after it not run.
    if settings.rollback_on_error || settings.stop_on_error {
        if let Some(index) = results
            .iter()
            .position(|r| matches!(r, BatchResult::Failed(_)))
            .filter(|_| passed_failures)
        {
            let source = match results.swap_remove(index) {
                BatchResult::Failed(e) => e,
                _ => Box::new(bad("a write failed")),
            };
            tx.fail();
            return Some(TxRun::Ran(changed, Err(Error::Batch { index, source })));
        }
    }
    Some(match outcome {
        None => TxRun::Ran(changed, Ok(results)),
        Some(Ok(e @ Error::Batch { .. })) => TxRun::Ran(changed, Err(e)),
        // An engine's own failure, or a refused write, after others ran.
        Some(e) => return fail(e, wrote),
    })
}

/// The state of a batch running through an open transaction while parsed.
struct InTx<E> {
    results: Vec<BatchResult>,
    changed: Vec<(&'static Table, i64)>,
    /// Writes ran: what follows cannot undo them alone.
    wrote: bool,
    /// Writes ran with failures counted and passed over, not stopping.
    passed_failures: bool,
    /// Set once the batch stops: the rest of the body is only checked.
    outcome: Option<std::result::Result<Error, E>>,
}

impl<E> InTx<E> {
    fn run(
        &mut self,
        tx: &Transaction<'static>,
        text: &str,
        admit: &dyn Fn(&Op) -> std::result::Result<(), E>,
        part: &Part<'_>,
        settings: Settings,
    ) {
        if self.outcome.is_some() {
            return;
        }
        if let Some(refused) = part.ops.iter().find_map(|op| admit(op).err()) {
            self.outcome = Some(Err(refused));
            return;
        }
        let stop = settings.rollback_on_error || settings.stop_on_error;
        let opts = BatchOptions {
            auto_transaction_rows: 0,
            rollback_on_error: false,
        };
        let done = self.results.len();
        self.wrote |= !part.ops.is_empty();
        self.changed.extend(part.ops.iter().filter_map(Op::changes));
        match with_items(std::slice::from_ref(part), text, |items| {
            tx.apply_items(items, opts, stop)
        }) {
            Ok(r) => {
                self.passed_failures |= r.iter().any(|r| matches!(r, BatchResult::Failed(_)));
                self.results.extend(r);
            }
            Err(Error::Batch { index, source }) => {
                self.outcome = Some(Ok(Error::Batch {
                    index: index + done,
                    source,
                }));
            }
            Err(e) => self.outcome = Some(Ok(e)),
        }
    }
}

/// The JSON array of per-item results: the new ID of an add, 200 for an
/// update or delete, an error object for a failed item. An update or delete
/// that found no row is 404 for Burrow clients (`exact`) and 200 for others,
/// as mORMot answers.
pub(crate) fn results_json(results: &[BatchResult], exact: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(results.len() * 8 + 2);
    out.push(b'[');
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match r {
            BatchResult::Added(id) => {
                out.extend_from_slice(itoa::Buffer::new().format(*id).as_bytes())
            }
            BatchResult::Done => out.extend_from_slice(b"200"),
            BatchResult::Missing if exact => out.extend_from_slice(b"404"),
            BatchResult::Missing => out.extend_from_slice(b"200"),
            BatchResult::Failed(e) => {
                out.extend_from_slice(b"{\"errorCode\":");
                out.extend_from_slice(itoa::Buffer::new().format(status_of(e)).as_bytes());
                out.extend_from_slice(b",\"errorText\":");
                json::write_str(&mut out, &e.to_string());
                out.push(b'}');
            }
        }
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod test {
    use super::*;
    use burrow_core::{Field, FieldKind};

    const fn f(name: &'static str, auto: AutoTime) -> Field {
        let kind = match auto {
            AutoTime::No => FieldKind::Text,
            _ => FieldKind::DateTime,
        };
        Field::new(name, kind).auto(auto)
    }

    static T: Table = Table {
        name: "Sample",
        fields: &[
            f("A", AutoTime::No),
            f("B", AutoTime::No),
            f("Changed", AutoTime::Modified),
        ],
    };

    fn unlimited() -> Arc<Charge> {
        Charge::new(&Arc::new(Allowance::new(usize::MAX)))
    }

    fn status(r: Result<()>) -> Option<u16> {
        match r {
            Ok(()) => None,
            Err(Error::Denied { status, .. }) => Some(status),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn charges_share_one_allowance_and_give_it_back() {
        let pool = Arc::new(Allowance::new(1000));
        let (a, b) = (Charge::new(&pool), Charge::new(&pool));
        assert_eq!(status(a.take(600)), None);
        // No room beside `a` now: later, maybe.
        assert_eq!(status(b.take(500)), Some(503));
        // More than the whole allowance: never.
        assert_eq!(status(b.take(1001)), Some(413));
        assert_eq!(status(a.take(401)), Some(413));
        assert_eq!(pool.used(), 600);
        drop(a);
        assert_eq!(pool.used(), 0);
        assert_eq!(status(b.take(500)), None);
        assert_eq!(status(b.take(500)), None);
        assert_eq!(status(b.take(1)), Some(413));
        drop(b);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_parse_charges_what_its_writes_hold() {
        let mut m = Model::new();
        m.add_table(&T);
        let body = format!("[{}]", vec![r#""POST@Sample",{}"#; 10_000].join(","));
        let per_write = held(&Op::Add(None, zero_row(&T, &mut Vec::new())));
        let enough = Arc::new(Allowance::new(10_000 * per_write));
        let charge = Charge::new(&enough);
        let parsed = parse(&m, None, None, body.as_bytes(), &charge).expect("fits");
        assert_eq!(parsed.ops().count(), 10_000);
        assert_eq!(enough.used(), 10_000 * per_write);
        drop(charge);
        assert_eq!(enough.used(), 0);
        let short = Arc::new(Allowance::new(10_000 * per_write - 1));
        let e = parse(&m, None, None, body.as_bytes(), &Charge::new(&short));
        assert!(matches!(e, Err(Error::Denied { status: 413, .. })));
        assert_eq!(short.used(), 0);
    }

    #[test]
    fn every_verb_form() -> Result<()> {
        let mut m = Model::new();
        m.add_table(&T);
        let body = br#"{Sample:["automaticTransactionPerRow",100,"POST",{"A":"x"},"PUT",{"RowID":3,"B":"y"},
            "DELETE",4,"SIMPLE",["a","b",""],"u02",[5,"z"],"i03",["p","q"],"03",[9,"p","q"],"DELETE@Sample","6"]}"#;
        let p = parse(&m, None, None, body, &unlimited())?;
        assert_eq!(p.settings.auto_rows, 100);
        assert_eq!(p.parts[0].ops.len(), 8);
        assert!(matches!(&p.parts[0].ops[1], Op::Update(r, f) if r.id == 3 && f == &vec![1, 2]));
        assert!(matches!(&p.parts[0].ops[4], Op::Update(r, f) if r.id == 5 && f == &vec![1, 2]));
        assert!(matches!(&p.parts[0].ops[6], Op::Add(Some(9), _)));
        assert!(matches!(&p.parts[0].ops[7], Op::Delete(_, 6)));
        for bad in [
            &br#"["POST",{"A":"x"}]"#[..],
            br#"{"Sample":["PUT",{"A":"x"}]}"#,
            br#"{"Sample":["u08",[1,"x"]]}"#,
            br#"{"Sample":["FROB",1]}"#,
            br#"{"Nope":[]}"#,
            br#"{"Sample":["POST"]}"#,
            br#"{"Sample":["POST",{"A":1}]}"#,
            br#"{"Sample":["SIMPLE",["a","b",""]] x}"#,
            br#"{"Sample":["SIMPLE",["a","b",""],"SIMPLE",["a","b"]]}"#,
            br#"{"Sample":["SIMPLE",["a","b","",1]]}"#,
            br#"{"Sample":["SIMPLE",["a","b","2024-01-01T00:00:00"],"SIMPLE",["a","b","2024-01-01T00:00:00"],]}"#,
            br#"{"Sample":["SIMPLE",["a\x","b",""]]}"#,
            br#"{"Sample":["SIMPLE",["a","b","2024-02-30T00:00:00"]]}"#,
            br#"{"Sample":[],"Other":[]}"#,
            br#"{}"#,
            br#"17"#,
            b"[\"SIMPLE@Sample\",[\"\xff\",\"b\",\"\"]]",
        ] {
            assert!(
                parse(&m, None, None, bad, &unlimited()).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        Ok(())
    }

    /// mORMot clients send automatic times as TimeLog integers; a batch row
    /// in any form takes every value a single `POST` takes, and refuses
    /// what it refuses.
    #[test]
    fn batch_rows_read_values_as_a_single_post_does() -> Result<()> {
        let mut m = Model::new();
        m.add_table(&T);
        let forms = [
            "135654243328",
            "0",
            r#""2024-01-02T03:04:05""#,
            r#""2024-01-02T03:04:05.25Z""#,
            r#""""#,
            "null",
            "true",
            r#""noon""#,
            "-5",
            "1.5",
            "[1]",
        ];
        for form in forms {
            let post = json::read_row(&T, format!(r#"{{"Changed":{form}}}"#).as_bytes());
            for body in [
                format!(r#"{{"Sample":["SIMPLE",["a","b",{form}]]}}"#),
                format!(r#"{{"Sample":["POST",{{"A":"a","Changed":{form}}}]}}"#),
                format!(r#"{{"Sample":["i04",[{form}]]}}"#),
                format!(r#"["SIMPLE@Sample",["a","b",{form}],"SIMPLE@Sample",["c","d",{form}]]"#),
            ] {
                let batch = parse(&m, None, None, body.as_bytes(), &unlimited());
                match (&post, &batch) {
                    (Ok((row, _)), Ok(p)) => {
                        for op in 0..p.parts[0].ops.len() {
                            let want = match &row.values[2] {
                                Value::DateTime(t) => burrow_core::datetime::format_datetime(*t),
                                other => format!("{other:?}"),
                            };
                            assert_eq!(text(p, op, 2), want, "{body}");
                        }
                    }
                    (Err(_), Err(_)) => {}
                    _ => panic!(
                        "{body}: a POST gives {:?}, the batch {:?}",
                        post.as_ref().map(|_| ()),
                        batch.as_ref().map(|_| ())
                    ),
                }
            }
        }
        assert!(json::read_row(&T, br#"{"Changed":135654243328}"#).is_ok());
        Ok(())
    }

    fn text(p: &Parsed<'_>, op: usize, field: usize) -> String {
        let mut op = op;
        let mut part = 0;
        while op >= p.parts[part].ops.len() {
            op -= p.parts[part].ops.len();
            part += 1;
        }
        let part = &p.parts[part];
        let rec = match &part.ops[op] {
            Op::Add(_, r) | Op::Update(r, _) => r,
            Op::Delete(..) => panic!("no row"),
        };
        let view = View {
            rec,
            cells: &part.cells[rec.start..rec.start + rec.table.fields.len()],
            text: p.text,
        };
        match view.field(field) {
            ValueRef::Text(t) => t.into_owned(),
            ValueRef::DateTime(t) => burrow_core::datetime::format_datetime(t),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn rows_read_in_place_and_repeated_verbs() -> Result<()> {
        let mut m = Model::new();
        m.add_table(&T);
        let body =
            br#" [ "SIMPLE@Sample" , [ "plain" , "esc\"aped\u00e9" , "2024-01-02T03:04:05.5Z" ] ,
            "SIMPLE@Sample",["second","",  "2024-01-02T03:04:05.5Z"],
            "SIMPLE@Sample",["third","x","2024-01-02T03:04:06"],
            "SIMPLE@sample",["fourth","y",""],
            "POST@Sample",{"B":"only b","ID":"12"} ] "#;
        let p = parse(&m, None, None, body, &unlimited())?;
        assert_eq!(p.parts[0].ops.len(), 5);
        assert!(matches!(p.parts[0].cells[0], Cell::Text("plain")));
        assert_eq!(text(&p, 0, 1), "esc\"aped\u{e9}");
        assert_eq!(text(&p, 0, 2), "2024-01-02T03:04:05.5");
        assert_eq!(text(&p, 1, 0), "second");
        assert_eq!(text(&p, 1, 2), "2024-01-02T03:04:05.5");
        assert_eq!(text(&p, 2, 2), "2024-01-02T03:04:06");
        assert_eq!(text(&p, 3, 0), "fourth");
        assert_eq!(text(&p, 3, 2), "1970-01-01T00:00:00");
        assert!(matches!(&p.parts[0].ops[4], Op::Add(Some(12), r) if r.id == 12));
        assert_eq!(text(&p, 4, 0), "");
        assert_eq!(text(&p, 4, 1), "only b");
        Ok(())
    }

    #[test]
    fn parts_read_apart_and_detached_hold_the_same_rows() -> Result<()> {
        let mut m = Model::new();
        m.add_table(&T);
        let body = br#"["automaticTransactionPerRow",5,"SIMPLE@Sample",["a","esc\"aped",""],
            "SIMPLE@Sample",["b","c","2024-01-02T03:04:05"],"POST@Sample",{"A":"d"},
            "rollbackOnError",true,"DELETE@Sample",4,"PUT@Sample",{"ID":2,"B":"e"}]"#;
        let whole = parse(&m, None, None, body, &unlimited())?;
        let body_text = text_of(body)?;
        let mut parts = Vec::new();
        let mut seen = Vec::new();
        let (last, settings) = parse_in_parts(
            &m,
            None,
            None,
            body_text,
            &unlimited(),
            (1, 2),
            &mut |p, s| {
                seen.push(s);
                parts.push(detach(p, body_text));
                Part::default()
            },
        )?;
        parts.push(detach(last, body_text));
        // Every part but the last is full (the first one smaller), and
        // carries the settings read so far.
        assert_eq!(
            parts.iter().map(|p| p.ops.len()).collect::<Vec<_>>(),
            [1, 2, 2, 0]
        );
        assert_eq!(seen[0].auto_rows, 5);
        assert!(!seen[1].rollback_on_error && seen[2].rollback_on_error);
        assert_eq!(settings, whole.settings);
        assert!(matches!(parts[0].cells[0], Cell::Span(_)));
        let apart = Parsed {
            parts,
            settings,
            text: body_text,
        };
        assert_eq!(apart.ops().count(), whole.ops().count());
        for (op, w) in whole.ops().enumerate() {
            if let Op::Delete(..) = w {
                continue;
            }
            // Automatic times are stamped at each parse: left out.
            for field in (0..T.fields.len()).filter(|&f| T.fields[f].auto == AutoTime::No) {
                assert_eq!(text(&apart, op, field), text(&whole, op, field));
            }
        }
        Ok(())
    }
}
