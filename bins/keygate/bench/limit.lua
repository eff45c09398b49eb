-- wrk script: POST /v1/ratelimits.limit with 10,000 rotating identifiers.
-- ROOT_KEY comes from the environment (the bare baseline ignores it); LIMIT (default
-- 1e9: every request passes) sets the limit, e.g. LIMIT=5 for a load of denials; ASYNC=true
-- sends `"async": true`; NAMESPACE (default bench) names the namespace.
local common = dofile("bins/keygate/bench/common.lua")
local root_key = os.getenv("ROOT_KEY") or "none"
local limit = os.getenv("LIMIT") or "1000000000"
local async = os.getenv("ASYNC") or "false"
local namespace = os.getenv("NAMESPACE") or "bench"
local requests = {}
local n = 10000

function init(args)
  for i = 1, n do
    local body = string.format(
      '{"namespace":"%s","identifier":"user_%06d@example.com","limit":%s,"duration":60000,"cost":1,"async":%s}',
      namespace, i, limit, async)
    requests[i] = wrk.format("POST", "/v1/ratelimits.limit", {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. root_key,
    }, body)
  end
end

request = common.rotation(requests)

done = common.done()
