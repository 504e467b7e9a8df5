-- Many runs in flight on one loop: a step that waits yields to the loop, so waits overlap
-- instead of adding up.
local mend = require "mend"
local H = require "spec.helper"

describe("an engine with many runs", function()
  after_each(H.cleanup)

  it("finishes 1,000 runs that each sleep 1 s in about 1 s of engine time", function()
    local eng = H.new_engine()
    local started, finished, in_flight, max_in_flight = 0, 0, 0, 0
    eng:register(H.one_step("napper", { execute = function(_, input)
      started = started + 1
      in_flight = in_flight + 1
      if in_flight > max_in_flight then max_in_flight = in_flight end
      mend.sleep(1)
      in_flight = in_flight - 1
      finished = finished + 1
      return input.i
    end }))
    local ids = {}
    local t0 = eng:now()
    for i = 1, 1000 do ids[i] = eng:start("napper", { i = i }) end
    eng:run()
    local elapsed = eng:now() - t0

    assert.are.equal(1000, started)
    assert.are.equal(1000, finished)
    assert.are.equal(1000, max_in_flight)
    assert.is_true(elapsed >= 1 - 1e-6 and elapsed < 1.5, "engine time " .. elapsed)
    local ok = 0
    for i, id in ipairs(ids) do
      local st = eng:status(id)
      if st.status == "succeeded" and H.step(st, "work").result == i then ok = ok + 1 end
    end
    assert.are.equal(1000, ok)
  end)

  it("does not let a long wait hold up a short one", function()
    local eng = H.new_engine()
    local done = {}
    eng:register(H.one_step("waits", { execute = function(ctx, input)
      mend.sleep(input.s)
      done[#done + 1] = { name = input.name, at = ctx:now() }
    end }))
    local t0 = eng:now()
    eng:start("waits", { name = "long", s = 10 })
    eng:start("waits", { name = "short", s = 1 })
    eng:run()
    assert.are.equal("short", done[1].name)
    assert.are.equal("long", done[2].name)
    assert.near(t0 + 1, done[1].at, 1e-3)
    assert.near(t0 + 10, done[2].at, 1e-3)
  end)

  it("keeps retry waits of different runs apart", function()
    local eng = H.new_engine()
    local calls = {}
    eng:register(H.one_step("waitsretry", {
      retry = { max_attempts = 2, initial = 5, jitter = 0 },
      execute = function(ctx, input)
        calls[input.n] = (calls[input.n] or 0) + 1
        if input.fail and calls[input.n] == 1 then error(mend.retryable("busy")) end
        return ctx:now()
      end,
    }))
    local t0 = eng:now()
    local a = eng:start("waitsretry", { n = 1, fail = true })
    local b = eng:start("waitsretry", { n = 2 })
    eng:run()
    assert.near(t0, H.step(eng:status(b), "work").result, 1e-3)
    assert.near(t0 + 5, H.step(eng:status(a), "work").result, 1e-3)
    assert.are.same({ 2, 1 }, calls)
  end)

  it("sleeps while its runs wait, instead of keeping a core busy", function()
    -- the real clock: the wait is a second of wall time, and run() must spend it asleep (a loop
    -- that polled would spend about all of it on the CPU)
    local eng = H.new_engine({ clock = "real" })
    eng:register(H.one_step("naps", { execute = function() mend.sleep(1); return true end }))
    local id = eng:start("naps", {})
    local w0, c0 = H.wall(), os.clock()
    eng:run()
    local wall, cpu = H.wall() - w0, os.clock() - c0
    assert.are.equal("succeeded", eng:status(id).status)
    assert.is_true(wall >= 1, "took " .. wall .. " s")
    assert.is_true(cpu < 0.4, string.format("%.2f s of CPU in %.2f s", cpu, wall))
  end)

  it("runs child processes without blocking the loop", function()
    -- each child says it started, then waits (20 s at most) until all ten have: ten children
    -- one after the other would each see only itself and those before it
    local dir = H.tmp_dir()
    local eng = H.new_engine()
    eng:register(H.one_step("children", { execute = function(_, input)
      return mend.exec { "sh", "-c", [[touch "$D/$N"; i=0
        while [ "$(ls "$D" | wc -l)" -lt 10 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
        echo "$N $(ls "$D" | wc -l)"]], env = { "N=" .. input.n, "D=" .. dir } }
    end }))
    local ids = {}
    for n = 1, 10 do ids[n] = eng:start("children", { n = n }) end
    eng:run()
    for n, id in ipairs(ids) do
      local r = H.step(eng:status(id), "work").result
      assert.are.equal(0, r.status)
      assert.are.equal(n .. " 10\n", r.stdout)
    end
  end)
end)

describe("a run read from another process while a worker runs it", function()
  after_each(H.cleanup)

  it("is read whole, never with a later step ahead of an earlier one", function()
    -- the worker: another process, 20 runs of 400 quick steps each
    local db = H.new_db()
    local dir = H.tmp_dir()
    local ids_file = dir .. "/ids"
    H.write_file(dir, "worker.lua", [[
      local mend = require "mend"
      local eng = mend.engine{ db = arg[1], clock = "real" }
      local steps = {}
      for k = 1, 400 do steps[k] = { name = "s" .. k, execute = function() return k end } end
      eng:register{ name = "long", steps = steps }
      local ids = {}
      for i = 1, 20 do ids[i] = eng:start("long", { i = i }) end
      local f = io.open(arg[2], "w") f:write(table.concat(ids, "\n"), "\n") f:close()
      eng:run()
    ]])
    local worker = assert(io.popen("lua5.4 " .. H.quote(dir .. "/worker.lua") .. " " ..
                                   H.quote(db) .. " " .. H.quote(ids_file) .. " 2>&1"))
    local deadline = H.wall() + 10
    while not io.open(ids_file) and H.wall() < deadline do os.execute("sleep 0.01") end
    os.execute("sleep 0.05")   -- the ids are written whole
    local ids = {}
    for l in io.lines(ids_file) do ids[#ids + 1] = l end
    assert.are.equal(20, #ids)
    local eng = H.reopen(db, { clock = "real" })
    local reads, midway, finished, wrong = 0, 0, 0, {}
    while finished < #ids and H.wall() < deadline do
      finished = 0
      for _, id in ipairs(ids) do
        local st = eng:status(id)
        reads = reads + 1
        if st.status == "succeeded" then finished = finished + 1 end
        local k = 1
        while st.steps[k] and st.steps[k].status == "succeeded" do k = k + 1 end
        if k > 1 and st.steps[k] then midway = midway + 1 end
        for j = k + 1, #st.steps do
          if st.steps[j].status ~= "pending" then
            wrong[#wrong + 1] = string.format("%s: %s %s, then %s %s", id, st.steps[k].name,
              st.steps[k].status, st.steps[j].name, st.steps[j].status)
            break
          end
        end
      end
    end
    local out = worker:read("a")
    assert.is_true(worker:close(), out)
    assert.are.equal(#ids, finished)
    assert.are.same({}, wrong)
    -- what makes the test: reads that met a run between its first step and its last
    assert.is_true(midway > 0, "no read met a run in progress (" .. reads .. " reads)")
  end)
end)
