-- wrk script: GET /root/Sample/{ID} over IDs 1..ROWS, in turn per thread.
local rows = tonumber(os.getenv("ROWS") or "10000")
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/root/Sample/" .. ((n % rows) + 1))
end
