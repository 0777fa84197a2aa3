//! The model (which tables exist) and the in-process client (which engine holds each).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::orm::Orm;
use crate::record::Record;
use crate::schema::Table;
use crate::storage::Storage;

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
/// let client = Client::builder(model)
///     .default_engine(sqlite)          // every table not placed elsewhere
///     .place::<Session>(memory)         // this one in the memory engine
///     .open()?;                         // creates or upgrades the tables
/// ```
pub struct Client {
    model: Model,
    routes: Vec<(&'static Table, usize)>,
    engines: Vec<Arc<dyn Storage>>,
    /// The default engine, which runs SQL over every table.
    sql: Option<usize>,
}

impl Client {
    /// Opens `model` with every table in `engine`.
    pub fn open(model: Model, engine: Arc<dyn Storage>) -> Result<Client> {
        Client::builder(model).default_engine(engine).open()
    }

    /// Starts placing the tables of `model` in engines.
    pub fn builder(model: Model) -> ClientBuilder {
        ClientBuilder {
            model,
            default: None,
            placed: Vec::new(),
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
}

impl Orm for Client {
    fn route(&self, table: &'static Table) -> Result<&dyn Storage> {
        // A model has a handful of tables: a scan by address beats hashing.
        for (t, e) in &self.routes {
            if std::ptr::eq(*t, table) {
                return Ok(self.engines[*e].as_ref());
            }
        }
        self.routes
            .iter()
            .find(|(t, _)| t.same(table))
            .map(|(_, e)| self.engines[*e].as_ref())
            .ok_or_else(|| Error::UnknownTable(table.name.to_owned()))
    }

    fn engines(&self, f: &mut dyn FnMut(&dyn Storage) -> Result<()>) -> Result<()> {
        self.engines.iter().try_for_each(|e| f(e.as_ref()))
    }

    fn sql_engine(&self) -> Result<&dyn Storage> {
        self.sql
            .map(|i| self.engines[i].as_ref())
            .ok_or_else(|| Error::Unsupported("the client has no default engine to run SQL".into()))
    }
}

/// Places the tables of a model in engines; see [`Client::builder`].
pub struct ClientBuilder {
    model: Model,
    default: Option<Arc<dyn Storage>>,
    placed: Vec<(&'static Table, Arc<dyn Storage>)>,
}

impl ClientBuilder {
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

    /// Creates or upgrades every table in its engine and returns the client.
    pub fn open(self) -> Result<Client> {
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
        for (table, e) in &routes {
            engines[*e].ensure_table(table)?;
        }
        // Tables held elsewhere become visible to the default engine's SQL.
        if let Some(main) = sql {
            for (table, e) in &routes {
                if *e != main {
                    engines[main].expose(table, engines[*e].clone())?;
                }
            }
        }
        Ok(Client {
            model: self.model,
            routes,
            engines,
            sql,
        })
    }
}
