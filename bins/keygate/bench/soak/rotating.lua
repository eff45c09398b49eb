-- ratelimits.limit over 1,000,000 rotating identifiers (the soak's rate-limit load).
local root = os.getenv("ROOT_KEY")
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. root
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
request = function()
  local body = string.format(
    '{"namespace":"soak","identifier":"user-%d","limit":100,"duration":60000}', math.random(1, 1000000))
  return wrk.format(nil, nil, nil, body)
end
