//! `burrow-tfb`: the TechEmpower benchmark server. See `apps/tfb/README.md`.

use std::net::SocketAddr;

use burrow_tfb::{Config, Store, Tfb, DEFAULT_PG_URL};
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Db {
    /// TFB's PostgreSQL database (every family).
    Postgres,
    /// SQLite in memory, filled at start (the ORM family).
    Sqlite,
    /// The memory engine, filled at start (the ORM family).
    Memory,
}

/// The TechEmpower Framework Benchmarks server, on Burrow.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Servers sharing the port, each with its own event loop and
    /// connections (default: the CPUs this process may use).
    #[arg(short = 's', long)]
    servers: Option<usize>,
    /// Event-loop threads per server.
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// Pin each server's threads to one CPU.
    #[arg(short = 'p', long)]
    pin: bool,
    /// The port to listen on (all addresses).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Where the ORM family's tables live.
    #[arg(long, value_enum, default_value_t = Db::Postgres)]
    db: Db,
    /// TFB's PostgreSQL database.
    #[arg(long, default_value = DEFAULT_PG_URL)]
    pg_url: String,
    /// PostgreSQL connections per server for the raw and async families.
    #[arg(long)]
    pg_conns: Option<usize>,
    /// PostgreSQL connections of the ORM family's pool.
    #[arg(long)]
    orm_pool: Option<usize>,
    /// Threads running the ORM family's PostgreSQL calls, each taking the
    /// queries of many requests at once (default: 2 per CPU).
    #[arg(long)]
    orm_threads: Option<usize>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("burrow-tfb: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // Every connection is a descriptor: TFB's 16,384 need the hard limit.
    let nofile = rlimit::increase_nofile_limit(u64::MAX)?;
    let store = match args.db {
        Db::Postgres => Store::Postgres(args.pg_url),
        Db::Sqlite => Store::Sqlite,
        Db::Memory => Store::Memory,
    };
    let mut config = Config::new(store, SocketAddr::from(([0, 0, 0, 0], args.port)));
    if let Some(s) = args.servers {
        config.servers = s.max(1);
    }
    config.threads = args.threads.max(1);
    config.pin = args.pin;
    if let Some(n) = args.pg_conns {
        config.pg_conns = n.max(1);
    }
    if let Some(n) = args.orm_pool {
        config.orm_pool = n.max(1);
    }
    if let Some(n) = args.orm_threads {
        config.orm_threads = n.max(1);
    }
    let tfb = Tfb::start(&config)?;
    println!(
        "burrow-tfb on http://{} ({} servers x {} threads{}, db {:?}, open files {nofile})",
        tfb.local_addr(),
        config.servers,
        config.threads,
        if config.pin { ", pinned" } else { "" },
        args.db,
    );
    tfb.run_until_signal()?;
    Ok(())
}
