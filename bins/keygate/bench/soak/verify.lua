-- v2 keys.verifyKey over the keys of KEYS_FILE, one after another (the soak's
-- verification load).
local keys = {}
for line in io.lines(os.getenv("KEYS_FILE")) do keys[#keys + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("ROOT_KEY")
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i % #keys + 1
  return wrk.format(nil, nil, nil, '{"key":"' .. keys[i] .. '"}')
end
