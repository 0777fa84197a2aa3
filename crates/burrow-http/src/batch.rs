//! Batch bodies: parsing every verb form mORMot clients send, and running the
//! writes with the same transaction rules as [`burrow_core::Orm::send`].

use burrow_core::chrono::Utc;
use burrow_core::{
    apply_batch_items, json, AutoTime, BatchItem, BatchOp, BatchOptions, BatchResult, Error, Model,
    OwnedRow, Result, Storage, Table, Value,
};
use serde_json::Value as J;

use crate::http::status_of;

/// One parsed write.
pub(crate) enum Op {
    Add(Option<i64>, OwnedRow),
    Update(OwnedRow, Vec<usize>),
    Delete(&'static Table, i64),
}

impl Op {
    pub fn table(&self) -> &'static Table {
        match self {
            Op::Add(_, r) | Op::Update(r, _) => r.table,
            Op::Delete(t, _) => t,
        }
    }
}

/// A parsed batch body.
pub(crate) struct Parsed {
    pub ops: Vec<Op>,
    /// `"automaticTransactionPerRow",N`: commit every N writes (0: none).
    pub auto_rows: usize,
    /// `"rollbackOnError",true` (Burrow): one transaction, undone on the first failure.
    pub rollback_on_error: bool,
    /// `"stopOnError",true` (Burrow): stop at the first failure and report it.
    pub stop_on_error: bool,
}

/// Fills the automatic time fields a client left out: `Modified` always,
/// `Created` on insert. Returns the fields to write.
pub(crate) fn stamp_missing(row: &mut OwnedRow, present: &mut Vec<usize>, inserting: bool) {
    let now = Utc::now();
    for (i, f) in row.table.fields.iter().enumerate() {
        let want = match f.auto {
            AutoTime::Modified => true,
            AutoTime::Created => inserting,
            AutoTime::No => false,
        };
        if want && !present.contains(&i) {
            row.values[i] = Value::DateTime(now);
            present.push(i);
        }
    }
}

/// Quotes the key of a body such as `{Sample:[…]}`, which mORMot clients send.
fn quote_outer_key(body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let start = body
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(0);
    if body.get(start) != Some(&b'{') {
        return body.into();
    }
    let key_at = start
        + 1
        + body[start + 1..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
    let key_len = body[key_at..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    if key_len == 0 {
        return body.into();
    }
    let mut v = Vec::with_capacity(body.len() + 2);
    v.extend_from_slice(&body[..key_at]);
    v.push(b'"');
    v.extend_from_slice(&body[key_at..key_at + key_len]);
    v.push(b'"');
    v.extend_from_slice(&body[key_at + key_len..]);
    v.into()
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
/// The body is read in one streaming pass: objects and `SIMPLE` arrays become
/// rows of typed values directly, without an intermediate JSON tree (a batch
/// of 10,000 rows parses several times faster this way).
pub(crate) fn parse(model: &Model, default: Option<&'static Table>, body: &[u8]) -> Result<Parsed> {
    let body = quote_outer_key(body);
    let mut de = serde_json::Deserializer::from_slice(&body);
    let parsed = de::DeserializeSeed::deserialize(BodySeed { model, default }, &mut de)
        .map_err(|e| bad(format!("invalid batch: {e}")))?;
    de.end().map_err(|e| bad(format!("invalid batch: {e}")))?;
    Ok(parsed)
}

use burrow_core::datetime::{parse_date, parse_datetime};
use burrow_core::{Currency, FieldKind};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;

fn custom<E: de::Error>(e: Error) -> E {
    E::custom(e)
}

struct BodySeed<'m> {
    model: &'m Model,
    default: Option<&'static Table>,
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Parsed, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array, or an object holding one array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Parsed, A::Error> {
        items(self.model, self.default, seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Parsed, A::Error> {
        let name: Cow<'de, str> = map
            .next_key_seed(StrSeed)?
            .ok_or_else(|| de::Error::custom("an empty batch object"))?;
        let t = self
            .model
            .table(&name)
            .ok_or_else(|| custom(Error::UnknownTable(name.to_string())))?;
        let p = map.next_value_seed(ItemsSeed {
            model: self.model,
            table: t,
        })?;
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("a batch object holds one array"));
        }
        Ok(p)
    }
}

struct ItemsSeed<'m> {
    model: &'m Model,
    table: &'static Table,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Parsed, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Parsed;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of batch items")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Parsed, A::Error> {
        items(self.model, Some(self.table), seq)
    }
}

/// A string, borrowed from the body when it has no escapes.
struct StrSeed;

impl<'de> DeserializeSeed<'de> for StrSeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for StrSeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

fn items<'de, A: SeqAccess<'de>>(
    model: &Model,
    default: Option<&'static Table>,
    mut seq: A,
) -> std::result::Result<Parsed, A::Error> {
    let mut p = Parsed {
        ops: Vec::with_capacity(seq.size_hint().unwrap_or(0) / 2),
        auto_rows: 0,
        rollback_on_error: false,
        stop_on_error: false,
    };
    while let Some(word) = seq.next_element_seed(StrSeed)? {
        let missing = || de::Error::custom(format!("{word} without a value"));
        match &*word {
            "automaticTransactionPerRow" => {
                p.auto_rows = seq.next_element::<u64>()?.ok_or_else(missing)? as usize;
                continue;
            }
            "options" => {
                seq.next_element::<de::IgnoredAny>()?.ok_or_else(missing)?;
                continue;
            }
            "rollbackOnError" => {
                p.rollback_on_error = seq.next_element::<bool>()?.ok_or_else(missing)?;
                continue;
            }
            "stopOnError" => {
                p.stop_on_error = seq.next_element::<bool>()?.ok_or_else(missing)?;
                continue;
            }
            _ => {}
        }
        let (verb, table) = match word.split_once('@') {
            Some((v, t)) => (
                v,
                model
                    .table(t)
                    .ok_or_else(|| custom(Error::UnknownTable(t.to_owned())))?,
            ),
            None => (
                &*word,
                default
                    .ok_or_else(|| custom(bad(format!("{word}: no table (use {word}@Table)"))))?,
            ),
        };
        let op = match verb {
            "POST" => {
                let (mut row, mut present) = seq
                    .next_element_seed(ObjectSeed { table })?
                    .ok_or_else(missing)?;
                stamp_missing(&mut row, &mut present, true);
                Op::Add((row.id > 0).then_some(row.id), row)
            }
            "PUT" => {
                let (mut row, mut present) = seq
                    .next_element_seed(ObjectSeed { table })?
                    .ok_or_else(missing)?;
                if row.id <= 0 {
                    return Err(custom(bad("PUT needs an ID (or RowID) member")));
                }
                if present.is_empty() {
                    return Err(custom(bad("PUT names no field")));
                }
                stamp_missing(&mut row, &mut present, false);
                Op::Update(row, present)
            }
            "SIMPLE" => Op::Add(
                None,
                seq.next_element_seed(SimpleSeed { table })?
                    .ok_or_else(missing)?,
            ),
            "DELETE" => {
                let v: J = seq.next_element()?.ok_or_else(missing)?;
                Op::Delete(
                    table,
                    json::parse_id(&v).ok_or_else(|| custom(bad("DELETE takes a positive ID")))?,
                )
            }
            v => {
                let value: J = seq.next_element()?.ok_or_else(missing)?;
                bits_op(table, v, &value).map_err(custom)?
            }
        };
        p.ops.push(op);
    }
    Ok(p)
}

/// The `u{hex}`, `i{hex}` and bare `{hex}` forms.
fn bits_op(table: &'static Table, v: &str, value: &J) -> Result<Op> {
    let arr = value
        .as_array()
        .ok_or_else(|| bad(format!("{v} takes an array")))?;
    if let Some(hex) = v.strip_prefix('u') {
        let mut fields = field_bits(table, hex)?;
        let (id, vals) = arr
            .split_first()
            .ok_or_else(|| bad("an update without ID"))?;
        let id = json::parse_id(id).ok_or_else(|| bad("an update needs a positive ID"))?;
        let mut row = OwnedRow::from_array(table, vals, Some(&fields))?;
        row.id = id;
        stamp_missing(&mut row, &mut fields, false);
        Ok(Op::Update(row, fields))
    } else {
        let hex = v.strip_prefix('i').unwrap_or(v);
        let mut fields = field_bits(table, hex)?;
        let (id, vals) = if arr.len() == fields.len() + 1 {
            let id = json::parse_id(&arr[0]).ok_or_else(|| bad("bad forced ID"))?;
            (Some(id), &arr[1..])
        } else {
            (None, &arr[..])
        };
        let mut row = OwnedRow::from_array(table, vals, Some(&fields))?;
        stamp_missing(&mut row, &mut fields, true);
        Ok(Op::Add(id, row))
    }
}

/// An object: a row and the fields it names.
struct ObjectSeed {
    table: &'static Table,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = (OwnedRow, Vec<usize>);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed {
    type Value = (OwnedRow, Vec<usize>);
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let t = self.table;
        let mut row = OwnedRow::zero(t);
        let mut present = Vec::with_capacity(t.fields.len());
        while let Some(name) = map.next_key_seed(StrSeed)? {
            match t.column(&name) {
                Some(burrow_core::Column::Id) => {
                    let v: J = map.next_value()?;
                    row.id = json::parse_id(&v).ok_or_else(|| {
                        custom(bad(format!("{}: ID must be a positive integer", t.name)))
                    })?;
                }
                Some(burrow_core::Column::Field(i)) => {
                    row.values[i] = map.next_value_seed(FieldSeed { table: t, idx: i })?;
                    if !present.contains(&i) {
                        present.push(i);
                    }
                }
                None => {
                    return Err(custom(Error::UnknownField {
                        table: t.name,
                        field: name.into_owned(),
                    }))
                }
            }
        }
        Ok((row, present))
    }
}

/// Every field's value, in declared order.
struct SimpleSeed {
    table: &'static Table,
}

impl<'de> DeserializeSeed<'de> for SimpleSeed {
    type Value = OwnedRow;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<OwnedRow, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SimpleSeed {
    type Value = OwnedRow;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of every field's value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<OwnedRow, A::Error> {
        let t = self.table;
        let mut values = Vec::with_capacity(t.fields.len());
        for idx in 0..t.fields.len() {
            match seq.next_element_seed(FieldSeed { table: t, idx })? {
                Some(v) => values.push(v),
                None => {
                    return Err(custom(bad(format!(
                        "{}: {idx} value(s) given for {} field(s)",
                        t.name,
                        t.fields.len()
                    ))))
                }
            }
        }
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(custom(bad(format!("{}: too many values", t.name))));
        }
        Ok(OwnedRow {
            table: t,
            id: 0,
            values,
        })
    }
}

/// One field's value, converted to the field's kind.
struct FieldSeed {
    table: &'static Table,
    idx: usize,
}

impl FieldSeed {
    fn convert<E: de::Error>(&self, v: J) -> std::result::Result<Value, E> {
        json::parse_value(self.table, &self.table.fields[self.idx], &v).map_err(custom)
    }
}

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        if self.table.fields[self.idx].kind == FieldKind::Json {
            let v = <J as serde::Deserialize>::deserialize(d)?;
            return self.convert(v);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Value, E> {
        self.convert(J::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Value, E> {
        match self.table.fields[self.idx].kind {
            FieldKind::I64 | FieldKind::Reference(_) => Ok(Value::Int(v)),
            _ => self.convert(J::from(v)),
        }
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Value, E> {
        match (self.table.fields[self.idx].kind, i64::try_from(v)) {
            (FieldKind::I64 | FieldKind::Reference(_), Ok(i)) => Ok(Value::Int(i)),
            (FieldKind::Currency, Ok(i)) => match Currency::from_int(i) {
                Some(c) => Ok(Value::Currency(c)),
                None => self.convert(J::from(v)),
            },
            _ => self.convert(J::from(v)),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        if self.table.fields[self.idx].kind == FieldKind::Currency {
            // Exact when the double is the nearest one to a 4-decimal amount;
            // anything else goes the slow way, which refuses it.
            if let Some(c) = Currency::from_f64(v).filter(|c| c.to_f64() == v) {
                return Ok(Value::Currency(c));
            }
        }
        self.convert(J::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Value, E> {
        let fast = match self.table.fields[self.idx].kind {
            FieldKind::Text => Some(Value::Text(v.to_owned())),
            FieldKind::Date if !v.is_empty() => parse_date(v).map(Value::Date),
            FieldKind::DateTime if !v.is_empty() => parse_datetime(v).map(Value::DateTime),
            _ => None,
        };
        match fast {
            Some(x) => Ok(x),
            None => self.convert(J::String(v.to_owned())),
        }
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Value, E> {
        if self.table.fields[self.idx].kind == FieldKind::Text {
            return Ok(Value::Text(v));
        }
        self.visit_str(&v)
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Value, E> {
        self.convert(J::Null)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Value, E> {
        self.convert(J::Null)
    }
}

/// Runs the writes. `route` gives each table's engine. Without an open
/// transaction, chunks of `auto_rows` (or the whole batch, with
/// `rollback_on_error`) each run in a transaction on every engine involved.
pub(crate) fn execute<'a>(
    p: &Parsed,
    route: &dyn Fn(&'static Table) -> Result<&'a dyn Storage>,
    in_tx: bool,
) -> Result<Vec<BatchResult>> {
    let items: Vec<BatchItem<'_>> = p
        .ops
        .iter()
        .map(|op| BatchItem {
            table: op.table(),
            op: match op {
                Op::Add(id, row) => BatchOp::Add { id: *id, row },
                Op::Update(row, fields) => BatchOp::Update {
                    row,
                    fields: Some(fields),
                },
                Op::Delete(_, id) => BatchOp::Delete { id: *id },
            },
        })
        .collect();
    let engines = items
        .iter()
        .map(|i| route(i.table))
        .collect::<Result<Vec<_>>>()?;
    let opts = BatchOptions {
        auto_transaction_rows: p.auto_rows,
        rollback_on_error: p.rollback_on_error,
    };
    apply_batch_items(&items, &engines, opts, p.stop_on_error, in_tx)
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
        Field {
            name,
            column: name,
            kind: if matches!(auto, AutoTime::No) {
                FieldKind::Text
            } else {
                FieldKind::DateTime
            },
            nullable: false,
            unique: false,
            indexed: false,
            auto,
        }
    }

    static T: Table = Table {
        name: "Sample",
        fields: &[
            f("A", AutoTime::No),
            f("B", AutoTime::No),
            f("Changed", AutoTime::Modified),
        ],
    };

    #[test]
    fn every_verb_form() -> Result<()> {
        let mut m = Model::new();
        m.add_table(&T);
        let body = br#"{Sample:["automaticTransactionPerRow",100,"POST",{"A":"x"},"PUT",{"RowID":3,"B":"y"},
            "DELETE",4,"SIMPLE",["a","b",""],"u02",[5,"z"],"i03",["p","q"],"03",[9,"p","q"],"DELETE@Sample","6"]}"#;
        let p = parse(&m, None, body)?;
        assert_eq!(p.auto_rows, 100);
        assert_eq!(p.ops.len(), 8);
        assert!(matches!(&p.ops[1], Op::Update(r, f) if r.id == 3 && f == &vec![1, 2]));
        assert!(matches!(&p.ops[4], Op::Update(r, f) if r.id == 5 && f == &vec![1, 2]));
        assert!(matches!(&p.ops[6], Op::Add(Some(9), _)));
        assert!(matches!(&p.ops[7], Op::Delete(_, 6)));
        for bad in [
            &br#"["POST",{"A":"x"}]"#[..],
            br#"{"Sample":["PUT",{"A":"x"}]}"#,
            br#"{"Sample":["u08",[1,"x"]]}"#,
            br#"{"Sample":["FROB",1]}"#,
            br#"{"Nope":[]}"#,
            br#"{"Sample":["POST"]}"#,
            br#"{"Sample":["POST",{"A":1}]}"#,
        ] {
            assert!(
                parse(&m, None, bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        Ok(())
    }
}
