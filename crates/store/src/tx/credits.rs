//! A key's credits (the credit columns of `keys`).

use super::*;
use keygate_rbac::store::CreditSpend;

/// remaining, refill interval, amount, day, last refill: the credit columns' values.
type CreditValues = (Option<i64>, Option<&'static str>, Option<i64>, Option<i64>, Option<i64>);

/// The credit columns' values of a key's credits, in [`CreditsRow`]'s first five.
fn credit_values(credits: Option<&Credits>) -> CreditValues {
    let Some(c) = credits else { return (None, None, None, None, None) };
    let remaining = Some(i64::try_from(c.remaining).unwrap_or(i64::MAX));
    match &c.refill {
        None => (remaining, None, None, None, None),
        Some(r) => (
            remaining,
            Some(r.interval.as_str()),
            Some(i64::try_from(r.amount).unwrap_or(i64::MAX)),
            r.day.map(i64::from),
            r.last_refill_at,
        ),
    }
}

impl CreditTx for DieselTx<'_> {
    fn set_key_credits(&mut self, key_id: &str, credits: Option<&Credits>) -> R<()> {
        let (remaining, interval, amount, day, last) = credit_values(credits);
        diesel::update(keys::table.filter(keys::id.eq(key_id)))
            .set((
                keys::credits_remaining.eq(remaining),
                keys::refill_interval.eq(interval),
                keys::refill_amount.eq(amount),
                keys::refill_day.eq(day),
                keys::last_refill_at.eq(last),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn add_key_credits(&mut self, key_id: &str, delta: i64) -> R<Option<u64>> {
        // One statement: concurrent changes add up, none is lost; never below 0, never
        // above 2^53 - 1 (so that repeated increments neither leave the JSON-safe range
        // nor overflow the column). `delta` is within ±(2^53 - 1), so no sum overflows.
        use diesel::dsl::sql;
        use diesel::sql_types::{BigInt, Nullable};
        let max = i64::try_from(keygate_domain::MAX_SAFE_INTEGER).unwrap_or(i64::MAX);
        let delta = delta.clamp(-max, max);
        let expr = sql::<Nullable<BigInt>>("CASE WHEN credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" < 0 THEN 0 WHEN credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" > ")
            .bind::<BigInt, _>(max)
            .sql(" THEN ")
            .bind::<BigInt, _>(max)
            .sql(" ELSE credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" END");
        diesel::update(keys::table.filter(keys::id.eq(key_id)).filter(keys::credits_remaining.is_not_null()))
            .set(keys::credits_remaining.eq(expr))
            .execute(self.conn)
            .map_err(db_err)?;
        let now: Option<Option<i64>> = keys::table
            .filter(keys::id.eq(key_id))
            .select(keys::credits_remaining)
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(now.flatten().map(|r| u64::try_from(r).unwrap_or(0)))
    }

    fn spend_key_credits(&mut self, key_id: &str, cost: u64, refill_at: Option<i64>) -> R<CreditSpend> {
        use diesel::dsl::sql;
        use diesel::sql_types::{BigInt, Bool, Nullable};
        let cost = i64::try_from(cost).unwrap_or(i64::MAX);
        // No refill asked: a boundary nothing is before.
        let at = refill_at.unwrap_or(i64::MIN);
        const DUE: &str = "refill_amount IS NOT NULL AND COALESCE(last_refill_at, created_at) < ";
        // What the key holds once a due refill is applied (SET reads the row as it was).
        let available = || {
            sql::<Nullable<BigInt>>(&format!("(CASE WHEN {DUE}"))
                .bind::<BigInt, _>(at)
                .sql(" THEN refill_amount ELSE credits_remaining END)")
        };
        let refilled_at = || {
            sql::<Nullable<BigInt>>(&format!("(CASE WHEN {DUE}"))
                .bind::<BigInt, _>(at)
                .sql(" THEN ")
                .bind::<BigInt, _>(at)
                .sql(" ELSE last_refill_at END)")
        };
        let row = keys::table.filter(keys::id.eq(key_id)).filter(keys::credits_remaining.is_not_null());
        // Paid: at least the cost, and more than 0 (a cost of 0 needs credits left too).
        let affordable = sql::<Bool>(&format!("(CASE WHEN {DUE}"))
            .bind::<BigInt, _>(at)
            .sql(" THEN refill_amount ELSE credits_remaining END) >= ")
            .bind::<BigInt, _>(cost.max(1));
        let paid: Option<Option<i64>> =
            on_each_backend!(self.conn, c => diesel::update(row.filter(affordable))
            .set((
                keys::credits_remaining.eq(available().sql(" - ").bind::<BigInt, _>(cost)),
                keys::last_refill_at.eq(refilled_at()),
            ))
            .returning(keys::credits_remaining)
            .get_result(c)
            .optional())
            .map_err(db_err)?;
        let remaining = |r: Option<i64>| r.map(|r| u64::try_from(r).unwrap_or(0));
        if let Some(after) = paid {
            return Ok(CreditSpend { paid: true, remaining: remaining(after) });
        }
        // Not paid: the refill still applies when due; then what is left.
        let now: Option<Option<i64>> = on_each_backend!(self.conn, c => diesel::update(row)
            .set((keys::credits_remaining.eq(available()), keys::last_refill_at.eq(refilled_at())))
            .returning(keys::credits_remaining)
            .get_result(c)
            .optional())
        .map_err(db_err)?;
        Ok(CreditSpend { paid: false, remaining: remaining(now.flatten()) })
    }

    fn set_key_credit_counter(
        &mut self,
        key_id: &str,
        expected: (u64, Option<i64>),
        remaining: u64,
        last_refill_at: Option<i64>,
    ) -> R<bool> {
        use diesel::sql_types::{BigInt, Nullable, Text};
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        // One static statement per backend, prepared once per connection (the writer runs
        // it for every key it writes); `last_refill_at` compared null-safely.
        macro_rules! run {
            ($c:expr, $sql:expr) => {
                diesel::sql_query($sql)
                    .bind::<BigInt, _>(int(remaining))
                    .bind::<Nullable<BigInt>, _>(last_refill_at)
                    .bind::<Text, _>(key_id)
                    .bind::<BigInt, _>(int(expected.0))
                    .bind::<Nullable<BigInt>, _>(expected.1)
                    .execute($c)
            };
        }
        let n = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => run!(
                c,
                "UPDATE keys SET credits_remaining = ?, last_refill_at = ? \
                 WHERE id = ? AND credits_remaining = ? AND last_refill_at IS ?"
            ),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => run!(
                c,
                "UPDATE keys SET credits_remaining = $1, last_refill_at = $2 \
                 WHERE id = $3 AND credits_remaining = $4 AND last_refill_at IS NOT DISTINCT FROM $5"
            ),
        };
        n.map(|n| n == 1).map_err(db_err)
    }
}
