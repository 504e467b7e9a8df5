-- Every `mend` command line that README.md and docs/*.md show in a code block names a command
-- that exists and only flags that command's `--help` lists, and a command that takes no
-- arguments but flags (`mend worker`) is shown with none: a reader copies these lines as they
-- are, so a renamed flag or a changed synopsis must not leave them behind.

local H = require "spec.helper"

local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."

local function doc_files()
  local list = { "README.md" }
  local p = assert(io.popen(("cd %s && ls docs/*.md"):format(H.quote(ROOT))))
  for line in p:lines() do list[#list + 1] = line end
  p:close()
  return list
end

-- The command lines of a document's code blocks: { file, line, text } for each `mend CMD`
-- in a line of a fenced block (several on a line of a synopsis, one per shell pipeline part).
local function command_lines()
  local found = {}
  for _, file in ipairs(doc_files()) do
    local inblock, n = false, 0
    for line in io.lines(ROOT .. "/" .. file) do
      n = n + 1
      if line:match("^%s*```") then
        inblock = not inblock
      elseif inblock then
        -- Quoted text (JSON inputs, notes) may hold anything; comments are prose.
        local text = line:gsub("'[^']*'", "Q"):gsub('"[^"]*"', "Q"):gsub("%s#.*$", "")
        -- A synopsis puts several commands on a line, three spaces or more apart.
        for part in (text:gsub("%s%s%s+", "|") .. "|"):gmatch("([^|;&]*)[|;&]") do
          local cmd, rest = part:match("^[%s%(%$]*[%w%./]*mend%s+(%l[%l-]*)(%f[%s%z].*)$")
          if cmd then
            found[#found + 1] = { file = file, line = n, cmd = cmd, rest = rest,
                                  synopsis = rest:find("[", 1, true) ~= nil }
          end
        end
      end
    end
  end
  return found
end

-- A text as a Lua pattern that matches it literally.
local function lit(text)
  return (text:gsub("%p", "%%%0"))
end

local help_cache = {}
local function help_of(cmd)
  if not help_cache[cmd] then
    local rc, out = H.shell(("%s %s --help"):format(H.quote(H.MEND), cmd))
    help_cache[cmd] = { text = out, rc = rc }
  end
  return help_cache[cmd]
end

-- Commands whose synopsis takes flags only (checked below, so that the list stays honest).
local FLAGS_ONLY = { worker = true, serve = true, dlq = false, repl = true, runs = true }

describe("the command lines the documents show", function()
  local lines = command_lines()

  it("are found in README.md and docs/", function()
    assert.is_true(#lines >= 20, ("only %d command lines found"):format(#lines))
  end)

  -- Runs check(line, wrong) on every command line; no line may add to `wrong`.
  local function each_line(check)
    local wrong = {}
    for _, l in ipairs(lines) do check(l, wrong) end
    assert.are.same({}, wrong)
  end

  it("name commands that exist and flags their --help lists", function()
    each_line(function(l, wrong)
      local h = help_of(l.cmd)
      if not h.text:find("usage: mend " .. lit(l.cmd)) then
        wrong[#wrong + 1] = ("%s:%d: mend %s: no such command (%s)"):format(
          l.file, l.line, l.cmd, h.text:match("[^\n]*"))
        return
      end
      for flag in l.rest:gmatch("%-%-[%w-]+") do
        if flag ~= "--help" and not h.text:find(lit(flag) .. "%f[^%w-]") then
          wrong[#wrong + 1] = ("%s:%d: mend %s %s: not in `mend %s --help`"):format(
            l.file, l.line, l.cmd, flag, l.cmd)
        end
      end
    end)
  end)

  -- mend serve took --durability and --log-level, mend start --durability, and their --help
  -- named neither.
  it("name in each command's --help every flag the command takes", function()
    local commands = require("mend.cli.commands").commands
    local wrong = {}
    for name, cmd in pairs(commands) do
      local text = help_of(name).text
      for flag in pairs(cmd.flags or {}) do
        if not text:find("--" .. lit(flag) .. "%f[^%w-]") then
          wrong[#wrong + 1] = ("mend %s takes --%s, which its --help does not name")
                                :format(name, flag)
        end
      end
    end
    table.sort(wrong)
    assert.are.same({}, wrong)
  end)

  -- README named MEND_DB "wherever a database is named", and nothing read it: a reader who
  -- set it had every command on ./mend.db.
  it("name no MEND_ variable, constant or option that mend does not have", function()
    local missing = {}
    for _, file in ipairs(doc_files()) do
      for name in H.slurp(ROOT .. "/" .. file):gmatch("MEND_[%u%d_]+") do
        local rc = H.shell(("grep -rqw %s %s/src %s/lua %s/include %s/CMakeLists.txt")
                             :format(name, ROOT, ROOT, ROOT, ROOT))
        if rc ~= 0 then missing[#missing + 1] = file .. ": " .. name end
      end
    end
    assert.are.same({}, missing)
  end)

  it("give commands that take only flags no other argument", function()
    each_line(function(l, wrong)
      if not FLAGS_ONLY[l.cmd] or l.synopsis then return end
      local usage = help_of(l.cmd).text:match("^(.-)\n\n") or ""
      local words = {}
      for w in l.rest:gmatch("%S+") do words[#words + 1] = w end
      -- Drop each flag with its value (the usage shows which flags take one).
      local i = 1
      while i <= #words do
        local w = words[i]
        if w:match("^%-%-") then
          i = i + (usage:find(lit(w) .. " %[?%u") and 2 or 1)
        else
          if not (w:match("^>") or w == "2>&1") then
            wrong[#wrong + 1] = ("%s:%d: mend %s given %q"):format(l.file, l.line, l.cmd, w)
          end
          i = i + 1
        end
      end
    end)
  end)

  it("checks the commands it says take only flags", function()
    for cmd, only in pairs(FLAGS_ONLY) do
      if only then
        local usage = help_of(cmd).text:match("^(.-)\n\n") or ""
        -- Every word of the usage is a flag, a flag's value or inside brackets.
        local bare = usage:gsub("%b[]", ""):gsub("usage: mend " .. cmd, "")
        assert.is_nil(bare:match("%u%u+"), ("mend %s's usage has an argument: %s"):format(cmd, usage))
      end
    end
  end)
end)
