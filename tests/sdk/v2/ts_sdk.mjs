// @unkey/api 2.5.1 and @unkey/ratelimit 2.1.4 (Unkey's v2 SDKs) against keygate: every
// operation keygate serves, their typed errors included. Exits non-zero on any mismatch.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { Unkey } from "@unkey/api";
import * as errors from "@unkey/api/models/errors";
import { Ratelimit, Overrides } from "@unkey/ratelimit";

const { KEYGATE_URL: serverURL, KEYGATE_ROOT_KEY: rootKey } = process.env;
const unkey = new Unkey({ rootKey, serverURL, retryConfig: { strategy: "none" } });
const run = `ts${Date.now()}`;
const show = (x) => JSON.stringify(x);

// A typed error of `cls` whose problem type ends with `kind`.
async function rejects(promise, cls, kind) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof cls, `${cls.name} expected, got ${e?.constructor?.name}: ${e?.message}`);
    const type = e.data$?.error?.type ?? "";
    assert.ok(type.endsWith(kind), `type ${type} ends with ${kind}`);
    assert.ok(e.data$.meta.requestId.startsWith("req_"));
    return e;
  }
  assert.fail(`expected ${cls.name}`);
}

// Permissions and roles.
const perm = await unkey.permissions.createPermission({ name: "Read docs", slug: `${run}.read`, description: "d" });
assert.ok(perm.data.permissionId.startsWith("perm_"), show(perm));
assert.ok(perm.meta.requestId.startsWith("req_"));
const gotPerm = await unkey.permissions.getPermission({ permission: `${run}.read` });
assert.deepEqual(gotPerm.data, { id: perm.data.permissionId, name: "Read docs", slug: `${run}.read`, description: "d" });
await rejects(unkey.permissions.createPermission({ name: "x", slug: `${run}.read` }), errors.ConflictErrorResponse, "permission_already_exists");
const role = await unkey.permissions.createRole({ name: `${run}-editor`, description: "edits", permissions: [`${run}.write`] });
const gotRole = await unkey.permissions.getRole({ role: role.data.roleId });
assert.equal(gotRole.data.name, `${run}-editor`);
assert.deepEqual(gotRole.data.permissions.map((p) => p.slug), [`${run}.write`]);
const setRole = await unkey.permissions.setRolePermissions({ roleId: `${run}-editor`, permissions: [`${run}.write`, `${run}.read`] });
assert.deepEqual(setRole.data.map((p) => p.slug), [`${run}.read`, `${run}.write`], show(setRole));
await rejects(unkey.permissions.getRole({ role: `${run}-ghost` }), errors.NotFoundErrorResponse, "role_not_found");

// Lists, a page at a time through the SDK's iterator.
for (let i = 0; i < 5; i++) {
  await unkey.permissions.createPermission({ name: `P${i}`, slug: `${run}.page.${i}` });
}
const slugs = [];
for await (const page of await unkey.permissions.listPermissions({ limit: 2 })) {
  slugs.push(...page.result.data.map((p) => p.slug));
}
assert.equal(new Set(slugs).size, slugs.length, "no permission twice");
for (let i = 0; i < 5; i++) assert.ok(slugs.includes(`${run}.page.${i}`), show(slugs));
const roleNames = [];
for await (const page of await unkey.permissions.listRoles({ limit: 1 })) {
  roleNames.push(...page.result.data.map((r) => r.name));
}
assert.ok(roleNames.includes(`${run}-editor`), show(roleNames));

// Keys.
const created = await unkey.keys.createKey({
  apiId: "api_sdk_v2", prefix: "tsv2", name: "ts-key", meta: { plan: "pro" }, permissions: [`${run}.direct`],
  roles: [`${run}-editor`], byteLength: 24,
});
const { keyId, key } = created.data;
assert.ok(keyId.startsWith("key_") && key.startsWith("tsv2_"), show(created));
const got = await unkey.keys.getKey({ keyId });
assert.equal(got.data.start, key.slice(0, "tsv2_".length + 4));
assert.deepEqual(got.data.permissions, [`${run}.direct`, `${run}.read`, `${run}.write`]);
assert.deepEqual(got.data.roles, [`${run}-editor`]);
assert.deepEqual(got.data.meta, { plan: "pro" });
const me = await unkey.keys.whoami({ key });
assert.equal(me.data.keyId, keyId);
const valid = await unkey.keys.verifyKey({ key, permissions: `${run}.read AND (${run}.write OR nope)` });
assert.deepEqual([valid.data.valid, valid.data.code, valid.data.keyId], [true, "VALID", keyId], show(valid));
const insufficient = await unkey.keys.verifyKey({ key, permissions: "nope" });
assert.equal(insufficient.data.code, "INSUFFICIENT_PERMISSIONS");
const unknown = await unkey.keys.verifyKey({ key: "tsv2_unknown" });
assert.deepEqual([unknown.data.valid, unknown.data.code], [false, "NOT_FOUND"]);
const bad = await rejects(unkey.keys.verifyKey({ key, permissions: "a AND" }), errors.BadRequestErrorResponse, "permissions_query_syntax_error");
assert.equal(bad.data$.error.errors[0].location, "body.permissions");
const disabled = await unkey.keys.createKey({ apiId: "api_sdk_v2", enabled: false });
assert.equal((await unkey.keys.verifyKey({ key: disabled.data.key })).data.code, "DISABLED");
const expired = await unkey.keys.createKey({ apiId: "api_sdk_v2", expires: Date.now() - 1000 });
assert.equal((await unkey.keys.verifyKey({ key: expired.data.key })).data.code, "EXPIRED");

const added = await unkey.keys.addPermissions({ keyId, permissions: [`${run}.extra`] });
assert.deepEqual(added.data.map((p) => p.slug), [`${run}.direct`, `${run}.extra`], show(added));
const removed = await unkey.keys.removePermissions({ keyId, permissions: [`${run}.extra`] });
assert.deepEqual(removed.data.map((p) => p.slug), [`${run}.direct`]);
const set = await unkey.keys.setPermissions({ keyId, permissions: [`${run}.only`] });
assert.deepEqual(set.data.map((p) => p.slug), [`${run}.only`]);
const viewer = await unkey.permissions.createRole({ name: `${run}-viewer` });
const roles = await unkey.keys.addRoles({ keyId, roles: [viewer.data.roleId] });
assert.deepEqual(roles.data.map((r) => r.name), [`${run}-editor`, `${run}-viewer`], show(roles));
assert.deepEqual((await unkey.keys.removeRoles({ keyId, roles: [`${run}-editor`] })).data.map((r) => r.name), [`${run}-viewer`]);
assert.deepEqual((await unkey.keys.setRoles({ keyId, roles: [] })).data, []);
await rejects(unkey.keys.addRoles({ keyId, roles: [`${run}-ghost`] }), errors.NotFoundErrorResponse, "role_not_found");
await rejects(unkey.keys.getKey({ keyId: "key_missing" }), errors.NotFoundErrorResponse, "key_not_found");
await rejects(unkey.keys.createKey({ apiId: "x" }), errors.BadRequestErrorResponse, "invalid_input");
// Recoverable keys (the run gives keygate an encryption keyring): revealed with decrypt.
const sealed = await unkey.keys.createKey({ apiId: "api_sdk_v2", recoverable: true });
assert.equal((await unkey.keys.getKey({ keyId: sealed.data.keyId, decrypt: true })).data.plaintext, sealed.data.key);
assert.equal((await unkey.keys.getKey({ keyId, decrypt: true })).data.plaintext, undefined, "not recoverable");
assert.deepEqual((await unkey.keys.deleteKey({ keyId })).data, {});
assert.equal((await unkey.keys.verifyKey({ key })).data.code, "NOT_FOUND");

// APIs: created, read, their keys listed a page at a time, deleted with their keys.
const api = await unkey.apis.createApi({ name: `${run}-api` });
const apiId = api.data.apiId;
assert.ok(apiId.startsWith("api_"), show(api));
assert.deepEqual((await unkey.apis.getApi({ apiId })).data, { id: apiId, name: `${run}-api` });
const inApi = [await unkey.keys.createKey({ apiId, permissions: [`${run}.listed`] }), await unkey.keys.createKey({ apiId })];
const listedKeys = [];
for await (const page of await unkey.apis.listKeys({ apiId, limit: 1 })) {
  listedKeys.push(...page.result.data.map((k) => k.keyId));
}
assert.deepEqual(listedKeys, inApi.map((k) => k.data.keyId).sort(), show(listedKeys));
assert.deepEqual((await unkey.apis.deleteApi({ apiId })).data, {});
assert.equal((await unkey.keys.verifyKey({ key: inApi[0].data.key })).data.code, "NOT_FOUND");
await rejects(unkey.apis.getApi({ apiId }), errors.NotFoundErrorResponse, "api_not_found");
await rejects(unkey.apis.createApi({ name: "x" }), errors.BadRequestErrorResponse, "invalid_input");

// Credits.
const metered = await unkey.keys.createKey({ apiId: "api_sdk_v2", credits: { remaining: 10, refill: { interval: "monthly", amount: 10, refillDay: 5 } } });
const meteredKey = await unkey.keys.getKey({ keyId: metered.data.keyId });
assert.deepEqual([meteredKey.data.credits.remaining, meteredKey.data.credits.refill.interval], [10, "monthly"], show(meteredKey));
const incremented = await unkey.keys.updateCredits({ keyId: metered.data.keyId, operation: "increment", value: 5 });
assert.equal(incremented.data.remaining, 15, show(incremented));
assert.equal((await unkey.keys.updateCredits({ keyId: metered.data.keyId, operation: "set", value: null })).data.remaining, null);

// updateKey and rerollKey.
const updated = await unkey.keys.updateKey({ keyId: metered.data.keyId, name: "renamed", meta: null, enabled: false });
assert.ok(updated.meta.requestId.startsWith("req_"));
assert.equal((await unkey.keys.getKey({ keyId: metered.data.keyId })).data.name, "renamed");
assert.equal((await unkey.keys.verifyKey({ key: metered.data.key })).data.code, "DISABLED");
await unkey.keys.updateKey({ keyId: metered.data.keyId, enabled: true });
const rerolled = await unkey.keys.rerollKey({ keyId: metered.data.keyId, expiration: 0 });
assert.ok(rerolled.data.keyId !== metered.data.keyId && rerolled.data.key.length > 10, show(rerolled));
assert.equal((await unkey.keys.verifyKey({ key: metered.data.key })).data.code, "EXPIRED");
assert.equal((await unkey.keys.getKey({ keyId: rerolled.data.keyId })).data.name, "renamed");

// Identities, and keys linked to them.
const ident = await unkey.identities.createIdentity({
  externalId: `${run}_customer`, meta: { plan: "pro" },
  ratelimits: [{ name: "requests", limit: 10, duration: 60000, autoApply: true }],
});
assert.ok(ident.data.identityId.startsWith("id_"), show(ident));
const gotIdent = await unkey.identities.getIdentity({ identity: `${run}_customer` });
assert.deepEqual([gotIdent.data.id, gotIdent.data.meta, gotIdent.data.ratelimits.map((r) => r.name)],
  [ident.data.identityId, { plan: "pro" }, ["requests"]], show(gotIdent));
await rejects(unkey.identities.createIdentity({ externalId: `${run}_customer` }), errors.ConflictErrorResponse, "identity_already_exists");
const linked = await unkey.keys.createKey({ apiId: "api_sdk_v2", externalId: `${run}_customer`,
  ratelimits: [{ name: "own", limit: 5, duration: 1000 }] });
const linkedKey = await unkey.keys.getKey({ keyId: linked.data.keyId });
assert.deepEqual([linkedKey.data.identity.externalId, linkedKey.data.ratelimits.map((r) => r.name)], [`${run}_customer`, ["own"]], show(linkedKey));
const updatedIdent = await unkey.identities.updateIdentity({ identity: ident.data.identityId, meta: { plan: "team" }, ratelimits: [] });
assert.deepEqual([updatedIdent.data.meta, updatedIdent.data.ratelimits], [{ plan: "team" }, []], show(updatedIdent));
const idents = [];
for await (const page of await unkey.identities.listIdentities({ limit: 1 })) {
  idents.push(...page.result.data.map((i) => i.externalId));
}
assert.ok(idents.includes(`${run}_customer`), show(idents));
// (The SDK's answer type of deleteIdentity holds `meta` alone: it drops keygate's `data: {}`.)
assert.ok((await unkey.identities.deleteIdentity({ identity: `${run}_customer` })).meta.requestId.startsWith("req_"));
await rejects(unkey.identities.getIdentity({ identity: `${run}_customer` }), errors.NotFoundErrorResponse, "identity_not_found");
assert.equal((await unkey.keys.verifyKey({ key: linked.data.key })).data.code, "VALID", "an unlinked key keeps working");

// Permissions and authentication errors.
const stranger = new Unkey({ rootKey: "kg_root_unknown_000000000000", serverURL, retryConfig: { strategy: "none" } });
await rejects(stranger.keys.getKey({ keyId: "key_x" }), errors.UnauthorizedErrorResponse, "key_not_found");
const noAuth = new Unkey({ rootKey: "", serverURL, retryConfig: { strategy: "none" } });
await rejects(noAuth.keys.getKey({ keyId: "key_x" }), errors.BadRequestErrorResponse, "authentication/missing");

// Rate limits: limit, multiLimit, overrides.
const ns = `${run}-api`;
const first = await unkey.ratelimit.limit({ namespace: ns, identifier: "u1", limit: 2, duration: 60000 });
assert.deepEqual([first.data.success, first.data.limit, first.data.remaining], [true, 2, 1], show(first));
const override = await unkey.ratelimit.setOverride({ namespace: ns, identifier: "vip*", limit: 50, duration: 60000 });
const withOverride = await unkey.ratelimit.limit({ namespace: ns, identifier: "vip1", limit: 2, duration: 60000 });
assert.deepEqual([withOverride.data.limit, withOverride.data.overrideId], [50, override.data.overrideId]);
assert.equal((await unkey.ratelimit.getOverride({ namespace: ns, identifier: "vip*" })).data.limit, 50);
const listed = [];
for await (const page of await unkey.ratelimit.listOverrides({ namespace: ns })) {
  listed.push(...page.result.data.map((o) => o.identifier));
}
assert.deepEqual(listed, ["vip*"]);
assert.deepEqual((await unkey.ratelimit.deleteOverride({ namespace: ns, identifier: "vip*" })).data, {});
await rejects(unkey.ratelimit.getOverride({ namespace: ns, identifier: "vip*" }), errors.NotFoundErrorResponse, "ratelimit_override_not_found");
const multi = await unkey.ratelimit.multiLimit([
  { namespace: ns, identifier: "u1", limit: 2, duration: 60000 },
  { namespace: ns, identifier: "u1", limit: 2, duration: 60000 },
]);
assert.deepEqual([multi.data.passed, multi.data.limits.map((l) => l.passed)], [false, [true, false]], show(multi));
assert.equal(multi.data.limits[0].remaining, 1, "nothing consumed");

// Keys issued elsewhere, brought in by their hashes (keys.migrateKeys): hex and base64.
const legacy = [`${run}_legacy_a`, `${run}_legacy_b`];
const sha = (k, enc) => createHash("sha256").update(k).digest(enc);
const migrated = await unkey.keys.migrateKeys({
  migrationId: "sha256_hex", apiId: "api_sdk_v2",
  keys: [{ hash: sha(legacy[0], "hex"), name: "legacy", permissions: [`${run}.legacy`], credits: { remaining: 3 } }],
});
assert.deepEqual(migrated.data.failed, [], show(migrated));
assert.equal(migrated.data.migrated[0].hash, sha(legacy[0], "hex"));
assert.ok(migrated.data.migrated[0].keyId.startsWith("key_"));
const viaBase64 = await unkey.keys.migrateKeys({
  migrationId: "sha256_base64", apiId: "api_sdk_v2",
  keys: [{ hash: sha(legacy[1], "base64") }, { hash: sha(legacy[0], "base64") }],
});
assert.deepEqual(viaBase64.data.failed, [sha(legacy[0], "base64")], "present already: failed");
const legacyCheck = await unkey.keys.verifyKey({ key: legacy[0], permissions: `${run}.legacy` });
assert.deepEqual([legacyCheck.data.valid, legacyCheck.data.credits], [true, 2], show(legacyCheck));
assert.equal((await unkey.keys.verifyKey({ key: legacy[1] })).data.code, "VALID");
await rejects(unkey.keys.migrateKeys({ migrationId: "nobody", apiId: "api_sdk_v2", keys: [{ hash: sha(legacy[0], "hex") }] }),
  errors.NotFoundErrorResponse, "migration_not_found");

// The customer portal's session and end-user half (@unkey/api 2.5.1 has no createPortal:
// the portal is made over plain HTTP): a session minted, its code exchanged, the user's
// keys listed, rerolled and charted with the portal_session cookie.
const portalApi = (await unkey.apis.createApi({ name: `${run}-portal` })).data.apiId;
const slug = `${run}-portal`.toLowerCase();
const made = await fetch(`${serverURL}/v2/portal.createPortal`, {
  method: "POST",
  headers: { authorization: `Bearer ${rootKey}`, "content-type": "application/json" },
  body: JSON.stringify({ slug, displayName: "Acme", keyspaceId: portalApi }),
});
assert.equal(made.status, 200, await made.clone().text());
const own = (await unkey.keys.createKey({ apiId: portalApi, externalId: `${run}_user` })).data;
const notOwn = (await unkey.keys.createKey({ apiId: portalApi, externalId: `${run}_other` })).data;
const minted = await unkey.portal.createSession({ portal: slug, externalId: `${run}_user`, scopes: ["keys:read", "keys:reroll", "analytics:read"] });
assert.ok(minted.result.data.id.startsWith("ps_"), show(minted.result));
const code = new URL(minted.result.data.url).searchParams.get("code");
const exchanged = await unkey.portal.exchangeCode({ code });
const cookie = { portalSession: exchanged.result.data.accessToken };
await rejects(unkey.portal.exchangeCode({ code }), errors.UnauthorizedErrorResponse, "key_not_found");
const portalKeys = [];
for await (const page of await unkey.portal.listKeys(cookie, { limit: 1 })) {
  portalKeys.push(...page.result.data.map((k) => k.keyId));
}
assert.deepEqual(portalKeys, [own.keyId]);
await rejects(unkey.portal.rerollKey(cookie, { keyId: notOwn.keyId, expiration: 0 }), errors.NotFoundErrorResponse, "key_not_found");
const rolled = await unkey.portal.rerollKey(cookie, { keyId: own.keyId, expiration: 0 });
assert.equal((await unkey.keys.verifyKey({ key: rolled.data.key })).data.code, "VALID");
const chart = await unkey.portal.getVerifications(cookie, { startTime: Date.now() - 3_600_000, endTime: Date.now() });
assert.ok(chart.data.length >= 60 && chart.data.every((p) => p.total === 0 || p.valid <= p.total), show(chart));

const limiter = new Ratelimit({ rootKey, baseUrl: serverURL, namespace: `${run}-rl`, limit: 2, duration: "60s" });
const results = [];
for (let i = 0; i < 3; i++) results.push((await limiter.limit("user")).success);
assert.deepEqual(results, [true, true, false]);
const overrides = new Overrides({ rootKey, baseUrl: serverURL });
await overrides.setOverride({ namespace: `${run}-rl`, identifier: "vip", limit: 10, duration: 60000 });
assert.equal((await overrides.getOverride({ namespace: `${run}-rl`, identifier: "vip" })).data.limit, 10);

// Analytics in SQL (API-v2.md §18): rows as the query names them; a refused query is a typed 400.
const sqlRows = await unkey.analytics.getVerifications({
  query: "SELECT outcome, sum(count) AS n FROM key_verifications_per_day_v1 GROUP BY outcome ORDER BY outcome",
});
assert.ok(Array.isArray(sqlRows.data) && sqlRows.data.every((r) => show(Object.keys(r)) === show(["outcome", "n"])), show(sqlRows));
const sqlLimits = await unkey.analytics.getRatelimits({ query: "SELECT namespace_name, sum(total) AS t FROM ratelimits_per_day_v1 GROUP BY 1" });
assert.ok(Array.isArray(sqlLimits.data), show(sqlLimits));
await rejects(unkey.analytics.getVerifications({ query: "SELECT * FROM keys" }), errors.BadRequestErrorResponse, "invalid_analytics_query");

console.log("v2 TypeScript SDKs: ok");
