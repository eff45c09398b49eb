-- What the wrk scripts share, loaded with dofile("bins/keygate/bench/common.lua") (wrk runs
-- from the workspace root): requests sent in rotation, and the RESULT line that lib.sh's
-- summaries read.
local common = {}

-- A wrk `request` function sending `requests` (filled by `init`) in turn.
function common.rotation(requests)
  local i, n = 0, nil
  return function()
    n = n or #requests
    i = (i % n) + 1
    return requests[i]
  end
end

-- wrk's `setup`: keeps each thread, so that `done` can read the counters its `response`
-- kept (each thread runs the script in a Lua state of its own; `done` runs in another).
local threads = {}
function common.track(thread)
  threads[#threads + 1] = thread
end

-- wrk's `done`: `RESULT rps=... p50_us=... p99_us=... errors=... requests=...`, errors being socket
-- errors, non-2xx/3xx answers and, when `counter` is given, the sum over the threads of
-- that global (answers the script's `response` counted as wrong; needs `setup = common.track`).
function common.done(counter)
  return function(summary, latency, requests)
    local refused = 0
    if counter then
      for _, t in ipairs(threads) do refused = refused + (t:get(counter) or 0) end
    end
    local e = summary.errors
    io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d errors=%d requests=%d\n",
      summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
      e.status + e.connect + e.read + e.write + e.timeout + refused, summary.requests))
  end
end

return common
