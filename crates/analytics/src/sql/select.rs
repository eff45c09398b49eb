//! One `SELECT`: its `FROM` (tables, CTEs, subqueries, joins), projection, `WHERE`,
//! `GROUP BY`, `HAVING` and the query's `ORDER BY`, which sees the `SELECT`'s names.

use super::ir::{Alias, Col, E, Frame, Rel, Source, Tr, single_name};
use super::query::{direction, order_items};
use super::tables::{self, Grain};
use super::{Dialect, R, at, invalid};
use sqlparser::ast::{
    Distinct, GroupByExpr, Join, JoinConstraint, JoinOperator, OrderBy, Select, SelectFlavor, SelectItem,
    SelectItemQualifiedWildcardKind, Spanned, TableFactor, TableWithJoins,
};

impl Tr<'_> {
    /// One `SELECT`, with its query's `ORDER BY` (which sees its names).
    pub(super) fn select(&mut self, s: &Select, order_by: Option<&OrderBy>) -> R<(String, Rel)> {
        if s.top.is_some() || s.into.is_some() || !s.lateral_views.is_empty() || s.prewhere.is_some() {
            return invalid(at(
                "TOP, INTO, LATERAL VIEW and PREWHERE are not allowed",
                s.select_token.0.span,
            ));
        }
        if !s.connect_by.is_empty()
            || !s.cluster_by.is_empty()
            || !s.distribute_by.is_empty()
            || !s.sort_by.is_empty()
        {
            return invalid(at(
                "CONNECT BY, CLUSTER BY, DISTRIBUTE BY and SORT BY are not allowed",
                s.select_token.0.span,
            ));
        }
        if !s.named_window.is_empty()
            || s.qualify.is_some()
            || s.value_table_mode.is_some()
            || s.exclude.is_some()
        {
            return invalid(at("WINDOW, QUALIFY and EXCLUDE are not allowed", s.select_token.0.span));
        }
        if !s.optimizer_hints.is_empty()
            || s.select_modifiers.is_some()
            || !matches!(s.flavor, SelectFlavor::Standard)
        {
            return invalid(at("this form of SELECT is not allowed", s.select_token.0.span));
        }
        let distinct = match &s.distinct {
            None | Some(Distinct::All) => false,
            Some(Distinct::Distinct) => true,
            Some(Distinct::On(_)) => return invalid(at("DISTINCT ON is not allowed", s.select_token.0.span)),
        };
        // FROM: each relation first (a subquery in FROM does not see its siblings), then
        // the frame, then the joins' conditions.
        let mut froms = Vec::new();
        let mut sources = Vec::new();
        let mut pending = Vec::new();
        for (i, twj) in s.from.iter().enumerate() {
            let TableWithJoins { relation, joins } = twj;
            let (sql, src) = self.factor(relation)?;
            froms.push((if i == 0 { String::new() } else { " CROSS JOIN ".to_string() }, sql, None));
            sources.push(src);
            for j in joins {
                let (kind, constraint) = join_kind(j)?;
                let (sql, src) = self.factor(&j.relation)?;
                pending.push((froms.len(), constraint, sources.len()));
                froms.push((format!(" {kind} "), sql, None));
                sources.push(src);
            }
        }
        self.frames.push(Frame { sources, aliases: Vec::new() });
        let result = self.select_in_frame(s, order_by, distinct, froms, pending);
        self.frames.pop();
        result
    }

    fn select_in_frame(
        &mut self,
        s: &Select,
        order_by: Option<&OrderBy>,
        distinct: bool,
        mut froms: Vec<(String, String, Option<String>)>,
        pending: Vec<(usize, Option<&JoinConstraint>, usize)>,
    ) -> R<(String, Rel)> {
        for (at_from, constraint, right) in pending {
            let on = match constraint {
                None => None,
                Some(JoinConstraint::On(e)) => {
                    let e = self.condition(e, "ON")?;
                    Some(e)
                }
                Some(JoinConstraint::Using(names)) => {
                    let mut parts = Vec::new();
                    for n in names {
                        let name = single_name(n)?;
                        let (l, r) = self.using_pair(&name, right)?;
                        parts.push(format!("{l} = {r}"));
                        let frame = self.frames.last_mut().expect("frame");
                        frame.sources[right].using.push(name);
                    }
                    Some(parts.join(" AND "))
                }
                Some(c) => return invalid(format!("JOIN … {c:?} is not allowed: use ON or USING")),
            };
            froms[at_from].2 = on;
        }
        let mut sql = String::from(if distinct { "SELECT DISTINCT " } else { "SELECT " });
        // The projection.
        let mut rel = Rel::default();
        let mut outs = Vec::new();
        for item in &s.projection {
            match item {
                SelectItem::Wildcard(opts) | SelectItem::QualifiedWildcard(_, opts)
                    if !wildcard_plain(opts) =>
                {
                    return invalid(at("* with EXCEPT, REPLACE or RENAME is not allowed", item.span()));
                }
                SelectItem::Wildcard(_) => self.star(None, &mut rel, &mut outs, item)?,
                SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(n), _) => {
                    let name = single_name(n)?;
                    self.star(Some(&name), &mut rel, &mut outs, item)?
                }
                SelectItem::UnnamedExpr(e) => {
                    let v = self.value(e)?;
                    self.output(output_name(e), v, &mut rel, &mut outs)?;
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    let v = self.value(expr)?;
                    self.frames
                        .last_mut()
                        .expect("frame")
                        .aliases
                        .push(Alias { name: alias.value.clone(), e: v.clone() });
                    self.output(alias.value.clone(), v, &mut rel, &mut outs)?;
                }
                other => return invalid(at("this select item is not allowed", other.span())),
            }
        }
        if outs.is_empty() {
            return invalid(at("the SELECT has no columns", s.select_token.0.span));
        }
        sql.push_str(&outs.join(", "));
        if !froms.is_empty() {
            sql.push_str(" FROM ");
            for (join, rel_sql, on) in &froms {
                sql.push_str(join);
                sql.push_str(rel_sql);
                if let Some(on) = on {
                    sql.push_str(&format!(" ON {on}"));
                }
            }
        }
        let mut wheres = Vec::new();
        if self.d == Dialect::Sqlite {
            // The deadline, checked per row this SELECT's joins produce: the call names a
            // column of every relation, so SQLite runs it in the innermost loop.
            let frame = self.frames.last().expect("frame");
            let cols: Vec<String> = frame
                .sources
                .iter()
                .filter_map(|s| s.rel.cols.first().map(|c| format!("{}.\"{}\"", s.internal, c.internal)))
                .collect();
            if !cols.is_empty() {
                wheres.push(format!("kg_deadline(COALESCE({}, 0) IS NULL) = 1", cols.join(", ")));
            }
        }
        if let Some(w) = &s.selection {
            let c = self.condition(w, "WHERE")?;
            wheres.push(c);
        }
        if !wheres.is_empty() {
            sql.push_str(&format!(" WHERE {}", wheres.join(" AND ")));
        }
        match &s.group_by {
            GroupByExpr::Expressions(exprs, modifiers) => {
                if !modifiers.is_empty() {
                    return invalid(at(
                        "GROUP BY modifiers (ROLLUP, CUBE, TOTALS) are not allowed",
                        s.select_token.0.span,
                    ));
                }
                if !exprs.is_empty() {
                    let mut parts = Vec::new();
                    for e in exprs {
                        let v = self.positional(e, &rel)?;
                        parts.push(v);
                    }
                    sql.push_str(&format!(" GROUP BY {}", parts.join(", ")));
                }
            }
            GroupByExpr::All(_) => {
                return invalid(at("GROUP BY ALL is not allowed: name the columns", s.select_token.0.span));
            }
        }
        if let Some(h) = &s.having {
            let c = self.condition_agg(h)?;
            sql.push_str(&format!(" HAVING {c}"));
        }
        if let Some(o) = order_by {
            let mut parts = Vec::new();
            for item in order_items(o)? {
                let v = self.positional(&item.expr, &rel)?;
                parts.push(format!("{v}{}", direction(&item.options)?));
            }
            sql.push_str(&format!(" ORDER BY {}", parts.join(", ")));
        }
        Ok((sql, rel))
    }

    /// `*` or `t.*`.
    fn star(
        &mut self,
        only: Option<&str>,
        rel: &mut Rel,
        outs: &mut Vec<String>,
        item: &SelectItem,
    ) -> R<()> {
        let frame = self.frames.last().expect("frame");
        let mut cols = Vec::new();
        for s in &frame.sources {
            if only.is_some_and(|n| s.name.as_deref() != Some(n)) {
                continue;
            }
            for c in s.rel.cols.iter().filter(|c| !c.hidden) {
                cols.push((c.name.clone(), E::sql(format!("{}.\"{}\"", s.internal, c.internal), c.ty)));
            }
        }
        if cols.is_empty() {
            return invalid(at("* names no relation of the FROM", item.span()));
        }
        for (name, e) in cols {
            self.output(name, e, rel, outs)?;
        }
        Ok(())
    }

    /// Adds an output column.
    fn output(&mut self, name: String, e: E, rel: &mut Rel, outs: &mut Vec<String>) -> R<()> {
        let internal = format!("c{}", rel.cols.len());
        let (sql, ty) = self.as_value(e)?;
        outs.push(format!("{sql} AS \"{internal}\""));
        rel.cols.push(Col { name, internal, ty, hidden: false });
        Ok(())
    }

    /// A `GROUP BY` or `ORDER BY` item: a position (1-based) is that output's expression.
    fn positional(&mut self, e: &sqlparser::ast::Expr, rel: &Rel) -> R<String> {
        if let sqlparser::ast::Expr::Value(v) = e
            && let sqlparser::ast::Value::Number(n, _) = &v.value
        {
            let i = n.parse::<usize>().ok().and_then(|i| i.checked_sub(1));
            let Some(col) = i.and_then(|i| rel.cols.get(i)) else {
                return invalid(at(format!("there is no output column {n}"), e.span()));
            };
            let _ = col;
            // Both backends read a bare position in GROUP BY and ORDER BY as the output.
            return Ok(format!("{}", i.unwrap_or(0) + 1));
        }
        let v = self.value(e)?;
        Ok(self.as_value(v)?.0)
    }

    /// A relation of a `FROM`.
    fn factor(&mut self, f: &TableFactor) -> R<(String, Source)> {
        match f {
            TableFactor::Table {
                name,
                alias,
                args,
                with_hints,
                version,
                with_ordinality,
                partitions,
                json_path,
                sample,
                index_directives,
                inheritance,
            } => {
                if args.is_some() {
                    return invalid(at(format!("table function {name} is not allowed"), f.span()));
                }
                if !with_hints.is_empty()
                    || version.is_some()
                    || *with_ordinality
                    || !partitions.is_empty()
                    || json_path.is_some()
                    || sample.is_some()
                    || !index_directives.is_empty()
                    || inheritance.is_some()
                {
                    return invalid(at(format!("{name}: table options are not allowed"), f.span()));
                }
                let table = single_name(name)?;
                let alias_name = match alias {
                    Some(a) if !a.columns.is_empty() => {
                        return invalid(at("column aliases on a table are not allowed", f.span()));
                    }
                    Some(a) => a.name.value.clone(),
                    None => table.clone(),
                };
                let internal = self.fresh("t");
                if let Some(cte) = self.ctes.iter().rev().find(|c| c.name == table) {
                    let (cte_internal, rel) = (cte.internal.clone(), cte.rel.clone());
                    return Ok((
                        format!("{cte_internal} AS {internal}"),
                        Source { name: Some(alias_name), internal, rel, using: Vec::new() },
                    ));
                }
                let Some(grain) = tables::lookup(&table, self.family)? else {
                    return invalid(at(
                        format!("unknown table {table}: the tables are {}", tables::names(self.family)),
                        f.span(),
                    ));
                };
                let body = tables::subquery(self.family, grain, self.scope, self.d, &mut self.binds);
                let rel = Rel {
                    cols: tables::columns(self.family)
                        .iter()
                        .map(|c| Col {
                            name: c.name.into(),
                            internal: c.internal.into(),
                            ty: c.ty,
                            hidden: c.hidden,
                        })
                        .collect(),
                };
                let _: Grain = grain;
                Ok((
                    format!("({body}) AS {internal}"),
                    Source { name: Some(alias_name), internal, rel, using: Vec::new() },
                ))
            }
            TableFactor::Derived { lateral, subquery, alias, sample } => {
                if *lateral || sample.is_some() {
                    return invalid(at("LATERAL and SAMPLE are not allowed", f.span()));
                }
                let name = match alias {
                    Some(a) if !a.columns.is_empty() => {
                        return invalid(at("column aliases on a subquery are not allowed", f.span()));
                    }
                    Some(a) => Some(a.name.value.clone()),
                    None => None,
                };
                let (sql, rel) = self.query(subquery, false)?;
                let internal = self.fresh("t");
                Ok((format!("({sql}) AS {internal}"), Source { name, internal, rel, using: Vec::new() }))
            }
            other => invalid(at("only tables and subqueries can be read from", other.span())),
        }
    }

    /// The two sides of `USING (name)`: the first earlier source having it, and `right`.
    fn using_pair(&self, name: &str, right: usize) -> R<(String, String)> {
        let frame = self.frames.last().expect("frame");
        let find = |s: &Source| {
            s.rel.cols.iter().find(|c| c.name == name).map(|c| format!("{}.\"{}\"", s.internal, c.internal))
        };
        let left = frame.sources[..right].iter().find_map(find);
        let r = find(&frame.sources[right]);
        match (left, r) {
            (Some(l), Some(r)) => Ok((l, r)),
            _ => invalid(format!("USING ({name}): both sides of the join need the column {name}")),
        }
    }
}

fn wildcard_plain(o: &sqlparser::ast::WildcardAdditionalOptions) -> bool {
    o.opt_ilike.is_none()
        && o.opt_exclude.is_none()
        && o.opt_except.is_none()
        && o.opt_replace.is_none()
        && o.opt_rename.is_none()
}

fn join_kind(j: &Join) -> R<(&'static str, Option<&JoinConstraint>)> {
    if j.global {
        return invalid(at("GLOBAL JOIN is not allowed", j.relation.span()));
    }
    let (kind, c) = match &j.join_operator {
        JoinOperator::Join(c) | JoinOperator::Inner(c) => ("JOIN", c),
        JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => ("LEFT JOIN", c),
        JoinOperator::CrossJoin(c) => ("CROSS JOIN", c),
        _ => return invalid(at("only JOIN, LEFT JOIN and CROSS JOIN are allowed", j.relation.span())),
    };
    match (kind, c) {
        ("CROSS JOIN", JoinConstraint::None) => Ok((kind, None)),
        ("CROSS JOIN", _) => invalid(at("CROSS JOIN takes no condition", j.relation.span())),
        (_, JoinConstraint::None) => invalid(at(format!("{kind} needs ON or USING"), j.relation.span())),
        (_, c) => Ok((kind, Some(c))),
    }
}

/// The answer's name of an unnamed projection: a column's name, else the expression's text.
fn output_name(e: &sqlparser::ast::Expr) -> String {
    match e {
        sqlparser::ast::Expr::Identifier(id) => id.value.clone(),
        sqlparser::ast::Expr::CompoundIdentifier(ids) => {
            ids.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        e => e.to_string(),
    }
}
