-- wrk script: POST /v2/keys.verifyKey (root key in ROOT_KEY) over the keys in KEYS_FILE (one
-- secret per line), in rotation, with no options: each verification spends what the key
-- carries (verify-credits.sh checks the keys verify VALID before it measures). Any answer
-- other than "valid":true counts as an error.
local requests = {}
local n = 0

function init(args)
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("ROOT_KEY") }
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    requests[n] = wrk.format("POST", "/v2/keys.verifyKey", headers, string.format('{"key":"%s"}', key))
  end
end

local i = 0
function request()
  i = (i % n) + 1
  return requests[i]
end

local invalid = 0
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"valid":true', 1, true) then
    invalid = invalid + 1
  end
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout + invalid))
end
