-- wrk script: POST /v1/keys.verifyKey for one key with a one-permission query.
-- KEY comes from the environment (a key holding documents.read; see docs/performance.md).
local key = os.getenv("KEY") or "none"
local body = string.format('{"key":"%s","authorization":{"permissions":{"and":["documents.read"]}}}', key)
local req

function init()
  -- Built here, not at load time: wrk sets the Host header only once the script is loaded.
  req = wrk.format("POST", "/v1/keys.verifyKey", { ["Content-Type"] = "application/json" }, body)
end

function request()
  return req
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
