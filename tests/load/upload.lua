-- wrk script: POSTs real photographs of mixed sizes as multipart/form-data uploads (wrk has no
-- multipart support of its own) and counts the answers by status, with Retry-After on 503s.
-- Usage: wrk -s tests/load/upload.lua URL -- PATH   (PATH e.g. "/blur?sigma=3")
-- BLURD_LOAD_FILE=file uploads that one file only.
local files = {"tests/data/photo_1080p.jpg", "tests/data/astronaut.png", "tests/data/rocket.jpg",
               "tests/data/coffee.png", "tests/data/camera.png"}
if os.getenv("BLURD_LOAD_FILE") then files = {os.getenv("BLURD_LOAD_FILE")} end
local boundary = "blurd-load-boundary"
local bodies = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  path = args[1] or "/blur?sigma=3"
  for i, name in ipairs(files) do
    local f = assert(io.open(name, "rb"))
    local data = f:read("*all")
    f:close()
    bodies[i] = "--" .. boundary .. "\r\n" ..
      "Content-Disposition: form-data; name=\"image\"; filename=\"" .. name .. "\"\r\n" ..
      "Content-Type: application/octet-stream\r\n\r\n" .. data .. "\r\n--" .. boundary .. "--\r\n"
  end
  ok, busy, retry, other = 0, 0, 0, 0
  math.randomseed(os.time() + (id or 0))
end

function request()
  local body = bodies[math.random(#bodies)]
  return wrk.format("POST", path,
    {["Content-Type"] = "multipart/form-data; boundary=" .. boundary}, body)
end

function response(status, headers, body)
  if status == 200 then ok = ok + 1
  elseif status == 503 then
    busy = busy + 1
    if headers["Retry-After"] then retry = retry + 1 end
  else other = other + 1 end
end

function done(summary, latency, requests)
  local t = {ok = 0, busy = 0, retry = 0, other = 0}
  for _, thread in ipairs(threads) do
    for k, _ in pairs(t) do t[k] = t[k] + thread:get(k) end
  end
  local e = summary.errors
  io.write(string.format("RESULT requests=%d seconds=%.1f rps=%.1f ok=%d busy503=%d " ..
    "with_retry_after=%d other=%d timeouts=%d connect=%d read=%d write=%d " ..
    "p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    t.ok, t.busy, t.retry, t.other, e.timeout, e.connect, e.read, e.write,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3))
end
