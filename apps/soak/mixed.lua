-- wrk script of the soak: the well-formed clients, authenticated as the
-- writer, mixing reads and writes on the Item table of `burrow-soak serve`.
--
-- Of every 10 requests: 5 retrieve a seed row by ID, 2 list 10 rows by an ID
-- range (a WHERE), 2 add a row, 1 updates a seed row. Every write keeps the
-- invariant Note = "q" .. Qty, and every row read back is checked for it, so
-- a torn or mixed-up row shows as `bad_rows` while the soak runs. Added rows
-- are named "w{run}-{thread}-{n}", unique, so that the check afterwards can tell
-- an add applied twice.
--
-- Environment: SEED (rows 1..SEED exist, default 10000), TOKEN (bearer),
-- RUN (a number told apart in the names of added rows, one per wrk run).

local seed = tonumber(os.getenv("SEED") or "10000")
local token = os.getenv("TOKEN") or "soak-writer-token"
local run = os.getenv("RUN") or "0"
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(tid * 7919)
  n = 0
  adds, updates, ok, non2xx, bad_rows, rows_seen = 0, 0, 0, 0, 0, 0
  statuses = {}
  first_error = ""
  wrk.headers["Authorization"] = "Bearer " .. token
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  n = n + 1
  local k = n % 10
  if k < 5 then
    return wrk.format("GET", "/root/Item/" .. math.random(seed))
  elseif k < 7 then
    local from = math.random(seed - 10)
    return wrk.format("GET", "/root/Item?where=ID%3E%3D" .. from .. "%20AND%20ID%3C" .. (from + 10))
  elseif k < 9 then
    local q = math.random(1000000)
    return wrk.format("POST", "/root/Item",
      nil, '{"Name":"w' .. run .. "-" .. tid .. "-" .. n .. '","Qty":' .. q .. ',"Note":"q' .. q .. '"}')
  else
    local q = -math.random(1000000)
    return wrk.format("PUT", "/root/Item/" .. math.random(seed),
      nil, '{"Qty":' .. q .. ',"Note":"q' .. q .. '"}')
  end
end

function response(status, headers, body)
  if status == 201 then
    adds = adds + 1
  elseif status == 200 and body == "" then
    updates = updates + 1
  end
  if status >= 200 and status < 300 then
    ok = ok + 1
  else
    non2xx = non2xx + 1
    statuses[status] = (statuses[status] or 0) + 1
    if first_error == "" then
      first_error = status .. " " .. (body or "")
    end
  end
  if body ~= nil and body ~= "" then
    for q, note in body:gmatch('"Qty":(%-?%d+),"Note":"([^"]*)"') do
      rows_seen = rows_seen + 1
      if note ~= "q" .. q then
        bad_rows = bad_rows + 1
      end
    end
  end
end

function done(summary, latency, requests)
  local t = { adds = 0, updates = 0, ok = 0, non2xx = 0, bad_rows = 0, rows_seen = 0 }
  local codes = {}
  local first_error = ""
  for _, thread in ipairs(threads) do
    if first_error == "" then
      first_error = thread:get("first_error")
    end
    for k, _ in pairs(t) do
      t[k] = t[k] + thread:get(k)
    end
    for code, count in pairs(thread:get("statuses")) do
      codes[code] = (codes[code] or 0) + count
    end
  end
  local e = summary.errors
  local socket_errors = e.connect + e.read + e.write + e.timeout
  local secs = summary.duration / 1e6
  local codes_text = ""
  for code, count in pairs(codes) do
    codes_text = codes_text .. " " .. code .. ":" .. count
  end
  io.write(string.format(
    "soak-wrk requests=%d rps=%.0f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f"
      .. " ok=%d non2xx=%d socket_errors=%d (connect %d, read %d, write %d, timeout %d)"
      .. " adds=%d updates=%d rows_seen=%d bad_rows=%d statuses=[%s ]%s\n",
    summary.requests, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000,
    t.ok, t.non2xx, socket_errors, e.connect, e.read, e.write, e.timeout,
    t.adds, t.updates, t.rows_seen, t.bad_rows, codes_text,
    first_error == "" and "" or (" first_error=" .. first_error)))
end
