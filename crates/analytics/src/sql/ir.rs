//! The translation's vocabulary, which every part of it shares: the translator's state
//! ([`Tr`], whose methods each part extends in its own file) with the relations and names
//! it tracks, a translated expression ([`E`]), the common type of two branches and a
//! relation's one name.

use super::{Binds, Dialect, Family, Param, R, Scope, Ty, at, invalid};
use sqlparser::ast::{ObjectName, ObjectNamePart, Spanned};

/// A translated expression: its value (SQL text, or a constant not yet bound), its type,
/// and whether it holds an aggregate.
#[derive(Debug, Clone)]
pub(super) struct E {
    pub k: K,
    pub ty: Ty,
    pub agg: bool,
}

#[derive(Debug, Clone)]
pub(super) enum K {
    Sql(String),
    Lit(Param),
    Null,
    Bool(bool),
    /// A constant time (Unix ms): `now()`, `today()`, a parsed literal.
    Time(i64),
    /// `INTERVAL n unit`: fixed milliseconds, or calendar months.
    Interval {
        ms: i64,
        months: i32,
    },
}

impl E {
    pub fn sql(s: String, ty: Ty) -> Self {
        Self { k: K::Sql(s), ty, agg: false }
    }

    pub fn with_agg(mut self, agg: bool) -> Self {
        self.agg |= agg;
        self
    }

    /// The text of a string literal.
    pub fn text_literal(&self) -> Option<&str> {
        match &self.k {
            K::Lit(Param::Text(s)) => Some(s),
            _ => None,
        }
    }
}

/// A relation's columns.
#[derive(Debug, Clone, Default)]
pub(super) struct Rel {
    pub cols: Vec<Col>,
}

#[derive(Debug, Clone)]
pub(super) struct Col {
    /// The name the query uses.
    pub name: String,
    /// The name in the written statement.
    pub internal: String,
    pub ty: Ty,
    /// Left out of `*` (a virtual column).
    pub hidden: bool,
}

/// A relation of a `FROM`: the name the query refers to it by (none for an unnamed
/// subquery) and its generated one.
#[derive(Debug)]
pub(super) struct Source {
    pub name: Option<String>,
    pub internal: String,
    pub rel: Rel,
    /// Columns joined with `USING`: an unqualified one means the first source's.
    pub using: Vec<String>,
}

/// A projection alias, usable in the rest of its `SELECT` (as ClickHouse allows).
#[derive(Debug, Clone)]
pub(super) struct Alias {
    pub name: String,
    pub e: E,
}

/// One `SELECT`'s names.
#[derive(Debug, Default)]
pub(super) struct Frame {
    pub sources: Vec<Source>,
    pub aliases: Vec<Alias>,
}

#[derive(Debug)]
pub(super) struct Cte {
    pub name: String,
    pub internal: String,
    pub rel: Rel,
}

/// The translation's state.
#[derive(Debug)]
pub(super) struct Tr<'a> {
    pub d: Dialect,
    pub family: Family,
    pub scope: &'a Scope,
    pub now: i64,
    pub binds: Binds,
    pub ctes: Vec<Cte>,
    pub frames: Vec<Frame>,
    pub next: usize,
    pub depth: usize,
}

impl Tr<'_> {
    /// A generated name not used before in this query (`t1`, `w2`…).
    pub(super) fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }
}

/// The common type of two branches of a set operation or `CASE`.
pub(super) fn unify(a: Ty, b: Ty) -> Option<Ty> {
    Some(match (a, b) {
        (a, b) if a == b => a,
        (Ty::Null, t) | (t, Ty::Null) => t,
        (Ty::Int | Ty::Bool, Ty::Float) | (Ty::Float, Ty::Int | Ty::Bool) => Ty::Float,
        (Ty::Int, Ty::Bool) | (Ty::Bool, Ty::Int) => Ty::Int,
        (Ty::Time, Ty::Int) | (Ty::Int, Ty::Time) => Ty::Int,
        _ => return None,
    })
}

/// The one identifier of a name (tables and relations are not qualified).
pub(super) fn single_name(n: &ObjectName) -> R<String> {
    match n.0.as_slice() {
        [ObjectNamePart::Identifier(id)] => Ok(id.value.clone()),
        _ => invalid(at(format!("{n}: a qualified or computed name is not allowed"), n.span())),
    }
}
