//! The TechEmpower Framework Benchmarks server, on Burrow's HTTP core
//! ([`burrow_http::web`]) and ORM.
//!
//! Three families answer the same tests: the ORM family through
//! [`burrow::Orm`] (`/db`, `/queries`, `/cached-queries`, `/updates`,
//! `/fortunes`), the raw family through the PostgreSQL driver with prepared
//! statements (`/rawdb`, `/rawqueries`, `/rawcached`, `/rawupdates`,
//! `/rawfortunes`), and the async family through the same driver with each
//! request's queries pipelined (`/asyncdb`, `/asyncqueries`,
//! `/asyncupdates`, `/asyncfortunes`); `/plaintext` and `/json` need no
//! database. See `apps/tfb/README.md`.

pub mod gather;
pub mod orm;
pub mod page;
pub mod raw;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use burrow_http::web::{HttpServer, Limits, Request, RequestHead, Response};

pub use orm::{Fortune, OrmSide, Store, World};
pub use raw::RawPg;

/// Rows of `World`.
pub const ROWS: i64 = 10_000;

/// The rows of `Fortune`, in ID order from 1, as TFB's scripts insert them.
pub const FORTUNES: [&str; 12] = [
    "fortune: No such file or directory",
    "A computer scientist is someone who fixes things that aren't broken.",
    "After enough decimal places, nobody gives a damn.",
    "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
    "A computer program does what you tell it to do, not what you want it to do.",
    "Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen",
    "Any program that runs right is obsolete.",
    "A list is only as strong as its weakest link. — Donald Knuth",
    "Feature: A bug with seniority.",
    "Computers make very fast, very accurate mistakes.",
    "<script>alert(\"This should not be displayed in a browser alert box.\");</script>",
    "フレームワークのベンチマーク",
];

/// TFB's database, as its scripts (and `apps/tfb/setup-db.sh`) create it.
pub const DEFAULT_PG_URL: &str =
    "postgres://benchmarkdbuser:benchmarkdbpass@127.0.0.1:5432/hello_world";

/// A random `World` ID, 1..=10,000.
pub fn random_id() -> i64 {
    fastrand::i64(1..=ROWS)
}

/// TFB's `queries`/`count` parameter: missing, empty, not a number or below
/// 1 means 1; above 500 means 500.
pub fn clamp_count(value: Option<&str>) -> usize {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return 1;
    };
    if v.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: too many of them for a u64 is still a number above 500.
        return v.parse::<u64>().map_or(500, |n| n.clamp(1, 500) as usize);
    }
    1
}

/// What the server is started with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the ORM family's tables live; the raw and async families need
    /// PostgreSQL and answer 404 otherwise.
    pub store: Store,
    /// The address every server listens on (they share it).
    pub addr: SocketAddr,
    /// Servers, each with its own event loop and database connections.
    pub servers: usize,
    /// Event-loop threads per server.
    pub threads: usize,
    /// Pin each server's threads to one CPU, servers spread over the CPUs.
    pub pin: bool,
    /// PostgreSQL connections per server for the raw and async families:
    /// one shared by every one-query request, the others taken in turn by
    /// requests of many queries ([`raw::RawPg::single`], [`raw::RawPg::multi`]).
    pub pg_conns: usize,
    /// PostgreSQL connections of the ORM family's pool (shared).
    pub orm_pool: usize,
    /// Threads running the ORM family's PostgreSQL calls, each taking the
    /// work queued by many requests at once (see [`gather`]).
    pub orm_threads: usize,
}

impl Config {
    /// Defaults for this machine: one server per CPU this process may run
    /// on (so `taskset` is respected), one thread each.
    pub fn new(store: Store, addr: SocketAddr) -> Config {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            store,
            addr,
            servers: cpus,
            threads: 1,
            pin: false,
            pg_conns: 5,
            orm_pool: 8 * cpus,
            orm_threads: 2 * cpus,
        }
    }
}

/// The handler: routes a request to its family.
pub struct App {
    orm: Arc<OrmSide>,
    /// Set once the server's runtime has connected it (PostgreSQL only).
    raw: OnceLock<RawPg>,
    /// Spreads connections over the raw connections.
    next: AtomicUsize,
}

/// What a connection keeps: the raw connection its requests use.
#[derive(Default)]
pub struct ConnState {
    pg: Option<usize>,
}

const PLAIN: &str = "text/plain";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// The paths served, for 404 against 405.
const PATHS: [&str; 17] = [
    "/plaintext",
    "/json",
    "/db",
    "/queries",
    "/cached-queries",
    "/cached_queries",
    "/updates",
    "/fortunes",
    "/rawdb",
    "/rawqueries",
    "/rawcached",
    "/rawupdates",
    "/rawfortunes",
    "/asyncdb",
    "/asyncqueries",
    "/asyncupdates",
    "/asyncfortunes",
];

impl burrow_http::web::Handler for App {
    type Conn = ConnState;

    async fn call(&self, conn: &mut ConnState, req: Request) -> Response {
        let head = req.head();
        let path = head.path();
        if !matches!(head.method(), "GET" | "HEAD") {
            if PATHS.contains(&path) {
                return Response::error(405, "Method Not Allowed").header("Allow", "GET, HEAD");
            }
            return Response::error(404, "Not Found");
        }
        match path {
            "/plaintext" => Response::with(PLAIN, b"Hello, World!".to_vec()),
            "/json" => json(&page::Message {
                message: "Hello, World!",
            }),
            // The database routes' future is large (a PostgreSQL query's
            // included): boxed, so that the requests above do not build and
            // move it.
            _ => Box::pin(self.database(conn, head)).await,
        }
    }
}

impl App {
    /// The ORM, raw and async families.
    async fn database(&self, conn: &mut ConnState, head: &RequestHead<'static>) -> Response {
        let n = |name: &str| count(head, name);
        match head.path() {
            "/db" => answer(self.orm.one().await),
            "/queries" => answer(self.orm.many(n("queries")).await),
            "/cached-queries" | "/cached_queries" => answer(self.orm.cached(n("count")).await),
            "/updates" => answer(self.orm.update(n("queries")).await),
            "/fortunes" => fortunes(self.orm.fortunes().await),
            _ => self.raw_family(conn, head).await,
        }
    }

    /// A handler over `orm`; the raw families answer once [`App::set_raw`]
    /// gave them connections.
    pub fn new(orm: Arc<OrmSide>) -> App {
        App {
            orm,
            raw: OnceLock::new(),
            next: AtomicUsize::new(0),
        }
    }

    /// Gives the raw and async families their connections.
    pub fn set_raw(&self, raw: RawPg) {
        let _ = self.raw.set(raw);
    }

    async fn raw_family(&self, conn: &mut ConnState, head: &RequestHead<'static>) -> Response {
        let path = head.path();
        let n = |name: &str| count(head, name);
        let Some(raw) = self.raw.get() else {
            return if PATHS.contains(&path) {
                Response::error(404, "the raw and async tests need --db postgres")
            } else {
                Response::error(404, "Not Found")
            };
        };
        let i = *conn
            .pg
            .get_or_insert_with(|| self.next.fetch_add(1, Ordering::Relaxed));
        let multi = raw.multi(i);
        match path {
            "/rawdb" | "/asyncdb" => answer(raw.single().one().await),
            "/rawqueries" => answer(multi.many(n("queries"), false).await),
            "/asyncqueries" => answer(multi.many(n("queries"), true).await),
            "/rawcached" => json(&raw.cached(n("count"))),
            "/rawupdates" => answer(multi.update(n("queries"), false).await),
            "/asyncupdates" => answer(multi.update(n("queries"), true).await),
            "/rawfortunes" | "/asyncfortunes" => fortunes(raw.single().fortunes().await),
            _ => Response::error(404, "Not Found"),
        }
    }
}

fn count(head: &RequestHead<'_>, name: &str) -> usize {
    clamp_count(head.param(name).as_deref())
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::with(JSON, body),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

fn answer<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> Response {
    match r {
        Ok(v) => json(&v),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

fn fortunes<E: std::fmt::Display>(r: Result<Vec<Fortune>, E>) -> Response {
    match r {
        Ok(rows) => Response::with(HTML, page::fortunes(rows).into_bytes()),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

/// The running servers.
pub struct Tfb {
    servers: Vec<HttpServer<App>>,
}

impl Tfb {
    /// Opens the store, then starts `config.servers` servers on one address.
    pub fn start(config: &Config) -> burrow::Result<Tfb> {
        let orm = Arc::new(OrmSide::open(
            &config.store,
            config.orm_pool,
            config.orm_threads,
        )?);
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let limits = Limits {
            // TFB opens up to 16,384 connections, all kept alive, from one
            // load generator's address (127.0.0.1 when run locally).
            max_connections: 1 << 20,
            max_connections_per_address: usize::MAX,
            // Bodies are tiny; compressing them would only cost time.
            gzip_min_bytes: usize::MAX,
            ..Limits::default()
        };
        let mut servers: Vec<HttpServer<App>> = Vec::with_capacity(config.servers);
        let mut addr = config.addr;
        for s in 0..config.servers.max(1) {
            let mut b = HttpServer::builder(App::new(orm.clone()))
                .server_name("Burrow")
                .threads(config.threads)
                .reuse_port(true)
                .limits(limits.clone());
            if config.pin && !cores.is_empty() {
                let core = cores[s % cores.len()];
                b = b.on_thread_start(move || {
                    core_affinity::set_for_current(core);
                });
            }
            let server = b.bind(addr)?;
            // Port 0 asks for a free port once: the servers after the first
            // share the port it got.
            addr = server.local_addr();
            if let Store::Postgres(url) = &config.store {
                let raw = server
                    .runtime()
                    .block_on(RawPg::connect(url, config.pg_conns))
                    .map_err(|e| {
                        burrow::Error::Io(std::io::Error::other(format!(
                            "PostgreSQL at {}: {e}",
                            burrow::sql::redact(url)
                        )))
                    })?;
                server.handler().set_raw(raw);
            }
            servers.push(server);
        }
        Ok(Tfb { servers })
    }

    /// The address the servers share.
    pub fn local_addr(&self) -> SocketAddr {
        self.servers[0].local_addr()
    }

    /// Whether the ORM family runs on the event loop (embedded engines).
    pub fn orm_inline(&self) -> bool {
        self.servers[0].handler().orm.inline()
    }

    /// Serves until Ctrl-C or SIGTERM, then stops every server.
    pub fn run_until_signal(mut self) -> std::io::Result<()> {
        let first = self.servers.remove(0);
        let r = first.wait_for_signal();
        first.shutdown();
        for s in self.servers {
            s.shutdown();
        }
        r
    }
}
