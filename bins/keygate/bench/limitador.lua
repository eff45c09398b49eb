-- wrk script: limitador's POST /check_and_report with 10,000 rotating identifiers, the
-- same identifiers, cost and order as limit.lua sends keygate (limitador.sh gives the
-- limit: 10^9 a minute, every request passing).
local common = dofile("bins/keygate/bench/common.lua")
local requests = {}
local n = 10000

function init(args)
  for i = 1, n do
    local body = string.format(
      '{"namespace":"bench","values":{"user_id":"user_%06d@example.com"},"delta":1}', i)
    requests[i] = wrk.format("POST", "/check_and_report", { ["Content-Type"] = "application/json" }, body)
  end
end

request = common.rotation(requests)

done = common.done()
