-- wrk script: POST /v1/keys.verifyKey over the keys in KEYS_FILE (one secret per line, each
-- holding documents.read), in rotation, with a one-permission query (verify-limit.sh checks
-- that the keys verify VALID before it measures).
local requests = {}
local n = 0

function init(args)
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    local body = string.format('{"key":"%s","authorization":{"permissions":{"and":["documents.read"]}}}', key)
    requests[n] = wrk.format("POST", "/v1/keys.verifyKey", { ["Content-Type"] = "application/json" }, body)
  end
end

local i = 0
function request()
  i = (i % n) + 1
  return requests[i]
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
