"""Keys hashed by the real libraries of the systems teams come from, brought into keygate
and verified (tests/legacy/run.sh): keys in npm prefixed-api-key's shape, hashed whole by
PyPI bcrypt (cost 12), argon2-cffi (its defaults: argon2id, 64 MiB, t=3, p=4), Python's
hashlib.scrypt (n=2^14, r=8, p=1, written as a PHC string) and Django's make_password
(pbkdf2_sha256, Django's iterations); half imported through v2 keys.migrateKeys, half
through `keygate keys import`. Each verifies VALID on its first try, runs one old-hash
check then (keygate_legacy_hash_checks_total), and none on its second; a wrong secret for
a known lookup is NOT_FOUND. Exits non-zero on any failure."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import argon2
import bcrypt
from django.conf import settings

settings.configure()
from django.contrib.auth.hashers import make_password  # noqa: E402

URL = os.environ["KEYGATE_URL"]
ROOT = os.environ["KEYGATE_ROOT_KEY"]
BIN = os.environ["KG_BIN"]


def call(op, body):
    req = urllib.request.Request(
        f"{URL}/v2/{op}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {ROOT}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        return json.load(r)["data"]


def checks():
    with urllib.request.urlopen(f"{URL}/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith("keygate_legacy_hash_checks_total "):
                return float(line.split()[1])
    return 0.0


def b64(raw):
    return base64.b64encode(raw).decode().rstrip("=")


def scrypt_phc(key):
    salt = os.urandom(16)
    dk = hashlib.scrypt(key.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"$scrypt$ln=14,r=8,p=1${b64(salt)}${b64(dk)}"


HASHERS = {
    "bcrypt": lambda k: bcrypt.hashpw(k.encode(), bcrypt.gensalt(12)).decode(),
    "argon2-cffi": lambda k: argon2.PasswordHasher().hash(k),
    "hashlib.scrypt": scrypt_phc,
    "django": make_password,
}


def main():
    keys = [json.loads(line) for line in sys.stdin if line.strip()]
    assert len(keys) == 2 * len(HASHERS), len(keys)
    api = call("apis.createApi", {"name": "from-the-old-system"})["apiId"]
    entries = []
    for i, k in enumerate(keys):
        system = list(HASHERS)[i % len(HASHERS)]
        k["system"] = system
        entries.append({"hash": HASHERS[system](k["token"]), "lookup": k["lookup"], "name": system})
    half = len(HASHERS)
    d = call("keys.migrateKeys", {"migrationId": "pk", "apiId": api, "keys": entries[:half]})
    assert d["failed"] == [] and len(d["migrated"]) == half, d
    ids = {k["token"]: m["keyId"] for k, m in zip(keys, d["migrated"])}
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries[half:]))
    out = subprocess.run(
        [BIN, "keys", "import", "--api", api, "--migration", "pk", "--migrations", "pk=legacy:_:1", f.name],
        check=True, capture_output=True, text=True,
    )
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["migrated"] == half and summary["failed"] == 0, summary

    for k in keys:
        before = checks()
        v = call("keys.verifyKey", {"key": k["token"]})
        assert v["valid"] and v["code"] == "VALID", (k["system"], v)
        if k["token"] in ids:
            assert v["keyId"] == ids[k["token"]], (k["system"], v)
        assert checks() == before + 1, (k["system"], "one old-hash check on the first use")
        v = call("keys.verifyKey", {"key": k["token"]})
        assert v["code"] == "VALID", (k["system"], v)
        assert checks() == before + 1, (k["system"], "the second verification runs no old-hash check")
        print(f"ok: {k['system']} key verified, then stored under keygate's hash")

    # A wrong secret for a lookup that has a waiting key: NOT_FOUND.
    waiting = keys[0]["token"].rsplit("_", 1)[0] + "_" + "x" * 24
    extra = {"hash": HASHERS["bcrypt"](keys[0]["token"] + "new"), "lookup": keys[0]["lookup"]}
    call("keys.migrateKeys", {"migrationId": "pk", "apiId": api, "keys": [extra]})
    v = call("keys.verifyKey", {"key": waiting})
    assert v["code"] == "NOT_FOUND", v
    print("ok: a wrong secret for a known lookup is NOT_FOUND")


main()
