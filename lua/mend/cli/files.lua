-- mend.cli.files: the workflow files of the `mend` command: the files of a workflows
-- directory (a worker loads them all, and again as they change), and the file a WORKFLOW
-- argument names (a file, or a name looked up in the directory). It loads files into the engine
-- it is given, never opens an engine, never reads the database, and prints nothing: what
-- goes wrong while serving is the engine's log and alert.

local mend = require "mend"
local core = require "mend.core"   -- its _hear_stop, for a worker whose files load
local base = require "mend.cli.base"

local fail = base.fail

local M = {}

-- The workflow files of a directory, sorted, so that a worker loads them in a stable order;
-- or nil and "DIR: why" when it cannot be read.
local function list_files(dir)
  local ok, names, regular = pcall(mend.listdir, dir)
  -- called by pcall, a C function: the message has no position to strip, only "path: reason"
  if not ok then return nil, names end
  local files = {}
  for _, name in ipairs(names) do
    -- a named pipe's opening would block the worker until a writer came, deaf to SIGTERM
    if name:match("%.lua$") and regular[name] then files[#files + 1] = dir .. "/" .. name end
  end
  table.sort(files)
  return files
end

-- A file's text, or nil when it cannot be read.
local function text_of(file)
  local f = io.open(file, "rb")
  local t = f and f:read("a")
  if f then f:close() end
  return t
end

function M.workflow_files(dir)
  local files, why = list_files(dir)
  if not files then
    fail("cannot read the workflows directory %s (a worker loads every .lua file of one)", why)
  end
  return files
end

-- Loads the files of the workflows directory that are new or changed since it last looked. One
-- that does not load is logged and alerted once per text, and the others are served: a broken
-- file must not take every workflow down. Looked at again every few seconds while serving, so
-- that a file fixed (or added) is taken up without a restart. A file's top level may take
-- seconds (up to its load limit): a SIGINT or SIGTERM meanwhile stops it, and nothing more loads
-- (the worker stops).
function M.workflow_loader(eng, dir)
  local seen, unreadable = {}, nil
  local declared, name_of = {}, {}   -- workflow name -> the file that last declared it; inverse
  -- A name another file declared already: the last loaded is the one new runs use, said so.
  local function declare(file, name)
    if name_of[file] and name_of[file] ~= name and declared[name_of[file]] == file then
      declared[name_of[file]] = nil
    end
    name_of[file] = name
    local other = declared[name]
    declared[name] = file
    -- (one text under two names, a symbolic link or a copy, is one workflow whichever is used)
    if other and other ~= file and name_of[other] == name
       and text_of(other) ~= seen[file] then   -- its text now: a link's changes with the file
      eng:log("warn", "workflow", ("%s and %s both declare workflow %s: its new runs use %s, the "
                                   .. "last loaded (keep one file a workflow)"):format(
                                   other < file and other or file, other < file and file or other,
                                   name, file))
    end
  end
  local function load_new(first)
    local ok, files = pcall(M.workflow_files, dir)
    if not ok then
      if first then error(files, 0) end
      -- said once, not at every look: the workflows loaded before go on being served
      local why = type(files) == "table" and files.message or tostring(files)
      if unreadable ~= why then
        unreadable = why
        eng:log("warn", "workflow", why .. ": serving the workflows loaded before")
      else
        eng:log("debug", "workflow", "looked again at " .. dir .. ": still unreadable")
      end
      return
    end
    if unreadable then
      unreadable = nil
      eng:log("info", "workflow", "the workflows directory " .. dir .. " can be read again")
    end
    for _, file in ipairs(files) do
      if core._hear_stop() then return end
      local text = text_of(file)
      if text and text ~= seen[file] then
        seen[file] = text
        local loaded, err = pcall(eng.load, eng, file)
        local stop = not loaded and core._hear_stop()
        if loaded then
          if not first then eng:log("info", "workflow", "loaded " .. file .. " (" .. err .. ")") end
          declare(file, err)
        elseif stop then
          seen[file] = nil
          eng:log("info", "worker", stop .. ": stopped loading " .. file)
          return
        else
          err = tostring(err)
          eng:log("error", "workflow", err)
          eng:alert{ kind = "workflow_load_failed", file = file, error = err }
        end
      end
    end
  end
  -- Until serve's loop listens for them, and while its tick loads, the signals are heard here;
  -- one heard in a tick goes on to the loop then (mend_limits_hear_stop).
  return function(first)
    core._hear_stop(true)
    local ok, err = pcall(load_new, first)
    core._hear_stop(false)
    if not ok then error(err, 0) end
  end
end

-- WORKFLOW names a workflow NAME found as DIR/NAME.lua, or a file. A bare name (no "/", no
-- ".lua") is a name first when DIR/NAME.lua is there: a script or a folder called as the
-- workflow where the command runs (a service's code beside it) is no workflow file; `./NAME`
-- names such a file. A folder opens as a file would, and is no workflow file either.
-- The file, and true when it is DIR/NAME.lua found by the name; or nil and DIR/NAME.lua.
function M.workflow_file(o, workflow)
  local dir = o.workflows or "workflows"
  if not workflow:find("/", 1, true) and not workflow:find("%.lua$") and #workflow <= 512 then
    local named = io.open(dir .. "/" .. workflow .. ".lua", "rb")
    if named then
      named:close()
      return dir .. "/" .. workflow .. ".lua", true
    end
  end
  local f = io.open(workflow, "rb")
  if f then
    local _, unreadable = f:read(0)
    f:close()
    if not unreadable then return workflow end
    -- a path (not a bare name) is no workflow name to look up in DIR either
    if workflow:find("/", 1, true) or workflow:find("%.lua$") then
      fail("%s is a folder, not a workflow file", workflow)
    end
  end
  -- MEND_NAME_MAX of mend.h: no workflow has a longer name.
  if #workflow > 512 then
    fail("no workflow file %s, and a workflow name of %d bytes, over the longest name of 512 bytes",
         workflow:sub(1, 64) .. "...", #workflow)
  end
  local path = dir .. "/" .. workflow .. ".lua"
  local why, errno
  f, why, errno = io.open(path, "rb")
  -- There but not to be opened: that is what is wrong, not a missing file (ENOENT, or ENOTDIR:
  -- DIR is no folder, which load_named names).
  if not f and errno ~= 2 and errno ~= 20 then
    fail("no workflow file %s, and %s%s", workflow, why,
         errno == 40 and " (a loop of symbolic links, or a chain of them too long)" or "")
  end
  if not f then return nil, path end
  f:close()
  return path, true
end

-- DIR/NAME.lua, found by NAME, declares workflow `declared`: a file of DIR that declares NAME
-- is the workflow a worker serving DIR runs under that name, so which is meant is not guessed.
-- Only the files whose text holds NAME are looked at (loaded: their top level runs); file is
-- loaded again after them, in case one declared `declared` too.
function M.refuse_named_other(eng, o, workflow, file, declared)
  local dir = o.workflows or "workflows"
  local files = list_files(dir) or {}
  local own, loaded = text_of(file), false
  for _, other in ipairs(files) do
    local text = other ~= file and text_of(other)
    if text and text ~= own and text:find(workflow, 1, true) then
      loaded = true
      local ok, name = pcall(eng.load, eng, other)
      if ok and name == workflow then
        fail("%s declares workflow %s, and %s declares workflow %s: give the file to start",
             file, declared, other, workflow)
      end
    end
  end
  if loaded then eng:load(file) end
end

-- Loads each of files, as a worker would (its top-level code runs), into found[] (those that
-- declare workflow) and broken[] (those that fail: their errors); two that declare it are
-- refused (a worker serves the last loaded: which is meant is not guessed).
local function load_each(eng, dir, workflow, files, texts, found, broken)
  for _, file in ipairs(files) do
    local loaded, name = pcall(eng.load, eng, file)
    -- (one text under two names, a symbolic link or a copy, is one workflow whichever is used)
    local same = texts[file] ~= nil and texts[found[1] or ""] == texts[file]
    if loaded and name == workflow and found[1] and not same then
      fail("workflow %s is declared by two files of %s: %s and %s: keep one, or give the file "
           .. "to start", workflow, dir, found[1], file)
    end
    if loaded and name == workflow then found[1] = found[1] or file end
    if not loaded then broken[#broken + 1] = tostring(name) end
  end
end

-- A workflow NAME of no file DIR/NAME.lua: the file that declares it under another file name,
-- as a worker serving DIR would find it (a file that fails is named). Only the files whose text
-- holds NAME are loaded first: loading runs a file's top-level code, and a directory of hundreds
-- ran all of theirs for one start. The others are loaded only when none of those declares NAME
-- (a name built from pieces, `"inv" .. "oice"`, is still found; a second file declaring NAME so
-- is not seen).
function M.load_named(eng, o, workflow, path)
  local dir = o.workflows or "workflows"
  local files, why = list_files(dir)
  if not files then
    fail("no workflow file %s, and no %s: cannot read the workflows directory %s", workflow,
         path, why)
  end
  local naming, others, texts = {}, {}, {}
  for _, file in ipairs(files) do
    local text = text_of(file)
    texts[file] = text
    local list = (not text or text:find(workflow, 1, true)) and naming or others
    list[#list + 1] = file
  end
  local found, broken = {}, {}
  load_each(eng, dir, workflow, naming, texts, found, broken)
  if not found[1] then load_each(eng, dir, workflow, others, texts, found, broken) end
  if found[1] then return workflow end
  fail("no workflow file %s, and no %s, nor a file in %s that declares workflow %s%s", workflow,
       path, dir, workflow, #broken > 0 and ("; these failed to load and may: " ..
       table.concat(broken, "; ")) or "")
end

return M
