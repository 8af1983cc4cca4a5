-- wrk script: acquire+release pairs on distinct locks, one connection per wrk thread.
-- Run with -t N -c N so each thread (and its Lua state) drives exactly one connection:
--   wrk -t16 -c16 -d5s -s bench/pairs.lua http://127.0.0.1:7400
-- Each thread alternates acquire and release on its own lock; a "pair" is one of each.
local counter = 0
local threads = {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  lease = nil
  pairs_done = 0
  failures = 0
  name = "bench-" .. id
end

function request()
  if lease == nil then
    return wrk.format("POST", "/v1/locks/" .. name .. "/acquire", {["Content-Type"] = "application/json"},
      '{"owner":"wrk-' .. id .. '","ttl_ms":30000}')
  end
  return wrk.format("POST", "/v1/locks/" .. name .. "/release", {["Content-Type"] = "application/json"},
    '{"lease":"' .. lease .. '"}')
end

function response(status, headers, body)
  if status ~= 200 then
    failures = failures + 1
    lease = nil
    return
  end
  if lease == nil then
    lease = string.match(body, '"lease":"([0-9a-f-]+)"')
  else
    lease = nil
    pairs_done = pairs_done + 1
  end
end

function done(summary, latency, requests)
  local total, fails = 0, 0
  for _, t in ipairs(threads) do
    total = total + t:get("pairs_done")
    fails = fails + t:get("failures")
  end
  local secs = summary.duration / 1e6
  io.write(string.format("pairs: %d in %.2fs = %.0f pairs/s; non-200: %d; p50 %.2f ms, p99 %.2f ms per request\n",
    total, secs, total / secs, fails, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
