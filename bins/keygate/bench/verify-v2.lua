-- wrk script: POST /v2/keys.verifyKey (root key in ROOT_KEY) over the keys in KEYS_FILE (one
-- secret per line), in rotation, with no options: each verification spends what the key
-- carries (verify-credits.sh checks the keys verify VALID before it measures). PERMISSIONS
-- (e.g. documents.read) adds that permission query; EXTRA (e.g. ,"ip":"127.0.0.1") is added
-- to each body as it is. Any answer without EXPECT (default "valid":true) counts as an error.
local common = dofile("bins/keygate/bench/common.lua")
local requests = {}
local n = 0

function init(args)
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("ROOT_KEY") }
  local permissions = os.getenv("PERMISSIONS")
  local query = (permissions and string.format(',"permissions":"%s"', permissions) or "") .. (os.getenv("EXTRA") or "")
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    requests[n] = wrk.format("POST", "/v2/keys.verifyKey", headers, string.format('{"key":"%s"%s}', key, query))
  end
end

request = common.rotation(requests)

setup = common.track
invalid = 0 -- a global: done reads it from each thread
local expect = os.getenv("EXPECT") or '"valid":true'
function response(status, headers, body)
  if status ~= 200 or not string.find(body, expect, 1, true) then
    invalid = invalid + 1
  end
end

done = common.done("invalid")
