-- README's "Layout" names every file of src/ and lua/ (a file added without its line, or a line
-- left for a file that is gone, fails here), and every C file of src/ opens with the paragraph
-- of what it owns and what it must never do; and "Two commands" names every Debian package
-- the Makefile installs.

local H = require "spec.helper"

local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."

local OUTSIDE = { ["mend.h"] = true, ["lua.c"] = true, ["game_loop.c"] = true,
                  ["tcp_server.c"] = true, ["http_spec.lua"] = true,
                  ["acceptance_capi.c"] = true }

local function files_under(dir, pattern)
  local p = assert(io.popen(("cd %s && find %s -type f | sort"):format(H.quote(ROOT), dir)))
  local list = {}
  for line in p:lines() do
    if line:match(pattern) then list[#list + 1] = line end
  end
  p:close()
  return list
end

local function layout_block()
  local readme = H.slurp(ROOT .. "/README.md")
  local section = readme:match("\n## Layout\n(.-)\n## ") or readme:match("\n## Layout\n(.*)$")
  assert.truthy(section, "a Layout section in README.md")
  return assert(section:match("```\n(.-)\n```"), "the tree in README's Layout")
end

-- The names the tree gives: words ending in .c, .h, .lua, with x.[ch] standing for x.c and x.h.
local function names_in(block)
  local names = {}
  for word in block:gmatch("[%w_]+%.[%w%[%]]+") do
    local stem = word:match("^(.-)%.%[ch%]$")
    if stem then
      names[stem .. ".c"], names[stem .. ".h"] = true, true
    else
      names[word] = true
    end
  end
  return names
end

describe("README's Layout", function()
  it("names every file of src/ and lua/mend/", function()
    local names = names_in(layout_block())
    local missing = {}
    for _, path in ipairs(files_under("src lua", "%.[ch]$")) do
      if not names[path:match("[^/]+$")] then missing[#missing + 1] = path end
    end
    for _, path in ipairs(files_under("lua", "%.lua$")) do
      if not names[path:match("[^/]+$")] then missing[#missing + 1] = path end
    end
    assert.are.same({}, missing)
  end)

  it("names no file of src/ or lua/mend/ that is not there", function()
    local present = {}
    for _, path in ipairs(files_under("src lua", "%.[chlua]+$")) do present[path:match("[^/]+$")] = true end
    local gone = {}
    for name in pairs(names_in(layout_block())) do
      if name:match("%.[ch]$") or name:match("%.lua$") then
        -- files the tree names outside src/ and lua/ (include/, examples/), and lua.c
        if not present[name] and not OUTSIDE[name] then
          gone[#gone + 1] = name
        end
      end
    end
    table.sort(gone)
    assert.are.same({}, gone)
  end)
end)

describe("each C file of src/", function()
  it("opens with what it owns and what it must never do", function()
    local lacking = {}
    for _, path in ipairs(files_under("src", "%.[ch]$")) do
      local opening = H.slurp(ROOT .. "/" .. path):match("^/%*(.-)%*/")
      if not opening then
        lacking[#lacking + 1] = path .. " (no opening comment)"
      elseif not (opening:lower():find("never", 1, true) or opening:find("[Pp]ure")
                  or opening:find("[Nn]othing else") or opening:find("nothing here")) then
        lacking[#lacking + 1] = path
      end
    end
    assert.are.same({}, lacking)
  end)
end)

describe("README's two commands", function()
  it("name every Debian package the Makefile installs", function()
    local makefile = H.slurp(ROOT .. "/Makefile")
    local list = assert(makefile:match("\nDEB_PACKAGES :=(.-[^\\])\n"), "DEB_PACKAGES in the Makefile")
    local readme = H.slurp(ROOT .. "/README.md")
    local named = readme:match("\n## Two commands\n(.-)\n## ")
    assert.truthy(named, "a Two commands section in README.md")
    local missing = {}
    for pkg in list:gsub("\\\n", " "):gmatch("[%w%.%-+]+") do
      if not named:find(pkg, 1, true) then missing[#missing + 1] = pkg end
    end
    assert.are.same({}, missing)
  end)
end)
