//! Reads: which rows a filter selects (through an index when it can), in which
//! order, after OFFSET and up to LIMIT.
//!
//! Rows come out in ID order unless an ORDER BY says otherwise, as SQLite's
//! table scans give them: the slots are in ID order while every insert brought
//! a higher ID than the last one (the usual case), and are sorted by ID when a
//! lower forced ID broke that.
//!
//! The caller's columns are those of its version of the record: `map` (a
//! [`crate::table::View::map`]) turns its field indexes into the table's slots,
//! and the rows it is handed see their fields through it.

use std::cell::Cell;
use std::cmp::Ordering;

use burrow_core::eval::{compare_rows, matches};
use burrow_core::{CmpOp, Column, Expr, Filter, Result, Select, Value};

use crate::layout::{param_key, MemRow};
use crate::table::TableData;

/// The rows a filter may select, before the filter itself runs on them.
enum Plan {
    /// Every row.
    All,
    /// These slots, in output order, without duplicates.
    Slots(Vec<u32>),
}

/// The table's column for the caller's column `c`; `None` past its fields.
fn slot_column(map: Option<&[usize]>, c: Column) -> Option<Column> {
    match (c, map) {
        (Column::Field(i), Some(m)) => m.get(i).map(|&s| Column::Field(s)),
        _ => Some(c),
    }
}

/// How good an index is for one term: the ID, a unique field, a plain index.
fn rank(t: &TableData, c: Column) -> Option<u8> {
    match c {
        Column::Id => Some(0),
        Column::Field(i) => t.index_kind(i).map(|unique| if unique { 1 } else { 2 }),
    }
}

/// Looks the values up in the index of `c`; `None` if one cannot be looked up
/// (a parameter of another type than the column's, or NULL): then the caller scans.
fn lookup(t: &TableData, c: Column, values: &[&Value], out: &mut Vec<u32>) -> Option<()> {
    match c {
        Column::Id => {
            for v in values {
                match v {
                    Value::Int(id) => out.extend(t.slot_of(*id)),
                    _ => return None,
                }
            }
        }
        Column::Field(i) => {
            let mut key = Vec::new();
            for v in values {
                param_key(&t.layout, i, &v.as_ref(), &mut key)?;
                t.lookup(i, &key, out);
            }
        }
    }
    Some(())
}

fn plan(t: &TableData, map: Option<&[usize]>, filter: &Filter) -> Plan {
    let Some(e) = &filter.expr else {
        return Plan::All;
    };
    let terms = match e {
        Expr::And(v) => v.as_slice(),
        other => std::slice::from_ref(other),
    };
    let mut usable: Vec<(u8, Column, Vec<&Value>)> = Vec::new();
    for term in terms {
        let (c, params): (Column, &[usize]) = match term {
            Expr::Cmp(c, CmpOp::Eq, p) => (*c, std::slice::from_ref(p)),
            Expr::In(c, list, false) => (*c, list.as_slice()),
            _ => continue,
        };
        let Some(c) = slot_column(map, c) else {
            continue;
        };
        let Some(r) = rank(t, c) else { continue };
        let Some(values) = params
            .iter()
            .map(|&p| filter.params.get(p))
            .collect::<Option<Vec<&Value>>>()
        else {
            continue;
        };
        usable.push((r, c, values));
    }
    usable.sort_by_key(|u| (u.0, u.2.len()));
    for (_, c, values) in usable {
        let mut slots = Vec::new();
        if lookup(t, c, &values, &mut slots).is_some() {
            sort_slots(t, &mut slots);
            slots.dedup();
            return Plan::Slots(slots);
        }
    }
    Plan::All
}

/// Sorts slots into output order: by slot when the table is in ID order, else by ID.
fn sort_slots(t: &TableData, slots: &mut [u32]) {
    if t.ordered() {
        slots.sort_unstable();
    } else {
        slots.sort_unstable_by_key(|&s| t.rows[s as usize].as_ref().map_or(i64::MIN, |r| r.id));
    }
}

/// Calls `f` with every selected row in ID order (descending with `rev`) until
/// it returns `false`.
pub fn visit<'t>(
    t: &'t TableData,
    map: Option<&'t [usize]>,
    filter: &Filter,
    rev: bool,
    f: &mut dyn FnMut(u32, &MemRow<'t>) -> Result<bool>,
) -> Result<()> {
    let list = match plan(t, map, filter) {
        Plan::All if t.ordered() => None,
        Plan::All => {
            let mut v: Vec<u32> = (0..t.rows.len() as u32)
                .filter(|&s| t.rows[s as usize].is_some())
                .collect();
            sort_slots(t, &mut v);
            Some(v)
        }
        Plan::Slots(v) => Some(v),
    };
    let mut step = |slot: u32| -> Result<bool> {
        match t.row(slot, map) {
            Some(row) if matches(filter, &row)? => f(slot, &row),
            _ => Ok(true),
        }
    };
    let n = t.rows.len() as u32;
    match (list, rev) {
        (None, false) => {
            for s in id_bound(t, filter, false).unwrap_or(0)..n {
                if !step(s)? {
                    break;
                }
            }
        }
        (None, true) => {
            for s in (0..id_bound(t, filter, true).map_or(n, |s| s + 1)).rev() {
                if !step(s)? {
                    break;
                }
            }
        }
        (Some(v), false) => {
            for s in v {
                if !step(s)? {
                    break;
                }
            }
        }
        (Some(v), true) => {
            for s in v.into_iter().rev() {
                if !step(s)? {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Where a scan of a table in ID order may start (or, reversed, end): at
/// the row that a top-level `ID >` or `ID >=` (reversed: `<`, `<=`) names,
/// when that row exists. A list read a page at a time gives one, the last
/// ID of the page before: each page then costs its own rows, not a scan of
/// all those before it. The filter still checks every row.
fn id_bound(t: &TableData, filter: &Filter, rev: bool) -> Option<u32> {
    let terms = match filter.expr.as_ref()? {
        Expr::And(v) => v.as_slice(),
        other => std::slice::from_ref(other),
    };
    terms.iter().find_map(|term| match term {
        Expr::Cmp(Column::Id, op, p)
            if matches!(
                (op, rev),
                (CmpOp::Gt | CmpOp::Ge, false) | (CmpOp::Lt | CmpOp::Le, true)
            ) =>
        {
            match filter.params.get(*p) {
                Some(Value::Int(id)) => t.slot_of(*id),
                _ => None,
            }
        }
        _ => None,
    })
}

/// Calls `out` with each row `select` selects, in its order, after its offset
/// and up to its limit, until `out` returns `false`.
pub fn select<'t>(
    t: &'t TableData,
    map: Option<&'t [usize]>,
    select: &Select,
    out: &mut dyn FnMut(&MemRow<'t>) -> Result<bool>,
) -> Result<()> {
    let mut left = select.limit.unwrap_or(u64::MAX);
    if left == 0 {
        return Ok(());
    }
    let mut skip = select.offset;
    // IDs are unique: an ORDER BY that starts with the ID is the ID order.
    let id_order = match select.order.first() {
        None => Some(false),
        Some((Column::Id, desc)) => Some(*desc),
        Some(_) => None,
    };
    if let Some(rev) = id_order {
        return visit(t, map, &select.filter, rev, &mut |_, row| {
            if skip > 0 {
                skip -= 1;
                return Ok(true);
            }
            left -= 1;
            Ok(out(row)? && left > 0)
        });
    }
    let mut slots = Vec::new();
    visit(t, map, &select.filter, false, &mut |slot, _| {
        slots.push(slot);
        Ok(true)
    })?;
    // Ties keep ID order (the order the rows were found in), so the sort is
    // total and a partial sort for a small LIMIT gives the same rows.
    let pos = |s: u32| {
        if t.ordered() {
            i64::from(s)
        } else {
            t.rows[s as usize].as_ref().map_or(0, |r| r.id)
        }
    };
    let failed: Cell<Option<burrow_core::Error>> = Cell::new(None);
    let cmp = |a: &u32, b: &u32| -> Ordering {
        let (ra, rb) = (t.row(*a, map), t.row(*b, map));
        let (Some(ra), Some(rb)) = (ra, rb) else {
            return Ordering::Equal;
        };
        match compare_rows(&select.order, &ra, &rb) {
            Ok(Ordering::Equal) => pos(*a).cmp(&pos(*b)),
            Ok(o) => o,
            Err(e) => {
                failed.set(Some(e));
                Ordering::Equal
            }
        }
    };
    let wanted = usize::try_from(skip.saturating_add(left)).unwrap_or(usize::MAX);
    if wanted < slots.len() / 2 {
        slots.select_nth_unstable_by(wanted, cmp);
        slots.truncate(wanted);
    }
    slots.sort_unstable_by(cmp);
    if let Some(e) = failed.take() {
        return Err(e);
    }
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    for &s in slots.iter().skip(skip) {
        if let Some(row) = t.row(s, map) {
            left -= 1;
            if !out(&row)? || left == 0 {
                break;
            }
        }
    }
    Ok(())
}

/// How many rows `filter` selects.
pub fn count(t: &TableData, map: Option<&[usize]>, filter: &Filter) -> Result<u64> {
    if filter.expr.is_none() {
        return Ok(t.live as u64);
    }
    let mut n = 0u64;
    visit(t, map, filter, false, &mut |_, _| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}
