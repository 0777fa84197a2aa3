//! Creating tables and indexes, and bringing existing ones up to the record.

use burrow_core::{Error, Result, Table};
use rusqlite::Connection;

use crate::statements::{column_def, column_type, quote};
use crate::{eng, ENGINE};

/// Creates `table` with its indexes, or adds the columns an existing one lacks.
/// Runs in one transaction unless the caller's is open, so a failure changes
/// nothing.
pub fn ensure(conn: &Connection, table: &'static Table) -> Result<()> {
    let own_tx = conn.is_autocommit();
    if own_tx {
        conn.execute_batch("BEGIN IMMEDIATE").map_err(eng)?;
    }
    let r = ensure_in_tx(conn, table);
    if own_tx {
        let end = if r.is_ok() { "COMMIT" } else { "ROLLBACK" };
        conn.execute_batch(end).map_err(eng)?;
    }
    r
}

fn ensure_in_tx(conn: &Connection, table: &'static Table) -> Result<()> {
    let mut name = String::new();
    quote(&mut name, table.name);
    let existing = columns(conn, table.name)?;
    if existing.is_empty() {
        let mut ddl = format!("CREATE TABLE {name} (ID INTEGER PRIMARY KEY");
        for i in 0..table.fields.len() {
            ddl.push_str(", ");
            ddl.push_str(&column_def(table, i));
        }
        ddl.push(')');
        conn.execute_batch(&ddl).map_err(eng)?;
    } else {
        match existing.iter().find(|c| c.name.eq_ignore_ascii_case("ID")) {
            Some(c) if c.pk && c.decl.eq_ignore_ascii_case("INTEGER") => {}
            _ => {
                return Err(Error::Schema(format!(
                    "table {} exists without an ID INTEGER PRIMARY KEY column",
                    table.name
                )))
            }
        }
        for (i, f) in table.fields.iter().enumerate() {
            match existing
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(f.column))
            {
                Some(c) if c.decl.eq_ignore_ascii_case(column_type(f.kind)) => {}
                Some(c) => {
                    return Err(Error::Schema(format!(
                        "column {}.{} is {} in the database, but field {} ({}) needs {}",
                        table.name,
                        f.column,
                        if c.decl.is_empty() {
                            "untyped"
                        } else {
                            &c.decl
                        },
                        f.name,
                        f.kind.name(),
                        column_type(f.kind)
                    )))
                }
                None => {
                    let ddl = format!("ALTER TABLE {name} ADD COLUMN {}", column_def(table, i));
                    conn.execute_batch(&ddl).map_err(eng)?;
                }
            }
        }
    }
    for f in table.fields.iter().filter(|f| f.unique || f.indexed) {
        let mut idx = String::new();
        quote(
            &mut idx,
            &format!(
                "{}_{}_{}",
                table.name,
                f.column,
                if f.unique { "uq" } else { "ix" }
            ),
        );
        let mut col = String::new();
        quote(&mut col, f.column);
        let ddl = format!(
            "CREATE {}INDEX IF NOT EXISTS {idx} ON {name} ({col})",
            if f.unique { "UNIQUE " } else { "" }
        );
        conn.execute_batch(&ddl).map_err(|e| {
            if f.unique {
                Error::Schema(format!(
                    "cannot make {}.{} unique: {e} (the stored rows hold duplicates)",
                    table.name, f.name
                ))
            } else {
                Error::engine(ENGINE, e)
            }
        })?;
    }
    Ok(())
}

struct ColumnInfo {
    name: String,
    decl: String,
    pk: bool,
}

fn columns(conn: &Connection, table: &str) -> Result<Vec<ColumnInfo>> {
    let mut stmt = conn
        .prepare("SELECT name, type, pk FROM pragma_table_info(?1)")
        .map_err(eng)?;
    let rows = stmt
        .query_map([table], |r| {
            Ok(ColumnInfo {
                name: r.get(0)?,
                decl: r.get(1)?,
                pk: r.get::<_, i64>(2)? > 0,
            })
        })
        .map_err(eng)?;
    rows.collect::<rusqlite::Result<_>>().map_err(eng)
}
