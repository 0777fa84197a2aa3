//! The writes of one row by ID (insert, update, delete) on a given
//! connection: the row calls run them, and batches fall back on them item by
//! item.

use burrow_core::{Error, Fields, Result, ValueRef};

use crate::conn::{q_err, query_i64, Conn, DbError};
use crate::table::TableSql;
use crate::values::{push_fields, Params};
use crate::ENGINE;

/// Inserts `row` with the given ID, or a new one; returns the ID.
pub(crate) fn insert(
    conn: &mut dyn Conn,
    guard: bool,
    t: &TableSql,
    id: Option<i64>,
    row: &dyn Fields,
) -> Result<i64> {
    let n = t.table.fields.len();
    let mut p = Params::new();
    let err = |e: DbError| e.into_error(ENGINE, Some(t.table));
    match id {
        None => {
            push_fields(t, row, 0..n, &mut p);
            if t.dialect.insert_returns_id() {
                query_i64(conn, &t.insert, &p, guard)
                    .map_err(|e| q_err(e, Some(t.table)))?
                    .ok_or_else(|| Error::engine(ENGINE, "INSERT returned no ID"))
            } else {
                conn.execute(&t.insert, &p, guard).map_err(err)?;
                Ok(conn.last_insert_id())
            }
        }
        Some(id) => {
            p.push(ValueRef::Int(id));
            push_fields(t, row, 0..n, &mut p);
            conn.execute(&t.insert_with_id, &p, guard).map_err(err)?;
            if let Some(seq) = &t.sequence {
                // Keep the sequence ahead of forced IDs, so that later new
                // IDs do not collide with them.
                let sql = format!(
                    "SELECT setval('{}', $1) FROM {seq} WHERE $1 > \
                     (CASE WHEN is_called THEN last_value ELSE last_value - 1 END)",
                    seq.replace('\'', "''")
                );
                conn.query(&sql, &[ValueRef::Int(id)], guard, &mut |_| Ok(()))
                    .map_err(|e| q_err(e, Some(t.table)))?;
            }
            Ok(id)
        }
    }
}

/// Updates every field of `row`, or the listed ones; returns whether the
/// row was there.
pub(crate) fn update(
    conn: &mut dyn Conn,
    guard: bool,
    t: &TableSql,
    row: &dyn Fields,
    fields: Option<&[usize]>,
) -> Result<bool> {
    let n = t.table.fields.len();
    let mut p = Params::new();
    let some;
    let sql: &str = match fields {
        None => {
            push_fields(t, row, 0..n, &mut p);
            &t.update_all
        }
        Some(list) => {
            if let Some(&bad) = list.iter().find(|&&i| i >= n) {
                return Err(Error::BadInput(format!(
                    "{} has no field #{bad}",
                    t.table.name
                )));
            }
            push_fields(t, row, list.iter().copied(), &mut p);
            some = t.update_some(list);
            &some
        }
    };
    p.push(ValueRef::Int(row.id()));
    let changed = conn
        .execute(sql, &p, guard)
        .map_err(|e| e.into_error(ENGINE, Some(t.table)))?;
    Ok(changed > 0)
}

/// Deletes the row of `id`; returns whether it was there.
pub(crate) fn delete(conn: &mut dyn Conn, guard: bool, t: &TableSql, id: i64) -> Result<bool> {
    let changed = conn
        .execute(&t.delete, &[ValueRef::Int(id)], guard)
        .map_err(|e| e.into_error(ENGINE, Some(t.table)))?;
    Ok(changed > 0)
}
