-- tick_log: a summary of examples/game_loop.c's --tick-log files (W11 writes one a mode in
-- its --dir): of the ticks over twice their budget, how much of their wall clock was the
-- thread's own CPU, how much runnable but not running (the OS ran something else), and which
-- of mend's phases held the time; beside them the sampled normal ticks. Reads; writes nothing.
--
--   lua5.4 bench/tick_log.lua BUDGET_MS FILE...
local budget = assert(tonumber(arg[1]), "usage: tick_log.lua BUDGET_MS FILE...") / 1e3

local function parse(line)
  local kind, rest = line:match("^(%a+) (.*)$")
  local t = { kind = kind }
  for k, v in rest:gmatch("(%S+) (%S+)") do t[k] = tonumber(v) or v end
  local a, b = tostring(t.lua_kb):match("(%d+)>(%d+)")
  t.kb0, t.kb1 = tonumber(a), tonumber(b)
  return t
end

local function pct(v, p)
  table.sort(v)
  if #v == 0 then return 0 end
  return v[math.max(1, math.min(#v, math.ceil(#v * p / 100)))]
end

for i = 2, #arg do
  local over, samples = {}, {}
  for line in io.lines(arg[i]) do
    local t = parse(line)
    if t.kind == "over" then over[#over + 1] = t elseif t.kind == "sample" then samples[#samples + 1] = t end
  end
  local wall, cpu, runnable, cpu_over_2x, cpu_over_1x, faults = 0, 0, 0, 0, 0, 0
  local phase = { pickup = 0, work = 0, gc = 0, handoff = 0 }
  local cpus = {}
  for _, t in ipairs(over) do
    wall, cpu, runnable = wall + t.wall, cpu + t.cpu, runnable + t.runnable
    cpus[#cpus + 1] = t.cpu
    if t.cpu > 2 * budget * 1e3 then cpu_over_2x = cpu_over_2x + 1 end
    if t.cpu > budget * 1e3 then cpu_over_1x = cpu_over_1x + 1 end
    faults = faults + t.minflt + t.majflt
    for k in pairs(phase) do phase[k] = phase[k] + t[k] end
  end
  local scpu = {}
  for _, t in ipairs(samples) do scpu[#scpu + 1] = t.cpu end
  print(string.format("%s: %d ticks over 2x; their wall %.1f ms = CPU %.1f + runnable %.1f + rest %.1f;"
    .. " CPU > budget in %d, > 2x budget in %d; CPU p50/max %.3f/%.3f ms; page faults %d;"
    .. " phases' wall ms pickup %.1f work %.1f gc %.1f handoff %.1f; %d samples, CPU p50/max %.3f/%.3f ms",
    arg[i], #over, wall, cpu, runnable, wall - cpu - runnable, cpu_over_1x, cpu_over_2x,
    pct(cpus, 50), pct(cpus, 100), faults, phase.pickup, phase.work, phase.gc, phase.handoff,
    #samples, pct(scpu, 50), pct(scpu, 100)))
end
