//! Properties of the SQL analytics translator (API-v2.md §18) over generated queries, no
//! database needed: whatever the text (token soups built from SQL's keywords, the public
//! tables, keygate's own tables, functions in and out of the list, literals with quotes
//! and escapes, comments), `compile` answers without panicking, and a statement it accepts
//! reads only through the scoped subqueries: it names no table of keygate's but the two
//! count tables (and the joins that resolve names), binds the caller's workspace, and
//! carries no text of the query but as bind parameters.

use keygate_analytics::sql::{Dialect, Family, Param, Scope, compile};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const TOKENS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "ORDER BY",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "UNION",
    "UNION ALL",
    "EXCEPT",
    "INTERSECT",
    "WITH",
    "AS",
    "JOIN",
    "LEFT JOIN",
    "CROSS JOIN",
    "ON",
    "USING",
    "AND",
    "OR",
    "NOT",
    "IN",
    "EXISTS",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "IS NULL",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DISTINCT",
    "INTERVAL",
    "DAY",
    "MONTH",
    "*",
    ",",
    "(",
    ")",
    "(",
    ")",
    "=",
    "!=",
    "<",
    ">=",
    "+",
    "-",
    "/",
    "%",
    "||",
    ";",
    ".",
    "key_verifications_per_minute_v1",
    "key_verifications_per_hour_v1",
    "key_verifications_per_day_v1",
    "key_verifications_per_month_v1",
    "ratelimits_per_day_v1",
    "key_verifications_v1",
    "keys",
    "root_keys",
    "workspaces",
    "sqlite_master",
    "pg_catalog.pg_tables",
    "verification_counts",
    "time",
    "workspace_id",
    "key_space_id",
    "apiId",
    "external_id",
    "key_id",
    "outcome",
    "tags",
    "count",
    "identifier",
    "t",
    "x",
    "c",
    "count(*)",
    "sum(count)",
    "avg(count)",
    "uniq(key_id)",
    "has(tags, 'a')",
    "now()",
    "today()",
    "toStartOfDay(time)",
    "toStartOfMonth(time)",
    "if(outcome = 'VALID', 1, 0)",
    "lower(outcome)",
    "concat(key_id, 'x')",
    "round(1.5, 1)",
    "toString(time)",
    "file('/etc/passwd')",
    "load_extension('x')",
    "pg_sleep(1)",
    "sqlite_version()",
    "kg_deadline(1)",
    "CAST(1 AS String)",
    "0",
    "1",
    "42",
    "1e308",
    "-9223372036854775807",
    "'VALID'",
    "'it''s'",
    "'\\u00e9'",
    "'; DROP TABLE keys; --'",
    "'2026-11-01'",
    "'%'",
    "NULL",
    "true",
    "/* c */",
    "-- c\n",
    "\"time\"",
    "`key_id`",
];

/// The public tables (a SELECT over one of them is more likely to compile).
const PUBLIC: &[&str] = &[
    "key_verifications_per_minute_v1",
    "key_verifications_per_hour_v1",
    "key_verifications_per_day_v1",
    "key_verifications_per_month_v1",
    "ratelimits_per_day_v1",
];

fn query() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 1..40).prop_map(|t| t.join(" "))
}

const EXPRS: &[&str] = &[
    "count()",
    "sum(count)",
    "key_id",
    "outcome",
    "time",
    "toStartOfDay(time)",
    "has(tags, 'a')",
    "lower(outcome)",
    "1",
    "'x'",
    "now()",
    "uniq(key_id)",
    "if(outcome = 'VALID', 1, 0)",
    "file('x')",
    "identifier",
    "keys.hash",
    "(SELECT count() FROM key_verifications_per_minute_v1)",
    "(SELECT hash FROM keys)",
    "passed",
    "namespace_name",
];
const CONDS: &[&str] = &[
    "outcome = 'VALID'",
    "time >= now() - INTERVAL 7 DAY",
    "workspace_id = 'other' OR 1=1",
    "has(tags, 'x')",
    "1",
    "key_id IN (SELECT key_id FROM key_verifications_per_minute_v1)",
    "key_id IN (SELECT hash FROM keys)",
    "count > 1",
    "'; DROP TABLE keys --' = key_id",
    "workspace_id IN (SELECT id FROM workspaces)",
    "total > passed",
];
const TAILS: &[&str] = &[
    "",
    "GROUP BY 1",
    "ORDER BY 1 DESC",
    "LIMIT 5",
    "UNION ALL SELECT count() FROM key_verifications_per_day_v1",
    "UNION SELECT id FROM workspaces",
    "; DROP TABLE keys",
    "/* ; DELETE FROM keys */",
    "-- ' OR 1=1",
];

fn valid_shape() -> impl Strategy<Value = String> {
    // A SELECT over a public table from grammar pieces: many of them compile.
    (
        prop::collection::vec(prop::sample::select(EXPRS), 1..4),
        prop::sample::select(PUBLIC),
        prop::option::of(prop::sample::select(CONDS)),
        prop::sample::select(TAILS),
    )
        .prop_map(|(exprs, table, cond, tail)| {
            let cond = cond.map(|c| format!(" WHERE {c}")).unwrap_or_default();
            format!("SELECT {} FROM {table}{cond} {tail}", exprs.join(", "))
        })
}

fn check(text: &str) {
    let scope = Scope { workspace_id: "ws_caller".into(), only: Some(vec!["api_one".into()]) };
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        for family in [Family::Verifications, Family::Ratelimits] {
            let Ok(c) = compile(text, family, &scope, dialect, 1_795_176_000_000) else { continue };
            let sql = c.sql.to_ascii_lowercase();
            for table in [
                " keys ",
                " root_keys ",
                " workspaces ",
                "sqlite_master",
                "pg_catalog",
                "verification_counts_",
            ] {
                assert!(!sql.contains(table), "{text} → {}", c.sql);
            }
            assert!(
                !sql.contains("drop") && !sql.contains("load_extension") && !sql.contains("pg_sleep"),
                "{text} → {}",
                c.sql
            );
            if sql.contains(" from ")
                && (sql.contains("verification_counts") || sql.contains("ratelimit_counts"))
            {
                assert!(c.params.contains(&Param::Text("ws_caller".into())), "{text} → {}", c.sql);
                assert!(c.params.contains(&Param::Text("api_one".into())), "{text} → {}", c.sql);
            }
            // No quote of the query's text: its strings are parameters.
            assert!(!c.sql.contains("VALID") && !c.sql.contains("it''s"), "{text} → {}", c.sql);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_token_soup_compiles_or_is_refused_without_a_panic(text in query()) {
        check(&text);
    }

    #[test]
    fn any_select_over_a_public_table_reads_only_the_caller_s_rows(text in valid_shape()) {
        check(&text);
    }
}

#[test]
fn the_generators_reach_accepted_queries() {
    // The properties above are only worth something if many generated queries compile.
    let scope = Scope { workspace_id: "ws_caller".into(), only: None };
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut accepted = 0;
    for _ in 0..2_000 {
        let text = valid_shape().new_tree(&mut runner).expect("value").current();
        if compile(&text, Family::Verifications, &scope, Dialect::Sqlite, 0).is_ok() {
            accepted += 1;
        }
    }
    assert!(accepted >= 50, "only {accepted} of 2,000 generated queries compile");
}
