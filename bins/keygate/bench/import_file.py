"""A file of `keygate keys import` entries (JSON lines) for the benchmarks, and the secrets
they stand for.

    python3 bins/keygate/bench/import_file.py FILE COUNT SEED [SECRETS_FILE SECRETS]

Entry i is the SHA-256 (hex) of the secret sk_bench_SEED_<i>_abcdefghij, with two
permissions and an identity (externalId, 1,000 identities over the file); every seventh
has a name, every thirteenth meta and credits. SECRETS_FILE gets the first SECRETS secrets
of keys without credits (for verification loads that must not run out).
"""
import hashlib
import json
import sys


def secret(seed, i):
    return f"sk_bench_{seed}_{i:08d}_abcdefghij"


def main():
    path, count, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(path, "w") as f:
        for i in range(count):
            e = {"hash": hashlib.sha256(secret(seed, i).encode()).hexdigest()}
            e["externalId"] = f"customer_{i % 1000}"
            e["permissions"] = ["documents.read", "documents.write"]
            if i % 7 == 0:
                e["name"] = f"key {i}"
            if i % 13 == 0:
                e["meta"], e["credits"] = {"plan": "pro", "i": i}, {"remaining": 100}
            f.write(json.dumps(e) + "\n")
    if len(sys.argv) > 5:
        wanted = int(sys.argv[5])
        with open(sys.argv[4], "w") as f:
            written = 0
            for i in range(count):
                if written == wanted:
                    break
                if i % 13:
                    f.write(secret(seed, i) + "\n")
                    written += 1


main()
