//! Expressions: names resolved to the relations of the `FROM` (or a projection alias, as
//! ClickHouse allows), literals as bind parameters, operators checked against the types of
//! their operands and written so that both backends compute the same value (`/` always in
//! floating point, a zero divisor gives NULL, `LIKE` case-sensitive, booleans as 0/1).

use super::ir::{E, K, Tr, unify};
use super::operators::like_to_glob;
use super::time::{interval, parse_time};
use super::{Dialect, Param, R, SqlError, Ty, at, invalid};
use sqlparser::ast::{CeilFloorKind, DateTimeField, Expr, Ident, InTarget, Spanned, UnaryOperator, Value};

impl Tr<'_> {
    /// The expression's SQL as it is (a boolean stays a boolean).
    pub(super) fn raw(&mut self, e: &E) -> R<String> {
        Ok(match &e.k {
            K::Sql(s) => s.clone(),
            K::Lit(p) => self.binds.bind(p.clone()),
            K::Null => "NULL".into(),
            K::Bool(b) => match (self.d, b) {
                (Dialect::Postgres, true) => "TRUE".into(),
                (Dialect::Postgres, false) => "FALSE".into(),
                (Dialect::Sqlite, b) => (*b as i32).to_string(),
            },
            K::Time(t) => self.binds.bind(Param::Int(*t)),
            K::Interval { .. } => {
                return invalid("an INTERVAL is only allowed added to or subtracted from a time");
            }
        })
    }

    /// The expression as a value: a boolean becomes 0 or 1 (ClickHouse's UInt8).
    pub(super) fn as_value(&mut self, e: E) -> R<(String, Ty)> {
        let s = self.raw(&e)?;
        Ok(match (e.ty, self.d) {
            (Ty::Bool, Dialect::Postgres) => (format!("CAST({s} AS INTEGER)"), Ty::Int),
            (Ty::Bool, Dialect::Sqlite) => (s, Ty::Int),
            (ty, _) => (s, ty),
        })
    }

    /// The expression as a condition: a number is true when not 0.
    pub(super) fn as_bool(&mut self, e: E) -> R<String> {
        let s = self.raw(&e)?;
        match e.ty {
            Ty::Bool | Ty::Null => Ok(s),
            Ty::Int | Ty::Float => Ok(match self.d {
                Dialect::Postgres => format!("({s} <> 0)"),
                Dialect::Sqlite => s,
            }),
            ty => invalid(format!("a {} is not a condition", ty.name())),
        }
    }

    /// A `WHERE` or `ON` condition (no aggregates).
    pub(super) fn condition(&mut self, e: &Expr, clause: &str) -> R<String> {
        let v = self.value(e)?;
        if v.agg {
            return invalid(at(
                format!("an aggregate function is not allowed in {clause}: use HAVING"),
                e.span(),
            ));
        }
        self.as_bool(v)
    }

    /// A `HAVING` condition.
    pub(super) fn condition_agg(&mut self, e: &Expr) -> R<String> {
        let v = self.value(e)?;
        self.as_bool(v)
    }

    /// An operand of arithmetic or a function: a boolean as 0/1.
    pub(super) fn operand(&mut self, e: &E) -> R<String> {
        Ok(self.as_value(e.clone())?.0)
    }

    /// Translates an expression.
    pub(super) fn value(&mut self, e: &Expr) -> R<E> {
        self.enter(e.span())?;
        let v = self.value_inner(e);
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self, e: &Expr) -> R<E> {
        match e {
            Expr::Identifier(id) => self.column(None, id),
            Expr::CompoundIdentifier(ids) => match ids.as_slice() {
                [t, c] => self.column(Some(t), c),
                _ => invalid(at(format!("{e}: a name has at most two parts (table.column)"), e.span())),
            },
            Expr::Value(v) => literal(&v.value, e),
            Expr::Nested(inner) => {
                let v = self.value(inner)?;
                Ok(match v.k {
                    K::Sql(s) => E { k: K::Sql(format!("({s})")), ..v },
                    _ => v,
                })
            }
            Expr::UnaryOp { op, expr } => {
                let v = self.value(expr)?;
                match op {
                    UnaryOperator::Not => {
                        let s = self.as_bool(v.clone())?;
                        Ok(E::sql(format!("(NOT {s})"), Ty::Bool).with_agg(v.agg))
                    }
                    UnaryOperator::Minus => match (&v.k, v.ty) {
                        (K::Lit(Param::Int(n)), _) => Ok(E { k: K::Lit(Param::Int(n.wrapping_neg())), ..v }),
                        (K::Lit(Param::Float(n)), _) => Ok(E { k: K::Lit(Param::Float(-n)), ..v }),
                        (_, Ty::Int | Ty::Float | Ty::Bool) => {
                            let s = self.operand(&v)?;
                            Ok(E::sql(
                                format!("(- {s})"),
                                if v.ty == Ty::Float { Ty::Float } else { Ty::Int },
                            )
                            .with_agg(v.agg))
                        }
                        _ => invalid(at(format!("- of a {}", v.ty.name()), e.span())),
                    },
                    UnaryOperator::Plus if v.ty.numeric() => Ok(v),
                    op => invalid(at(format!("the operator {op} is not allowed"), e.span())),
                }
            }
            Expr::BinaryOp { left, op, right } => {
                let l = self.value(left)?;
                let r = self.value(right)?;
                self.binary(l, op, r, e)
            }
            Expr::IsNull(x) | Expr::IsNotNull(x) => {
                let v = self.value(x)?;
                let s = self.raw(&v)?;
                let not = if matches!(e, Expr::IsNotNull(_)) { " NOT" } else { "" };
                Ok(E::sql(format!("({s} IS{not} NULL)"), Ty::Bool).with_agg(v.agg))
            }
            Expr::Between { expr, negated, low, high } => {
                let v = self.value(expr)?;
                let lo = self.value(low)?;
                let hi = self.value(high)?;
                let lo = self.comparable(&v, lo, e)?;
                let hi = self.comparable(&v, hi, e)?;
                let (vs, ls, hs) = (self.operand(&v)?, self.operand(&lo)?, self.operand(&hi)?);
                let not = if *negated { " NOT" } else { "" };
                Ok(E::sql(format!("({vs}{not} BETWEEN {ls} AND {hs})"), Ty::Bool)
                    .with_agg(v.agg || lo.agg || hi.agg))
            }
            Expr::In { expr, target, negated, global } => {
                if *global {
                    return invalid(at("GLOBAL IN is not allowed", e.span()));
                }
                let v = self.value(expr)?;
                let not = if *negated { " NOT" } else { "" };
                let vs = self.operand(&v)?;
                match target {
                    InTarget::List(items) => {
                        let mut parts = Vec::new();
                        let mut agg = v.agg;
                        for item in items {
                            let x = self.value(item)?;
                            let x = self.comparable(&v, x, item)?;
                            agg |= x.agg;
                            parts.push(self.operand(&x)?);
                        }
                        if parts.is_empty() {
                            return invalid(at("IN () needs at least one value", e.span()));
                        }
                        Ok(E::sql(format!("({vs}{not} IN ({}))", parts.join(", ")), Ty::Bool).with_agg(agg))
                    }
                    InTarget::Subquery(q) => {
                        let (sql, rel) = self.query(q, false)?;
                        let [col] = rel.cols.as_slice() else {
                            return invalid(at("the subquery of IN must select one column", e.span()));
                        };
                        check_comparable(v.ty, col.ty, e)?;
                        Ok(E::sql(format!("({vs}{not} IN ({sql}))"), Ty::Bool).with_agg(v.agg))
                    }
                    _ => invalid(at("IN takes a list or a subquery", e.span())),
                }
            }
            Expr::Like { negated, any, expr, pattern, escape_char }
            | Expr::ILike { negated, any, expr, pattern, escape_char } => {
                if *any || escape_char.is_some() {
                    return invalid(at("LIKE ANY and ESCAPE are not allowed", e.span()));
                }
                let insensitive = matches!(e, Expr::ILike { .. });
                let v = self.value(expr)?;
                if !matches!(v.ty, Ty::Text | Ty::Null) {
                    return invalid(at(format!("LIKE applies to a String, not a {}", v.ty.name()), e.span()));
                }
                let p = self.value(pattern)?;
                let Some(pat) = p.text_literal() else {
                    return invalid(at("the pattern of LIKE must be a string literal", pattern.span()));
                };
                let vs = self.raw(&v)?;
                let not = if *negated { "NOT " } else { "" };
                let sql = match (self.d, insensitive) {
                    (Dialect::Sqlite, false) => {
                        let glob = self.binds.bind(Param::Text(like_to_glob(pat)));
                        format!("({vs} {not}GLOB {glob})")
                    }
                    (Dialect::Sqlite, true) => {
                        let p = self.binds.bind(Param::Text(pat.to_string()));
                        format!("({vs} {not}LIKE {p} ESCAPE '\\')")
                    }
                    (Dialect::Postgres, i) => {
                        let p = self.binds.bind(Param::Text(pat.to_string()));
                        format!("({vs} {not}{} {p})", if i { "ILIKE" } else { "LIKE" })
                    }
                };
                Ok(E::sql(sql, Ty::Bool).with_agg(v.agg))
            }
            Expr::Case { operand, conditions, else_result, .. } => {
                let mut sql = String::from("(CASE");
                let mut agg = false;
                let op = match operand {
                    Some(o) => {
                        let v = self.value(o)?;
                        agg |= v.agg;
                        sql.push(' ');
                        sql.push_str(&self.operand(&v)?);
                        Some(v)
                    }
                    None => None,
                };
                let mut ty = Ty::Null;
                for w in conditions {
                    let c = self.value(&w.condition)?;
                    agg |= c.agg;
                    let cs = match &op {
                        Some(o) => {
                            let c = self.comparable(o, c, &w.condition)?;
                            self.operand(&c)?
                        }
                        None => self.as_bool(c)?,
                    };
                    let r = self.value(&w.result)?;
                    agg |= r.agg;
                    let (rs, rty) = self.as_value(r)?;
                    ty = unify(ty, rty)
                        .ok_or_else(|| SqlError::Invalid(at("CASE mixes result types", e.span())))?;
                    sql.push_str(&format!(" WHEN {cs} THEN {rs}"));
                }
                if let Some(x) = else_result {
                    let r = self.value(x)?;
                    agg |= r.agg;
                    let (rs, rty) = self.as_value(r)?;
                    ty = unify(ty, rty)
                        .ok_or_else(|| SqlError::Invalid(at("CASE mixes result types", e.span())))?;
                    sql.push_str(&format!(" ELSE {rs}"));
                }
                sql.push_str(" END)");
                Ok(E::sql(sql, ty).with_agg(agg))
            }
            Expr::Exists { subquery, negated } => {
                let (sql, _) = self.query(subquery, false)?;
                let not = if *negated { "NOT " } else { "" };
                Ok(E::sql(format!("({not}EXISTS ({sql}))"), Ty::Bool))
            }
            Expr::Subquery(q) => {
                let (sql, rel) = self.query(q, false)?;
                let [col] = rel.cols.as_slice() else {
                    return invalid(at("a subquery used as a value must select one column", e.span()));
                };
                Ok(E::sql(format!("({sql})"), col.ty))
            }
            Expr::Interval(i) => interval(i, e),
            Expr::Function(f) => self.function(f, e),
            Expr::Floor { expr, field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime) }
            | Expr::Ceil { expr, field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime) } => {
                let v = self.value(expr)?;
                let f = if matches!(e, Expr::Floor { .. }) { "floor" } else { "ceil" };
                self.rounding(f, &v, 0, e)
            }
            Expr::Cast { .. } => {
                invalid(at("CAST is not allowed: use toString, toInt64, toFloat64 or toDateTime", e.span()))
            }
            other => invalid(at(format!("{} is not allowed", construct(other)), e.span())),
        }
    }

    /// A name: a projection alias of this `SELECT` (ClickHouse's rule), a column of its
    /// `FROM`, else of an enclosing query's.
    fn column(&mut self, table: Option<&Ident>, name: &Ident) -> R<E> {
        let n = name.value.as_str();
        if table.is_none()
            && let Some(frame) = self.frames.last()
            && let Some(a) = frame.aliases.iter().rev().find(|a| a.name == n)
        {
            let e = a.e.clone();
            return Ok(match e.k {
                K::Sql(s) => E { k: K::Sql(format!("({s})")), ..e },
                _ => e,
            });
        }
        for frame in self.frames.iter().rev() {
            let mut found = Vec::new();
            for s in &frame.sources {
                if let Some(t) = table
                    && s.name.as_deref() != Some(t.value.as_str())
                {
                    continue;
                }
                if let Some(c) = s.rel.cols.iter().find(|c| c.name == n) {
                    found.push((s, c));
                }
            }
            match found.as_slice() {
                [] if table.is_some()
                    && frame.sources.iter().any(|s| s.name.as_deref() == table.map(|t| t.value.as_str())) =>
                {
                    break;
                }
                [] => continue,
                [(s, c)] => return Ok(E::sql(format!("{}.\"{}\"", s.internal, c.internal), c.ty)),
                [(s, c), rest @ ..] if rest.iter().all(|(r, _)| r.using.iter().any(|u| u == n)) => {
                    return Ok(E::sql(format!("{}.\"{}\"", s.internal, c.internal), c.ty));
                }
                _ => return invalid(at(format!("the column {n} is ambiguous: name its table"), name.span)),
            }
        }
        if n == "identifier" {
            return Err(SqlError::NotSupported(at(
                "the column identifier is not kept: keygate counts rate-limit decisions per namespace, not per \
                 identifier; use ratelimits_per_minute_v1 by namespace (or keygate.getRatelimits with identifiers: \
                 true for the heaviest identifiers)",
                name.span,
            )));
        }
        let what = match table {
            Some(t) => format!("{}.{n}", t.value),
            None => n.to_string(),
        };
        invalid(at(format!("unknown column {what}"), name.span))
    }

    /// `other` made comparable with `v`: a string literal compared with a time is parsed as
    /// a date or date-time (UTC).
    pub(super) fn comparable(&mut self, v: &E, other: E, at_expr: &Expr) -> R<E> {
        if v.ty == Ty::Time
            && let Some(s) = other.text_literal()
        {
            let t = parse_time(s).ok_or_else(|| {
                SqlError::Invalid(at(
                    format!("'{s}' is not a date (YYYY-MM-DD) or date-time (YYYY-MM-DD hh:mm:ss)"),
                    at_expr.span(),
                ))
            })?;
            return Ok(E { k: K::Time(t), ty: Ty::Time, agg: false });
        }
        check_comparable(v.ty, other.ty, at_expr)?;
        Ok(other)
    }
}

/// Whether values of `a` and `b` may be compared (the same on both backends).
pub(super) fn check_comparable(a: Ty, b: Ty, e: &Expr) -> R<()> {
    let group = |t: Ty| match t {
        Ty::Int | Ty::Float | Ty::Bool | Ty::Time => 1,
        Ty::Text => 2,
        Ty::Array => 3,
        Ty::Null => 0,
    };
    let (ga, gb) = (group(a), group(b));
    if ga == 3 || gb == 3 {
        return invalid(at("an array cannot be compared: use has(tags, 'x')", e.span()));
    }
    if ga != 0 && gb != 0 && ga != gb {
        return invalid(at(format!("a {} cannot be compared with a {}", a.name(), b.name()), e.span()));
    }
    Ok(())
}

fn literal(v: &Value, e: &Expr) -> R<E> {
    Ok(match v {
        Value::Number(n, _) => match n.parse::<i64>() {
            Ok(i) => E { k: K::Lit(Param::Int(i)), ty: Ty::Int, agg: false },
            Err(_) => match n.parse::<f64>() {
                Ok(f) if f.is_finite() => E { k: K::Lit(Param::Float(f)), ty: Ty::Float, agg: false },
                _ => return invalid(at(format!("the number {n} is out of range"), e.span())),
            },
        },
        Value::SingleQuotedString(s) => E { k: K::Lit(Param::Text(s.clone())), ty: Ty::Text, agg: false },
        Value::Boolean(b) => E { k: K::Bool(*b), ty: Ty::Bool, agg: false },
        Value::Null => E { k: K::Null, ty: Ty::Null, agg: false },
        _ => return invalid(at("this kind of literal is not allowed: use a number or a 'string'", e.span())),
    })
}
/// What an expression is, for "… is not allowed".
fn construct(e: &Expr) -> String {
    let text = e.to_string();
    let short: String = text.chars().take(40).collect();
    format!("the expression {short}")
}
