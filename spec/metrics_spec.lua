-- /metrics of a real `mend worker --listen` (and `mend serve`) process: the text parsed by a
-- strict reader of Prometheus' text format 0.0.4 (and by `promtool check metrics` when the
-- machine has it), and the process's counters checked against the runs the test made.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local mend = require "mend"

local q, sh = H.quote, H.shell
local json = mend.json

local OK = [[
return { name = "ok", steps = { { name = "one", execute = function() return 1 end } } }
]]

-- Fails twice with a retryable error (counted in a file next to it), then succeeds.
local FLAKY = [[
local mend = require "mend"
return { name = "flaky", retry = { max_attempts = 5, initial = 0.01, multiplier = 1, jitter = 0 },
  steps = { { name = "call", execute = function(ctx, input)
    local f = io.open(input.count)
    local n = f and tonumber(f:read("a")) or 0
    if f then f:close() end
    f = assert(io.open(input.count, "w"))
    f:write(tostring(n + 1))
    f:close()
    if n < 2 then error(mend.retryable("busy " .. n)) end
    return "done"
  end } } }
]]

-- Its second step fails for good: the first is compensated.
local SAGA = [[
local mend = require "mend"
return { name = "saga", steps = {
  { name = "reserve", execute = function() return "r" end, compensate = function() end },
  { name = "charge", execute = function() error(mend.fatal("declined")) end },
} }
]]

local function curl(args)
  local out = os.tmpname()
  local rc, code = sh("curl -s -m 20 -o " .. q(out) .. " -w '%{http_code}' " .. args)
  assert.are.equal(0, rc, "curl failed")
  local body = H.read(out)
  os.remove(out)
  return tonumber(code), body
end

local function start_run(base, workflow, input)
  local code, body = curl("-X POST -H 'Content-Type: application/json' --data-binary " ..
                          q(json.encode({ workflow = workflow, input = input })) .. " " ..
                          q(base .. "/api/v1/runs"))
  assert.are.equal(201, code, body)
  return json.decode(body).id
end

local function status_of(base, id)
  local code, body = curl(q(base .. "/api/v1/runs/" .. id))
  assert.are.equal(200, code, body)
  return json.decode(body).status
end

-- ------------------------------------------------------------ a strict reader of the format

local NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
local LABEL = "^[a-zA-Z_][a-zA-Z0-9_]*$"
local TYPES = { counter = true, gauge = true, histogram = true, summary = true, untyped = true }

local function number(s)
  if s == "+Inf" then return math.huge elseif s == "-Inf" then return -math.huge
  elseif s == "NaN" then return 0 / 0 end
  assert(s:match("^[-+]?%d*%.?%d+[eE]?[-+]?%d*$"), "not a sample value: " .. s)
  return assert(tonumber(s), "not a number: " .. s)
end

-- name{labels} value -> name, {label = value}, the labels as text (sorted), value.
local function sample(line)
  local name, rest = line:match("^([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)$")
  assert(name, "a sample line must begin with a metric name: " .. line)
  local labels, keys = {}, {}
  if rest:sub(1, 1) == "{" then
    local i = 2
    while rest:sub(i, i) ~= "}" do
      local l, after = rest:match("^([a-zA-Z_][a-zA-Z0-9_]*)=\"()", i)
      assert(l, "a bad label in: " .. line)
      assert(not labels[l], "label " .. l .. " twice in: " .. line)
      local v, j = {}, after
      while true do
        local c = rest:sub(j, j)
        assert(c ~= "" and c ~= "\n", "an unterminated label value in: " .. line)
        if c == "\\" then
          local e = rest:sub(j + 1, j + 1)
          assert(e == "\\" or e == "\"" or e == "n", "a bad escape in: " .. line)
          v[#v + 1] = e == "n" and "\n" or e
          j = j + 2
        elseif c == "\"" then j = j + 1; break
        else v[#v + 1] = c; j = j + 1 end
      end
      labels[l] = table.concat(v)
      keys[#keys + 1] = l
      i = j
      if rest:sub(i, i) == "," then i = i + 1
      else assert(rest:sub(i, i) == "}", "a bad label list in: " .. line) end
    end
    rest = rest:sub(i + 1)
  end
  local value, ts = rest:match("^ (%S+)$")
  if not value then value, ts = rest:match("^ (%S+) (%-?%d+)$") end
  assert(value, "a bad sample line: " .. line)
  table.sort(keys)
  local id = {}
  for _, k in ipairs(keys) do id[#id + 1] = k .. "=" .. labels[k] end
  return name, labels, table.concat(id, ","), number(value)
end

-- The families of the text: name -> {type, help, samples = {{name, labels, value}}}, with
-- every rule of the format checked: one HELP and one TYPE per family before its samples, the
-- samples of a family together, no series twice, a histogram's buckets cumulative and ending
-- at +Inf with its _count.
local function parse(text)
  assert(text:sub(-1) == "\n", "the text must end with a newline")
  local families, order, current, seen = {}, {}, nil, {}
  local function family(name)
    local f = families[name]
    if not f then
      f = { samples = {} }
      families[name] = f
      order[#order + 1] = name
    end
    return f
  end
  for line in text:gmatch("([^\n]*)\n") do
    assert(line ~= "", "an empty line")
    if line:sub(1, 1) == "#" then
      local what, name, rest = line:match("^# (%u+) (%S+) ?(.*)$")
      if what == "HELP" or what == "TYPE" then
        assert(name:match(NAME), "a bad metric name: " .. name)
        local f = family(name)
        assert(#f.samples == 0, what .. " after the samples of " .. name)
        if what == "TYPE" then
          assert(not f.type, "TYPE twice for " .. name)
          assert(TYPES[rest], "a bad type: " .. line)
          f.type = rest
        else
          assert(not f.help, "HELP twice for " .. name)
          f.help = rest
        end
        current = name
      end
    else
      local name, labels, id, value = sample(line)
      local f = families[name] and name
      for _, suffix in ipairs({ "_bucket", "_sum", "_count" }) do
        local base = name:sub(1, #name - #suffix)
        if not f and name:sub(-#suffix) == suffix and families[base] and
           (families[base].type == "histogram" or families[base].type == "summary") then
          f = base
        end
      end
      assert(f, "a sample of no declared family: " .. line)
      assert(f == current, "the samples of " .. f .. " are not together")
      assert(not seen[name .. "{" .. id .. "}"], "a series twice: " .. line)
      seen[name .. "{" .. id .. "}"] = true
      if families[f].type == "counter" then assert(value >= 0, "a negative counter: " .. line) end
      table.insert(families[f].samples, { name = name, labels = labels, value = value })
    end
  end
  for _, name in ipairs(order) do
    local f = families[name]
    assert(f.type, "no TYPE for " .. name)
    if f.type == "histogram" then
      local le, count, prev_le, prev = nil, nil, -math.huge, 0
      for _, s in ipairs(f.samples) do
        if s.name == name .. "_bucket" then
          le = number(assert(s.labels.le, "a bucket without le"))
          assert(le > prev_le, "buckets not in order of le in " .. name)
          assert(s.value >= prev, "buckets not cumulative in " .. name)
          prev_le, prev = le, s.value
        elseif s.name == name .. "_count" then count = s.value end
      end
      assert.are.equal(math.huge, le, "the last bucket of " .. name .. " is not +Inf")
      assert.are.equal(prev, count, "the +Inf bucket of " .. name .. " is not its _count")
    end
  end
  return families
end

-- The value of one series: name{a="x",b="y"} as a table of labels.
local function value(families, family, name, labels)
  local f = assert(families[family], "no family " .. family)
  for _, s in ipairs(f.samples) do
    if s.name == name then
      local same = true
      for k, v in pairs(labels or {}) do if s.labels[k] ~= v then same = false end end
      for k in pairs(s.labels) do if not (labels or {})[k] then same = false end end
      if same then return s.value end
    end
  end
  error("no series " .. name .. " " .. json.encode(labels or {}))
end

local function metrics(base)
  local code, text = curl(q(base .. "/metrics"))
  assert.are.equal(200, code, text)
  if os.execute("command -v promtool >/dev/null 2>&1") then
    local f = os.tmpname()
    local h = assert(io.open(f, "w"))
    h:write(text)
    h:close()
    local rc, out = sh("promtool check metrics < " .. q(f))
    os.remove(f)
    assert.are.equal(0, rc, out)
  end
  return parse(text), text
end

local function workspace()
  local dir = H.tmp_dir()
  os.execute("mkdir -p " .. q(dir .. "/wf"))
  H.write_file(dir .. "/wf", "ok.lua", OK)
  H.write_file(dir .. "/wf", "flaky.lua", FLAKY)
  H.write_file(dir .. "/wf", "saga.lua", SAGA)
  return dir, H.new_db(dir, "metrics.db")
end

describe("/metrics", function()
  after_each(function()
    S.stop_all()
    H.cleanup()
  end)

  it("the strict reader refuses what Prometheus refuses", function()
    local bad = {
      "x 1",                                                       -- no newline at the end
      "# TYPE x counter\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",           -- a series twice
      "# TYPE x counter\nx 1\n# TYPE y gauge\ny 1\nx{a=\"2\"} 1\n", -- a family split
      "x 1\n",                                                     -- no TYPE
      "# TYPE x counter\nx{a=\"\\q\"} 1\n",                        -- a bad escape
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\nh_sum 0\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\nh_sum 0\n",
      "# TYPE x counter\nx 1 2 3\n",
    }
    for _, text in ipairs(bad) do assert.has_error(function() parse(text) end) end
    parse("# HELP x a \"thing\"\n# TYPE x counter\nx{a=\"\\\"\\\\\\n\"} 1\n" ..
          "# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.7\nh_count 2\n")
  end)

  it("counts what a worker did: runs started and ended, attempts, failures by kind, retries, commits", function()
    local dir, db = workspace()
    local base = S.start(dir .. "/wf", db, nil, "worker")
    local ids = {
      start_run(base, "ok", {}),
      start_run(base, "flaky", { count = dir .. "/count" }),
      start_run(base, "saga", {}),
    }
    local want = { "succeeded", "succeeded", "compensated" }
    for i, id in ipairs(ids) do
      H.wait_for("run " .. i, function() return status_of(base, id) == want[i] end, 20)
    end
    local m, text = metrics(base)
    local function c(family, labels, name)
      return value(m, family, name or family, labels)
    end
    for _, wf in ipairs({ "ok", "flaky", "saga" }) do
      assert.are.equal(1, c("mend_runs_started_total", { workflow = wf }), text)
    end
    assert.are.equal(1, c("mend_runs_ended_total", { workflow = "ok", status = "succeeded" }))
    assert.are.equal(1, c("mend_runs_ended_total", { workflow = "flaky", status = "succeeded" }))
    assert.are.equal(1, c("mend_runs_ended_total", { workflow = "saga", status = "compensated" }))
    assert.are.equal(0, c("mend_runs_ended_total", { workflow = "saga", status = "failed" }))
    assert.are.equal(0, c("mend_runs_ended_total", { workflow = "ok", status = "needs_attention" }))
    assert.are.equal(1, c("mend_step_attempts_total", { workflow = "ok", phase = "execute" }))
    assert.are.equal(3, c("mend_step_attempts_total", { workflow = "flaky", phase = "execute" }))
    assert.are.equal(2, c("mend_step_attempts_total", { workflow = "saga", phase = "execute" }))
    assert.are.equal(1, c("mend_step_attempts_total", { workflow = "saga", phase = "compensate" }))
    assert.are.equal(0, c("mend_step_attempts_total", { workflow = "flaky", phase = "compensate" }))
    assert.are.equal(2, c("mend_step_failures_total", { workflow = "flaky", phase = "execute", kind = "retryable" }))
    assert.are.equal(1, c("mend_step_failures_total", { workflow = "saga", phase = "execute", kind = "fatal" }))
    for _, kind in ipairs({ "fatal", "compensable", "timeout", "error" }) do
      assert.are.equal(0, c("mend_step_failures_total", { workflow = "flaky", phase = "execute", kind = kind }))
    end
    assert.are.equal(0, c("mend_step_failures_total", { workflow = "saga", phase = "compensate", kind = "retryable" }))
    assert.are.equal(0, c("mend_step_failures_total", { workflow = "ok", phase = "execute", kind = "retryable" }))
    assert.are.equal(2, c("mend_step_retries_total", { workflow = "flaky", phase = "execute" }))
    assert.are.equal(0, c("mend_step_retries_total", { workflow = "saga", phase = "execute" }))
    -- every transition was committed in some batch: at least one per run start and end
    local batches = c("mend_commit_batches_total")
    assert.is_true(batches >= 3, text)
    assert.are.equal(batches, c("mend_commit_latency_seconds", nil, "mend_commit_latency_seconds_count"))
    assert.are.equal(batches, c("mend_commit_latency_seconds", { le = "+Inf" }, "mend_commit_latency_seconds_bucket"))
    assert.is_true(c("mend_commit_latency_seconds", nil, "mend_commit_latency_seconds_sum") > 0)
    assert.are.equal(m.mend_commit_latency_seconds.type, "histogram")
    assert.are.equal(m.mend_runs_started_total.type, "counter")
    -- the gauges read from the database stay
    assert.are.equal(0, c("mend_dlq_size"))
    assert.are.equal(1, c("mend_runs", { workflow = "saga", status = "compensated" }))
  end)

  -- A reader of docs/http-api.md looks a metric up there: every family serve and a worker
  -- export has its row, of its type, and every row is a family they export. `mend_runs_parked`
  -- was the dead-letter queue's size again, while parked runs (README) are runs moved out of
  -- memory: a name says what it counts, counters end in _total, times in _seconds.
  it("exports each metric docs/http-api.md documents, and only those, named by what they count",
     function()
    local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."
    local documented, rows = {}, 0
    for line in io.lines(root .. "/docs/http-api.md") do
      local cell, kind = line:match("^| (`mend_[^|]*) | (%a+) |")
      if cell then
        rows = rows + 1
        local names = {}
        for n in cell:gmatch("`(mend_[%w_]+)") do names[#names + 1] = n end
        assert.are.equal(1, #names, "one metric a row: " .. line)
        assert.is_nil(documented[names[1]], names[1] .. " documented twice")
        documented[names[1]] = kind
      end
    end
    assert.is_true(rows >= 10, "the metric tables of docs/http-api.md were not found")
    for _, command in ipairs({ "serve", "worker" }) do
      local dir, db = workspace()
      local base = S.start(dir .. "/wf", db, nil, command)
      start_run(base, "ok", {})
      local m, text = metrics(base)
      local exported = {}
      for name, f in pairs(m) do
        exported[name] = f.type
        assert.are.equal(documented[name], f.type, command .. " exports " .. name ..
                         " (" .. f.type .. "), which docs/http-api.md does not document as such")
        if f.type == "counter" then assert.matches("_total$", name)
        else assert.is_nil(name:match("_total$"), name .. " is no counter") end
        assert.is_nil(name:match("parked"), name .. ": parked runs are runs out of memory")
      end
      for name, kind in pairs(documented) do
        assert.are.equal(kind, exported[name], "docs/http-api.md documents " .. name ..
                         ", which " .. command .. " does not export:\n" .. text)
      end
      for _, name in ipairs({ "mend_oldest_unfinished_run_age_seconds", "mend_commit_latency_seconds" }) do
        assert.truthy(exported[name], name)
      end
      S.stop_all()
    end
  end)

  it("counts in the process that does the work: mend serve only starts runs", function()
    local dir, db = workspace()
    local base = S.start(dir .. "/wf", db, nil, "serve")
    start_run(base, "ok", {})
    local m = metrics(base)
    assert.are.equal(1, value(m, "mend_runs_started_total", "mend_runs_started_total", { workflow = "ok" }))
    assert.are.equal(0, value(m, "mend_runs_ended_total", "mend_runs_ended_total", { workflow = "ok", status = "succeeded" }))
    assert.are.equal(0, value(m, "mend_step_attempts_total", "mend_step_attempts_total", { workflow = "ok", phase = "execute" }))
    -- the start was committed before its id was given: one batch at least
    assert.is_true(value(m, "mend_commit_batches_total", "mend_commit_batches_total") >= 1)
  end)
end)
