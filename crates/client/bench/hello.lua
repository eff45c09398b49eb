-- wrk script: GET / with "Authorization: Bearer <key>" over the keys in KEYS_FILE (one
-- secret per line), in rotation. Any answer other than 200 counts as an error.
local common = dofile("bins/keygate/bench/common.lua")
local requests = {}
local n = 0

function init(args)
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    requests[n] = wrk.format("GET", "/", { ["Authorization"] = "Bearer " .. key })
  end
end

request = common.rotation(requests)

setup = common.track
bad = 0 -- a global: done reads it from each thread
function response(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
  end
end

done = common.done("bad")
