//! Analytics in SQL (API-v2.md §18) on recorded counts: a table of queries and the rows
//! each must answer, the same on SQLite and on PostgreSQL (the suite runs on both), and the
//! queries that must be refused, with what they may never read.

use keygate_analytics::sql::{Family, SqlError};
use keygate_analytics::store::{RatelimitCount, VerificationCount};
use keygate_analytics::{AnalyticsService, AnalyticsStore};
use keygate_domain::ManualClock;
use keygate_rbac::{Principal, RbacService};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use serde_json::Value;
use std::sync::Arc;

/// 2026-11-20 12:00:00 UTC.
const NOW: i64 = 1_795_176_000_000;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;
/// 30 minutes ago.
const T0: i64 = NOW - 30 * MIN;
/// The hour three days ago, and the day forty days ago (in October).
const H3: i64 = 1_794_916_800_000;
const D40: i64 = 1_791_676_800_000;

struct Fixture {
    _db: TestDb,
    svc: AnalyticsService<SqlStore>,
    rbac: Arc<RbacService<SqlStore>>,
    admin: Principal,
    /// The two APIs' ids, the two namespaces', the identities'.
    api1: String,
    api2: String,
    email: String,
    sms: String,
    alice: String,
    bob: String,
    other_ws: String,
}

#[allow(clippy::too_many_arguments)]
fn vc(
    ws: &str,
    width: i64,
    bucket: i64,
    api: &str,
    key: &str,
    ident: &str,
    outcome: &str,
    tags: &[&str],
    count: u64,
) -> VerificationCount {
    VerificationCount {
        workspace_id: ws.into(),
        width,
        bucket,
        api_id: api.into(),
        key_id: key.into(),
        identity_id: ident.into(),
        outcome: outcome.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        count,
        // Only a VALID verification is charged (API-v2.md §22): 2 credits each here.
        spent_credits: if outcome == "VALID" { count * 2 } else { 0 },
    }
}

fn rc(ws: &str, ns: &str, width: i64, bucket: i64, passed: u64, denied: u64) -> RatelimitCount {
    RatelimitCount { workspace_id: ws.into(), namespace_id: ns.into(), width, bucket, passed, denied }
}

fn fixture() -> Fixture {
    let db = TestDb::fresh();
    let store =
        SqlStore::open(&db.url, PoolSettings { max_size: 4, ..PoolSettings::default() }).expect("open");
    let clock = Arc::new(ManualClock::new(NOW as u64));
    let rbac = Arc::new(RbacService::new(store, clock));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api1 = rbac.create_api(&admin, "one").expect("api").id;
    let api2 = rbac.create_api(&admin, "two").expect("api").id;
    let alice = rbac.create_identity(&admin, "alice", None, &[], None).expect("identity").identity.id;
    let bob = rbac.create_identity(&admin, "bob", None, &[], None).expect("identity").identity.id;
    let email = rbac.resolve_namespace(&admin, "email").expect("ns").to_string();
    let sms = rbac.resolve_namespace(&admin, "sms").expect("ns").to_string();
    let other = rbac.create_workspace("other").expect("workspace");
    let other_ws = other.id.clone();
    let w = ws.id.as_str();
    let counts = vec![
        vc(w, MIN, T0, &api1, "key_1", &alice, "VALID", &["a", "b"], 5),
        vc(w, MIN, T0, &api1, "key_1", &alice, "RATE_LIMITED", &[], 2),
        vc(w, MIN, T0 + MIN, &api1, "key_2", "", "VALID", &["b"], 3),
        vc(w, MIN, T0 + MIN, &api2, "key_3", &bob, "USAGE_EXCEEDED", &[], 1),
        vc(w, HOUR, H3, &api1, "key_1", &alice, "VALID", &[], 10),
        vc(w, HOUR, H3, &api2, "key_3", &bob, "VALID", &["a"], 7),
        vc(w, DAY, D40, &api1, "key_2", "", "VALID", &[], 100),
        vc(&other_ws, MIN, T0, "api_other", "key_other", "", "VALID", &["a"], 1000),
    ];
    let limits = vec![
        rc(w, &email, MIN, T0, 8, 2),
        rc(w, &sms, MIN, T0, 1, 0),
        rc(w, &email, HOUR, H3, 50, 5),
        rc(&other_ws, "rlns_other", MIN, T0, 999, 1),
    ];
    rbac.store()
        .analytics_transaction(|tx| {
            tx.add_verification_counts(&counts)?;
            tx.add_ratelimit_counts(&limits)?;
            Ok(())
        })
        .expect("counts");
    let svc = AnalyticsService::new(rbac.clone(), None).with_sql_capacity(2);
    Fixture { _db: db, svc, rbac, admin, api1, api2, email, sms, alice, bob, other_ws }
}

impl Fixture {
    /// `text` with `$API1`, `$API2`, `$EMAIL`, `$SMS`, `$ALICE`, `$BOB`, `$OTHER` replaced.
    fn fill(&self, text: &str) -> String {
        text.replace("$API1", &self.api1)
            .replace("$API2", &self.api2)
            .replace("$EMAIL", &self.email)
            .replace("$SMS", &self.sms)
            .replace("$ALICE", &self.alice)
            .replace("$BOB", &self.bob)
            .replace("$OTHER", &self.other_ws)
    }

    fn run(&self, p: &Principal, family: Family, q: &str) -> Result<Value, SqlError> {
        let rows = self.svc.query_sql(p, family, &self.fill(q))?;
        Ok(serde_json::to_value(rows).expect("json"))
    }
}

const V: Family = Family::Verifications;
const L: Family = Family::Ratelimits;

/// (family, query, expected rows as JSON text with placeholders).
const ANSWERS: &[(Family, &str, &str)] = &[
    (V, "SELECT sum(count) AS n FROM key_verifications_per_minute_v1", r#"[{"n":11}]"#),
    (V, "SELECT sum(count) AS n FROM key_verifications_per_hour_v1", r#"[{"n":28}]"#),
    (V, "SELECT sum(count) AS n FROM key_verifications_per_day_v1", r#"[{"n":128}]"#),
    (V, "SELECT sum(count) AS n FROM key_verifications_per_month_v1", r#"[{"n":128}]"#),
    (
        V,
        "select SUM(count) n from key_verifications_per_day_v1 where workspace_id = '$OTHER'",
        r#"[{"n":0}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS n FROM key_verifications_per_day_v1 WHERE workspace_id = '$OTHER' OR 1=1",
        r#"[{"n":128}]"#,
    ),
    (V, "SELECT count(*) AS rows FROM key_verifications_per_minute_v1", r#"[{"rows":4}]"#),
    (V, "SELECT count() AS rows FROM key_verifications_per_hour_v1", r#"[{"rows":6}]"#),
    (
        V,
        "SELECT outcome, sum(count) AS total FROM key_verifications_per_day_v1 GROUP BY outcome ORDER BY outcome",
        r#"[{"outcome":"RATE_LIMITED","total":2},{"outcome":"USAGE_EXCEEDED","total":1},{"outcome":"VALID","total":125}]"#,
    ),
    (
        V,
        "SELECT time, sum(count) AS total FROM key_verifications_per_month_v1 GROUP BY time ORDER BY time",
        r#"[{"time":1790812800000,"total":100},{"time":1793491200000,"total":28}]"#,
    ),
    (
        V,
        "SELECT toStartOfMonth(time) AS m, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY m ORDER BY m DESC",
        r#"[{"m":1793491200000,"c":28},{"m":1790812800000,"c":100}]"#,
    ),
    (
        V,
        "SELECT toStartOfDay(time) AS day, sum(count) AS c FROM key_verifications_per_hour_v1 GROUP BY day ORDER BY day",
        r#"[{"day":1794873600000,"c":17},{"day":1795132800000,"c":11}]"#,
    ),
    (
        V,
        "SELECT toStartOfHour(time) AS h, count() AS n FROM key_verifications_per_minute_v1 GROUP BY h",
        r#"[{"h":1795172400000,"n":4}]"#,
    ),
    (
        V,
        "SELECT time FROM key_verifications_per_minute_v1 GROUP BY time ORDER BY time",
        r#"[{"time":1795174200000},{"time":1795174260000}]"#,
    ),
    (
        V,
        "SELECT key_id, sum(count) AS c FROM key_verifications_per_day_v1 WHERE time >= now() - INTERVAL 7 DAY GROUP BY key_id ORDER BY c DESC, key_id",
        r#"[{"key_id":"key_1","c":17},{"key_id":"key_3","c":8},{"key_id":"key_2","c":3}]"#,
    ),
    (
        V,
        "SELECT key_id, sum(count) AS c FROM key_verifications_per_day_v1 WHERE time >= '2026-11-01' GROUP BY key_id ORDER BY key_id",
        r#"[{"key_id":"key_1","c":17},{"key_id":"key_2","c":3},{"key_id":"key_3","c":8}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE time BETWEEN toDateTime('2026-10-01 00:00:00') AND toDate('2026-10-31')",
        r#"[{"c":100}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE time >= toStartOfMonth(now())",
        r#"[{"c":28}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE time < now() - INTERVAL 1 MONTH",
        r#"[{"c":100}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE time >= today() - INTERVAL '3' DAY",
        r#"[{"c":28}]"#,
    ),
    (
        V,
        "SELECT external_id, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY external_id ORDER BY external_id",
        r#"[{"external_id":"","c":103},{"external_id":"alice","c":17},{"external_id":"bob","c":8}]"#,
    ),
    (
        V,
        "SELECT external_id, SUM(spent_credits) AS spent FROM key_verifications_per_month_v1 GROUP BY external_id ORDER BY external_id",
        r#"[{"external_id":"","spent":206},{"external_id":"alice","spent":30},{"external_id":"bob","spent":14}]"#,
    ),
    (
        V,
        "SELECT sum(spent_credits) AS spent FROM key_verifications_per_hour_v1 WHERE externalId = 'alice'",
        r#"[{"spent":30}]"#,
    ),
    (
        V,
        "SELECT sum(spent_credits) AS spent, sum(count) AS n FROM key_verifications_per_minute_v1",
        r#"[{"spent":16,"n":11}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE externalId = 'alice'",
        r#"[{"c":17}]"#,
    ),
    (V, "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE apiId = '$API2'", r#"[{"c":8}]"#),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_day_v1 WHERE api_id = '$API1' AND outcome = 'VALID'",
        r#"[{"c":118}]"#,
    ),
    (
        V,
        "SELECT key_space_id = '$API1' AS first, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY first ORDER BY first",
        r#"[{"first":0,"c":8},{"first":1,"c":120}]"#,
    ),
    (
        V,
        "SELECT identity_id, sum(count) AS c FROM key_verifications_per_hour_v1 WHERE identity_id != '' GROUP BY identity_id ORDER BY c",
        r#"[{"identity_id":"$BOB","c":8},{"identity_id":"$ALICE","c":17}]"#,
    ),
    (V, "SELECT sum(count) AS c FROM key_verifications_per_minute_v1 WHERE has(tags, 'b')", r#"[{"c":8}]"#),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_hour_v1 WHERE has(tags, 'a') AND NOT has(tags, 'b')",
        r#"[{"c":7}]"#,
    ),
    (
        V,
        "SELECT tags, sum(count) AS c FROM key_verifications_per_minute_v1 WHERE length(tags) > 0 GROUP BY tags ORDER BY c",
        r#"[{"tags":["b"],"c":3},{"tags":["a","b"],"c":5}]"#,
    ),
    (
        V,
        "SELECT length(tags) AS n, count() AS rows FROM key_verifications_per_minute_v1 GROUP BY n ORDER BY n",
        r#"[{"n":0,"rows":2},{"n":1,"rows":1},{"n":2,"rows":1}]"#,
    ),
    (
        V,
        "SELECT uniq(key_id) AS keys, uniqExact(outcome) AS outcomes FROM key_verifications_per_day_v1",
        r#"[{"keys":3,"outcomes":3}]"#,
    ),
    (V, "SELECT count(DISTINCT key_space_id) AS apis FROM key_verifications_per_month_v1", r#"[{"apis":2}]"#),
    (
        V,
        "SELECT min(count) AS lo, max(count) AS hi, avg(count) AS mean FROM key_verifications_per_minute_v1",
        r#"[{"lo":1,"hi":5,"mean":2.75}]"#,
    ),
    (
        V,
        "SELECT round(avg(count), 1) AS r, floor(avg(count)) AS f, ceil(avg(count)) AS c FROM key_verifications_per_minute_v1",
        r#"[{"r":2.8,"f":2.0,"c":3.0}]"#,
    ),
    (
        V,
        "SELECT sum(count) / 4 AS q, sum(count) % 4 AS m, abs(0 - sum(count)) AS a FROM key_verifications_per_minute_v1",
        r#"[{"q":2.75,"m":3,"a":11}]"#,
    ),
    (V, "SELECT sum(count) / 0 AS z FROM key_verifications_per_minute_v1", r#"[{"z":null}]"#),
    (
        V,
        "SELECT sum(if(outcome = 'VALID', count, 0)) AS valid, sum(outcome != 'VALID') AS other_rows FROM key_verifications_per_minute_v1",
        r#"[{"valid":8,"other_rows":2}]"#,
    ),
    (
        V,
        "SELECT sum(CASE WHEN outcome = 'VALID' THEN count ELSE 0 END) AS v FROM key_verifications_per_day_v1",
        r#"[{"v":125}]"#,
    ),
    (
        V,
        "SELECT lower(outcome) AS o, upper('x') AS u, concat(key_id, ':', outcome) AS k FROM key_verifications_per_minute_v1 WHERE key_id = 'key_2'",
        r#"[{"o":"valid","u":"X","k":"key_2:VALID"}]"#,
    ),
    (
        V,
        "SELECT key_id || '/' || toString(count) AS s FROM key_verifications_per_minute_v1 WHERE outcome = 'USAGE_EXCEEDED'",
        r#"[{"s":"key_3/1"}]"#,
    ),
    (
        V,
        "SELECT toString(time) AS t, toUnixTimestamp(time) AS s, toUnixTimestamp64Milli(time) AS ms FROM key_verifications_per_month_v1 WHERE time < '2026-11-01' LIMIT 1",
        r#"[{"t":"2026-10-01 00:00:00","s":1790812800,"ms":1790812800000}]"#,
    ),
    (
        V,
        "SELECT fromUnixTimestamp64Milli(1790812800000) = toDateTime('2026-10-01 00:00:00') AS same",
        r#"[{"same":1}]"#,
    ),
    (
        V,
        "SELECT toInt64(2.9) AS i, toFloat64(3) AS f, toInt64('42') AS s, toString(1.5) AS t",
        r#"[{"i":2,"f":3.0,"s":42,"t":"1.5"}]"#,
    ),
    (
        V,
        "SELECT coalesce(NULL, 'x') AS c, 1 + 2 * 3 AS n, -(4) AS m, 7 - 10 AS d",
        r#"[{"c":"x","n":7,"m":-4,"d":-3}]"#,
    ),
    (
        V,
        "SELECT toStartOfWeek(toDateTime('2026-11-20 12:00:00')) AS w, toStartOfYear(now()) AS y, toStartOfMinute(now() + INTERVAL 90 SECOND) AS m",
        r#"[{"w":1794700800000,"y":1767225600000,"m":1795176060000}]"#,
    ),
    (
        V,
        "SELECT outcome FROM key_verifications_per_day_v1 WHERE outcome LIKE 'RATE%' GROUP BY outcome",
        r#"[{"outcome":"RATE_LIMITED"}]"#,
    ),
    (
        V,
        "SELECT outcome FROM key_verifications_per_day_v1 WHERE outcome LIKE 'rate%' GROUP BY outcome",
        r#"[]"#,
    ),
    (
        V,
        "SELECT outcome FROM key_verifications_per_day_v1 WHERE outcome ILIKE 'rate%' GROUP BY outcome",
        r#"[{"outcome":"RATE_LIMITED"}]"#,
    ),
    (
        V,
        "SELECT outcome FROM key_verifications_per_day_v1 WHERE outcome NOT LIKE '%\\\\_%' GROUP BY outcome",
        r#"[{"outcome":"VALID"}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_day_v1 WHERE key_id IN ('key_1', 'key_3') AND outcome NOT IN ('RATE_LIMITED') GROUP BY key_id ORDER BY key_id",
        r#"[{"key_id":"key_1"},{"key_id":"key_3"}]"#,
    ),
    (
        V,
        "SELECT DISTINCT outcome FROM key_verifications_per_minute_v1 ORDER BY outcome LIMIT 2",
        r#"[{"outcome":"RATE_LIMITED"},{"outcome":"USAGE_EXCEEDED"}]"#,
    ),
    (
        V,
        "SELECT DISTINCT outcome FROM key_verifications_per_minute_v1 ORDER BY outcome LIMIT 1 OFFSET 2",
        r#"[{"outcome":"VALID"}]"#,
    ),
    (
        V,
        "SELECT key_id, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY key_id HAVING c > 10 ORDER BY 2 DESC",
        r#"[{"key_id":"key_2","c":103},{"key_id":"key_1","c":17}]"#,
    ),
    (
        V,
        "SELECT key_id, sum(count) FROM key_verifications_per_day_v1 GROUP BY 1 ORDER BY 2 LIMIT 1",
        r#"[{"key_id":"key_3","sum(count)":8}]"#,
    ),
    (
        V,
        "WITH daily AS (SELECT key_id, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY key_id) SELECT max(c) AS top FROM daily",
        r#"[{"top":103}]"#,
    ),
    (
        V,
        "WITH a AS (SELECT key_id, count FROM key_verifications_per_minute_v1), b AS (SELECT key_id, sum(count) AS c FROM a GROUP BY key_id) SELECT * FROM b ORDER BY key_id",
        r#"[{"key_id":"key_1","c":7},{"key_id":"key_2","c":3},{"key_id":"key_3","c":1}]"#,
    ),
    (
        V,
        "SELECT s.k, s.c FROM (SELECT key_id AS k, sum(count) AS c FROM key_verifications_per_hour_v1 GROUP BY key_id) AS s WHERE s.c > 5 ORDER BY s.k",
        r#"[{"k":"key_1","c":17},{"k":"key_3","c":8}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_minute_v1 WHERE count = (SELECT max(count) FROM key_verifications_per_minute_v1)",
        r#"[{"key_id":"key_1"}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_day_v1 WHERE key_id IN (SELECT key_id FROM key_verifications_per_minute_v1 WHERE outcome = 'USAGE_EXCEEDED') GROUP BY key_id",
        r#"[{"key_id":"key_3"}]"#,
    ),
    (
        V,
        "SELECT DISTINCT d.key_id FROM key_verifications_per_day_v1 d WHERE EXISTS (SELECT 1 FROM key_verifications_per_minute_v1 m WHERE m.key_id = d.key_id AND m.outcome = 'RATE_LIMITED')",
        r#"[{"key_id":"key_1"}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_minute_v1 UNION SELECT key_id FROM key_verifications_per_hour_v1 ORDER BY key_id",
        r#"[{"key_id":"key_1"},{"key_id":"key_2"},{"key_id":"key_3"}]"#,
    ),
    (
        V,
        "SELECT 'm' AS t, sum(count) AS c FROM key_verifications_per_minute_v1 UNION ALL SELECT 'h', sum(count) FROM key_verifications_per_hour_v1 ORDER BY c",
        r#"[{"t":"m","c":11},{"t":"h","c":28}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_day_v1 EXCEPT SELECT key_id FROM key_verifications_per_minute_v1 WHERE outcome = 'VALID'",
        r#"[{"key_id":"key_3"}]"#,
    ),
    (
        V,
        "SELECT key_id FROM key_verifications_per_day_v1 INTERSECT SELECT key_id FROM key_verifications_per_minute_v1 WHERE outcome = 'VALID' ORDER BY 1",
        r#"[{"key_id":"key_1"},{"key_id":"key_2"}]"#,
    ),
    (
        V,
        "SELECT m.key_id, m.c, d.c AS total FROM (SELECT key_id, sum(count) AS c FROM key_verifications_per_minute_v1 GROUP BY key_id) m JOIN (SELECT key_id, sum(count) AS c FROM key_verifications_per_day_v1 GROUP BY key_id) d ON m.key_id = d.key_id ORDER BY m.key_id",
        r#"[{"key_id":"key_1","c":7,"total":17},{"key_id":"key_2","c":3,"total":103},{"key_id":"key_3","c":1,"total":8}]"#,
    ),
    (
        V,
        "SELECT a.outcome, count() AS n FROM key_verifications_per_minute_v1 a LEFT JOIN key_verifications_per_hour_v1 b USING (key_id) WHERE b.time < '2026-11-19' GROUP BY a.outcome ORDER BY a.outcome",
        r#"[{"outcome":"RATE_LIMITED","n":1},{"outcome":"USAGE_EXCEEDED","n":1},{"outcome":"VALID","n":1}]"#,
    ),
    (
        V,
        "SELECT * FROM key_verifications_per_minute_v1 WHERE outcome = 'USAGE_EXCEEDED'",
        r#"[{"time":1795174260000,"workspace_id":"ws_placeholder","key_space_id":"$API2","identity_id":"$BOB","external_id":"bob","key_id":"key_3","outcome":"USAGE_EXCEEDED","tags":[],"count":1,"spent_credits":0}]"#,
    ),
    (
        V,
        "SELECT sum(count) AS c FROM key_verifications_per_minute_v1 /* a comment; DROP TABLE keys */ WHERE key_id = 'key_1' -- and another",
        r#"[{"c":7}]"#,
    ),
    (
        V,
        "SELECT count() AS n FROM key_verifications_per_day_v1 WHERE key_id = '''; DROP TABLE keys; --'",
        r#"[{"n":0}]"#,
    ),
    (V, "SELECT 'it''s' AS q, '\\u00e9' AS u, 'é' AS e", r#"[{"q":"it's","u":"u00e9","e":"é"}]"#),
    (
        L,
        "SELECT namespace_name, sum(passed) AS p, sum(total) AS t FROM ratelimits_per_hour_v1 GROUP BY namespace_name ORDER BY namespace_name",
        r#"[{"namespace_name":"email","p":58,"t":65},{"namespace_name":"sms","p":1,"t":1}]"#,
    ),
    (
        L,
        "SELECT time, sum(total - passed) AS denied FROM ratelimits_per_minute_v1 GROUP BY time",
        r#"[{"time":1795174200000,"denied":2}]"#,
    ),
    (
        L,
        "SELECT namespace_id = '$EMAIL' AS is_email, sum(total) AS t FROM ratelimits_per_day_v1 GROUP BY is_email ORDER BY is_email",
        r#"[{"is_email":0,"t":1},{"is_email":1,"t":65}]"#,
    ),
    (
        L,
        "SELECT count() AS n, sum(total) AS t FROM ratelimits_per_month_v1 WHERE workspace_id != ''",
        r#"[{"n":2,"t":66}]"#,
    ),
];

#[test]
fn each_query_answers_its_rows() {
    let f = fixture();
    let ws = f.admin.workspace_id.clone();
    let mut failures = Vec::new();
    for (family, query, expected) in ANSWERS {
        let expected: Value =
            serde_json::from_str(&f.fill(expected).replace("ws_placeholder", &ws)).expect(expected);
        match f.run(&f.admin, *family, query) {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{query}\n  expected {expected}\n  got      {got}")),
            Err(e) => failures.push(format!("{query}\n  expected {expected}\n  failed   {e:?}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} queries:\n{}", failures.len(), ANSWERS.len(), failures.join("\n"));
    assert!(ANSWERS.len() >= 60, "the table holds {} queries", ANSWERS.len());
}

/// What a refused query answers: 400 invalid (`I`), 400 not supported (`N`), 400 too
/// expensive (`X`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum No {
    I,
    N,
    X,
}

/// (family, query, how it is refused, a word the message holds).
const REFUSED: &[(Family, &str, No, &str)] = &[
    (V, "SELECT * FROM keys", No::I, "unknown table keys"),
    (V, "SELECT * FROM verification_counts", No::I, "unknown table verification_counts"),
    (V, "WITH k AS (SELECT * FROM root_keys) SELECT * FROM k", No::I, "root_keys"),
    (V, "SELECT * FROM (SELECT hash FROM keys) AS s", No::I, "unknown table keys"),
    (V, "SELECT key_id FROM key_verifications_per_day_v1 UNION SELECT hash FROM keys", No::I, "keys"),
    (
        V,
        "SELECT key_id FROM key_verifications_per_day_v1 WHERE key_id IN (SELECT id FROM workspaces)",
        No::I,
        "workspaces",
    ),
    (V, "SELECT * FROM main.keys", No::I, "qualified"),
    (V, "SELECT * FROM default.key_verifications_per_day_v1", No::I, "qualified"),
    (V, "SELECT * FROM sqlite_master", No::I, "sqlite_master"),
    (V, "SELECT * FROM pg_catalog.pg_tables", No::I, "qualified"),
    (V, "SELECT * FROM information_schema.tables", No::I, "qualified"),
    (V, "SELECT * FROM system.tables", No::I, "qualified"),
    (V, "SELECT * FROM numbers(10)", No::I, "table function"),
    (V, "SELECT * FROM file('/etc/passwd')", No::I, "table function"),
    (V, "SELECT * FROM url('http://example.com', CSV)", No::I, "table function"),
    (V, "SELECT file('/etc/passwd')", No::I, "function file"),
    (V, "SELECT sqlite_version()", No::I, "function sqlite_version"),
    (V, "SELECT pg_read_file('/etc/passwd')", No::I, "function pg_read_file"),
    (V, "SELECT load_extension('/tmp/x.so')", No::I, "function load_extension"),
    (V, "SELECT pg_sleep(10)", No::I, "function pg_sleep"),
    (V, "SELECT randomblob(1000000000)", No::I, "function randomblob"),
    (V, "SELECT kg_deadline(1)", No::I, "function kg_deadline"),
    (V, "SELECT current_setting('data_directory')", No::I, "function current_setting"),
    (V, "SELECT count(*) FROM key_verifications_per_day_v1; DROP TABLE keys", No::I, "one statement"),
    (V, "SELECT 1; SELECT 2", No::I, "one statement"),
    (V, "DROP TABLE keys", No::I, "only a SELECT"),
    (V, "DELETE FROM keys", No::I, "only a SELECT"),
    (V, "INSERT INTO keys VALUES (1)", No::I, "only a SELECT"),
    (V, "UPDATE keys SET hash = ''", No::I, "only a SELECT"),
    (V, "ATTACH DATABASE '/tmp/x' AS x", No::I, ""),
    (V, "PRAGMA table_info(keys)", No::I, ""),
    (V, "SET statement_timeout = 0", No::I, "only a SELECT"),
    (V, "SELECT * FROM key_verifications_per_day_v1 INTO OUTFILE '/tmp/x'", No::I, ""),
    (V, "SELECT count() FROM key_verifications_per_day_v1 SETTINGS max_threads = 1", No::I, "SETTINGS"),
    (V, "SELECT count() FROM key_verifications_per_day_v1 FORMAT JSON", No::I, ""),
    (
        V,
        "SELECT count() FROM key_verifications_per_day_v1 /* ; DROP TABLE keys */ ; DROP TABLE keys",
        No::I,
        "one statement",
    ),
    (
        V,
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT * FROM r",
        No::I,
        "RECURSIVE",
    ),
    (V, "SELECT CAST(count AS String) FROM key_verifications_per_day_v1", No::I, "CAST"),
    (V, "SELECT nosuchcolumn FROM key_verifications_per_day_v1", No::I, "unknown column nosuchcolumn"),
    (V, "SELECT count FROM key_verifications_per_day_v1 WHERE outcome = 1", No::I, "cannot be compared"),
    (V, "SELECT tags = 'a' FROM key_verifications_per_day_v1", No::I, "has(tags"),
    (V, "SELECT sum(outcome) FROM key_verifications_per_day_v1", No::I, "sum of a String"),
    (V, "SELECT count() FROM key_verifications_per_day_v1 WHERE sum(count) > 1", No::I, "HAVING"),
    (V, "SELECT count() FROM key_verifications_per_day_v1 WHERE time > 'yesterday'", No::I, "not a date"),
    (V, "SELECT row_number() OVER () FROM key_verifications_per_day_v1", No::I, "OVER"),
    (V, "SELECT quantile(0.5)(count) FROM key_verifications_per_day_v1", No::I, ""),
    (V, "SELECT count() FROM key_verifications_per_day_v1 LIMIT (SELECT 1)", No::I, "LIMIT"),
    (V, "SELECT time + INTERVAL 1 MONTH FROM key_verifications_per_day_v1", No::N, "constant time"),
    (V, "SELECT * FROM key_verifications_v1", No::N, "key_verifications_per_minute_v1"),
    (L, "SELECT * FROM ratelimits_v1", No::N, "ratelimits_per_minute_v1"),
    (L, "SELECT identifier, sum(total) FROM ratelimits_per_day_v1 GROUP BY identifier", No::N, "identifier"),
    (V, "SELECT * FROM ratelimits_per_day_v1", No::I, "analytics.getVerifications"),
    (L, "SELECT * FROM key_verifications_per_day_v1", No::I, "analytics.getRatelimits"),
    (V, "SELECT toStartOfHour(fromUnixTimestamp64Milli(-9223372036854775807)) AS t", No::I, "out of range"),
    (V, "SELECT toDate(fromUnixTimestamp64Milli(-9223372036854775807)) AS t", No::I, "out of range"),
    (V, "SELECT toStartOfMonth(fromUnixTimestamp64Milli(9223372036854775807)) AS t", No::I, "out of range"),
    (V, "SELECT now() + INTERVAL 1000000 YEAR AS t", No::I, "out of range"),
    (V, "SELECT 1e308 * 10 AS x", No::I, ""),
    (V, "SELECT", No::I, "parse"),
    (V, "SELEC 1", No::I, "parse"),
    (V, "SELECT 'unterminated", No::I, "parse"),
];

#[test]
fn each_refused_query_is_refused_for_what_it_is_and_changes_nothing() {
    let f = fixture();
    let mut failures = Vec::new();
    for (family, query, want, word) in REFUSED {
        let kind = match f.run(&f.admin, *family, query) {
            Ok(rows) => {
                failures.push(format!("{query}: answered {rows}"));
                continue;
            }
            Err(SqlError::Invalid(m)) => (No::I, m),
            Err(SqlError::NotSupported(m)) => (No::N, m),
            Err(SqlError::TooExpensive(m)) => (No::X, m),
            Err(e) => {
                failures.push(format!("{query}: {e:?}"));
                continue;
            }
        };
        if kind.0 != *want || !kind.1.contains(word) {
            failures.push(format!("{query}: {:?} {:?}, expected {want:?} naming {word:?}", kind.0, kind.1));
        }
    }
    assert!(failures.is_empty(), "{} of {}:\n{}", failures.len(), REFUSED.len(), failures.join("\n"));
    // Nothing was dropped or written: the counts and the tables are all there.
    let total = f.run(&f.admin, V, "SELECT sum(count) AS n FROM key_verifications_per_month_v1").unwrap();
    assert_eq!(total, serde_json::json!([{"n": 128}]));
    assert_eq!(f.svc_apis(), 2);
}

impl Fixture {
    fn svc_apis(&self) -> usize {
        self.rbac.list_apis(&self.admin).expect("apis").len()
    }
}

#[test]
fn a_root_key_scoped_to_some_apis_or_namespaces_reads_only_those() {
    let f = fixture();
    let ws = f.admin.workspace_id.clone();
    let only_api1 = Principal::new("rk_api1".into(), ws.clone(), [format!("api.{}.read_analytics", f.api1)]);
    let sum = |p: &Principal, q: &str| f.run(p, V, q).unwrap()[0]["n"].clone();
    assert_eq!(sum(&only_api1, "SELECT sum(count) AS n FROM key_verifications_per_month_v1"), 120);
    let sneaky =
        "SELECT sum(count) AS n FROM key_verifications_per_day_v1 WHERE key_space_id = '$API2' OR 1 = 1";
    assert_eq!(sum(&only_api1, sneaky), 120);
    assert_eq!(
        sum(&only_api1, "SELECT sum(count) AS n FROM key_verifications_per_day_v1 WHERE apiId = '$API2'"),
        0
    );
    let union = "SELECT sum(n) AS n FROM (SELECT sum(count) AS n FROM key_verifications_per_minute_v1 UNION ALL \
                 SELECT sum(count) FROM key_verifications_per_hour_v1 WHERE key_space_id != '$API1')";
    assert_eq!(sum(&only_api1, union), 10);
    // Both APIs, listed one by one: both.
    let both = Principal::new(
        "rk_both".into(),
        ws.clone(),
        [format!("api.{}.read_analytics", f.api1), format!("api.{}.read_analytics", f.api2)],
    );
    assert_eq!(sum(&both, "SELECT sum(count) AS n FROM key_verifications_per_month_v1"), 128);
    // Rate limits by namespace.
    let only_email =
        Principal::new("rk_email".into(), ws.clone(), [format!("ratelimit.{}.read_analytics", f.email)]);
    let rows = f
        .run(&only_email, L, "SELECT namespace_name, sum(total) AS t FROM ratelimits_per_day_v1 GROUP BY 1")
        .unwrap();
    assert_eq!(rows, serde_json::json!([{"namespace_name": "email", "t": 65}]));
    // No permission for the family: 403, whatever else the key holds.
    for (p, family) in [(&only_api1, L), (&only_email, V)] {
        match f.svc.query_sql(p, family, "SELECT 1") {
            Err(SqlError::Rbac(e)) => {
                assert_eq!(e.code(), keygate_domain::ErrorCode::InsufficientPermissions)
            }
            other => panic!("{other:?}"),
        }
    }
    let _ = &f.sms;
}

#[test]
fn answers_are_capped_at_ten_thousand_rows_and_long_queries_are_stopped() {
    let f = fixture();
    // 4 rows joined 7 times: 16,384 rows, capped whatever the LIMIT.
    let join7 = "SELECT 1 AS x FROM key_verifications_per_minute_v1 a, key_verifications_per_minute_v1 b, \
                 key_verifications_per_minute_v1 c, key_verifications_per_minute_v1 d, key_verifications_per_minute_v1 e, \
                 key_verifications_per_minute_v1 f, key_verifications_per_minute_v1 g";
    for suffix in ["", " LIMIT 10001", " LIMIT 100000"] {
        let rows = f.run(&f.admin, V, &format!("{join7}{suffix}")).unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 10_000, "{suffix}");
    }
    assert_eq!(f.run(&f.admin, V, &format!("{join7} LIMIT 3")).unwrap().as_array().unwrap().len(), 3);
    // 4^20 rows: stopped at its deadline.
    let from: Vec<String> = (0..20).map(|i| format!("key_verifications_per_minute_v1 t{i}")).collect();
    let forever = format!("SELECT count() AS n FROM {}", from.join(", "));
    // Two at once (the most of one workspace, and the capacity of this service): while
    // they run, a third of the workspace, and one of another workspace, answer busy.
    let other = Principal::new(f.admin.root_key_id.clone(), f.other_ws.clone(), ["*".to_string()]);
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..2).map(|_| s.spawn(|| f.run(&f.admin, V, &forever))).collect();
        // They take their slots within milliseconds and hold them for 5 s (a probe sent
        // before that could take one and leave one of them busy instead).
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        let quick = "SELECT 1 AS x";
        let busy = match f.run(&f.admin, V, quick) {
            Err(SqlError::Busy(m)) => m,
            other => panic!("a third query of the workspace: {other:?}"),
        };
        assert!(busy.contains("this workspace already runs 2"), "{busy}");
        match f.run(&other, V, quick) {
            Err(SqlError::Busy(m)) => {
                assert!(m.contains("already runs 2 analytics queries, its most"), "{m}")
            }
            other => panic!("another workspace past the capacity: {other:?}"),
        }
        for run in runs {
            match run.join().expect("no panic") {
                Err(SqlError::TooExpensive(m)) => assert!(m.contains("5 s"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    });
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(30), "stopped only after {took:?}");
    // Their slots are free again: another workspace runs.
    assert_eq!(f.run(&other, V, "SELECT 1 AS x").unwrap(), serde_json::json!([{"x": 1}]));
    // The store works on after it (the connection is clean).
    let total = f.run(&f.admin, V, "SELECT sum(count) AS n FROM key_verifications_per_month_v1").unwrap();
    assert_eq!(total, serde_json::json!([{"n": 128}]));
    // Too long, or nested too deep.
    let long = format!("SELECT 1 AS x{}", " ".repeat(10_000));
    assert!(matches!(f.run(&f.admin, V, &long), Err(SqlError::Rbac(_))));
    let deep = format!("SELECT {}1{} AS x", "(".repeat(200), ")".repeat(200));
    assert!(matches!(f.run(&f.admin, V, &deep), Err(SqlError::Invalid(_) | SqlError::TooExpensive(_))));
}

#[test]
fn every_example_of_the_docs_runs_on_both_backends() {
    let f = fixture();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/analytics-sql.md"))
        .expect("doc");
    let examples = doc.split("## Examples").nth(1).expect("examples").split("\n## ").next().expect("section");
    let queries: Vec<&str> = examples
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('`') && l.ends_with('`'))
        .map(|l| l.trim_matches('`'))
        .collect();
    assert_eq!(queries.len(), 16, "{queries:#?}");
    for q in queries {
        let family = if q.contains("ratelimits_") { L } else { V };
        if let Err(e) = f.run(&f.admin, family, q) {
            panic!("{q}: {e:?}");
        }
    }
}

#[test]
fn every_table_reads_only_the_caller_s_workspace_however_it_is_asked() {
    let f = fixture();
    let ws = f.admin.workspace_id.clone();
    let tables = [
        (V, "key_verifications_per_minute_v1"),
        (V, "key_verifications_per_hour_v1"),
        (V, "key_verifications_per_day_v1"),
        (V, "key_verifications_per_month_v1"),
        (L, "ratelimits_per_minute_v1"),
        (L, "ratelimits_per_hour_v1"),
        (L, "ratelimits_per_day_v1"),
        (L, "ratelimits_per_month_v1"),
    ];
    for (family, t) in tables {
        let n = |q: String| -> Value {
            match f.run(&f.admin, family, &q) {
                Ok(rows) => rows[0]["n"].clone(),
                Err(e) => panic!("{q}: {e:?}"),
            }
        };
        let all = n(format!("SELECT count() AS n FROM {t}"));
        assert!(all.as_i64().unwrap() > 0, "{t} has rows of the caller");
        for narrowing in [
            "WHERE workspace_id = '$OTHER'",
            "WHERE workspace_id != '$WS'",
            "WHERE workspace_id = '' /* ' OR 1=1 -- */ OR workspace_id = '$OTHER' -- '",
            "WHERE workspace_id IN (SELECT '$OTHER')",
        ] {
            assert_eq!(
                n(format!("SELECT count() AS n FROM {t} {narrowing}").replace("$WS", &ws)),
                0,
                "{t} {narrowing}"
            );
        }
        for widening in ["WHERE workspace_id = '$OTHER' OR 1=1", "WHERE 1=1 OR workspace_id LIKE '%'", ""] {
            assert_eq!(n(format!("SELECT count() AS n FROM {t} {widening}")), all, "{t} {widening}");
        }
        let distinct = f.run(&f.admin, family, &format!("SELECT DISTINCT workspace_id FROM {t}")).unwrap();
        assert_eq!(distinct, serde_json::json!([{"workspace_id": ws}]), "{t}");
        let unioned = format!(
            "SELECT n FROM (SELECT count() AS n FROM {t} UNION ALL SELECT count() FROM {t} WHERE workspace_id = '$OTHER') ORDER BY n DESC LIMIT 1"
        );
        assert_eq!(n(unioned), all, "{t}");
        for refused in [
            format!("WITH x AS (SELECT * FROM keys) SELECT * FROM {t}, x"),
            format!("SELECT * FROM {t} WHERE workspace_id IN (SELECT id FROM workspaces)"),
            format!("SELECT workspace_id FROM {t} UNION SELECT id FROM workspaces"),
            format!("SELECT workspace_id FROM {t} UNION ALL SELECT hash FROM keys"),
            format!("SELECT * FROM {t} JOIN root_keys r ON r.workspace_id = workspace_id"),
            format!("SELECT file('/etc/passwd') FROM {t}"),
            format!("SELECT load_extension('x') FROM {t}"),
            format!("SELECT 1 FROM {t}; SELECT 1 FROM {t}"),
            format!("SELECT * FROM {t} WHERE '1' = '1'; DELETE FROM keys"),
        ] {
            match f.run(&f.admin, family, &refused) {
                Err(SqlError::Invalid(_)) => {}
                other => panic!("{refused}: {other:?}"),
            }
        }
    }
}
