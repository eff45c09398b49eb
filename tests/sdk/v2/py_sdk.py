"""unkey.py 3.2.2 (Unkey's v2 Python SDK) against keygate: every operation keygate serves,
their typed errors included. Exits non-zero on any mismatch."""

import base64
import hashlib
import os
import time

from unkey.py import Unkey, errors, models
from unkey.py.utils import BackoffStrategy, RetryConfig

server_url = os.environ["KEYGATE_URL"]
root_key = os.environ["KEYGATE_ROOT_KEY"]
no_retry = RetryConfig("backoff", BackoffStrategy(1, 1, 1, 1), False)
run = f"py{int(time.time() * 1000)}"


def client(key):
    return Unkey(root_key=key, server_url=server_url, retry_config=no_retry)


unkey = client(root_key)


def rejects(call, cls, kind, **kwargs):
    """Calls `call`, expecting the typed error `cls` whose problem type ends with `kind`."""
    try:
        call(**kwargs)
    except cls as e:
        assert e.data.error.type.endswith(kind), e.data.error.type
        assert e.data.meta.request_id.startswith("req_")
        return e
    raise AssertionError(f"expected {cls.__name__}")


def rejects_with_status(call, status, kind, **kwargs):
    """A status the SDK has no typed error for (403 on rootKeys.listKeys)."""
    try:
        call(**kwargs)
    except errors.APIError as e:
        assert e.status_code == status, e
        assert kind in e.body, e.body
        return e
    raise AssertionError(f"expected status {status}")


# Permissions and roles.
perm = unkey.permissions.create_permission(name="Read docs", slug=f"{run}.read", description="d")
assert perm.data.permission_id.startswith("perm_"), perm
got = unkey.permissions.get_permission(permission=perm.data.permission_id)
assert (got.data.name, got.data.slug, got.data.description) == ("Read docs", f"{run}.read", "d"), got
rejects(unkey.permissions.create_permission, errors.ConflictErrorResponse, "permission_already_exists", name="x", slug=f"{run}.read")
role = unkey.permissions.create_role(name=f"{run}-editor", description="edits", permissions=[f"{run}.write"])
got_role = unkey.permissions.get_role(role=f"{run}-editor")
assert got_role.data.id == role.data.role_id
assert [p.slug for p in got_role.data.permissions] == [f"{run}.write"]
set_role = unkey.permissions.set_role_permissions(request={"role": role.data.role_id, "permissions": [f"{run}.read", f"{run}.write"]})
assert [p.slug for p in set_role.data] == [f"{run}.read", f"{run}.write"], set_role
rejects(unkey.permissions.get_permission, errors.NotFoundErrorResponse, "permission_not_found", permission=f"{run}.ghost")
for i in range(5):
    unkey.permissions.create_permission(name=f"P{i}", slug=f"{run}.page.{i}")
slugs = []
page = unkey.permissions.list_permissions(limit=2)
while page is not None:
    slugs += [p.slug for p in page.result.data]
    page = page.next()
assert len(set(slugs)) == len(slugs), slugs
assert all(f"{run}.page.{i}" in slugs for i in range(5)), slugs
roles = []
page = unkey.permissions.list_roles(limit=1)
while page is not None:
    roles += [r.name for r in page.result.data]
    page = page.next()
assert f"{run}-editor" in roles, roles

# Keys.
created = unkey.keys.create_key(api_id="api_sdk_py", prefix="pyv2", name="py-key", meta={"plan": "pro"},
                                permissions=[f"{run}.direct"], roles=[f"{run}-editor"])
key_id, key = created.data.key_id, created.data.key
assert key_id.startswith("key_") and key.startswith("pyv2_"), created
k = unkey.keys.get_key(key_id=key_id).data
assert k.start == key[: len("pyv2_") + 4] and k.meta == {"plan": "pro"}, k
assert k.permissions == [f"{run}.direct", f"{run}.read", f"{run}.write"], k.permissions
assert k.roles == [f"{run}-editor"], k.roles
assert unkey.keys.whoami(key=key).data.key_id == key_id
v = unkey.keys.verify_key(key=key, permissions=f"{run}.read and ({run}.write or nope)").data
assert (v.valid, v.code, v.key_id) == (True, "VALID", key_id), v
assert unkey.keys.verify_key(key=key, permissions="nope").data.code == "INSUFFICIENT_PERMISSIONS"
assert unkey.keys.verify_key(key="pyv2_unknown").data.code == "NOT_FOUND"
e = rejects(unkey.keys.verify_key, errors.BadRequestErrorResponse, "permissions_query_syntax_error", key=key, permissions="(a")
assert e.data.error.errors[0].location == "body.permissions", e.data.error.errors
disabled = unkey.keys.create_key(api_id="api_sdk_py", enabled=False).data.key
assert unkey.keys.verify_key(key=disabled).data.code == "DISABLED"
expired = unkey.keys.create_key(api_id="api_sdk_py", expires=int(time.time() * 1000) - 1000).data.key
assert unkey.keys.verify_key(key=expired).data.code == "EXPIRED"

added = unkey.keys.add_permissions(key_id=key_id, permissions=[f"{run}.extra"])
assert [p.slug for p in added.data] == [f"{run}.direct", f"{run}.extra"], added
assert [p.slug for p in unkey.keys.remove_permissions(key_id=key_id, permissions=[f"{run}.extra"]).data] == [f"{run}.direct"]
assert [p.slug for p in unkey.keys.set_permissions(key_id=key_id, permissions=[f"{run}.only"]).data] == [f"{run}.only"]
viewer = unkey.permissions.create_role(name=f"{run}-viewer")
assert [r.name for r in unkey.keys.add_roles(key_id=key_id, roles=[viewer.data.role_id]).data] == [f"{run}-editor", f"{run}-viewer"]
assert [r.name for r in unkey.keys.remove_roles(key_id=key_id, roles=[f"{run}-editor"]).data] == [f"{run}-viewer"]
assert unkey.keys.set_roles(key_id=key_id, roles=[]).data == []
rejects(unkey.keys.add_roles, errors.NotFoundErrorResponse, "role_not_found", key_id=key_id, roles=[f"{run}-ghost"])
rejects(unkey.keys.get_key, errors.NotFoundErrorResponse, "key_not_found", key_id="key_missing")
rejects(unkey.keys.create_key, errors.BadRequestErrorResponse, "invalid_input", api_id="x")
# Recoverable keys (the run gives keygate an encryption keyring): revealed with decrypt.
sealed = unkey.keys.create_key(api_id="api_sdk_py", recoverable=True).data
assert unkey.keys.get_key(key_id=sealed.key_id, decrypt=True).data.plaintext == sealed.key
assert unkey.keys.get_key(key_id=sealed.key_id).data.plaintext is None
listed = unkey.apis.list_keys(api_id="api_sdk_py", decrypt=True, limit=100)
revealed = {}
while listed is not None:
    revealed.update({k.key_id: k.plaintext for k in listed.result.data})
    listed = listed.next()
assert revealed[sealed.key_id] == sealed.key and revealed[key_id] is None, revealed
unkey.keys.delete_key(key_id=key_id)
assert unkey.keys.verify_key(key=key).data.code == "NOT_FOUND"
rejects(client("kg_root_unknown_000000000000").keys.get_key, errors.UnauthorizedErrorResponse, "key_not_found", key_id="key_x")

# APIs: created, read, their keys listed a page at a time, deleted with their keys.
api_id = unkey.apis.create_api(name=f"{run}-api").data.api_id
assert api_id.startswith("api_"), api_id
got_api = unkey.apis.get_api(api_id=api_id).data
assert (got_api.id, got_api.name) == (api_id, f"{run}-api"), got_api
in_api = [unkey.keys.create_key(api_id=api_id).data for _ in range(3)]
listed_keys = []
page = unkey.apis.list_keys(api_id=api_id, limit=2)
while page is not None:
    listed_keys += [k.key_id for k in page.result.data]
    page = page.next()
assert listed_keys == sorted(k.key_id for k in in_api), listed_keys
unkey.apis.delete_api(api_id=api_id)
assert unkey.keys.verify_key(key=in_api[0].key).data.code == "NOT_FOUND"
rejects(unkey.apis.get_api, errors.NotFoundErrorResponse, "api_not_found", api_id=api_id)

# Credits.
metered = unkey.keys.create_key(api_id="api_sdk_py", credits={"remaining": 10, "refill": {"interval": "daily", "amount": 10}}).data
assert unkey.keys.get_key(key_id=metered.key_id).data.credits.remaining == 10
assert unkey.keys.update_credits(key_id=metered.key_id, operation="decrement", value=3).data.remaining == 7
assert unkey.keys.update_credits(key_id=metered.key_id, operation="set", value=None).data.remaining is None

# updateKey and rerollKey.
unkey.keys.update_key(key_id=metered.key_id, name="renamed", enabled=False)
assert unkey.keys.get_key(key_id=metered.key_id).data.name == "renamed"
assert unkey.keys.verify_key(key=metered.key).data.code == "DISABLED"
unkey.keys.update_key(key_id=metered.key_id, enabled=True)
rerolled = unkey.keys.reroll_key(key_id=metered.key_id, expiration=0).data
assert rerolled.key_id != metered.key_id, rerolled
assert unkey.keys.verify_key(key=metered.key).data.code == "EXPIRED"

# Identities, and keys linked to them.
ident = unkey.identities.create_identity(
    external_id=f"{run}_customer", meta={"plan": "pro"},
    ratelimits=[{"name": "requests", "limit": 10, "duration": 60000, "auto_apply": True}],
)
assert ident.data.identity_id.startswith("id_"), ident
got_ident = unkey.identities.get_identity(identity=f"{run}_customer").data
assert (got_ident.id, got_ident.meta, [r.name for r in got_ident.ratelimits]) == (ident.data.identity_id, {"plan": "pro"}, ["requests"]), got_ident
rejects(unkey.identities.create_identity, errors.ConflictErrorResponse, "identity_already_exists", external_id=f"{run}_customer")
linked = unkey.keys.create_key(api_id="api_sdk_py", external_id=f"{run}_customer", ratelimits=[{"name": "own", "limit": 5, "duration": 1000}]).data
linked_key = unkey.keys.get_key(key_id=linked.key_id).data
assert (linked_key.identity.external_id, [r.name for r in linked_key.ratelimits]) == (f"{run}_customer", ["own"]), linked_key
updated = unkey.identities.update_identity(identity=ident.data.identity_id, meta={"plan": "team"}, ratelimits=[]).data
assert (updated.meta, updated.ratelimits) == ({"plan": "team"}, []), updated
idents = []
page = unkey.identities.list_identities(limit=1)
while page is not None:
    idents += [i.external_id for i in page.result.data]
    page = page.next()
assert f"{run}_customer" in idents, idents
unkey.identities.delete_identity(identity=f"{run}_customer")
rejects(unkey.identities.get_identity, errors.NotFoundErrorResponse, "identity_not_found", identity=f"{run}_customer")
assert unkey.keys.verify_key(key=linked.key).data.code == "VALID"

# Rate limits.
ns = f"{run}-api"
first = unkey.ratelimit.limit(namespace=ns, identifier="u1", limit=2, duration=60000).data
assert (first.success, first.limit, first.remaining) == (True, 2, 1), first
override = unkey.ratelimit.set_override(namespace=ns, identifier="vip*", limit=50, duration=60000)
hit = unkey.ratelimit.limit(namespace=ns, identifier="vip1", limit=2, duration=60000).data
assert (hit.limit, hit.override_id) == (50, override.data.override_id), hit
assert unkey.ratelimit.get_override(namespace=ns, identifier="vip*").data.limit == 50
listed = []
page = unkey.ratelimit.list_overrides(namespace=ns)
while page is not None:
    listed += [o.identifier for o in page.result.data]
    page = page.next()
assert listed == ["vip*"], listed
unkey.ratelimit.delete_override(namespace=ns, identifier="vip*")
rejects(unkey.ratelimit.get_override, errors.NotFoundErrorResponse, "ratelimit_override_not_found", namespace=ns, identifier="vip*")
multi = unkey.ratelimit.multi_limit(request=[
    {"namespace": ns, "identifier": "u1", "limit": 2, "duration": 60000},
    {"namespace": ns, "identifier": "u1", "limit": 2, "duration": 60000},
]).data
assert (multi.passed, [c.passed for c in multi.limits]) == (False, [True, False]), multi
assert multi.limits[0].remaining == 1, "nothing consumed"

# Keys issued elsewhere, brought in by their hashes (keys.migrateKeys): hex and base64.
legacy = [f"{run}_legacy_a", f"{run}_legacy_b"]
digest = [hashlib.sha256(k.encode()).digest() for k in legacy]
moved = unkey.keys.migrate_keys(migration_id="sha256_hex", api_id="api_sdk_py", keys=[
    {"hash": digest[0].hex(), "name": "legacy", "permissions": [f"{run}.legacy"], "credits": {"remaining": 3}},
]).data
assert moved.failed == [] and moved.migrated[0].key_id.startswith("key_"), moved
assert moved.migrated[0].hash == digest[0].hex()
b64 = [base64.urlsafe_b64encode(d).decode().rstrip("=") for d in digest]
again = unkey.keys.migrate_keys(migration_id="sha256_base64", api_id="api_sdk_py", keys=[{"hash": b64[1]}, {"hash": b64[0]}]).data
assert again.failed == [b64[0]], again
check = unkey.keys.verify_key(key=legacy[0], permissions=f"{run}.legacy").data
assert (check.valid, check.credits) == (True, 2), check
assert unkey.keys.verify_key(key=legacy[1]).data.code == "VALID"
rejects(unkey.keys.migrate_keys, errors.NotFoundErrorResponse, "migration_not_found",
        migration_id="nobody", api_id="api_sdk_py", keys=[{"hash": digest[0].hex()}])

# Root keys over the API (rootKeys.*): create, list with cursors, update, reroll, delete.
made = unkey.root_keys.create_key(permissions=["api.*.read_key", "rootkey.*.read_key"], name=f"{run}_ci").data
assert made.key_id.startswith("rk_") and made.key.startswith("kg_root_"), made
child = client(made.key)
rejects(child.root_keys.create_key, errors.ForbiddenErrorResponse, "insufficient_permissions", permissions=["*"])
listed, page = [], child.root_keys.list_keys(limit=1)
while page is not None:
    listed += page.result.data
    page = page.next()
mine = next(k for k in listed if k.key_id == made.key_id)
assert (mine.name, mine.end, mine.enabled, mine.expires) == (f"{run}_ci", made.key[-4:], True, None), mine
assert mine.last_used_at > 0 and made.key.startswith(mine.start), mine
unkey.root_keys.update_key(key_id=made.key_id, name=None, permissions=["rootkey.*.read_key"])
rejects(child.keys.get_key, errors.ForbiddenErrorResponse, "insufficient_permissions", key_id="key_nothing")
rerolled = unkey.root_keys.reroll_key(key_id=made.key_id, expiration=0).data
rejects_with_status(child.root_keys.list_keys, 403, "forbidden")
assert client(rerolled.key).root_keys.list_keys().result.data
unkey.root_keys.delete_key(key_id=rerolled.key_id)
rejects(client(rerolled.key).root_keys.list_keys, errors.UnauthorizedErrorResponse, "key_not_found")
rejects(unkey.root_keys.delete_key, errors.NotFoundErrorResponse, "root_key_not_found", key_id=rerolled.key_id)

# The customer portal (portal.*): a portal, a session minted for one end user, its code
# exchanged, the user's own keys listed, rerolled and charted, sessions listed and revoked.
portal_api = unkey.apis.create_api(name=f"{run}-portal").data.api_id
slug = f"{run}-portal".lower()
made = unkey.portal.create_portal(request={"slug": slug, "display_name": "Acme", "keyspace_id": portal_api}).data
portal = unkey.portal.get_portal(request={"portal": slug}).data
assert (portal.id, portal.keyspace_id, portal.enabled) == (made.portal_id, portal_api, True), portal
portal = unkey.portal.update_portal(portal=made.portal_id, primary_color="#112233").data
assert portal.branding.primary_color == "#112233", portal
rejects(unkey.portal.get_portal, errors.NotFoundErrorResponse, "portal_not_found", request={"portal": "nope-nope"})
mine = unkey.keys.create_key(api_id=portal_api, external_id=f"{run}_user").data
theirs = unkey.keys.create_key(api_id=portal_api, external_id=f"{run}_other").data
session = unkey.portal.create_session(portal=slug, external_id=f"{run}_user",
                                      scopes=["keys:read", "keys:reroll", "analytics:read"],
                                      return_url="https://app.example.com/settings").result.data
assert session.id.startswith("ps_") and session.url.startswith(f"{server_url}/portal/{slug}?code="), session
code = session.url.split("code=")[1]
exchanged = unkey.portal.exchange_code(code=code).result.data
assert exchanged.expires_at > time.time() * 1000, exchanged
rejects(unkey.portal.exchange_code, errors.UnauthorizedErrorResponse, "key_not_found", code=code)
# unkey.py 3.2.2 cannot send its own cookie security scheme (its security code raises "sub
# type not supported" for any cookie value): the end-user calls take an empty security
# object and pass the cookie as a header.
def as_user(security_model):
    return {"security": security_model.model_construct(portal_session=None),
            "http_headers": {"Cookie": f"portal_session={exchanged.access_token}"}}
assert [k.key_id for k in unkey.portal.list_keys(**as_user(models.PortalListKeysSecurity)).result.data] == [mine.key_id]
rejects(unkey.portal.reroll_key, errors.NotFoundErrorResponse, "key_not_found",
        **as_user(models.PortalRerollKeySecurity), key_id=theirs.key_id, expiration=0)
rolled = unkey.portal.reroll_key(**as_user(models.PortalRerollKeySecurity), key_id=mine.key_id, expiration=0).data
assert unkey.keys.verify_key(key=rolled.key).data.valid
now = int(time.time() * 1000)
chart = unkey.portal.get_verifications(**as_user(models.PortalGetVerificationsSecurity),
                                       start_time=now - 3_600_000, end_time=now)
assert chart.bucket_millis == 60_000 and all(len(k.data) >= 60 for k in chart.keys), chart
groups = unkey.portal.list_sessions(portal=slug).data
assert [(g.external_id, [x.status.value for x in g.sessions]) for g in groups] == [(f"{run}_user", ["active"])], groups
assert unkey.portal.revoke_session(portal=slug, external_id=f"{run}_user").data.sessions_revoked == 1
rejects(unkey.portal.list_keys, errors.UnauthorizedErrorResponse, "key_not_found",
        **as_user(models.PortalListKeysSecurity))
unkey.portal.delete_portal(portal=made.portal_id)
rejects(unkey.portal.get_portal, errors.NotFoundErrorResponse, "portal_not_found", request={"portal": slug})

# The Key object's lastUsedAt (Unkey's name, which the SDK reads): set once the key was
# verified (analytics write the verification within seconds).
used = unkey.keys.create_key(api_id="api_sdk_py").data
assert unkey.keys.get_key(key_id=used.key_id).data.last_used_at is None
assert unkey.keys.verify_key(key=used.key).data.valid
deadline = time.time() + 15
while (seen := unkey.keys.get_key(key_id=used.key_id).data.last_used_at) is None:
    assert time.time() < deadline, "lastUsedAt was never set"
    time.sleep(0.25)
assert 0 < seen <= time.time() * 1000, seen

# Analytics in SQL (API-v2.md §18): rows as the query names them; a refused query is a typed
# 400 naming what it refused.
rows = unkey.analytics.get_verifications(
    query="SELECT outcome, sum(count) AS n FROM key_verifications_per_day_v1 GROUP BY outcome ORDER BY outcome"
).data
assert isinstance(rows, list) and all(list(r) == ["outcome", "n"] for r in rows), rows
assert any(r["outcome"] == "VALID" and r["n"] >= 1 for r in rows), rows
limits = unkey.analytics.get_ratelimits(
    query="SELECT namespace_name, sum(total) AS t FROM ratelimits_per_day_v1 GROUP BY namespace_name"
).data
assert isinstance(limits, list), limits
e = rejects(unkey.analytics.get_verifications, errors.BadRequestErrorResponse, "invalid_analytics_query",
            query="SELECT * FROM keys")
assert "keys" in e.data.error.detail, e.data.error.detail
rejects(unkey.analytics.get_verifications, errors.BadRequestErrorResponse, "not_supported",
        query="SELECT count() FROM key_verifications_v1")

print("v2 Python SDK: ok")
