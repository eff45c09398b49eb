#!/usr/bin/env python3
"""The soak (issue 52): one keygate on the embedded default under a mixed load for a long
time, sampled every few seconds, so that a slow leak shows.

    python3 bins/keygate/bench/soak.py --duration 1800 --out docs/soak    # 30 minutes
    python3 bins/keygate/bench/soak.py --duration 60 --bin target/debug/keygate   # CI's smoke

The load: v2 keys.verifyKey over 100 keys that spend credits under an auto-applied limit
(wrk), ratelimits.limit over 1,000,000 rotating identifiers (wrk), and beside them keys
created, verified and deleted, SQL analytics queries, key reads and dashboard pages. Every
--interval seconds: the process's RSS (and its anonymous part), the heap as the allocator
counts it (bytes held, pages in use, pages resident: `keygate_memory_bytes`), open file descriptors and
threads, the database's size on disk (file and WAL), the analytics
counts held in memory, the keys in the verification cache, requests per second and the p99 latency of the interval (from
/metrics), and the 5xx answers of the side load, into soak.csv; soak.png plots them.

Verdict (verdict.json): RSS at the end within 10 % of RSS at 10 minutes (or a third of the
run, if shorter), no file-descriptor growth over the same span (each the median of two
minutes' samples), no 5xx. A run of 10 minutes
or more exits 1 when the verdict fails; a shorter one (the CI smoke) reports it only.
"""

import argparse
import csv
import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BENCH = os.path.dirname(os.path.abspath(__file__))


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port, root_key):
        self.base = f"http://127.0.0.1:{port}"
        self.root_key = root_key
        self.errors = 0  # 5xx answers of the side load
        self.calls = 0
        self.lock = threading.Lock()

    def post(self, path, body, auth=True, opener=None):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.root_key}")
        return self._send(req, opener)

    def get(self, path, opener=None):
        return self._send(urllib.request.Request(self.base + path), opener)

    def _send(self, req, opener=None):
        try:
            with (opener or urllib.request.build_opener()).open(req, timeout=10) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        with self.lock:
            self.calls += 1
            if status >= 500:
                self.errors += 1
                print(f"soak: {status} on {req.full_url}: {text[:200]}", file=sys.stderr)
        return status, text


def wait_up(server, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if server.get("/v1/liveness")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("soak: keygate did not start")


def side_load(server, stop):
    """Keys created, verified and deleted; analytics queries; key reads; dashboard pages."""
    status, text = server.post("/v2/apis.createApi", {"name": "soak-side"})
    api = json.loads(text)["data"]["apiId"]
    jar = http.cookiejar.CookieJar()
    dash = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    _, page = server.get("/dashboard/login", dash)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"root_key": server.root_key, "csrf_token": token}).encode()
    server._send(urllib.request.Request(server.base + "/dashboard/login", data=form, method="POST"), dash)
    sql = "SELECT outcome, count(*) AS n FROM key_verifications_v1 GROUP BY outcome"
    i = 0
    while not stop.is_set():
        i += 1
        _, text = server.post("/v2/keys.createKey", {"apiId": api, "name": f"side-{i}"})
        created = json.loads(text).get("data", {})
        if "key" in created:
            server.post("/v2/keys.verifyKey", {"key": created["key"]})
            server.post("/v2/keys.getKey", {"keyId": created["keyId"]})
            server.post("/v2/keys.deleteKey", {"keyId": created["keyId"]})
        if i % 10 == 0:
            server.post("/v2/analytics.getVerifications", {"query": sql})
            server.get("/dashboard/", dash)
            server.get("/dashboard/apis", dash)
        time.sleep(0.1)


def scrape(server):
    _, text = server.get("/metrics")
    buckets, count, held, heap = {}, 0.0, {}, {}
    for line in text.splitlines():
        if line.startswith("keygate_http_request_duration_seconds_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("keygate_http_request_duration_seconds_count{"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("keygate_analytics_held{"):
            kind = line.split('kind="')[1].split('"')[0]
            held[kind] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("keygate_verify_cache_keys "):
            held["verify_cache"] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("keygate_memory_bytes{"):
            kind = line.split('kind="')[1].split('"')[0]
            heap[kind] = float(line.rsplit(" ", 1)[1]) / 2**20
    return buckets, count, held, heap


def p99_ms(before, after):
    """The upper bound of the bucket holding the 99th percentile of the interval."""
    bounds = sorted(after, key=lambda le: float("inf") if le == "+Inf" else float(le))
    total = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)
    if total <= 0:
        return 0.0
    for le in bounds:
        if after[le] - before.get(le, 0.0) >= 0.99 * total:
            return float("inf") if le == "+Inf" else float(le) * 1000
    return float("inf")


def proc(pid):
    status = open(f"/proc/{pid}/status").read()
    kib = {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ["VmRSS", "RssAnon", "Threads"]}
    return kib["VmRSS"] / 1024, kib["RssAnon"] / 1024, len(os.listdir(f"/proc/{pid}/fd")), kib["Threads"]


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_s"] / 60 for r in rows]
    series = [
        ("memory (MiB)", ["rss_mib", "anon_mib", "heap_resident_mib", "heap_active_mib", "heap_allocated_mib"]),
        ("open fds, threads", ["fds", "threads"]),
        ("database file + WAL (MiB)", ["db_mib"]),
        ("analytics counts held", ["held_verifications", "held_ratelimits"]),
        ("keys in the verification cache", ["verify_cache_keys"]),
        ("p99 latency (ms, bucket bound)", ["p99_ms"]),
        ("requests per second", ["rps"]),
    ]
    series = [(title, [c for c in cols if c in rows[0]]) for title, cols in series]
    series = [(title, cols) for title, cols in series if cols]
    fig, axes = plt.subplots(len(series), 1, figsize=(9, 2.4 * len(series)), sharex=True)
    for ax, (title, cols) in zip(axes, series):
        for c in cols:
            ax.plot(t, [r[c] for r in rows], label=c)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
        if len(cols) > 1:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/keygate"))
    ap.add_argument("--duration", type=int, default=1800, help="seconds")
    ap.add_argument("--interval", type=int, default=10, help="seconds between samples")
    ap.add_argument("--connections", type=int, default=4, help="per wrk load")
    ap.add_argument("--verify-cache-mb", type=int, default=16,
                    help="KEYGATE_VERIFY_CACHE_MB: small, so that the side load's key churn reaches the bound")
    ap.add_argument("--out", default=None, help="directory for soak.csv, soak.png, verdict.json")
    ap.add_argument("--from-csv", default=None, help="plot and judge an earlier run's soak.csv")
    args = ap.parse_args()
    if args.from_csv:
        return from_csv(args.from_csv, args.out or os.path.dirname(os.path.abspath(args.from_csv)))
    for tool in ["wrk"]:
        if not shutil.which(tool):
            sys.exit(f"soak: {tool} is missing: apt-get install {tool}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("soak: matplotlib is missing: pip install matplotlib")
    work = tempfile.mkdtemp(prefix="keygate-soak-")
    out = args.out or work
    os.makedirs(out, exist_ok=True)
    port, root_key = free_port(), f"kg_root_soak_{int(time.time())}_0123456789"
    env = dict(os.environ, DATABASE_URL=f"sqlite://{work}/soak.db", KEYGATE_LISTEN=f"127.0.0.1:{port}",
               KEYGATE_ROOT_KEY=root_key, RUST_LOG="warn", KEYGATE_VERIFY_CACHE_MB=str(args.verify_cache_mb))
    keygate = subprocess.Popen([args.bin], env=env, stderr=open(f"{work}/keygate.log", "w"))
    children = [keygate]
    try:
        server = Server(port, root_key)
        wait_up(server)
        _, text = server.post("/v2/apis.createApi", {"name": "soak"})
        api = json.loads(text)["data"]["apiId"]
        keys = []
        for i in range(100):
            body = {"apiId": api, "name": f"soak-{i}", "credits": {"remaining": 10**9},
                    "ratelimits": [{"name": "calls", "limit": 10**6, "duration": 60000, "autoApply": True}]}
            status, text = server.post("/v2/keys.createKey", body)
            if status != 200:
                sys.exit(f"soak: keys.createKey answered {status}: {text}")
            keys.append(json.loads(text)["data"]["key"])
        with open(f"{work}/keys.txt", "w") as f:
            f.write("\n".join(keys) + "\n")
        wrk_env = dict(os.environ, ROOT_KEY=root_key, KEYS_FILE=f"{work}/keys.txt")
        for script, path in [("verify.lua", "/v2/keys.verifyKey"), ("rotating.lua", "/v1/ratelimits.limit")]:
            cmd = ["wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s", "-s",
                   os.path.join(BENCH, "soak", script), server.base + path]
            children.append(subprocess.Popen(cmd, env=wrk_env, stdout=subprocess.DEVNULL))
        stop = threading.Event()
        side = threading.Thread(target=side_load, args=(server, stop), daemon=True)
        side.start()

        rows, start = [], time.time()
        before, count_before, _, _ = scrape(server)
        while time.time() - start < args.duration:
            time.sleep(args.interval)
            if keygate.poll() is not None:
                sys.exit(f"soak: keygate exited ({keygate.returncode}); see {work}/keygate.log")
            after, count_after, held, heap = scrape(server)
            rss, anon, fds, threads = proc(keygate.pid)
            disk = sum(os.path.getsize(f"{work}/soak.db{s}") for s in ["", "-wal", "-shm"]
                       if os.path.exists(f"{work}/soak.db{s}"))
            rows.append({
                "t_s": round(time.time() - start, 1),
                "rss_mib": round(rss, 1),
                "anon_mib": round(anon, 1),
                "heap_allocated_mib": round(heap.get("allocated", 0.0), 1),
                "heap_active_mib": round(heap.get("active", 0.0), 1),
                "heap_resident_mib": round(heap.get("resident", 0.0), 1),
                "fds": fds,
                "threads": threads,
                "db_mib": round(disk / 2**20, 1),
                "held_verifications": held.get("verifications", 0),
                "held_ratelimits": held.get("ratelimits", 0),
                "verify_cache_keys": held.get("verify_cache", 0),
                "p99_ms": p99_ms(before, after),
                "rps": round((count_after - count_before) / args.interval),
                "errors_5xx": server.errors,
            })
            before, count_before = after, count_after
            print(json.dumps(rows[-1]), flush=True)
        stop.set()
        side.join(timeout=15)
    finally:
        for p in reversed(children):
            p.terminate()
        for p in children:
            p.wait()

    with open(os.path.join(out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    finish(rows, args.duration, server.calls, out)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def finish(rows, duration, side_calls, out):
    """The plot and the verdict. RSS and fds are compared as medians of two minutes (the
    allocator and the rate-limit windows' sweeps move RSS by tens of MiB between samples):
    around the mark (10 minutes, or a third of a shorter run) and at the end."""
    plot(rows, os.path.join(out, "soak.png"))
    mark = min(600, duration / 3)
    span = min(60, duration / 6)
    around = [r for r in rows if abs(r["t_s"] - mark) <= span] or rows[:1]
    last = [r for r in rows if r["t_s"] >= rows[-1]["t_s"] - 2 * span] or rows[-1:]
    rss_mark, rss_end = median([r["rss_mib"] for r in around]), median([r["rss_mib"] for r in last])
    fds_mark, fds_end = median([r["fds"] for r in around]), median([r["fds"] for r in last])
    errors = rows[-1]["errors_5xx"]
    verdict = {
        "duration_s": duration,
        "mark_s": mark,
        "rss_mib_at_mark": rss_mark,
        "rss_mib_at_end": rss_end,
        "rss_mib_max": max(r["rss_mib"] for r in rows),
        "rss_growth": round(rss_end / rss_mark - 1, 4),
        "heap_allocated_mib_at_mark": median([r.get("heap_allocated_mib", 0.0) for r in around]),
        "heap_allocated_mib_at_end": median([r.get("heap_allocated_mib", 0.0) for r in last]),
        "fds_at_mark": fds_mark,
        "fds_at_end": fds_end,
        "threads_max": max(r["threads"] for r in rows),
        "max_p99_ms": max(r["p99_ms"] for r in rows),
        "requests": int(sum(r["rps"] for r in rows) * (rows[1]["t_s"] - rows[0]["t_s"] if len(rows) > 1 else 0)),
        "side_calls": side_calls,
        "errors_5xx": errors,
    }
    verdict["pass"] = verdict["rss_growth"] <= 0.10 and fds_end <= fds_mark and errors == 0
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(verdict, f, indent=2)
        f.write("\n")
    print(json.dumps(verdict))
    print(f"soak: {out}/soak.csv, soak.png, verdict.json")
    if not verdict["pass"] and duration >= 600:
        sys.exit(1)


def from_csv(path, out):
    """The plot and verdict of an earlier run's CSV (--from-csv)."""
    with open(path) as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    duration = int(round(rows[-1]["t_s"] / 10) * 10)
    os.makedirs(out, exist_ok=True)
    finish(rows, duration, None, out)


if __name__ == "__main__":
    main()
