//! What analytics cost a request (docs/performance/analytics.md): one verification
//! counted by `recorder::Recorder`, one rate-limit decision by
//! `limit_recorder::LimitRecorder`, in their common case (the series or identifier
//! held already) and their worst (10,000 identifiers rotating through full sketches).
//!
//!   cargo bench -p keygate-analytics --bench recorders

use criterion::{Criterion, criterion_group, criterion_main};
use keygate_analytics::limit_recorder::{LimitDecision, LimitRecorder};
use keygate_analytics::recorder::{Outcome, Recorder};
use keygate_rbac::VerifyCode;
use std::hint::black_box;

fn recorders(c: &mut Criterion) {
    let identifiers: Vec<String> = (0..10_000).map(|i| format!("user_{i:06}@example.com")).collect();
    let mut g = c.benchmark_group("record");

    let r = Recorder::new(1_000_000);
    let tags = vec!["plan:pro".to_string()];
    let keys: Vec<String> = (0..1_000).map(|i| format!("key_{i:016}")).collect();
    let mut i = 0;
    g.bench_function("verification, 1,000 keys", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            r.record(black_box(&Outcome {
                workspace_id: "ws_1",
                api_id: Some("api_1"),
                key_id: &keys[i],
                identity_id: None,
                code: VerifyCode::Valid,
                tags: &tags,
                at_ms: 1_000,
                spent_credits: 0,
            }));
        })
    });

    // Many keys, each counted once already this minute (its series is found), as a
    // verification over a million cached keys finds them: the cost of a table larger than
    // the processor's caches.
    for (name, n) in [("verification, 100,000 keys", 100_000), ("verification, 1,000,000 keys", 1_000_000)] {
        let r = Recorder::new(2_000_000);
        let keys: Vec<String> = (0..n).map(|i| format!("key_2Xb{i:017}")).collect();
        let record = |key: &str| {
            r.record(black_box(&Outcome {
                workspace_id: "ws_2XbQk7MvT1cYp4Fz9",
                api_id: Some("api_2XbQk8Hn3LwRa6Dd2"),
                key_id: key,
                identity_id: Some("id_2XbQk9Zs5EoUq1Vx7"),
                code: VerifyCode::Valid,
                tags: &[],
                at_ms: 1_000,
                spent_credits: 0,
            }))
        };
        keys.iter().for_each(|k| record(k));
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 7_919) % keys.len();
                record(&keys[i]);
            })
        });
    }

    for (name, n) in [("decision, 100 identifiers", 100), ("decision, 10,000 identifiers", 10_000)] {
        let r = LimitRecorder::new(1_000_000);
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % n;
                r.record(black_box(&LimitDecision {
                    workspace_id: "ws_1",
                    namespace_id: "rlns_1",
                    identifier: &identifiers[i],
                    passed: true,
                    at_ms: 1_000,
                }));
            })
        });
    }
    g.finish();
}

criterion_group!(benches, recorders);
criterion_main!(benches);
