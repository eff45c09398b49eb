-- wrk script: GET / with "Authorization: Bearer <key>" over the keys in KEYS_FILE (one
-- secret per line), in rotation. Any answer other than 200 counts as an error.
local requests = {}
local n = 0

function init(args)
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    requests[n] = wrk.format("GET", "/", { ["Authorization"] = "Bearer " .. key })
  end
end

local i = 0
function request()
  i = (i % n) + 1
  return requests[i]
end

local bad = 0
function response(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout + bad))
end
