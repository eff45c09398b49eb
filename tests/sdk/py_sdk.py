"""unkey-py 0.10 against keygate, and /openapi.json through openapi-spec-validator: raises
(non-zero exit) on any mismatch."""
import json
import os
import urllib.request

from openapi_spec_validator import validate
from unkey_py import Unkey

url, root, key_id = os.environ["KEYGATE_URL"], os.environ["KEYGATE_ROOT_KEY"], os.environ["KEYGATE_KEY_ID"]
s = Unkey(bearer_auth=root, server_url=url)

r = s.keys.set_permissions(request={"key_id": key_id, "permissions": [{"name": "py.read", "create": True}]})
assert r.http_meta.response.status_code == 200
assert [p.name for p in r.response_bodies] == ["py.read"], r.response_bodies

r = s.keys.add_roles(request={"key_id": key_id, "roles": [{"name": "py-role", "create": True}]})
assert [p.name for p in r.response_bodies] == ["py-role", "ts-role"], r.response_bodies

req = {"namespace": "py-sdk", "identifier": "u", "limit": 2, "duration": 60000}
results = [s.ratelimits.limit(request=req).object for _ in range(3)]
assert [o.success for o in results] == [True, True, False], results
assert [o.remaining for o in results] == [1, 0, 0], results
peek = s.ratelimits.limit(request={**req, "cost": 0, "async": True, "meta": {"a": "b"},
                                   "resources": [{"type": "project", "id": "p1", "name": "P"}]}).object
assert (peek.success, peek.remaining, peek.limit) == (False, 0, 2), peek


ov = s.ratelimit.set_override(request={"namespace_name": "py-sdk", "identifier": "vip_*", "limit": 10,
                                       "duration": 60000}).object
assert ov.override_id.startswith("rlor_"), ov
vip = s.ratelimits.limit(request={**req, "identifier": "vip_1"}).object
assert (vip.limit, vip.remaining) == (10, 9), vip
assert s.ratelimit.get_override(identifier="vip_*", namespace_name="py-sdk").object.limit == 10
assert s.ratelimit.list_overrides(namespace_name="py-sdk").object.total == 1
r = s.ratelimits.delete_override(request={"namespace_name": "py-sdk", "identifier": "vip_*"})
assert r.http_meta.response.status_code == 200


def error_code(call):
    try:
        call()
    except Exception as e:  # the SDK's typed errors carry the parsed body as e.data.error
        code = e.data.error.code
        return getattr(code, "value", code)
    raise AssertionError("expected an error")


assert error_code(lambda: s.keys.set_permissions(request={"key_id": "key_nope", "permissions": []})) == "NOT_FOUND"
assert error_code(lambda: s.ratelimits.limit(request={**req, "duration": 10})) == "BAD_REQUEST"
created = s.keys.create(request={"api_id": "api_sdk", "name": "py-key", "prefix": "py",
                                     "permissions": ["py.read"], "roles": ["py-role"]}).object
assert created.key.startswith("py_") and created.key_id.startswith("key_"), created
v = s.keys.verify(request={"key": created.key, "api_id": "api_sdk",
                            "authorization": {"permissions": {"or": ["py.write", "py.read"]}}}).v1_keys_verify_key_response
assert v.valid and getattr(v.code, "value", v.code) == "VALID" and v.key_id == created.key_id, v
assert v.permissions == ["py.read"] and v.roles == ["py-role"], v
v = s.keys.verify(request={"key": created.key, "authorization": {"permissions": "py.admin"}})
v = v.v1_keys_verify_key_response
assert not v.valid and getattr(v.code, "value", v.code) == "INSUFFICIENT_PERMISSIONS", v
r = s.keys.add_permissions(request={"key_id": created.key_id, "permissions": [{"name": "py.extra"}]})
assert [p.name for p in r.response_bodies] == ["py.extra", "py.read"], r.response_bodies
r = s.keys.remove_permissions(request={"key_id": created.key_id, "permissions": [{"name": "py.read"}]})
assert r.http_meta.response.status_code == 200
r = s.keys.set_roles(request={"key_id": created.key_id, "roles": [{"name": "py-other", "create": True}]})
assert [p.name for p in r.response_bodies] == ["py-other"], r.response_bodies
r = s.keys.remove_roles(request={"key_id": created.key_id, "roles": [{"name": "py-other"}]})
assert r.http_meta.response.status_code == 200
v = s.keys.verify(request={"key": created.key}).v1_keys_verify_key_response
assert (v.permissions, v.roles) == (["py.extra"], []), v
r = s.keys.delete(request={"key_id": created.key_id})
assert r.http_meta.response.status_code == 200
assert error_code(lambda: s.keys.delete(request={"key_id": created.key_id})) == "NOT_FOUND"
v = s.keys.verify(request={"key": created.key}).v1_keys_verify_key_response
assert not v.valid and getattr(v.code, "value", v.code) == "NOT_FOUND", v
perm = s.permissions.create(request={"name": "py.crud", "description": "from the py sdk"}).object
assert perm.permission_id.startswith("perm_"), perm
assert error_code(lambda: s.permissions.create(request={"name": "py.crud"})) == "CONFLICT"
got = s.permissions.get(permission_id=perm.permission_id).object
assert (got.id, got.name, got.description) == (perm.permission_id, "py.crud", "from the py sdk"), got
assert "py.crud" in [p.name for p in s.permissions.list().response_bodies]
assert s.permissions.delete(request={"permission_id": perm.permission_id}).http_meta.response.status_code == 200
role = s.permissions.create_role(request={"name": "py-crud-role"}).object
assert s.permissions.get_role(role_id=role.role_id).object.name == "py-crud-role"
assert role.role_id in [r.id for r in s.permissions.list_roles().response_bodies]
assert s.permissions.delete_role(request={"role_id": role.role_id}).http_meta.response.status_code == 200
bad = Unkey(bearer_auth="not-a-root-key", server_url=url)
assert error_code(lambda: bad.ratelimits.limit(request=req)) == "UNAUTHORIZED"
# The served OpenAPI documents are valid OpenAPI 3.1 for a third-party validator.
for doc in ("/openapi.json", "/openapi-v2.json"):
    with urllib.request.urlopen(url + doc) as resp:
        validate(json.load(resp))
print("py sdk: ok (unkey-py 0.10.0); /openapi.json and /openapi-v2.json valid (openapi-spec-validator 0.9.0)")
