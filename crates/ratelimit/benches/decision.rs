//! The in-process decision: 1 and 2 threads; 1, 100k and 1M live budgets.
//! `cargo bench -p keygate-ratelimit --bench decision`
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keygate_ratelimit::{BudgetKey, LimitRequest, MemoryStore};
use std::hint::black_box;
use std::time::{Duration, Instant};

const NS: &str = "rlns_8fW2kQxZpL3vN7aT9cYdJe";
const REQ: LimitRequest = LimitRequest {
    limit: u64::MAX >> 12,
    duration: 3_600_000,
    cost: 1,
};
const NOW: u64 = 1_800_000_000_000;

fn filled(live: usize) -> (MemoryStore, Vec<String>) {
    let store = MemoryStore::new();
    let ids: Vec<String> = (0..live)
        .map(|i| format!("user_{i:08}@example.com"))
        .collect();
    for id in &ids {
        store.check(
            BudgetKey {
                namespace_id: NS,
                identifier: id,
                duration: REQ.duration,
            },
            REQ,
            NOW,
        );
    }
    (store, ids)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision");
    group
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for live in [1usize, 100_000, 1_000_000] {
        let (store, ids) = filled(live);
        group.bench_with_input(BenchmarkId::new("1_thread", live), &live, |b, _| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 7919) % ids.len();
                let key = BudgetKey {
                    namespace_id: NS,
                    identifier: &ids[i],
                    duration: REQ.duration,
                };
                black_box(store.check(key, REQ, NOW))
            })
        });
        group.bench_with_input(BenchmarkId::new("2_threads", live), &live, |b, _| {
            // Wall time of 2 threads doing `iters` decisions each, divided by 2*iters:
            // the per-decision cost at full use of both cores.
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..2usize {
                        let (store, ids) = (&store, &ids);
                        s.spawn(move || {
                            let mut i = t * 104_729;
                            for _ in 0..iters {
                                i = (i + 7919) % ids.len();
                                let key = BudgetKey {
                                    namespace_id: NS,
                                    identifier: &ids[i],
                                    duration: REQ.duration,
                                };
                                black_box(store.check(key, REQ, NOW));
                            }
                        });
                    }
                });
                start.elapsed() / 2
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
