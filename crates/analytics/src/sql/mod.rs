//! Analytics in SQL (API-v2.md §18): `analytics.getVerifications` and
//! `analytics.getRatelimits` take one read-only `SELECT` in ClickHouse's dialect over
//! Unkey's public tables, and keygate answers it from its own counts, on SQLite and
//! PostgreSQL alike.
//!
//! The query is parsed ([`sqlparser`], ClickHouse dialect), never spliced: [`compile`]
//! walks the tree with an allow-list (statements, tables, columns, functions, operators)
//! and writes a new statement for the backend from what it checked. What reaches the
//! database is keygate's SQL text only: every literal is a bind parameter, every table is
//! a subquery over keygate's count tables that already holds `workspace = caller` (and the
//! caller's APIs or namespaces), and every name the query chose (aliases, CTEs) is replaced
//! by a generated one. Times are Unix milliseconds throughout, as Unkey answers them.
//!
//! - `ir`: what every part shares: the translator's state `Tr`, a translated expression
//!   `E`, the relations and names in scope; the parts below extend `Tr` and import from
//!   `ir`, never from each other in a circle.
//! - `tables`: the public tables and their scoped subqueries.
//! - `query`: statements, `WITH`, set operations, `ORDER BY` and `LIMIT`.
//! - `select`: one `SELECT`: `FROM` and joins, projection, `WHERE`, `GROUP BY`, `HAVING`.
//! - `expr`: expressions, names and literals, with their types.
//! - `operators`: operators and `LIKE` patterns.
//! - `time`: constant times, parsed and shifted by `INTERVAL`s.
//! - `functions`: the allowed functions, each written for both backends.
//! - `run`: the service's entry point (permissions, per-workspace concurrency, the run,
//!   the rows as JSON).

mod expr;
mod functions;
mod ir;
mod operators;
mod query;
pub(crate) mod run;
mod select;
mod tables;
mod time;

pub use run::{SqlAnswer, SqlRow};

use keygate_rbac::{RbacError, StorageError};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The longest query text (characters).
pub const MAX_QUERY_CHARS: usize = 10_000;
/// The most rows an answer holds: a larger or missing top-level `LIMIT` is capped.
pub const MAX_ROWS: i64 = 10_000;
/// How long a query may run before it is stopped.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Queries of one workspace running at once; one more answers 429.
pub const MAX_CONCURRENT_PER_WORKSPACE: usize = 2;
/// Queries of all workspaces running at once unless the service is told otherwise
/// ([`crate::AnalyticsService::with_sql_capacity`]): half the default database pool, so
/// that the other half serves what needs the database while queries hold theirs.
pub const DEFAULT_MAX_CONCURRENT: usize = 4;
/// The deepest nesting of expressions and subqueries.
const MAX_DEPTH: usize = 48;
/// The parser's own recursion limit (below its default, well above any real query).
const PARSER_RECURSION_LIMIT: usize = 40;
/// Error text the SQLite deadline function raises (recognised by [`SqlRunError`]).
pub const DEADLINE_MARKER: &str = "keygate: analytics query past its deadline";

/// The SQL the statement is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// Which method's tables a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `analytics.getVerifications`: `key_verifications_per_*_v1`.
    Verifications,
    /// `analytics.getRatelimits`: `ratelimits_per_*_v1`.
    Ratelimits,
}

/// What a query may read: one workspace, and within it only these APIs (verifications) or
/// namespaces (rate limits) when `only` is set.
#[derive(Debug, Clone)]
pub struct Scope {
    pub workspace_id: String,
    pub only: Option<Vec<String>>,
}

/// A bind parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(i64),
    Float(f64),
    Text(String),
}

/// The type of a value, as far as the translation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Int,
    Float,
    Text,
    Bool,
    /// Unix ms.
    Time,
    /// A JSON array of strings (`tags`).
    Array,
    Null,
}

impl Ty {
    /// ClickHouse's name for it (in error messages).
    pub fn name(self) -> &'static str {
        match self {
            Ty::Int => "Int64",
            Ty::Float => "Float64",
            Ty::Text => "String",
            Ty::Bool => "Bool",
            Ty::Time => "DateTime",
            Ty::Array => "Array(String)",
            Ty::Null => "NULL",
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Bool | Ty::Time | Ty::Null)
    }
}

/// An answer column: its name (the query's alias, the column's name, or the expression's
/// text) and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: Ty,
}

/// A checked query, written for one backend: each row comes back as one JSON array text
/// (the answer's columns in order).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub sql: String,
    /// `?1`, `?2`… (SQLite) or `$1`, `$2`… (PostgreSQL), in this order.
    pub params: Vec<Param>,
    pub columns: Vec<Column>,
    pub dialect: Dialect,
}

/// Why a query is not answered.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// Not a query keygate accepts (400 `invalid_input`), naming the construct and where.
    #[error("{0}")]
    Invalid(String),
    /// A table or column of Unkey's that keygate does not keep (400 `not_supported`).
    #[error("{0}")]
    NotSupported(String),
    /// Stopped by a bound (400 `keygate/analytics/query_too_expensive`).
    #[error("{0}")]
    TooExpensive(String),
    /// The workspace already runs [`MAX_CONCURRENT_PER_WORKSPACE`] queries, or the
    /// service its capacity of all workspaces' (429).
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Rbac(#[from] RbacError),
}

/// How running a compiled query failed in the store.
#[derive(Debug)]
pub enum SqlRunError {
    /// Past [`TIMEOUT`].
    TooExpensive,
    /// The database refused the statement (e.g. a column neither grouped nor aggregated):
    /// its message.
    Rejected(String),
    Storage(StorageError),
}

impl From<SqlRunError> for SqlError {
    fn from(e: SqlRunError) -> Self {
        match e {
            SqlRunError::TooExpensive => SqlError::TooExpensive(format!(
                "the query ran for more than {} s and was stopped",
                TIMEOUT.as_secs()
            )),
            SqlRunError::Rejected(m) => SqlError::Invalid(format!("the query cannot run: {m}")),
            SqlRunError::Storage(e) => SqlError::Rbac(RbacError::Storage(e)),
        }
    }
}

/// Checks `text` and writes it for `dialect`, reading only what `scope` allows; `now`
/// (Unix ms) is what `now()` and `today()` mean.
pub fn compile(
    text: &str,
    family: Family,
    scope: &Scope,
    dialect: Dialect,
    now: i64,
) -> Result<Compiled, SqlError> {
    query::compile(text, family, scope, dialect, now)
}

/// The bind parameters of a statement being written: equal values share one number, so an
/// expression written twice (in the projection and in `GROUP BY`) is the same text twice.
#[derive(Debug)]
struct Binds {
    dialect: Dialect,
    params: Vec<Param>,
    seen: HashMap<String, usize>,
}

impl Binds {
    fn new(dialect: Dialect) -> Self {
        Self { dialect, params: Vec::new(), seen: HashMap::new() }
    }

    /// The placeholder of `p`.
    fn bind(&mut self, p: Param) -> String {
        let key = match &p {
            Param::Int(v) => format!("i{v}"),
            Param::Float(v) => format!("f{}", v.to_bits()),
            Param::Text(s) => format!("t{s}"),
        };
        let n = *self.seen.entry(key).or_insert_with(|| {
            self.params.push(p);
            self.params.len()
        });
        let mut s = String::with_capacity(4);
        let _ = match self.dialect {
            Dialect::Sqlite => write!(s, "?{n}"),
            Dialect::Postgres => write!(s, "${n}"),
        };
        s
    }
}

type R<T> = Result<T, SqlError>;

/// A query keygate does not accept, saying why.
fn invalid<T>(m: impl Into<String>) -> R<T> {
    Err(SqlError::Invalid(m.into()))
}

/// `what` at `line:column` of the query (1-based, as the parser counts).
fn at(what: impl std::fmt::Display, span: sqlparser::tokenizer::Span) -> String {
    if span.start.line == 0 {
        what.to_string()
    } else {
        format!("{what} (line {}, column {})", span.start.line, span.start.column)
    }
}
