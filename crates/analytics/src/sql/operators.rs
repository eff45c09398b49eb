//! Operators (`AND`, comparisons, arithmetic, `||`), `INTERVAL`s and `LIKE` patterns,
//! checked against their operands' types and written to compute the same value on both
//! backends.

use super::ir::{E, K, Tr};
use super::time::shift;
use super::{Dialect, R, SqlError, Ty, at, invalid};
use sqlparser::ast::{BinaryOperator, Expr, Spanned};

impl Tr<'_> {
    pub(super) fn binary(&mut self, l: E, op: &BinaryOperator, r: E, e: &Expr) -> R<E> {
        let agg = l.agg || r.agg;
        match op {
            BinaryOperator::And | BinaryOperator::Or => {
                let (ls, rs) = (self.as_bool(l)?, self.as_bool(r)?);
                let op = if matches!(op, BinaryOperator::And) { "AND" } else { "OR" };
                Ok(E::sql(format!("({ls} {op} {rs})"), Ty::Bool).with_agg(agg))
            }
            BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq => {
                let (l, r) = if r.ty == Ty::Time {
                    let l = self.comparable(&r, l, e)?;
                    (l, r)
                } else {
                    let r = self.comparable(&l, r, e)?;
                    (l, r)
                };
                let sym = match op {
                    BinaryOperator::Eq => "=",
                    BinaryOperator::NotEq => "<>",
                    BinaryOperator::Lt => "<",
                    BinaryOperator::LtEq => "<=",
                    BinaryOperator::Gt => ">",
                    _ => ">=",
                };
                let (ls, rs) = if l.ty == Ty::Bool && r.ty == Ty::Bool {
                    (self.raw(&l)?, self.raw(&r)?)
                } else {
                    (self.operand(&l)?, self.operand(&r)?)
                };
                Ok(E::sql(format!("({ls} {sym} {rs})"), Ty::Bool).with_agg(agg))
            }
            BinaryOperator::StringConcat => self.concat(&[l, r]),
            BinaryOperator::Plus | BinaryOperator::Minus => {
                self.add(l, matches!(op, BinaryOperator::Minus), r, e)
            }
            BinaryOperator::Multiply | BinaryOperator::Divide | BinaryOperator::Modulo => {
                for x in [&l, &r] {
                    if !matches!(x.ty, Ty::Int | Ty::Float | Ty::Bool | Ty::Null) {
                        return invalid(at(format!("{op} of a {}", x.ty.name()), e.span()));
                    }
                }
                let (ls, rs) = (self.operand(&l)?, self.operand(&r)?);
                let float = self.float_type();
                Ok(match op {
                    BinaryOperator::Multiply => {
                        let ty = if l.ty == Ty::Float || r.ty == Ty::Float { Ty::Float } else { Ty::Int };
                        E::sql(format!("({ls} * {rs})"), ty)
                    }
                    // ClickHouse's `/` is always floating point; a zero divisor gives NULL.
                    BinaryOperator::Divide => {
                        E::sql(format!("(CAST({ls} AS {float}) / NULLIF({rs}, 0))"), Ty::Float)
                    }
                    _ => {
                        if l.ty == Ty::Float || r.ty == Ty::Float {
                            return invalid(at("% takes whole numbers", e.span()));
                        }
                        E::sql(format!("({ls} % NULLIF({rs}, 0))"), Ty::Int)
                    }
                }
                .with_agg(agg))
            }
            op => invalid(at(format!("the operator {op} is not allowed"), e.span())),
        }
    }

    /// `+` and `-`: numbers; a time and an INTERVAL; two times (their distance in ms).
    fn add(&mut self, l: E, minus: bool, r: E, e: &Expr) -> R<E> {
        let agg = l.agg || r.agg;
        let sym = if minus { "-" } else { "+" };
        match (&l.k, l.ty, &r.k, r.ty) {
            (K::Time(t), _, K::Interval { ms, months }, _) => {
                let sign = if minus { -1 } else { 1 };
                let t = shift(*t, sign * *ms, sign as i32 * *months)
                    .ok_or_else(|| SqlError::Invalid(at("the time is out of range", e.span())))?;
                Ok(E { k: K::Time(t), ty: Ty::Time, agg: false })
            }
            (_, Ty::Time, K::Interval { ms, months: 0 }, _) => {
                let ls = self.raw(&l)?;
                Ok(E::sql(format!("({ls} {sym} {ms})"), Ty::Time).with_agg(agg))
            }
            (_, Ty::Time, K::Interval { .. }, _) => Err(SqlError::NotSupported(at(
                "an INTERVAL of months or years applies to a constant time only (now(), today(), a literal); \
                 use days for a column",
                e.span(),
            ))),
            (K::Interval { .. }, _, _, Ty::Time) if !minus => self.add(r, false, l, e),
            (_, Ty::Time, _, Ty::Time) if minus => {
                let (ls, rs) = (self.raw(&l)?, self.raw(&r)?);
                Ok(E::sql(format!("({ls} - {rs})"), Ty::Int).with_agg(agg))
            }
            (_, lt, _, rt)
                if matches!(lt, Ty::Int | Ty::Float | Ty::Bool | Ty::Null)
                    && matches!(rt, Ty::Int | Ty::Float | Ty::Bool | Ty::Null) =>
            {
                let (ls, rs) = (self.operand(&l)?, self.operand(&r)?);
                let ty = if lt == Ty::Float || rt == Ty::Float { Ty::Float } else { Ty::Int };
                Ok(E::sql(format!("({ls} {sym} {rs})"), ty).with_agg(agg))
            }
            _ => invalid(at(
                format!("{sym} of a {} and a {} (add an INTERVAL to a time)", l.ty.name(), r.ty.name()),
                e.span(),
            )),
        }
    }

    /// `concat(…)` and `||`: the values as text, joined (NULL if one is NULL).
    pub(super) fn concat(&mut self, parts: &[E]) -> R<E> {
        let mut out = Vec::new();
        let mut agg = false;
        for p in parts {
            agg |= p.agg;
            if p.ty == Ty::Array {
                return invalid("concat of an array");
            }
            let s = self.operand(p)?;
            out.push(if p.ty == Ty::Text { s } else { format!("CAST({s} AS TEXT)") });
        }
        Ok(E::sql(format!("({})", out.join(" || ")), Ty::Text).with_agg(agg))
    }

    pub(super) fn float_type(&self) -> &'static str {
        match self.d {
            Dialect::Sqlite => "REAL",
            Dialect::Postgres => "DOUBLE PRECISION",
        }
    }
}

/// `LIKE`'s pattern (`%`, `_`, `\` escapes) as a GLOB pattern (case-sensitive on SQLite).
pub(super) fn like_to_glob(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => out.push('*'),
            '_' => out.push('?'),
            '\\' => match chars.next() {
                Some(n) => push_glob_literal(&mut out, n),
                None => push_glob_literal(&mut out, '\\'),
            },
            c => push_glob_literal(&mut out, c),
        }
    }
    out
}

fn push_glob_literal(out: &mut String, c: char) {
    match c {
        '*' | '?' | '[' => {
            out.push('[');
            out.push(c);
            out.push(']');
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_patterns_become_globs_with_their_specials_escaped() {
        assert_eq!(super::like_to_glob("a%b_c"), "a*b?c");
        assert_eq!(super::like_to_glob("x*y?[z]"), "x[*]y[?][[]z]");
        assert_eq!(super::like_to_glob(r"100\%"), "100%");
    }
}
