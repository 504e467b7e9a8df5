/*
 * fuzz_workflow: libFuzzer target for the workflow loader (src/workflow.c): Lua source text in,
 * the checks of mend_workflow_from_table out.
 *
 * Each input is loaded as a text chunk (never a binary one) into a fresh Lua state, run, and
 * what it returns is checked as a definition, then freed. The state is kept from hanging and
 * from exhausting the fuzzer: its allocator refuses past 16 MiB (a definition needs kilobytes;
 * under ASan, filling 64 MiB took seconds per input), and a count hook raises after about a
 * million instructions (and then at every instruction, so that a pcall in a loop cannot
 * swallow it). Only the pure parts of the standard library are opened, without what reaches
 * files or the process; the C functions of Lua whose time no hook bounds (pattern matching,
 * table.move, string.rep: a loop of 10 KB copies ran 20 s under ASan) are left out, since a
 * hang inside them is Lua's and the engine's sandbox bounds them, not the loader. `require` knows
 * "mend" and "mend.sim" only, as stubs that answer any use, so that the real workflows of
 * workflows/ reach the checks. This harness must never touch a file; built only with MEND_FUZZ (see
 * tests/fuzz/README.md).
 */
#include "workflow.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

#define MEM_LIMIT ((size_t)16 << 20)
#define INSTRUCTION_BUDGET 1000000L
#define HOOK_EVERY 1000

static size_t mem_used;
static long instructions_left;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    mem_used -= old;
    return NULL;
  }
  if (nsize > old && mem_used + (nsize - old) > MEM_LIMIT) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) mem_used = mem_used - old + nsize;
  return p;
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  instructions_left -= HOOK_EVERY;
  if (instructions_left > 0) return;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
  luaL_error(L, "instruction budget exhausted");
}

/* What the chunk sees: load() of text only, the stubs of require, no print. */
static const char prelude[] =
  "local load, select, setmetatable, error = load, select, setmetatable, error\n"
  "load = function(...)\n"
  "  local chunk, name, _, env = ...\n"
  "  if select('#', ...) >= 4 then return load(chunk, name, 't', env) end\n"
  "  return load(chunk, name, 't')\n"
  "end\n"
  "local stub = setmetatable({}, { __index = function(t) return t end,\n"
  "                                __call = function(t) return t end })\n"
  "require = function(name)\n"
  "  if name == 'mend' or name == 'mend.sim' then return stub end\n"
  "  error(\"module '\" .. tostring(name) .. \"' not found\")\n"
  "end\n"
  "dofile, loadfile, print = nil, nil, nil\n"
  "string.dump, string.find, string.match, string.gmatch, string.gsub = nil, nil, nil, nil, nil\n"
  "table.move, string.rep = nil, nil\n";

static void open_libs(lua_State *L) {
  static const luaL_Reg libs[] = {
    {LUA_GNAME, luaopen_base},       {LUA_COLIBNAME, luaopen_coroutine},
    {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
    {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8},
    {NULL, NULL},
  };
  for (const luaL_Reg *l = libs; l->func; l++) {
    luaL_requiref(L, l->name, l->func, 1);
    lua_pop(L, 1);
  }
}

/* Under lua_pcall: the definition's metamethods may raise while it is checked. */
static int check_definition(lua_State *L) {
  char err[1024];
  mend_workflow *wf = mend_workflow_from_table(L, 1, "fuzz.lua", NULL, err, sizeof err);
  mend_workflow_free(L, wf);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_State *L = lua_newstate(capped_alloc, NULL);
  if (!L) return 0;
  open_libs(L);
  if (luaL_dostring(L, prelude) != LUA_OK) abort();
  instructions_left = INSTRUCTION_BUDGET;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  lua_pushcfunction(L, check_definition);
  if (luaL_loadbufferx(L, (const char *)data, size, "@fuzz.lua", "t") == LUA_OK &&
      lua_pcall(L, 0, 1, 0) == LUA_OK)
    lua_pcall(L, 1, 0, 0);
  lua_close(L);
  return 0;
}
