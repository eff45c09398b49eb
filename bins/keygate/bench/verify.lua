-- wrk script: POST /v1/keys.verifyKey over the keys in KEYS_FILE (one secret per line, each
-- holding documents.read), in rotation, with a one-permission query (verify-limit.sh checks
-- that the keys verify VALID before it measures).
local common = dofile("bins/keygate/bench/common.lua")
local requests = {}
local n = 0

function init(args)
  for key in io.lines(os.getenv("KEYS_FILE")) do
    n = n + 1
    local body = string.format('{"key":"%s","authorization":{"permissions":{"and":["documents.read"]}}}', key)
    requests[n] = wrk.format("POST", "/v1/keys.verifyKey", { ["Content-Type"] = "application/json" }, body)
  end
end

request = common.rotation(requests)

done = common.done()
