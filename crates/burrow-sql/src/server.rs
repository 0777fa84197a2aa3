//! What the engine learns about the server when it connects: its version,
//! and for MySQL the settings that bound multi-row statements.

use burrow_core::{Result, ValueRef};

use crate::conn::{q_err, Conn};
use crate::dialect::Dialect;

/// What the engine learnt about the server when it connected.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    pub version: String,
    /// MySQL: a multi-row INSERT gets consecutive IDs (`innodb_autoinc_lock_mode`
    /// 0 or 1), `id_step` apart (`auto_increment_increment`).
    pub consecutive_ids: bool,
    pub id_step: i64,
    /// MySQL: `max_allowed_packet`, which bounds a multi-row INSERT; `None`
    /// where no packet limit applies.
    pub max_packet: Option<usize>,
    /// `DELETE … RETURNING` (PostgreSQL, SQLite, MariaDB; not MySQL).
    pub returning: bool,
}

impl ServerInfo {
    /// Asks the server on `conn`.
    pub(crate) fn read(conn: &mut dyn Conn, d: Dialect) -> Result<ServerInfo> {
        let mut info = ServerInfo {
            version: String::new(),
            consecutive_ids: true,
            id_step: 1,
            max_packet: None,
            returning: true,
        };
        conn.query(d.server_info_sql(), &[], false, &mut |row| {
            if let ValueRef::Text(v) = row.value(0)? {
                info.version = v.into_owned();
            }
            // Only MySQL's query has more columns (see `Dialect::server_info_sql`).
            if row.len() > 1 {
                let int = |i: usize| -> Result<i64> {
                    Ok(match row.value(i)? {
                        ValueRef::Int(v) => v,
                        ValueRef::Text(t) => t.parse().unwrap_or(0),
                        _ => 0,
                    })
                };
                info.consecutive_ids = int(1)? != 2;
                info.id_step = int(2)?.max(1);
                info.max_packet = Some(usize::try_from(int(3)?).unwrap_or(4 << 20).max(64 * 1024));
                info.returning = info.version.to_ascii_lowercase().contains("mariadb");
            }
            Ok(())
        })
        .map_err(|e| q_err(e, None))?;
        Ok(info)
    }
}
