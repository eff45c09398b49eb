-- keygate's forward auth for HAProxy (docs/gateways.md, "HAProxy"): an `http-request`
-- action that asks keygate's /v1/gateway.authorize about the request with HAProxy's
-- built-in HTTP client, then passes it on, or answers the client with keygate's refusal.
--
--   global
--       lua-load /etc/haproxy/keygate.lua
--   frontend api
--       http-request set-var-fmt(txn.keygate_root_key) "kg_root_..."
--       http-request set-var-fmt(txn.keygate_policy) "documents"
--       http-request lua.keygate_authorize http://127.0.0.1:8080/v1/gateway.authorize
--       http-response lua.keygate_rate_limit_fields
--
-- The policy comes from the configuration only: the variables txn.keygate_root_key,
-- txn.keygate_policy, txn.keygate_permissions, txn.keygate_ratelimit and
-- txn.keygate_key_header become the call's X-Keygate-* headers, and every X-Keygate-*
-- header of the end user's request is dropped, from the call to keygate and from the
-- request passed upstream. A pass sets X-Keygate-Key-Id (and -Key-Name, -Key-Meta when
-- keygate sends them) on the upstream request; a refusal answers the client with
-- keygate's status, body and headers; keygate unreachable, or answering past the timeout
-- (500 ms), is 503.

local SETTINGS = {
  { "txn.keygate_root_key", "X-Keygate-Root-Key" },
  { "txn.keygate_policy", "X-Keygate-Policy" },
  { "txn.keygate_permissions", "X-Keygate-Permissions" },
  { "txn.keygate_ratelimit", "X-Keygate-Ratelimit" },
  { "txn.keygate_key_header", "X-Keygate-Key-Header" },
}
-- keygate's answer to a pass, onto the upstream request.
local PASSED = { "x-keygate-key-id", "x-keygate-key-name", "x-keygate-key-meta" }
-- keygate's answer's fields the client sees: on a refusal, and the rate limit's on a pass.
local REFUSAL = { "content-type", "www-authenticate", "retry-after" }
local RATE_LIMIT = { "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit" }
-- Request headers not copied onto the call (the call has its own framing and host).
local NOT_COPIED = { ["host"] = true, ["content-length"] = true, ["transfer-encoding"] = true,
  ["connection"] = true, ["expect"] = true, ["upgrade"] = true }
local TIMEOUT_MS = 500

-- A header's values as HAProxy gives them (a table indexed from 0), in order.
local function values(v)
  local list = {}
  if v == nil then return list end
  local i = 0
  while v[i] ~= nil do list[#list + 1] = v[i]; i = i + 1 end
  for _, x in ipairs(v) do if list[1] ~= x then list[#list + 1] = x end end
  return list
end

local function is_keygate(name)
  return string.sub(string.lower(name), 1, 10) == "x-keygate-"
end

local function answer(txn, status, body, headers)
  local reply = txn:reply()
  reply:set_status(status)
  for name, value in pairs(headers) do reply:add_header(name, value) end
  if body ~= nil and body ~= "" then reply:set_body(body) end
  txn:done(reply)
end

core.register_action("keygate_authorize", { "http-req" }, function(txn, url)
  local call = {}
  for name, v in pairs(txn.http:req_get_headers()) do
    local lower = string.lower(name)
    if not is_keygate(lower) and not NOT_COPIED[lower] then call[lower] = values(v) end
  end
  for _, s in ipairs(SETTINGS) do
    local v = txn:get_var(s[1])
    if v ~= nil and v ~= "" then call[s[2]] = { v } end
  end
  call["x-original-method"] = { txn.f:method() }
  call["x-original-uri"] = { txn.f:url() }
  local ok, res = pcall(function()
    return core.httpclient():get({ url = url, headers = call, timeout = TIMEOUT_MS })
  end)
  if not ok or res == nil or res.status == nil or res.status == 0 then
    core.Warning("keygate: no answer from " .. url .. (ok and "" or (": " .. tostring(res))))
    answer(txn, 503, "keygate is unreachable\n", { ["content-type"] = "text/plain" })
    return
  end
  local got = {}
  for name, v in pairs(res.headers or {}) do got[string.lower(name)] = values(v)[1] end
  if res.status >= 200 and res.status < 300 then
    -- The end user's own X-Keygate-* headers never reach the upstream; keygate's do.
    local names = {}
    for name, _ in pairs(txn.http:req_get_headers()) do
      if is_keygate(name) then names[#names + 1] = name end
    end
    for _, name in ipairs(names) do txn.http:req_del_header(name) end
    for _, name in ipairs(PASSED) do
      if got[name] ~= nil then txn.http:req_set_header(name, got[name]) end
    end
    local fields = {}
    for _, name in ipairs(RATE_LIMIT) do fields[name] = got[name] end
    txn:set_priv(fields)
    return
  end
  -- A refusal: keygate's status, body and the fields the client needs. HAProxy answers
  -- only the statuses it knows; keygate's are all among them.
  local headers = {}
  for _, list in ipairs({ REFUSAL, RATE_LIMIT }) do
    for _, name in ipairs(list) do headers[name] = got[name] end
  end
  answer(txn, res.status, res.body, headers)
end, 1)

-- On a pass, the rate limit's fields onto the answer the client gets.
core.register_action("keygate_rate_limit_fields", { "http-res" }, function(txn)
  local fields = txn:get_priv()
  if type(fields) ~= "table" then return end
  for _, name in ipairs(RATE_LIMIT) do
    if fields[name] ~= nil then txn.http:res_set_header(name, fields[name]) end
  end
end, 0)
