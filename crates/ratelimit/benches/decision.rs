//! The in-process decision: 1 and 2 threads; 1, 100k and 1M live budgets; and the layouts
//! of keys' own limits (a namespace per key, or one for all).
//! `cargo bench -p keygate-ratelimit --bench decision`
//!
//! Identifiers are read in order from a prepared list, as a server reads the identifier of
//! the request it has just parsed; the table probes they cause are in hash order, i.e.
//! random. The list is one buffer of fixed-width identifiers, read sequentially (1.3 MB at
//! 100k short ones): a server's identifier sits in the request buffer it just parsed, so
//! the bench should not make each decision chase a `String` of its own (a `Vec<String>`
//! spans ~5.6 MB at 100k, more than the table, and competes with it for the cache; see
//! docs/performance/decision.md). `short` identifiers (`user_00012345`, 13 bytes) are
//! stored inline (up to 15 bytes); `long` ones (`user_00012345@example.com`, 25 bytes) take
//! the heap path.
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keygate_ratelimit::{BudgetKey, LimitRequest, MemoryStore};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REQ: LimitRequest = LimitRequest { limit: u64::MAX >> 12, duration: 3_600_000, cost: 1 };
const NOW: u64 = 1_800_000_000_000;

/// `len` identifiers of `width` bytes each, back to back in one string.
struct Ids {
    all: String,
    width: usize,
    len: usize,
}

impl Ids {
    fn new(live: usize, long: bool) -> Self {
        let one = |i: usize| if long { format!("user_{i:08}@example.com") } else { format!("user_{i:08}") };
        let width = one(0).len();
        let all: String = (0..live).map(one).collect();
        assert_eq!(all.len(), width * live, "identifiers of one width");
        Self { all, width, len: live }
    }

    #[inline]
    fn get(&self, i: usize) -> &str {
        &self.all[i * self.width..(i + 1) * self.width]
    }
}

fn filled(live: usize, long: bool, ns: &Arc<String>) -> (MemoryStore, Ids) {
    let store = MemoryStore::new();
    let ids = Ids::new(live, long);
    for i in 0..ids.len {
        let key = BudgetKey {
            namespace_id: ns,
            identifier: ids.get(i),
            duration: REQ.duration,
            algorithm: Default::default(),
        };
        store.check(key, REQ, NOW);
    }
    (store, ids)
}

fn run(store: &MemoryStore, ids: &Ids, ns: &Arc<String>, start: usize, iters: u64) {
    let mut i = start % ids.len;
    for _ in 0..iters {
        i += 1;
        if i == ids.len {
            i = 0;
        }
        let key = BudgetKey {
            namespace_id: ns,
            identifier: ids.get(i),
            duration: REQ.duration,
            algorithm: Default::default(),
        };
        black_box(store.check(key, REQ, NOW));
    }
}

fn bench(c: &mut Criterion) {
    let ns = Arc::new(String::from("rlns_8fW2kQxZpL3vN7aT9cYdJe"));
    let mut group = c.benchmark_group("decision");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    let cases = [(1usize, false), (100_000, false), (1_000_000, false), (100_000, true)];
    for (live, long) in cases {
        let (store, ids) = filled(live, long, &ns);
        let label = format!("{live}_{}", if long { "long" } else { "short" });
        group.bench_with_input(BenchmarkId::new("1_thread", &label), &live, |b, _| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                run(&store, &ids, &ns, 0, iters);
                start.elapsed()
            })
        });
        group.bench_with_input(BenchmarkId::new("2_threads", &label), &live, |b, _| {
            // Wall time of 2 threads doing `iters` decisions each, divided by 2*iters:
            // the per-decision cost at full use of both cores.
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..2usize {
                        let (store, ids, ns) = (&store, &ids, &ns);
                        s.spawn(move || run(store, ids, ns, t * ids.len / 2, iters));
                    }
                });
                start.elapsed() / 2
            })
        });
    }
    group.finish();
    own_limits(c);
    persistent(c);

    // Calibration: the floor of any hash table on this machine: a bare foldhash hashbrown
    // probe, no lock, no strings, no decision. Keys are random u64 (splitmix64), read in
    // order, so that buckets are hit in random order as string keys hit them; consecutive
    // integer keys would hit buckets in a constant stride the prefetcher learns.
    let mut base = c.benchmark_group("baseline_hashmap_probe");
    base.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for live in [100_000usize, 1_000_000] {
        let keys: Vec<u64> = (0..live as u64).map(splitmix64).collect();
        let small: hashbrown::HashMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
        let wide: hashbrown::HashMap<u64, [u64; 7]> = keys.iter().map(|&k| (k, [k; 7])).collect();
        base.bench_with_input(BenchmarkId::new("16B_entries", live), &live, |b, _| {
            let mut i = 0usize;
            b.iter(|| {
                i = if i + 1 == live { 0 } else { i + 1 };
                black_box(small.get(&keys[i]))
            })
        });
        base.bench_with_input(BenchmarkId::new("64B_entries", live), &live, |b, _| {
            let mut i = 0usize;
            b.iter(|| {
                i = if i + 1 == live { 0 } else { i + 1 };
                black_box(wide.get(&keys[i]).map(|v| v[3]))
            })
        });
    }
    base.finish();

    // Calibration: the latency of one cache miss at a given working set. A chain of
    // dependent loads through 64-byte slots in random order (one cycle through all of
    // them), so no two loads overlap. The table behind `100000_short` spans ~4 MiB; a
    // decision, which must update its budget under a lock, pays one such miss in full.
    let mut chase = c.benchmark_group("baseline_dependent_load");
    chase.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for mib in [1usize, 4, 8, 64] {
        let ring = chase_ring(mib << 20);
        chase.bench_with_input(BenchmarkId::new("MiB", mib), &mib, |b, _| {
            b.iter_custom(|iters| {
                let mut p = 0usize;
                let start = Instant::now();
                for _ in 0..iters {
                    p = ring[p][0];
                }
                black_box(p);
                start.elapsed()
            })
        });
    }
    chase.finish();
}

/// The layout of keys' own limits in `keys.verifyKey` (keygate-usage's `limits.rs`): 1,000
/// keys with one limit each, its identifier the limit's id (24 bytes, the heap path), each
/// key's budgets in a namespace of its own (`vl:<key id>}`, as the shared stores need for
/// one cluster slot per key) or all keys' in one (`vl`, the in-process store's layout).
fn own_limits(c: &mut Criterion) {
    const KEYS: usize = 1_000;
    let mut group = c.benchmark_group("keys_own_limits");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    let ids: Vec<String> =
        (0..KEYS).map(|i| format!("rl_{:021}", splitmix64(i as u64) % 10u64.pow(18))).collect();
    let one = Arc::new(String::from("vl"));
    let per_key: Vec<Arc<String>> =
        (0..KEYS).map(|i| Arc::new(format!("vl:key_{:020}}}", splitmix64(!(i as u64))))).collect();
    for (label, namespace) in [("namespace_per_key", false), ("one_namespace", true)] {
        let store = MemoryStore::new();
        let ns = |i: usize| if namespace { &one } else { &per_key[i] };
        let key = |i: usize| BudgetKey {
            namespace_id: ns(i),
            identifier: &ids[i],
            duration: 60_000,
            algorithm: Default::default(),
        };
        let req = LimitRequest { limit: u64::MAX >> 12, duration: 60_000, cost: 1 };
        for i in 0..KEYS {
            store.check(key(i), req, NOW);
        }
        group.bench_function(BenchmarkId::new("1_thread", label), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = if i + 1 == KEYS { 0 } else { i + 1 };
                black_box(store.check(key(i), req, NOW))
            })
        });
    }
    group.finish();
}

/// The persistent store (its budgets journaled to files in a temporary directory) against
/// the volatile one: 10,000 live budgets, every decision taking a token (so every decision
/// appends a record), the journals rewritten as they fill.
fn persistent(c: &mut Criterion) {
    let mut group = c.benchmark_group("persistent");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    let ns = Arc::new(String::from("rlns_8fW2kQxZpL3vN7aT9cYdJe"));
    let ids = Ids::new(10_000, false);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let stores = [
        ("volatile", MemoryStore::new()),
        ("journaled", MemoryStore::persistent(dir.path(), NOW).expect("open").expect("owner")),
    ];
    for (label, store) in &stores {
        group.bench_function(BenchmarkId::new("1_thread_10000", label), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                run(store, &ids, &ns, 0, iters);
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// `bytes / 64` slots linked into one cycle in random order.
fn chase_ring(bytes: usize) -> Vec<[usize; 8]> {
    let n = bytes / 64;
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 1u64;
    for i in (1..n).rev() {
        x = splitmix64(x);
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut ring = vec![[0usize; 8]; n];
    for w in 0..n {
        ring[order[w]][0] = order[(w + 1) % n];
    }
    ring
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

criterion_group!(benches, bench);
criterion_main!(benches);
