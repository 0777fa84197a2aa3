//! Creating tables, or mapping records onto tables that already exist.
//!
//! A table the engine creates gets the column types of
//! [`Dialect::column_type`]. A table that exists keeps its own: each mapped
//! column's actual type decides how its field is stored (a `DATE` or a
//! `VARCHAR` for a date, a `TIMESTAMPTZ` or a `TEXT` for a date-time), and a
//! type that cannot hold the field is a [`Error::Schema`] naming both.

use burrow_core::{Error, FieldKind, Result, Table, ValueRef};
use burrow_sqlite::schema::{index_ddl, index_error};
use burrow_sqlite::statements::TableNames;

use crate::conn::{q_err, Conn};
use crate::dialect::{Dialect, Enc};
use crate::options::SqlOptions;
use crate::table::TableSql;
use crate::ENGINE;

/// A column as the database describes it.
struct ColInfo {
    name: String,
    /// Lower-case type: PostgreSQL `udt_name`, MySQL `DATA_TYPE`, SQLite's
    /// declared type.
    ty: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Int,
    Real,
    Bool,
    Text,
    Json,
    Blob,
    Date,
    Stamp,
    Other,
}

fn family(d: Dialect, ty: &str) -> Family {
    match d {
        Dialect::Postgres => match ty {
            "int2" | "int4" | "int8" => Family::Int,
            "float4" | "float8" => Family::Real,
            "bool" => Family::Bool,
            "text" | "varchar" | "bpchar" => Family::Text,
            "json" | "jsonb" => Family::Json,
            "bytea" => Family::Blob,
            "date" => Family::Date,
            "timestamp" | "timestamptz" => Family::Stamp,
            _ => Family::Other,
        },
        Dialect::MySql => match ty {
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => Family::Int,
            "float" | "double" | "real" => Family::Real,
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => Family::Text,
            "json" => Family::Json,
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                Family::Blob
            }
            "date" => Family::Date,
            "datetime" | "timestamp" => Family::Stamp,
            _ => Family::Other,
        },
        // SQLite's type affinity rules.
        Dialect::Sqlite => {
            let t = ty.to_ascii_uppercase();
            if t.contains("INT") {
                Family::Int
            } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
                Family::Text
            } else if t.contains("BLOB") || t.is_empty() {
                Family::Blob
            } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
                Family::Real
            } else {
                Family::Other
            }
        }
    }
}

/// How a field is stored in an existing column of this family, if it can be.
fn enc_for(kind: FieldKind, fam: Family) -> Option<Enc> {
    use FieldKind as K;
    Some(match (kind, fam) {
        (K::I32 | K::I64 | K::U32 | K::Reference(_), Family::Int) => Enc::Int,
        (K::F64, Family::Real) => Enc::Real,
        (K::Bool, Family::Bool | Family::Int) => Enc::Bool,
        (K::Currency, Family::Int) => Enc::Currency,
        (K::Text, Family::Text) => Enc::Text,
        (K::Json, Family::Text | Family::Json) => Enc::Text,
        (K::Blob, Family::Blob) => Enc::Blob,
        (K::Date, Family::Date) => Enc::Date,
        (K::Date, Family::Text) => Enc::DateText,
        (K::DateTime, Family::Stamp) => Enc::Stamp,
        (K::DateTime, Family::Text) => Enc::StampText,
        _ => return None,
    })
}

fn columns(conn: &mut dyn Conn, d: Dialect, db_name: &str, table: &Table) -> Result<Vec<ColInfo>> {
    let mut out = Vec::new();
    conn.query(
        d.columns_sql(),
        &[ValueRef::Text(db_name.into())],
        false,
        &mut |row| {
            let text = |i: usize| -> Result<String> {
                match row.value(i)? {
                    ValueRef::Text(t) => Ok(t.into_owned()),
                    ValueRef::Blob(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                    ValueRef::Null => Ok(String::new()),
                    other => Err(Error::engine(
                        ENGINE,
                        format!("catalog gave {}", other.type_name()),
                    )),
                }
            };
            out.push(ColInfo {
                name: text(0)?,
                ty: text(1)?.to_ascii_lowercase(),
            });
            Ok(())
        },
    )
    .map_err(|e| q_err(e, Some(table)))?;
    Ok(out)
}

/// Creates `table` with its indexes, or maps it onto the existing table and
/// adds the columns it lacks; returns its statements. `conn` is outside any
/// transaction (tables are set up on the engine, never inside a unit of work).
pub fn ensure(conn: &mut dyn Conn, opts: &SqlOptions, table: &'static Table) -> Result<TableSql> {
    let d = opts.dialect;
    let own_tx = d.transactional_ddl();
    if own_tx {
        conn.simple(d.begin_verb())
            .map_err(|e| e.into_error(ENGINE, Some(table)))?;
    }
    let r = ensure_in_tx(conn, opts, table);
    if own_tx {
        let end = if r.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let done = conn
            .simple(end)
            .map_err(|e| e.into_error(ENGINE, Some(table)));
        if r.is_ok() {
            done?;
        }
    }
    r
}

fn ensure_in_tx(conn: &mut dyn Conn, opts: &SqlOptions, table: &'static Table) -> Result<TableSql> {
    let d = opts.dialect;
    let db_name = opts.table_name(table).to_owned();
    let id_col = opts.column_name(table, "ID").to_owned();
    let col_names: Vec<String> = table
        .fields
        .iter()
        .map(|f| opts.column_name(table, f.name).to_owned())
        .collect();
    if let Some(dup) = col_names
        .iter()
        .enumerate()
        .find(|(i, c)| {
            c.eq_ignore_ascii_case(&id_col)
                || col_names[..*i].iter().any(|o| o.eq_ignore_ascii_case(c))
        })
        .map(|(_, c)| c)
    {
        return Err(Error::Schema(format!(
            "two fields of {} map to the column {dup:?}",
            table.name
        )));
    }
    let qname = d.quoted(&db_name);
    let existing = columns(conn, d, &db_name, table)?;
    let keyed = |i: usize| table.fields[i].unique || table.fields[i].indexed;
    let mut encs = Vec::with_capacity(table.fields.len());
    if existing.is_empty() {
        let mut ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qname} ({}",
            d.id_column_def(&d.quoted(&id_col))
        );
        for (i, f) in table.fields.iter().enumerate() {
            let enc = d.encoding(f.kind, opts.datetimes);
            ddl.push_str(", ");
            d.quote(&mut ddl, &col_names[i]);
            d.write_column_def(&mut ddl, f.kind, enc, keyed(i), f.nullable, false);
            encs.push(enc);
        }
        ddl.push(')');
        ddl.push_str(d.table_suffix());
        conn.simple(&ddl)
            .map_err(|e| e.into_error(ENGINE, Some(table)))?;
    } else {
        let find = |name: &str| existing.iter().find(|c| c.name.eq_ignore_ascii_case(name));
        match find(&id_col) {
            Some(c) if family(d, &c.ty) == Family::Int => {}
            Some(c) => {
                return Err(Error::Schema(format!(
                    "the ID column {db_name}.{id_col} is {}, not an integer",
                    c.ty
                )))
            }
            None => {
                return Err(Error::Schema(format!(
                    "table {db_name} exists without the ID column {id_col:?} (map another \
                     column with map_column({:?}, \"ID\", …))",
                    table.name
                )))
            }
        }
        for (i, f) in table.fields.iter().enumerate() {
            match find(&col_names[i]) {
                Some(c) => {
                    let enc = enc_for(f.kind, family(d, &c.ty)).ok_or_else(|| {
                        Error::Schema(format!(
                            "column {db_name}.{} is {} in the database, which cannot hold \
                             field {} ({})",
                            c.name,
                            c.ty,
                            f.name,
                            f.kind.name()
                        ))
                    })?;
                    encs.push(enc);
                }
                None => {
                    let enc = d.encoding(f.kind, opts.datetimes);
                    let mut ddl = format!("ALTER TABLE {qname} ADD COLUMN ");
                    d.quote(&mut ddl, &col_names[i]);
                    d.write_column_def(&mut ddl, f.kind, enc, keyed(i), f.nullable, true);
                    conn.simple(&ddl)
                        .map_err(|e| e.into_error(ENGINE, Some(table)))?;
                    encs.push(enc);
                }
            }
        }
    }
    for (i, f) in table.fields.iter().enumerate().filter(|(i, _)| keyed(*i)) {
        let mut col = d.quoted(&col_names[i]);
        // MySQL indexes unbounded text by a prefix only (a unique key over
        // the whole value is MariaDB's hash-based long unique).
        if d == Dialect::MySql && !f.unique && matches!(encs[i], Enc::Text | Enc::Blob) {
            let fam_ty = columns(conn, d, &db_name, table)?
                .into_iter()
                .find(|c| c.name.eq_ignore_ascii_case(&col_names[i]))
                .map(|c| c.ty)
                .unwrap_or_default();
            if fam_ty.contains("text") || fam_ty.contains("blob") {
                col.push_str("(255)");
            }
        }
        let index = d.quoted(&d.index_name(&db_name, &col_names[i], f.unique));
        conn.simple(&index_ddl(&qname, &index, &col, f.unique))
            .map_err(|e| index_error(table, f, e, |e| e.into_error(ENGINE, Some(table))))?;
    }
    let mut pg_types = Vec::new();
    let mut sequence = None;
    if d == Dialect::Postgres {
        let now = columns(conn, d, &db_name, table)?;
        let ty = |name: &str| {
            now.iter()
                .find(|c| c.name.eq_ignore_ascii_case(name))
                .map(|c| c.ty.clone())
                .unwrap_or_else(|| "text".into())
        };
        pg_types.push(ty(&id_col));
        pg_types.extend(col_names.iter().map(|c| ty(c)));
        if let Some(bad) = pg_types.iter().find(|t| {
            !t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        }) {
            return Err(Error::Schema(format!(
                "unexpected column type {bad:?} in {db_name}"
            )));
        }
        let mut seq = None;
        conn.query(
            "SELECT pg_get_serial_sequence($1, $2)",
            &[
                ValueRef::Text(qname.as_str().into()),
                ValueRef::Text(id_col.as_str().into()),
            ],
            false,
            &mut |row| {
                if let ValueRef::Text(t) = row.value(0)? {
                    seq = Some(t.into_owned());
                }
                Ok(())
            },
        )
        .map_err(|e| q_err(e, Some(table)))?;
        sequence = Some(seq.ok_or_else(|| {
            Error::Schema(format!(
                "the ID column {db_name}.{id_col} has no sequence: make it an identity \
                 (ALTER TABLE … ALTER COLUMN … ADD GENERATED BY DEFAULT AS IDENTITY) so that \
                 servers sharing the database draw IDs from one place"
            ))
        })?);
    }
    let names = TableNames {
        table: qname,
        id: d.quoted(&id_col),
        columns: col_names.iter().map(|c| d.quoted(c)).collect(),
        numbered: d.numbered_params(),
    };
    Ok(TableSql::new(table, d, names, encs, pg_types, sequence))
}
