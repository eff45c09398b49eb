//! Statements, `WITH`, set operations, `SELECT`, `FROM` and joins: each checked and
//! written anew, every relation under a generated name (`t1`, `w1`), every output column
//! `c0`, `c1`… (the caller's names are kept beside, for the answer).

use super::ir::{Cte, Rel, Tr, unify};
use super::{
    Binds, Column, Compiled, Dialect, Family, MAX_DEPTH, MAX_ROWS, R, Scope, SqlError, Ty, at, invalid,
};
use sqlparser::ast::{
    LimitClause, OrderBy, OrderByKind, OrderBySort, Query, SetExpr, SetOperator, SetQuantifier, Spanned,
    Statement,
};
use sqlparser::dialect::ClickHouseDialect;
use sqlparser::parser::Parser;

pub(super) fn compile(text: &str, family: Family, scope: &Scope, d: Dialect, now: i64) -> R<Compiled> {
    let statements = Parser::new(&ClickHouseDialect {})
        .with_recursion_limit(super::PARSER_RECURSION_LIMIT)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| SqlError::Invalid(format!("the query does not parse: {e}")))?;
    let query = match statements.as_slice() {
        [Statement::Query(q)] => q,
        [] => return invalid("the query is empty"),
        [one] => return invalid(format!("only a SELECT is allowed, not {}", statement_kind(one))),
        more => return invalid(format!("one statement only: the query holds {}", more.len())),
    };
    let mut tr = Tr {
        d,
        family,
        scope,
        now,
        binds: Binds::new(d),
        ctes: Vec::new(),
        frames: Vec::new(),
        next: 0,
        depth: 0,
    };
    let (inner, rel) = tr.query(query, true)?;
    let cells: Vec<String> = rel
        .cols
        .iter()
        .map(|c| {
            let v = format!("q.\"{}\"", c.internal);
            match (d, c.ty) {
                (Dialect::Sqlite, Ty::Array) => format!("json({v})"),
                (Dialect::Postgres, Ty::Array) => format!("CAST({v} AS JSON)"),
                _ => v,
            }
        })
        .collect();
    let row = match d {
        Dialect::Sqlite => format!("json_array({})", cells.join(", ")),
        Dialect::Postgres => format!("CAST(json_build_array({}) AS TEXT)", cells.join(", ")),
    };
    let sql = format!("SELECT {row} AS row FROM ({inner}) AS q");
    let columns = rel.cols.into_iter().map(|c| Column { name: c.name, ty: c.ty }).collect();
    Ok(Compiled { sql, params: tr.binds.params, columns, dialect: d })
}

fn statement_kind(s: &Statement) -> String {
    let text = s.to_string();
    text.split_whitespace().next().unwrap_or("a statement").to_uppercase()
}

impl Tr<'_> {
    pub(super) fn enter(&mut self, span: sqlparser::tokenizer::Span) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SqlError::TooExpensive(at(
                format!("the query nests deeper than {MAX_DEPTH} levels"),
                span,
            )));
        }
        Ok(())
    }

    /// A query (`top`: the answer's, whose `LIMIT` is capped) and its columns.
    pub(super) fn query(&mut self, q: &Query, top: bool) -> R<(String, Rel)> {
        self.enter(q.span())?;
        if q.fetch.is_some() || !q.locks.is_empty() || q.for_clause.is_some() {
            return invalid(at("FETCH, FOR and locking clauses are not allowed", q.span()));
        }
        if q.settings.is_some() || q.format_clause.is_some() || !q.pipe_operators.is_empty() {
            return invalid(at("SETTINGS, FORMAT and pipe operators are not allowed", q.span()));
        }
        let ctes_before = self.ctes.len();
        let mut sql = String::new();
        if let Some(with) = &q.with {
            if with.recursive {
                return invalid(at("WITH RECURSIVE is not allowed", with.with_token.0.span));
            }
            let mut parts = Vec::new();
            for cte in &with.cte_tables {
                if !cte.alias.columns.is_empty() || cte.from.is_some() || cte.materialized.is_some() {
                    return invalid(at("a CTE takes a name and a query only", cte.alias.name.span));
                }
                let (body, rel) = self.query(&cte.query, false)?;
                let internal = self.fresh("w");
                parts.push(format!("{internal} AS ({body})"));
                self.ctes.push(Cte { name: cte.alias.name.value.clone(), internal, rel });
            }
            sql.push_str(&format!("WITH {} ", parts.join(", ")));
        }
        let (limit, offset) = self.limit(q.limit_clause.as_ref(), top)?;
        let tail = |order: String| {
            let mut t = order;
            if let Some(l) = limit {
                t.push_str(&format!(" LIMIT {l}"));
            }
            if let Some(o) = offset {
                if limit.is_none() {
                    // SQLite needs a LIMIT before OFFSET.
                    t.push_str(" LIMIT -1");
                }
                t.push_str(&format!(" OFFSET {o}"));
            }
            t
        };
        let result = match &*q.body {
            SetExpr::Select(s) => {
                let (body, rel) = self.select(s, q.order_by.as_ref())?;
                sql.push_str(&body);
                sql.push_str(&tail(String::new()));
                rel
            }
            body => {
                let (body, rel) = self.set_expr(body)?;
                let order = match &q.order_by {
                    Some(o) => self.order_by_outputs(o, &rel)?,
                    None => String::new(),
                };
                sql.push_str(&body);
                sql.push_str(&tail(order));
                rel
            }
        };
        // A postgres LIMIT -1 is not valid: written only for SQLite's sake above.
        if self.d == Dialect::Postgres {
            sql = sql.replace(" LIMIT -1 OFFSET", " OFFSET");
        }
        self.ctes.truncate(ctes_before);
        self.depth -= 1;
        Ok((sql, result))
    }

    /// The query's `LIMIT` and `OFFSET` (literals only); the top-level one capped at
    /// [`MAX_ROWS`].
    fn limit(&mut self, l: Option<&LimitClause>, top: bool) -> R<(Option<i64>, Option<i64>)> {
        let lit = |e: &sqlparser::ast::Expr, what: &str| -> R<i64> {
            match e {
                sqlparser::ast::Expr::Value(v) => match &v.value {
                    sqlparser::ast::Value::Number(n, _) => match n.parse::<i64>() {
                        Ok(n) if n >= 0 => Ok(n),
                        _ => invalid(at(format!("{what} must be a whole number ≥ 0"), e.span())),
                    },
                    _ => invalid(at(format!("{what} must be a number"), e.span())),
                },
                _ => invalid(at(format!("{what} must be a number literal"), e.span())),
            }
        };
        let (limit, offset) = match l {
            None => (None, None),
            Some(LimitClause::LimitOffset { limit, offset, limit_by }) => {
                if !limit_by.is_empty() {
                    return invalid("LIMIT … BY is not allowed");
                }
                let limit = limit.as_ref().map(|e| lit(e, "LIMIT")).transpose()?;
                let offset = offset.as_ref().map(|o| lit(&o.value, "OFFSET")).transpose()?;
                (limit, offset)
            }
            Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
                (Some(lit(limit, "LIMIT")?), Some(lit(offset, "OFFSET")?))
            }
        };
        let limit = if top { Some(limit.map_or(MAX_ROWS, |l| l.min(MAX_ROWS))) } else { limit };
        Ok((limit, offset))
    }

    /// A set operation's branch, or a `SELECT`.
    fn set_expr(&mut self, body: &SetExpr) -> R<(String, Rel)> {
        match body {
            SetExpr::Select(s) => self.select(s, None),
            SetExpr::Query(q) => {
                // A parenthesized query as a branch: a subquery on both backends (SQLite
                // takes no parentheses around a compound's member).
                let (sql, rel) = self.query(q, false)?;
                let t = self.fresh("t");
                Ok((format!("SELECT * FROM ({sql}) AS {t}"), rel))
            }
            SetExpr::SetOperation { left, op, set_quantifier, right } => {
                let (l, lrel) = self.branch(left)?;
                let (r, rrel) = self.branch(right)?;
                if lrel.cols.len() != rrel.cols.len() {
                    return invalid(format!(
                        "the branches of {op} have {} and {} columns",
                        lrel.cols.len(),
                        rrel.cols.len()
                    ));
                }
                let all = match set_quantifier {
                    SetQuantifier::All => true,
                    SetQuantifier::Distinct | SetQuantifier::None => false,
                    q => return invalid(format!("{op} {q} is not allowed")),
                };
                let op = match (op, all) {
                    (SetOperator::Union, true) => "UNION ALL",
                    (SetOperator::Union, false) => "UNION",
                    (SetOperator::Except | SetOperator::Minus, false) => "EXCEPT",
                    (SetOperator::Intersect, false) => "INTERSECT",
                    (op, true) => return invalid(format!("{op} ALL is not allowed (only UNION ALL)")),
                };
                let mut rel = lrel;
                for (l, r) in rel.cols.iter_mut().zip(&rrel.cols) {
                    l.ty = unify(l.ty, r.ty).ok_or_else(|| {
                        SqlError::Invalid(format!(
                            "{op} mixes {} and {} in column {}",
                            l.ty.name(),
                            r.ty.name(),
                            l.name
                        ))
                    })?;
                }
                Ok((format!("{l} {op} {r}"), rel))
            }
            other => invalid(format!("only SELECT is allowed, not {}", statement_kind_of(other))),
        }
    }

    /// A branch of a set operation: a nested set operation becomes a subquery, so that
    /// both backends group it the way the query did.
    fn branch(&mut self, e: &SetExpr) -> R<(String, Rel)> {
        let (sql, rel) = self.set_expr(e)?;
        if matches!(e, SetExpr::SetOperation { .. }) {
            let t = self.fresh("t");
            return Ok((format!("SELECT * FROM ({sql}) AS {t}"), rel));
        }
        Ok((sql, rel))
    }

    /// `ORDER BY` of a set operation: by output column names or positions.
    fn order_by_outputs(&mut self, o: &OrderBy, rel: &Rel) -> R<String> {
        let items = order_items(o)?;
        let mut out = Vec::new();
        for item in items {
            let col = match &item.expr {
                sqlparser::ast::Expr::Identifier(id) => rel.cols.iter().find(|c| c.name == id.value),
                sqlparser::ast::Expr::Value(v) => match &v.value {
                    sqlparser::ast::Value::Number(n, _) => {
                        n.parse::<usize>().ok().and_then(|i| i.checked_sub(1)).and_then(|i| rel.cols.get(i))
                    }
                    _ => None,
                },
                _ => None,
            };
            let Some(col) = col else {
                return invalid(at(
                    "ORDER BY of a UNION or EXCEPT names an output column or its position",
                    item.expr.span(),
                ));
            };
            out.push(format!("\"{}\"{}", col.internal, direction(&item.options)?));
        }
        Ok(format!(" ORDER BY {}", out.join(", ")))
    }
}

fn statement_kind_of(e: &SetExpr) -> &'static str {
    match e {
        SetExpr::Values(_) => "VALUES",
        SetExpr::Insert(_) => "INSERT",
        SetExpr::Update(_) => "UPDATE",
        SetExpr::Delete(_) => "DELETE",
        SetExpr::Merge(_) => "MERGE",
        SetExpr::Table(_) => "TABLE",
        _ => "this statement",
    }
}

pub(super) fn order_items(o: &OrderBy) -> R<&[sqlparser::ast::OrderByExpr]> {
    if o.interpolate.is_some() {
        return invalid("INTERPOLATE is not allowed");
    }
    match &o.kind {
        OrderByKind::Expressions(items) => {
            if items.iter().any(|i| i.with_fill.is_some()) {
                return invalid("WITH FILL is not allowed");
            }
            Ok(items)
        }
        OrderByKind::All(_) => invalid("ORDER BY ALL is not allowed: name the columns"),
    }
}

/// ` ASC|DESC NULLS FIRST|LAST`: NULLs last unless asked (ClickHouse's default).
pub(super) fn direction(o: &sqlparser::ast::OrderByOptions) -> R<String> {
    let dir = match &o.sort {
        None | Some(OrderBySort::Asc) => "ASC",
        Some(OrderBySort::Desc) => "DESC",
        Some(OrderBySort::Using(_)) => return invalid("ORDER BY … USING is not allowed"),
    };
    let nulls = if o.nulls_first == Some(true) { "NULLS FIRST" } else { "NULLS LAST" };
    Ok(format!(" {dir} {nulls}"))
}
