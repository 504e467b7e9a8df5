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

  it("name commands that exist and flags their --help lists", function()
    local wrong = {}
    for _, l in ipairs(lines) do
      local h = help_of(l.cmd)
      if not h.text:match("usage: mend " .. l.cmd:gsub("%-", "%%-")) then
        wrong[#wrong + 1] = ("%s:%d: mend %s: no such command (%s)"):format(
          l.file, l.line, l.cmd, h.text:match("[^\n]*"))
      else
        for flag in l.rest:gmatch("%-%-[%w-]+") do
          if flag ~= "--help" and not h.text:find(flag:gsub("%-", "%%-") .. "%f[^%w-]") then
            wrong[#wrong + 1] = ("%s:%d: mend %s %s: not in `mend %s --help`"):format(
              l.file, l.line, l.cmd, flag, l.cmd)
          end
        end
      end
    end
    assert.are.same({}, wrong)
  end)

  it("give commands that take only flags no other argument", function()
    local wrong = {}
    for _, l in ipairs(lines) do
      if FLAGS_ONLY[l.cmd] and not l.synopsis then
        -- Drop each flag with its value (a flag's value is the next word unless it is a flag).
        local words = {}
        for w in l.rest:gmatch("%S+") do words[#words + 1] = w end
        local i = 1
        while i <= #words do
          local w = words[i]
          if w:match("^%-%-") then
            local usage = help_of(l.cmd).text:match("^(.-)\n\n") or ""
            local takes_value = usage:find(w .. " %u") or usage:find(w .. " %[?%u")
            i = i + (takes_value and 2 or 1)
          elseif w:match("^%[") or w:match("^%]") or w:match("^>") or w == "2>&1" then
            i = i + 1  -- a synopsis's brackets, or a redirection
          else
            wrong[#wrong + 1] = ("%s:%d: mend %s given %q"):format(l.file, l.line, l.cmd, w)
            i = i + 1
          end
        end
      end
    end
    assert.are.same({}, wrong)
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
