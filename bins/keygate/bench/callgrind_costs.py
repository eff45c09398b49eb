#!/usr/bin/env python3
"""Per-request costs from one callgrind dump: instructions, heap allocations, and the
functions with the largest self cost.

    python3 bins/keygate/bench/callgrind_costs.py DUMP REQUESTS [TOP]

DUMP is one dump, or the prefix of a dump taken with `--separate-threads=yes` (one file
per thread, DUMP-NN): then the threads that serve requests (actix's workers, the blocking
pool) are counted apart from the background threads (analytics flushes, upkeep), whose
share per request only reflects how slow the run was. Prints `instructions=...
allocations=... sha2=...` per request (and `background=...`) on its first line (the
allocations are calls to malloc, calloc, realloc and the aligned allocators, from any
caller), then the TOP (default 12) functions by self instructions per request. Used by
verify-profile.sh.
"""
import glob
import os
import re
import sys
from collections import defaultdict

# Rust's allocations (the server's global allocator is jemalloc, under its `_rjem_`
# prefix; mimalloc's names and the shims for older builds) and C's (SQLite's, libc's).
ALLOCATORS = {
    "_rjem_malloc", "_rjem_mallocx", "_rjem_calloc", "_rjem_realloc", "_rjem_rallocx",
    "mi_malloc_aligned", "mi_zalloc_aligned", "mi_realloc_aligned",
    "__rust_alloc", "__rust_alloc_zeroed", "__rust_realloc",
    "malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign",
}


# A thread that ran any of these serves requests.
REQUEST_THREAD = ("actix_http::h1::dispatcher", "tokio::runtime::blocking")


def read(path):
    """Self cost per function and allocation calls in one dump file, and whether the
    thread served requests."""
    names = {}
    self_cost = defaultdict(int)
    allocations = 0
    serves = False
    fn = None
    callee = None
    after_call = False
    name_re = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")

    def resolve(line):
        m = name_re.match(line)
        if not m:
            return line.split("=", 1)[1]
        if m.group(2):
            names[m.group(1)] = m.group(2)
            nonlocal serves
            serves = serves or any(t in m.group(2) for t in REQUEST_THREAD)
        return names.get(m.group(1), m.group(1))

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                fn = resolve(line.rstrip("\n"))
                after_call = False
            elif line.startswith("cfn="):
                callee = resolve(line.rstrip("\n"))
            elif line.startswith("calls="):
                if callee in ALLOCATORS:
                    allocations += int(line.split("=", 1)[1].split()[0])
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    self_cost[fn] += int(parts[1])
    return self_cost, allocations, serves


def main():
    path, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    files = [path] if os.path.exists(path) else sorted(glob.glob(glob.escape(path) + "-*"))
    self_cost = defaultdict(int)
    allocations = 0
    background = 0
    for f in files:
        costs, allocs, serves = read(f)
        if serves or len(files) == 1:
            for name, c in costs.items():
                self_cost[name] += c
            allocations += allocs
        else:
            background += sum(costs.values())
    total = sum(self_cost.values())
    sha = sum(c for name, c in self_cost.items() if name.startswith("sha2::"))
    print(
        f"instructions={total / requests:.0f} allocations={allocations / requests:.1f} "
        f"sha2={sha / requests:.0f} background={background / requests:.0f}"
    )
    for name, cost in sorted(self_cost.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {cost / requests:8.0f}  {name[:110]}")


if __name__ == "__main__":
    main()
