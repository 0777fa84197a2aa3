//! Creating tables and indexes, and bringing existing ones up to the record.
//!
//! The column types, defaults and index statements here are also what the
//! external layer (`burrow-sql`) writes into SQLite files, so that a file
//! either engine creates is the same file; its index statements and errors
//! serve its other databases too.

use std::fmt::Display;

use burrow_core::{Error, Field, FieldKind, Result, Table};
use rusqlite::Connection;

use crate::statements::quote;
use crate::{eng, ENGINE};

/// The type of the ID column: the rowid itself.
pub const ID_TYPE: &str = "INTEGER PRIMARY KEY";

/// The declared SQLite type of a field kind.
pub fn column_type(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::F64 => "REAL",
        FieldKind::Text | FieldKind::Json | FieldKind::Date | FieldKind::DateTime => "TEXT",
        FieldKind::Blob => "BLOB",
        _ => "INTEGER",
    }
}

/// The default a NOT NULL column gets, so that a column added to a table with
/// rows holds a value its field type reads back.
pub fn column_default(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::F64 => "0.0",
        FieldKind::Text => "''",
        FieldKind::Json => "'null'",
        FieldKind::Date => "'1970-01-01'",
        FieldKind::DateTime => "'1970-01-01T00:00:00'",
        FieldKind::Blob => "x''",
        _ => "0",
    }
}

/// Appends what follows a column's quoted name in CREATE TABLE and ADD
/// COLUMN: its type, and for a NOT NULL column the default that lets it be
/// added to a table that has rows.
pub fn write_column_def(out: &mut String, kind: FieldKind, nullable: bool) {
    out.push(' ');
    out.push_str(column_type(kind));
    if !nullable {
        out.push_str(" NOT NULL DEFAULT ");
        out.push_str(column_default(kind));
    }
}

/// The name of a field's index: `table_column_uq` or `table_column_ix`.
pub fn index_name(table: &str, column: &str, unique: bool) -> String {
    format!("{table}_{column}_{}", if unique { "uq" } else { "ix" })
}

/// `CREATE [UNIQUE] INDEX IF NOT EXISTS`, every name given quoted.
pub fn index_ddl(table: &str, index: &str, column: &str, unique: bool) -> String {
    format!(
        "CREATE {}INDEX IF NOT EXISTS {index} ON {table} ({column})",
        if unique { "UNIQUE " } else { "" }
    )
}

/// The error of a failed index statement: for a unique index, most likely
/// rows that already break it, which is a schema problem the user must solve;
/// `other` reports any other failure.
pub fn index_error<E: Display>(
    table: &Table,
    field: &Field,
    e: E,
    other: impl FnOnce(E) -> Error,
) -> Error {
    if field.unique {
        Error::Schema(format!(
            "cannot make {}.{} unique: {e} (the stored rows hold duplicates)",
            table.name, field.name
        ))
    } else {
        other(e)
    }
}

/// Creates `table` with its indexes, or adds the columns an existing one lacks.
/// Runs in one transaction unless the caller's is open, so a failure changes
/// nothing.
pub(crate) fn ensure(conn: &Connection, table: &'static Table) -> Result<()> {
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

/// `"column" TYPE …` of a field.
fn column_def(f: &Field) -> String {
    let mut s = String::new();
    quote(&mut s, f.column);
    write_column_def(&mut s, f.kind, f.nullable);
    s
}

fn ensure_in_tx(conn: &Connection, table: &'static Table) -> Result<()> {
    let mut name = String::new();
    quote(&mut name, table.name);
    let existing = columns(conn, table.name)?;
    if existing.is_empty() {
        let mut ddl = format!("CREATE TABLE {name} (ID {ID_TYPE}");
        for f in table.fields {
            ddl.push_str(", ");
            ddl.push_str(&column_def(f));
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
        for f in table.fields {
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
                    let ddl = format!("ALTER TABLE {name} ADD COLUMN {}", column_def(f));
                    conn.execute_batch(&ddl).map_err(eng)?;
                }
            }
        }
    }
    for f in table.fields.iter().filter(|f| f.unique || f.indexed) {
        let mut index = String::new();
        quote(&mut index, &index_name(table.name, f.column, f.unique));
        let mut col = String::new();
        quote(&mut col, f.column);
        conn.execute_batch(&index_ddl(&name, &index, &col, f.unique))
            .map_err(|e| index_error(table, f, e, |e| Error::engine(ENGINE, e)))?;
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
