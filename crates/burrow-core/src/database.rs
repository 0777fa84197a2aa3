//! The model (which tables exist) and the in-process client (which engine holds each).

use std::sync::Arc;

use crate::batch::BatchOptions;
use crate::error::{Error, Result};
use crate::orm::Orm;
use crate::record::Record;
use crate::schema::Table;
use crate::storage::{BatchItem, BatchResult, Caps, RowOps, SqlHost, Storage};
use crate::transaction::{self, Transaction};

/// The tables of an application.
#[derive(Debug, Clone, Default)]
pub struct Model {
    tables: Vec<&'static Table>,
}

impl Model {
    /// An empty model.
    pub fn new() -> Self {
        Model::default()
    }

    /// Adds the table of `T`.
    pub fn with<T: Record>(mut self) -> Self {
        self.add_table(T::table());
        self
    }

    /// Adds a table by its description.
    pub fn add_table(&mut self, table: &'static Table) {
        if !self.tables.iter().any(|t| t.same(table)) {
            self.tables.push(table);
        }
    }

    /// The tables, in the order they were added.
    pub fn tables(&self) -> &[&'static Table] {
        &self.tables
    }

    /// The table called `name` (ASCII case ignored).
    pub fn table(&self, name: &str) -> Option<&'static Table> {
        self.tables
            .iter()
            .copied()
            .find(|t| t.name.eq_ignore_ascii_case(name))
    }
}

/// The in-process client: a model whose tables are each held by an engine.
///
/// ```ignore
/// let client = Database::builder(model)
///     .default_engine(sqlite)          // every table not placed elsewhere
///     .place::<Session>(memory)         // this one in the memory engine
///     .open()?;                         // creates or upgrades the tables
/// ```
///
/// Every call made on the client is its own transaction on the engine that
/// holds the table. [`Database::transaction`] opens one over every engine of
/// the model, as a value the calls of that unit of work go through.
pub struct Database {
    model: Model,
    routes: Vec<(&'static Table, usize)>,
    /// In the one order every client takes engines in (see
    /// [`transaction::engine_order`]), so that transactions over several
    /// engines never wait for each other in a circle.
    engines: Vec<Arc<dyn Storage>>,
    /// The default engine, which runs SQL over every table.
    sql: Option<usize>,
    /// Whether a whole-table statement goes straight to its table's engine
    /// (see [`DatabaseBuilder::sql_direct`]).
    sql_direct: bool,
}

impl Database {
    /// Opens `model` with every table in `engine`.
    pub fn open(model: Model, engine: Arc<dyn Storage>) -> Result<Database> {
        Database::builder(model).default_engine(engine).open()
    }

    /// Starts placing the tables of `model` in engines.
    pub fn builder(model: Model) -> DatabaseBuilder {
        DatabaseBuilder {
            model,
            default: None,
            placed: Vec::new(),
            sql_direct: true,
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The engine that holds the table called `name`.
    pub fn engine_of(&self, name: &str) -> Option<&Arc<dyn Storage>> {
        self.routes
            .iter()
            .find(|(t, _)| t.name.eq_ignore_ascii_case(name))
            .map(|(_, e)| &self.engines[*e])
    }

    /// The engine that holds `table`.
    pub fn engine(&self, table: &'static Table) -> Result<&Arc<dyn Storage>> {
        self.engine_index(table).map(|e| &self.engines[e])
    }

    /// Every engine of the model, each once, in the order transactions take them.
    pub fn engines(&self) -> &[Arc<dyn Storage>] {
        &self.engines
    }

    #[inline]
    pub(crate) fn engine_index(&self, table: &'static Table) -> Result<usize> {
        // A model has a handful of tables: a scan by address beats hashing.
        for (t, e) in &self.routes {
            if std::ptr::eq(*t, table) {
                return Ok(*e);
            }
        }
        self.engine_index_by_name(table)
    }

    /// Another version of a record with the same table: found by definition.
    #[cold]
    fn engine_index_by_name(&self, table: &'static Table) -> Result<usize> {
        self.routes
            .iter()
            .find(|(t, _)| t.same(table))
            .map(|(_, e)| *e)
            .ok_or_else(|| Error::UnknownTable(table.name.to_owned()))
    }

    /// The engine holding `table` and what it can do, when it is not the
    /// SQL host (see [`Orm::sql_list`]).
    pub(crate) fn elsewhere(&self, table: &'static Table) -> Option<(usize, Caps)> {
        let e = self.engine_index(table).ok()?;
        (self.sql_direct && Some(e) != self.sql).then(|| (e, self.engines[e].caps()))
    }

    /// The error of SQL asked of engine `e`, which runs none.
    pub(crate) fn no_sql(&self, e: usize) -> Error {
        Error::Unsupported(format!(
            "the {} engine does not run SQL",
            self.engines[e].caps().name
        ))
    }

    pub(crate) fn sql_index(&self) -> Result<usize> {
        self.sql
            .ok_or_else(|| Error::Unsupported("the client has no default engine to run SQL".into()))
    }

    /// Begins a transaction on every engine of the model, in the one fixed
    /// order all clients use. Calls go through the returned handle, which
    /// commits when consumed by [`Transaction::commit`] and rolls back when
    /// dropped. A transaction has no `transaction` method, so nesting one
    /// does not compile; a second transaction begun on the client while
    /// this one is open waits for it, at most the engines' lock timeout
    /// ([`Error::Busy`]).
    pub fn transaction(&self) -> Result<Transaction<'_>> {
        Transaction::begin(transaction::ClientRef::Borrowed(self))
    }

    /// [`Database::transaction`] on a shared client: the handle owns its
    /// reference, so it can be kept between calls (a server keeps one per
    /// connection between `BEGIN` and `END`).
    pub fn transaction_shared(self: &Arc<Self>) -> Result<Transaction<'static>> {
        Transaction::begin(transaction::ClientRef::Shared(self.clone()))
    }

    /// Runs `f` in a transaction: committed when it returns `Ok`, rolled back
    /// when it returns an error or panics.
    pub fn in_transaction<R>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<R>) -> Result<R> {
        let tx = self.transaction()?;
        let r = f(&tx)?;
        tx.commit()?;
        Ok(r)
    }
}

impl Orm for Database {
    #[inline]
    fn route(&self, table: &'static Table) -> Result<&dyn RowOps> {
        let e = self.engine_index(table)?;
        Ok(&*self.engines[e] as &dyn RowOps)
    }

    fn sql_host(&self) -> Result<&dyn SqlHost> {
        let e = self.sql_index()?;
        self.engines[e].sql_host().ok_or_else(|| self.no_sql(e))
    }

    fn sql_elsewhere(&self, table: &'static Table) -> Option<(&dyn RowOps, Caps)> {
        let (e, caps) = self.elsewhere(table)?;
        Some((&*self.engines[e] as &dyn RowOps, caps))
    }

    fn apply_items(
        &self,
        items: &[BatchItem<'_>],
        options: BatchOptions,
        stop_on_error: bool,
    ) -> Result<Vec<BatchResult>> {
        // Runs of items in one engine, not an engine per item: a 10,000-item
        // batch of one table had its engine written 10,000 times into memory
        // no cache held, then copied and sorted per chunk.
        let mut runs: Vec<transaction::Run> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let engine = self.engine_index(item.table)?;
            match runs.last_mut() {
                Some(run) if run.engine == engine => run.end = i + 1,
                _ => runs.push(transaction::Run { engine, end: i + 1 }),
            }
        }
        transaction::run_batch(&self.engines, items, &runs, options, stop_on_error)
    }
}

/// Places the tables of a model in engines; see [`Database::builder`].
pub struct DatabaseBuilder {
    model: Model,
    default: Option<Arc<dyn Storage>>,
    placed: Vec<(&'static Table, Arc<dyn Storage>)>,
    sql_direct: bool,
}

impl DatabaseBuilder {
    /// The engine of every table not placed elsewhere.
    pub fn default_engine(mut self, engine: Arc<dyn Storage>) -> Self {
        self.default = Some(engine);
        self
    }

    /// Keeps the table of `T` in `engine`.
    pub fn place<T: Record>(mut self, engine: Arc<dyn Storage>) -> Self {
        self.placed.push((T::table(), engine));
        self
    }

    /// Whether [`Orm::sql_list`] sends a statement reading one table whole
    /// to the engine holding it, when that is not the default engine (on by
    /// default). Off, every statement goes through the default engine's
    /// SQL, other engines' tables as its virtual tables: mORMot2's
    /// `SetStaticVirtualTableDirect(false)`, and how the engine benchmark
    /// measures its All Virtual cells.
    pub fn sql_direct(mut self, on: bool) -> Self {
        self.sql_direct = on;
        self
    }

    /// Creates or upgrades every table in its engine and returns the client.
    pub fn open(self) -> Result<Database> {
        let mut engines: Vec<Arc<dyn Storage>> = Vec::new();
        let mut index_of = |e: &Arc<dyn Storage>| {
            engines
                .iter()
                .position(|x| Arc::ptr_eq(x, e))
                .unwrap_or_else(|| {
                    engines.push(e.clone());
                    engines.len() - 1
                })
        };
        let mut routes = Vec::new();
        for &table in self.model.tables() {
            let engine = self
                .placed
                .iter()
                .rev()
                .find(|(t, _)| t.same(table))
                .map(|(_, e)| e)
                .or(self.default.as_ref())
                .ok_or_else(|| {
                    Error::BadInput(format!("no engine for table {} and no default", table.name))
                })?;
            routes.push((table, index_of(engine)));
        }
        if let Some((t, _)) = self
            .placed
            .iter()
            .find(|(t, _)| self.model.table(t.name).is_none())
        {
            return Err(Error::UnknownTable(format!(
                "{} is placed in an engine but not in the model",
                t.name
            )));
        }
        let sql = self.default.as_ref().map(&mut index_of);
        // Engines in the global order; routes follow them.
        let mut order: Vec<usize> = (0..engines.len()).collect();
        order.sort_by_key(|&i| transaction::engine_order(&engines[i]));
        let engines: Vec<Arc<dyn Storage>> = order.iter().map(|&i| engines[i].clone()).collect();
        let new_index = |old: usize| order.iter().position(|&i| i == old).expect("every index");
        let routes: Vec<(&'static Table, usize)> =
            routes.into_iter().map(|(t, e)| (t, new_index(e))).collect();
        let sql = sql.map(new_index);
        for (table, e) in &routes {
            engines[*e].ensure_table(table)?;
        }
        // Tables held elsewhere become visible to the default engine's SQL.
        if let Some(main) = sql {
            for (table, e) in &routes {
                if *e != main {
                    if let Some(host) = engines[main].sql_host() {
                        host.expose(table, engines[*e].clone())?;
                    }
                }
            }
        }
        Ok(Database {
            model: self.model,
            routes,
            engines,
            sql,
            sql_direct: self.sql_direct,
        })
    }
}
