// @unkey/api 0.38 and @unkey/ratelimit 0.5 against keygate: exits non-zero on any mismatch.
import assert from "node:assert/strict";
import { Unkey } from "@unkey/api";
import { Ratelimit } from "@unkey/ratelimit";

const { KEYGATE_URL: baseUrl, KEYGATE_ROOT_KEY: rootKey, KEYGATE_KEY_ID: keyId } = process.env;
const unkey = new Unkey({ rootKey, baseUrl, retry: { attempts: 0 } });

const set = await unkey.keys.setPermissions({
  keyId,
  permissions: [{ name: "ts.write", create: true }, { slug: "ts.read" }],
});
assert.deepEqual(set.result.map((p) => p.name), ["ts.read", "ts.write"], JSON.stringify(set));
assert.ok(set.result.every((p) => p.id.startsWith("perm_")));

const roles = await unkey.keys.addRoles({ keyId, roles: [{ name: "ts-role", create: true }] });
assert.deepEqual(roles.result.map((r) => r.name), ["ts-role"], JSON.stringify(roles));

const got = await unkey.keys.get({ keyId });
assert.equal(got.result.id, keyId);
assert.deepEqual(got.result.permissions.map((p) => p.name), ["ts.read", "ts.write"]);

const created = await unkey.keys.create({
  apiId: "api_sdk", name: "ts-key", prefix: "ts", meta: { plan: "pro" }, permissions: ["ts.read"], roles: ["ts-role"],
});
assert.ok(created.result.keyId.startsWith("key_"), JSON.stringify(created));
assert.ok(created.result.key.startsWith("ts_"), JSON.stringify(created));
const createdKey = await unkey.keys.get({ keyId: created.result.keyId });
assert.deepEqual(createdKey.result.permissions.map((p) => p.name), ["ts.read"], JSON.stringify(createdKey));
assert.deepEqual(createdKey.result.roles.map((r) => r.name), ["ts-role"]);
assert.deepEqual(createdKey.result.meta, { plan: "pro" });
const verified = await unkey.keys.verify({
  apiId: "api_sdk", key: created.result.key, authorization: { permissions: { and: ["ts.read", { or: ["x", "ts.read"] }] } },
});
assert.equal(verified.result.valid, true, JSON.stringify(verified));
assert.equal(verified.result.code, "VALID");
assert.equal(verified.result.keyId, created.result.keyId);
assert.deepEqual(verified.result.roles, ["ts-role"]);
const denied = await unkey.keys.verify({ key: created.result.key, authorization: { permissions: "ts.admin" } });
assert.deepEqual([denied.result.valid, denied.result.code], [false, "INSUFFICIENT_PERMISSIONS"], JSON.stringify(denied));
// Analytics: the two verifications above, once written (every 2 s).
let rows = [];
for (let i = 0; i < 50 && !(rows[0]?.total >= 2); i++) {
  if (i > 0) await new Promise((r) => setTimeout(r, 200));
  rows = (await unkey.analytics.getVerifications({ apiId: "api_sdk", groupBy: "key" })).result ?? [];
}
assert.equal(rows[0]?.keyId, created.result.keyId, JSON.stringify(rows));
assert.deepEqual([rows[0].valid, rows[0].insufficientPermissions, rows[0].total], [1, 1, 2]);
const perDay = await unkey.keys.getVerifications({ keyId: created.result.keyId });
assert.equal(perDay.result.verifications[0].success, 1, JSON.stringify(perDay));
const badGroup = await unkey.analytics.getVerifications({ apiId: "api_sdk", groupBy: "week" });
assert.equal(badGroup.error.code, "BAD_REQUEST", JSON.stringify(badGroup));

const added = await unkey.keys.addPermissions({ keyId: created.result.keyId, permissions: [{ name: "ts.extra" }] });
assert.deepEqual(added.result.map((p) => p.name), ["ts.extra", "ts.read"], JSON.stringify(added));
const removed = await unkey.keys.removePermissions({ keyId: created.result.keyId, permissions: [{ name: "ts.read" }] });
assert.deepEqual(removed.result, {}, JSON.stringify(removed));
const setRoles = await unkey.keys.setRoles({ keyId: created.result.keyId, roles: [{ name: "ts-other", create: true }] });
assert.deepEqual(setRoles.result.map((r) => r.name), ["ts-other"], JSON.stringify(setRoles));
const removedRoles = await unkey.keys.removeRoles({ keyId: created.result.keyId, roles: [{ name: "ts-other" }] });
assert.deepEqual(removedRoles.result, {}, JSON.stringify(removedRoles));
const after = await unkey.keys.get({ keyId: created.result.keyId });
assert.deepEqual([after.result.permissions.map((p) => p.name), after.result.roles], [["ts.extra"], []]);
const deleted = await unkey.keys.delete({ keyId: created.result.keyId });
assert.deepEqual(deleted.result, {}, JSON.stringify(deleted));
const gone = await unkey.keys.get({ keyId: created.result.keyId });
assert.equal(gone.error.code, "NOT_FOUND", JSON.stringify(gone));

const perm = await unkey.permissions.createPermission({ name: "ts.crud", description: "from the ts sdk" });
assert.ok(perm.result.permissionId.startsWith("perm_"), JSON.stringify(perm));
const dup = await unkey.permissions.createPermission({ name: "ts.crud" });
assert.equal(dup.error.code, "CONFLICT", JSON.stringify(dup));
const gotPerm = await unkey.permissions.getPermission({ permissionId: perm.result.permissionId });
assert.deepEqual(gotPerm.result, { id: perm.result.permissionId, name: "ts.crud", description: "from the ts sdk" });
const allPerms = await unkey.permissions.listPermissions();
assert.ok(allPerms.result.some((p) => p.name === "ts.crud"), JSON.stringify(allPerms));
assert.deepEqual((await unkey.permissions.deletePermission({ permissionId: perm.result.permissionId })).result, {});
const role = await unkey.permissions.createRole({ name: "ts-crud-role" });
assert.ok(role.result.roleId.startsWith("role_"), JSON.stringify(role));
assert.equal((await unkey.permissions.getRole({ roleId: role.result.roleId })).result.name, "ts-crud-role");
assert.ok((await unkey.permissions.listRoles()).result.some((r) => r.id === role.result.roleId));
assert.deepEqual((await unkey.permissions.deleteRole({ roleId: role.result.roleId })).result, {});

const limit = { namespace: "ts-sdk", identifier: "u1", limit: 2, duration: 60000 };
const first = await unkey.ratelimits.limit(limit);
assert.equal(first.result.success, true, JSON.stringify(first));
assert.equal(first.result.remaining, 1);
assert.equal(first.result.reset % 60000, 0);

const ov = await unkey.ratelimits.setOverride({ namespaceName: "ts-sdk", identifier: "vip_*", limit: 10, duration: 60000 });
assert.ok(ov.result.overrideId.startsWith("rlor_"), JSON.stringify(ov));
const vip = await unkey.ratelimits.limit({ namespace: "ts-sdk", identifier: "vip_1", limit: 1, duration: 60000 });
assert.deepEqual([vip.result.limit, vip.result.remaining], [10, 9], JSON.stringify(vip));
const gotOv = await unkey.ratelimits.getOverride({ namespaceName: "ts-sdk", identifier: "vip_*" });
assert.deepEqual([gotOv.result.id, gotOv.result.limit], [ov.result.overrideId, 10], JSON.stringify(gotOv));
const listOv = await unkey.ratelimits.listOverrides({ namespaceName: "ts-sdk" });
assert.equal(listOv.result.total, 1, JSON.stringify(listOv));
assert.deepEqual((await unkey.ratelimits.deleteOverride({ namespaceName: "ts-sdk", identifier: "vip_*" })).result, {});

const missing = await unkey.keys.setPermissions({ keyId: "key_doesnotexist", permissions: [] });
assert.equal(missing.error.code, "NOT_FOUND", JSON.stringify(missing));
assert.match(missing.error.requestId, /^req_/);

const bad = await new Unkey({ rootKey: "not-a-root-key", baseUrl, retry: { attempts: 0 } }).ratelimits.limit(limit);
assert.equal(bad.error.code, "UNAUTHORIZED", JSON.stringify(bad));

const invalid = await unkey.ratelimits.limit({ ...limit, duration: 10 });
assert.equal(invalid.error.code, "BAD_REQUEST");
assert.equal(invalid.error.message, "duration: must be >= 1000");

// APIs: the same objects as v2's, on v1's wire.
const api = await unkey.apis.create({ name: "ts-v1-api" });
const apiId = api.result.apiId;
assert.ok(apiId.startsWith("api_"), JSON.stringify(api));
const gotApi = await unkey.apis.get({ apiId });
assert.deepEqual([gotApi.result.id, gotApi.result.name], [apiId, "ts-v1-api"], JSON.stringify(gotApi));
const apiKeys = [(await unkey.keys.create({ apiId })).result, (await unkey.keys.create({ apiId })).result];
const firstPage = await unkey.apis.listKeys({ apiId, limit: 1 });
assert.equal(firstPage.result.total, 2, JSON.stringify(firstPage));
const secondPage = await unkey.apis.listKeys({ apiId, limit: 1, cursor: firstPage.result.cursor });
const pagedIds = [...firstPage.result.keys, ...secondPage.result.keys].map((k) => k.id);
assert.deepEqual(pagedIds, apiKeys.map((k) => k.keyId).sort(), JSON.stringify(secondPage));
assert.equal(secondPage.result.cursor, undefined);
assert.deepEqual((await unkey.apis.delete({ apiId })).result, {});
assert.equal((await unkey.apis.get({ apiId })).error.code, "NOT_FOUND");
assert.equal((await unkey.keys.verify({ key: apiKeys[0].key })).result.code, "NOT_FOUND");

const rl = new Ratelimit({ rootKey, baseUrl, namespace: "ts-ratelimit", limit: 2, duration: "30s" });
const seen = [];
for (let i = 0; i < 3; i++) seen.push((await rl.limit("user_1")).success);
assert.deepEqual(seen, [true, true, false]);
const peek = await rl.limit("user_1", { cost: 0, async: true, meta: { plan: "pro" }, resources: [{ type: "doc", id: "d1" }] });
assert.deepEqual([peek.success, peek.remaining, peek.limit], [false, 0, 2]);

console.log("ts sdk: ok (@unkey/api 0.38.0, @unkey/ratelimit 0.5.5)");
