-- wrk script: POST /v1/ratelimits.limit with 10,000 rotating identifiers.
-- ROOT_KEY comes from the environment (the bare baseline ignores it); LIMIT (default
-- 1e9: every request passes) sets the limit, e.g. LIMIT=5 for a load of denials; ASYNC=true
-- sends `"async": true`.
local root_key = os.getenv("ROOT_KEY") or "none"
local limit = os.getenv("LIMIT") or "1000000000"
local async = os.getenv("ASYNC") or "false"
local requests = {}
local n = 10000

function init(args)
  for i = 1, n do
    local body = string.format(
      '{"namespace":"bench","identifier":"user_%06d@example.com","limit":%s,"duration":60000,"cost":1,"async":%s}',
      i, limit, async)
    requests[i] = wrk.format("POST", "/v1/ratelimits.limit", {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. root_key,
    }, body)
  end
end

local i = 0
function request()
  i = (i % n) + 1
  return requests[i]
end

local non200 = 0
function response(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
