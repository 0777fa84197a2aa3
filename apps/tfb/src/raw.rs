//! The raw and async families: `tokio-postgres` on the server's own event
//! loop, with statements prepared once per connection.
//!
//! Both families share the connections; they differ in how one request's
//! queries go out. Raw awaits each query before sending the next (one round
//! trip each); async sends them all at once, which `tokio-postgres` turns
//! into PostgreSQL's pipeline: every query its own Parse/Bind/Execute/Sync,
//! back to back on the socket, the answers read in order.

use futures_util::future::try_join_all;
use tokio_postgres::{Client, NoTls, Statement};

use crate::orm::{new_number, Fortune, World};
use crate::random_id;

/// One connection and its prepared statements.
pub struct PgConn {
    client: Client,
    world: Statement,
    fortunes: Statement,
    /// One `UPDATE` of many rows: the IDs and their new numbers bound as
    /// two arrays, joined by position.
    update: Statement,
}

/// The connections one server's requests share.
pub struct RawPg {
    conns: Vec<PgConn>,
    /// Every `World` row, read once at start, for `/rawcached`.
    cached: Vec<i32>,
}

/// What the raw family's errors say.
pub type PgResult<T> = Result<T, tokio_postgres::Error>;

impl RawPg {
    /// Opens `n` connections (on the current Tokio runtime, which drives
    /// them) and prepares their statements.
    pub async fn connect(url: &str, n: usize) -> PgResult<RawPg> {
        let mut conns = Vec::with_capacity(n.max(1));
        for _ in 0..n.max(1) {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let world = client
                .prepare("SELECT id, randomnumber FROM world WHERE id = $1")
                .await?;
            let fortunes = client.prepare("SELECT id, message FROM fortune").await?;
            let update = client
                .prepare(
                    "UPDATE world SET randomnumber = v.r \
                     FROM (SELECT unnest($1::int[]) AS id, unnest($2::int[]) AS r) AS v \
                     WHERE world.id = v.id",
                )
                .await?;
            conns.push(PgConn {
                client,
                world,
                fortunes,
                update,
            });
        }
        let mut cached = vec![0; crate::ROWS as usize + 1];
        for row in conns[0]
            .client
            .query("SELECT id, randomnumber FROM world", &[])
            .await?
        {
            let id: i32 = row.get(0);
            if let Some(slot) = usize::try_from(id).ok().and_then(|i| cached.get_mut(i)) {
                *slot = row.get(1);
            }
        }
        Ok(RawPg { conns, cached })
    }

    /// How many connections it holds.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether it holds none (never: [`RawPg::connect`] opens at least one).
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The connection every one-query request shares. PostgreSQL's cost of
    /// a one-row query is mostly its backend waking to read it and writing
    /// the answer: on one connection the queries of all concurrent requests
    /// are read and answered together, a few dozen per wake-up, where spread
    /// over four connections each backend woke for a few. Measured on two
    /// cores, `/asyncdb` and `/rawdb`: about 1.25× the requests/s of
    /// connections taken in turn.
    pub fn single(&self) -> &PgConn {
        &self.conns[0]
    }

    /// A connection for a request of many queries, `i` chosen per HTTP
    /// connection: the others than [`RawPg::single`]'s, in turn, so that
    /// such requests use PostgreSQL's processes side by side (20-query
    /// updates ran 1.5× faster on four connections than on one) and never
    /// queue the one-query requests behind them.
    pub fn multi(&self, i: usize) -> &PgConn {
        match self.conns.len() {
            0 | 1 => &self.conns[0],
            n => &self.conns[1 + i % (n - 1)],
        }
    }

    /// `n` rows from the table read at start.
    pub fn cached(&self, n: usize) -> Vec<World> {
        (0..n)
            .map(|_| {
                let id = random_id();
                World {
                    id,
                    random_number: self.cached[id as usize],
                }
            })
            .collect()
    }
}

impl PgConn {
    async fn world(&self, id: i64) -> PgResult<World> {
        let row = self.client.query_one(&self.world, &[&(id as i32)]).await?;
        Ok(World {
            id: i64::from(row.get::<_, i32>(0)),
            random_number: row.get(1),
        })
    }

    /// One random row.
    pub async fn one(&self) -> PgResult<World> {
        self.world(random_id()).await
    }

    /// `n` random rows; `pipelined` sends all the queries before the first
    /// answer comes back.
    pub async fn many(&self, n: usize, pipelined: bool) -> PgResult<Vec<World>> {
        if pipelined {
            try_join_all((0..n).map(|_| self.world(random_id()))).await
        } else {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(self.world(random_id()).await?);
            }
            Ok(out)
        }
    }

    /// `n` random rows, each given a new random number, written back by one
    /// statement.
    pub async fn update(&self, n: usize, pipelined: bool) -> PgResult<Vec<World>> {
        let mut rows = self.many(n, pipelined).await?;
        for w in &mut rows {
            w.random_number = new_number(w.random_number);
        }
        // In ID order, so that two requests updating the same rows lock
        // them in the same order and never deadlock.
        let mut sorted: Vec<(i32, i32)> = rows
            .iter()
            .map(|w| (w.id as i32, w.random_number))
            .collect();
        sorted.sort_unstable();
        sorted.dedup_by_key(|(id, _)| *id);
        let (ids, numbers): (Vec<i32>, Vec<i32>) = sorted.into_iter().unzip();
        self.client.execute(&self.update, &[&ids, &numbers]).await?;
        // A row drawn twice keeps the number that was written.
        for w in &mut rows {
            if let Ok(i) = ids.binary_search(&(w.id as i32)) {
                w.random_number = numbers[i];
            }
        }
        Ok(rows)
    }

    /// Every fortune.
    pub async fn fortunes(&self) -> PgResult<Vec<Fortune>> {
        Ok(self
            .client
            .query(&self.fortunes, &[])
            .await?
            .into_iter()
            .map(|r| Fortune {
                id: i64::from(r.get::<_, i32>(0)),
                message: r.get(1),
            })
            .collect())
    }
}
