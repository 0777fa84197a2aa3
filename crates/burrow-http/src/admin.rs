//! Backups over HTTP, for administrators (users of a group made with
//! [`crate::Group::admin`]), into the folder set with
//! [`crate::ServerBuilder::backup_folder`]:
//!
//! - `POST /{root}/_backup?file=NAME[&table=TABLE][&gzip=1]` starts a backup
//!   of the engine holding `TABLE` (the only engine, when there is one) to
//!   `NAME` in that folder: `202` and the job, as `GET` shows it.
//! - `GET /{root}/_backup/{id}`: a job's state (`running` with `done` and
//!   `total` in the engine's units, `done` with `bytes`, or `failed` with
//!   `error`); `GET /{root}/_backup`: the recent jobs.
//!
//! Nothing but a plain file name is accepted (letters, digits, `.`, `_`, `-`,
//! not starting with a dot), so a backup lands in the folder and nowhere
//! else, and never replaces a file there (`409`). One backup runs at a time,
//! on its own thread; the engine keeps serving (see each engine's backup).
//! Anonymous callers get `401`, other users `403`, and a server without
//! authentication offers no backups at all.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use burrow_core::{json, Error, Result, Storage};

use crate::auth::Principal;
use crate::rest::RestRequest;
use crate::server::Shared;
use crate::web::Response;

/// Jobs remembered for `GET` once finished; older ones are forgotten.
const KEPT_JOBS: usize = 32;
/// The longest file name accepted.
const MAX_NAME: usize = 128;

type Outcome = std::result::Result<Response, Response>;

/// The server's backup folder and its jobs.
pub(crate) struct Backups {
    folder: PathBuf,
    desk: Mutex<Desk>,
}

#[derive(Default)]
struct Desk {
    next_id: u64,
    jobs: VecDeque<Arc<Job>>,
}

struct Job {
    id: u64,
    file: String,
    gzip: bool,
    started: Instant,
    state: Mutex<State>,
}

enum State {
    Running { done: u64, total: u64 },
    Done { bytes: u64, seconds: f64 },
    Failed(String),
}

impl Backups {
    /// The folder, created if missing; an error if it is not a folder.
    pub(crate) fn new(folder: &Path) -> Result<Backups> {
        let io = |what: &str, e: std::io::Error| {
            Error::BadInput(format!("backup folder {}: {what}: {e}", folder.display()))
        };
        std::fs::create_dir_all(folder).map_err(|e| io("cannot create it", e))?;
        // Resolved once: a link swapped in later for the folder's path
        // changes nothing.
        let folder = folder
            .canonicalize()
            .map_err(|e| io("cannot resolve it", e))?;
        Ok(Backups {
            folder,
            desk: Mutex::default(),
        })
    }

    fn desk(&self) -> std::sync::MutexGuard<'_, Desk> {
        self.desk.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Job {
    fn json(&self) -> Vec<u8> {
        let mut out = format!("{{\"id\":{},\"file\":", self.id).into_bytes();
        json::write_str(&mut out, &self.file);
        out.extend_from_slice(format!(",\"gzip\":{}", self.gzip).as_bytes());
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { done, total } => out.extend_from_slice(
                format!(
                    ",\"state\":\"running\",\"done\":{done},\"total\":{total},\"seconds\":{:.3}",
                    self.started.elapsed().as_secs_f64()
                )
                .as_bytes(),
            ),
            State::Done { bytes, seconds } => out.extend_from_slice(
                format!(",\"state\":\"done\",\"bytes\":{bytes},\"seconds\":{seconds:.3}")
                    .as_bytes(),
            ),
            State::Failed(e) => {
                out.extend_from_slice(b",\"state\":\"failed\",\"error\":");
                json::write_str(&mut out, e);
            }
        }
        out.push(b'}');
        out
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    fn running(&self) -> bool {
        matches!(
            *self.state.lock().unwrap_or_else(PoisonError::into_inner),
            State::Running { .. }
        )
    }
}

/// `/{root}/_backup…`; `rest` is the path after `_backup`.
pub(crate) fn handle(sh: &Shared, req: &RestRequest, who: Principal, rest: &[&str]) -> Outcome {
    let Some(backups) = &sh.backups else {
        return Err(Response::error(
            404,
            "backups over HTTP are not enabled on this server",
        ));
    };
    let Some(auth) = &sh.auth else {
        return Err(Response::error(
            403,
            "backups over HTTP need authentication and an administrator",
        ));
    };
    if who == Principal::Anyone {
        return Err(Response::error(401, "authentication required"));
    }
    if !auth.is_admin(who) {
        return Err(Response::error(403, "backups are for administrators"));
    }
    match (req.method(), rest) {
        ("POST", []) => start(sh, backups, req),
        ("GET" | "HEAD", []) => {
            let desk = backups.desk();
            let mut out = b"[".to_vec();
            for (i, job) in desk.jobs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&job.json());
            }
            out.push(b']');
            Ok(Response::json(out))
        }
        ("GET" | "HEAD", [id]) => {
            let id: u64 = id
                .parse()
                .map_err(|_| Response::error(400, "a backup job's ID is a number"))?;
            let desk = backups.desk();
            let job = desk
                .jobs
                .iter()
                .find(|j| j.id == id)
                .ok_or_else(|| Response::error(404, &format!("no backup job {id}")))?;
            Ok(Response::json(job.json()))
        }
        (_, [] | [_]) => Err(Response::error(405, "Method Not Allowed")),
        _ => Err(Response::error(404, "Not Found")),
    }
}

/// Checks a backup's file name: a plain name in the folder, nothing else.
fn file_name(name: &str) -> std::result::Result<&str, Response> {
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        Ok(name)
    } else {
        Err(Response::error(
            400,
            &format!(
                "a backup's file is a plain name of at most {MAX_NAME} letters, digits, '.', '_' \
                 or '-', not starting with '.'; it is written in the server's backup folder"
            ),
        ))
    }
}

fn start(sh: &Shared, backups: &Backups, req: &RestRequest) -> Outcome {
    let name = req
        .param("file")
        .ok_or_else(|| Response::error(400, "name the backup's file: ?file=NAME"))?;
    let name = file_name(&name)?.to_owned();
    let gzip = matches!(req.param("gzip").as_deref(), Some("1" | "true"));
    let engine: Arc<dyn Storage> = match req.param("table") {
        Some(t) => {
            let table = crate::rest::table(sh, &t)?;
            sh.client.engine(table).map_err(crate::rest::err)?.clone()
        }
        None => match sh.client.engines() {
            [one] => one.clone(),
            _ => {
                return Err(Response::error(
                    400,
                    "this server has several engines: name a table whose engine to back up \
                     (?table=NAME)",
                ))
            }
        },
    };
    if engine.online_backup().is_none() {
        return Err(Response::error(
            400,
            &format!(
                "the {} engine cannot back up while it serves",
                engine.caps().name
            ),
        ));
    }
    let path = backups.folder.join(&name);
    let mut desk = backups.desk();
    if let Some(job) = desk.jobs.iter().find(|j| j.running()) {
        return Err(Response::error(
            409,
            &format!("backup job {} is running; one runs at a time", job.id),
        ));
    }
    // `symlink_metadata`: a link of that name counts as a file, whatever it
    // points to.
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(Response::error(
            409,
            &format!("{name} is already in the backup folder; a backup never replaces a file"),
        ));
    }
    desk.next_id += 1;
    let job = Arc::new(Job {
        id: desk.next_id,
        file: name,
        gzip,
        started: Instant::now(),
        state: Mutex::new(State::Running { done: 0, total: 0 }),
    });
    let worker = job.clone();
    let spawned = std::thread::Builder::new()
        .name("burrow-backup".into())
        .spawn(move || {
            let Some(backup) = engine.online_backup() else {
                return;
            };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                backup.backup_to(&path, gzip, &mut |done, total| {
                    worker.set(State::Running { done, total })
                })
            }));
            worker.set(match r {
                Ok(Ok(bytes)) => State::Done {
                    bytes,
                    seconds: worker.started.elapsed().as_secs_f64(),
                },
                Ok(Err(e)) => State::Failed(e.to_string()),
                Err(_) => State::Failed("the backup stopped on an internal error".into()),
            });
        });
    if spawned.is_err() {
        return Err(Response::error(
            503,
            "cannot start a backup now; try again later",
        ));
    }
    if desk.jobs.len() >= KEPT_JOBS {
        if let Some(i) = desk.jobs.iter().position(|j| !j.running()) {
            desk.jobs.remove(i);
        }
    }
    desk.jobs.push_back(job.clone());
    let mut r = Response::json(job.json());
    r.status = 202;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_are_backup_files() {
        for ok in ["db.bak", "2026-11-24_full.db.gz", "a", "A-b_c.1"] {
            assert!(file_name(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(MAX_NAME + 1);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "../x",
            "a/b",
            "a\\b",
            "/etc/passwd",
            "x\0y",
            "a b",
            "é.db",
            "%2e%2e",
            long.as_str(),
        ] {
            assert_eq!(file_name(bad).unwrap_err().status, 400, "{bad:?}");
        }
    }
}
