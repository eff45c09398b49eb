//! The service's entry point: who may read what, at most
//! [`MAX_CONCURRENT_PER_WORKSPACE`] queries of a workspace at once (and the service's
//! capacity of all workspaces'), the run with its deadline, and the rows as JSON objects in
//! the query's column order.

use super::{
    Column, Compiled, Dialect, Family, MAX_CONCURRENT_PER_WORKSPACE, MAX_QUERY_CHARS, Scope, SqlError,
    TIMEOUT, Ty,
};
use crate::{AnalyticsService, AnalyticsStore};
use keygate_domain::ValidationError;
use keygate_rbac::{Principal, RbacError};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// One answer row: the query's columns, in its order.
#[derive(Debug, Clone)]
pub struct SqlRow {
    names: Arc<[String]>,
    values: Vec<Value>,
}

impl SqlRow {
    /// The value of the column `name` (the last of that name).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.names.iter().rposition(|n| n == name).and_then(|i| self.values.get(i))
    }

    /// The values, in column order.
    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

impl Serialize for SqlRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.values.len()))?;
        for (n, v) in self.names.iter().zip(&self.values) {
            m.serialize_entry(n, v)?;
        }
        m.end()
    }
}

/// The rows of a query.
pub type SqlAnswer = Vec<SqlRow>;

/// The running queries: per workspace, and in all (each holds a database connection for
/// up to [`TIMEOUT`], so many workspaces at once must not hold the whole pool).
#[derive(Debug)]
pub(crate) struct Slots {
    running: parking_lot::Mutex<(HashMap<String, usize>, usize)>,
    capacity: usize,
}

impl Default for Slots {
    fn default() -> Self {
        Self::new(super::DEFAULT_MAX_CONCURRENT)
    }
}

struct Slot<'a> {
    slots: &'a Slots,
    workspace: String,
}

impl Slots {
    /// At most `capacity` queries at once in all (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self { running: Default::default(), capacity: capacity.max(1) }
    }

    /// A slot for one query of `workspace`, or why there is none.
    fn take(&self, workspace: &str) -> Result<Slot<'_>, SqlError> {
        let mut guard = self.running.lock();
        let (per_workspace, total) = &mut *guard;
        let n = per_workspace.get(workspace).copied().unwrap_or(0);
        if n >= MAX_CONCURRENT_PER_WORKSPACE {
            return Err(SqlError::Busy(format!(
                "this workspace already runs {MAX_CONCURRENT_PER_WORKSPACE} analytics queries: retry when one ends"
            )));
        }
        if *total >= self.capacity {
            return Err(SqlError::Busy(format!(
                "keygate already runs {} analytics queries, its most at once: retry shortly",
                self.capacity
            )));
        }
        *per_workspace.entry(workspace.to_string()).or_insert(0) += 1;
        *total += 1;
        Ok(Slot { slots: self, workspace: workspace.to_string() })
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut guard = self.slots.running.lock();
        let (per_workspace, total) = &mut *guard;
        if let Some(n) = per_workspace.get_mut(&self.workspace) {
            *n -= 1;
            *total -= 1;
            if *n == 0 {
                per_workspace.remove(&self.workspace);
            }
        }
    }
}

impl<S: AnalyticsStore> AnalyticsService<S> {
    /// `analytics.getVerifications` / `analytics.getRatelimits` (API-v2.md §18): `query`
    /// over the caller's workspace, limited to the APIs or namespaces its root key may read.
    pub fn query_sql(&self, p: &Principal, family: Family, query: &str) -> Result<SqlAnswer, SqlError> {
        let chars = query.chars().count();
        if chars == 0 || chars > MAX_QUERY_CHARS {
            return Err(RbacError::from(ValidationError::new(
                "query",
                format!("must be 1 to {MAX_QUERY_CHARS} characters (it has {chars})"),
            ))
            .into());
        }
        let scope = scope_of(p, family)?;
        let _slot = self.sql_slots.take(&p.workspace_id)?;
        self.fold_for_read()?;
        let dialect = match self.rbac.store().kind() {
            "postgres" => Dialect::Postgres,
            _ => Dialect::Sqlite,
        };
        let compiled = super::compile(query, family, &scope, dialect, self.now())?;
        let deadline = Instant::now() + TIMEOUT;
        // A failed run rolls its snapshot back (PostgreSQL's is aborted by then).
        let rows = at_lowest_priority(|| {
            let mut failure = None;
            let rows = self.rbac.store().analytics_snapshot(|tx| {
                tx.run_analytics_sql(&compiled, deadline).map_err(|e| {
                    failure = Some(e);
                    RbacError::BadRequest("the analytics query failed".into())
                })
            });
            match (rows, failure) {
                (_, Some(f)) => Err(SqlError::from(f)),
                (rows, None) => rows.map_err(SqlError::from),
            }
        })?;
        decode(&compiled, rows)
    }
}

/// Runs `f` on a thread of its own at the lowest CPU priority (nice 19 on Linux): a query
/// that reads or joins a lot takes the CPU only when verifications and limits leave it
/// idle (on SQLite the query runs in this thread; PostgreSQL runs it in its own process).
fn at_lowest_priority<T: Send>(f: impl FnOnce() -> Result<T, SqlError> + Send) -> Result<T, SqlError> {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new().name("keygate-analytics-sql".into());
        let handle = thread.spawn_scoped(s, || {
            lower_priority();
            f()
        });
        match handle {
            Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(e) => Err(SqlError::Rbac(RbacError::Storage(keygate_rbac::StorageError::Unavailable(
                format!("no thread for the analytics query: {e}"),
            )))),
        }
    })
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // Lowering one's own priority needs no privilege; if refused, the query runs as is.
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

/// What `p` may read: the whole workspace, or some APIs (namespaces); none: 403.
fn scope_of(p: &Principal, family: Family) -> Result<Scope, SqlError> {
    let prefix = match family {
        Family::Verifications => "api.",
        Family::Ratelimits => "ratelimit.",
    };
    let any = format!("{prefix}*.read_analytics");
    let only = if p.holds(&any) {
        None
    } else {
        let ids: Vec<String> = p
            .permissions()
            .filter_map(|perm| perm.strip_prefix(prefix)?.strip_suffix(".read_analytics"))
            .filter(|id| !id.is_empty() && !id.contains('*') && !id.contains('.'))
            .map(str::to_string)
            .collect();
        if ids.is_empty() {
            return Err(RbacError::missing(&[&any]).into());
        }
        Some(ids)
    };
    Ok(Scope { workspace_id: p.workspace_id.clone(), only })
}

/// The rows (one JSON array text each) as values of their columns' types: the same JSON
/// from both backends (floats to 15 significant digits, SQLite's precision).
fn decode(c: &Compiled, rows: Vec<String>) -> Result<SqlAnswer, SqlError> {
    let names: Arc<[String]> = c.columns.iter().map(|c| c.name.clone()).collect();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        // A value JSON cannot carry (an infinite float, on SQLite) refuses the answer.
        let values: Vec<Value> = serde_json::from_str(&row).map_err(|e| {
            SqlError::Invalid(format!("the query's result holds a value JSON cannot carry: {e}"))
        })?;
        let values = values.into_iter().zip(&c.columns).map(|(v, col)| normalize(v, col)).collect();
        out.push(SqlRow { names: names.clone(), values });
    }
    Ok(out)
}

fn normalize(v: Value, c: &Column) -> Value {
    match (c.ty, v) {
        (_, Value::Null) => Value::Null,
        (Ty::Float, Value::Number(n)) => n.as_f64().map_or(Value::Null, float),
        (Ty::Int | Ty::Time | Ty::Bool, Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => n.as_f64().map_or(Value::Null, float),
        },
        (Ty::Array, Value::String(s)) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        (_, Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => n.as_f64().map_or(Value::Null, float),
        },
        (_, v) => v,
    }
}

/// A float to 15 significant digits.
fn float(f: f64) -> Value {
    if !f.is_finite() {
        return Value::Null;
    }
    let rounded: f64 = format!("{f:.14e}").parse().unwrap_or(f);
    serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_runs_at_most_two_queries_at_once_and_others_are_not_counted() {
        let slots = Slots::default();
        let a = slots.take("ws_a").expect("first");
        let b = slots.take("ws_a").expect("second");
        let third = slots.take("ws_a").err().expect("a third waits for one to end");
        assert!(matches!(&third, SqlError::Busy(m) if m.contains("this workspace")), "{third}");
        let other = slots.take("ws_b").expect("another workspace is not held back");
        drop(a);
        let c = slots.take("ws_a").expect("a slot freed");
        drop((b, c, other));
        assert_eq!(*slots.running.lock(), (HashMap::new(), 0), "nothing left behind");
    }

    #[test]
    fn all_workspaces_together_run_at_most_the_capacity() {
        let slots = Slots::new(3);
        let held: Vec<_> = ["ws_a", "ws_b", "ws_c"].iter().map(|w| slots.take(w).expect("room")).collect();
        let full = slots.take("ws_d").err().expect("a fourth workspace waits");
        assert!(matches!(&full, SqlError::Busy(m) if m.contains("its most at once")), "{full}");
        // A refused take holds nothing.
        assert_eq!(slots.running.lock().1, 3);
        drop(held);
        let again = slots.take("ws_d").expect("room once one ends");
        drop(again);
        assert_eq!(*slots.running.lock(), (HashMap::new(), 0), "nothing left behind");
        assert!(Slots::new(0).take("ws_a").is_ok(), "a capacity of 0 is taken as 1");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn queries_run_on_a_thread_of_their_own_at_the_lowest_priority() {
        let me = std::thread::current().id();
        let (nice, other) = at_lowest_priority(|| {
            let nice = rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("nice");
            Ok((nice, std::thread::current().id() != me))
        })
        .expect("ran");
        assert_eq!((nice, other), (19, true));
        // The caller's own priority is untouched.
        assert_eq!(rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("nice"), 0);
    }

    #[test]
    fn floats_keep_fifteen_significant_digits_and_whole_numbers_stay_whole() {
        assert_eq!(float(0.1 + 0.2), serde_json::json!(0.3));
        assert_eq!(float(2.75), serde_json::json!(2.75));
        assert_eq!(float(f64::NAN), Value::Null);
        let int = Column { name: "n".into(), ty: Ty::Int };
        assert_eq!(normalize(serde_json::json!(3), &int), serde_json::json!(3));
    }
}
