/*
 * lrepl: line editing for `mend repl` (the table `mend.core.readline`), through libedit's
 * readline emulation. It owns the process's one line editor, its history (in memory, and read
 * from and written to the file it is given) and the reference to the Lua completion function;
 * it never evaluates what is typed (that is lua/mend/repl.lua's job), never chooses where the
 * history file is (the REPL does), and is only used when stdin is a terminal.
 *
 * libedit keeps its state in globals, so this module does too: there is one terminal. The
 * completer runs inside readline(), that is inside a Lua call of readline.read, on the state
 * that made that call; it is called protected, so a Lua error cannot unwind through libedit.
 */
#include <lauxlib.h>
#include <lua.h>
#include <errno.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <editline/readline.h>

/* The Lua side of completion: the state in readline.read and the completer's registry ref. */
static lua_State *read_L;
static int completer_ref = LUA_NOREF;
static const void *completer_owner;   /* the main thread of the state holding completer_ref */

static const void *main_thread(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  const void *p = lua_topointer(L, -1);
  lua_pop(L, 1);
  return p;
}

/* The matches of the completion in progress, handed out one by one by next_match. */
static char **matches;
static size_t nmatches, next_index;

static void free_matches(void) {
  for (size_t i = 0; i < nmatches; i++) free(matches[i]);
  free(matches);
  matches = NULL;
  nmatches = next_index = 0;
}

/* Calls completer(text, line, start, finish) and keeps the strings of the list it returns.
 * Errors of the completer mean "no matches": the line being edited must survive them. */
static void collect_matches(const char *text, int start, int finish) {
  lua_State *L = read_L;
  free_matches();
  if (!L || completer_ref == LUA_NOREF || main_thread(L) != completer_owner) return;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushstring(L, text);
  lua_pushstring(L, rl_line_buffer ? rl_line_buffer : "");
  lua_pushinteger(L, start);
  lua_pushinteger(L, finish);
  if (lua_pcall(L, 4, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    size_t n = (size_t)luaL_len(L, -1);
    matches = calloc(n ? n : 1, sizeof *matches);
    for (size_t i = 1; matches && i <= n; i++) {
      if (lua_rawgeti(L, -1, (lua_Integer)i) == LUA_TSTRING) {
        char *s = strdup(lua_tostring(L, -1));
        if (s) matches[nmatches++] = s;
      }
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
}

/* rl_completion_matches' generator: the kept matches in order; libedit frees what it gets. */
static char *next_match(const char *text, int state) {
  (void)text;
  (void)state;
  if (next_index >= nmatches) return NULL;
  return strdup(matches[next_index++]);
}

static char *no_match(const char *text, int state) {
  (void)text;
  (void)state;
  return NULL;
}

static char **complete(const char *text, int start, int finish) {
  rl_attempted_completion_over = 1;    /* never fall back to file names */
  collect_matches(text, start, finish);
  char **result = nmatches ? rl_completion_matches(text, next_match) : NULL;
  free_matches();
  return result;
}

static void init_editor(void) {
  static int done;
  if (done) return;
  done = 1;
  setlocale(LC_CTYPE, "");             /* libedit decodes multibyte input by the locale */
  rl_readline_name = "mend";           /* the application name in ~/.editrc */
  /* '.' and ':' are not breaks: `mend.ret` and `eng:st` are completed as one word. */
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{}()[],+-*/%^#~";
  rl_completion_append_character = '\0';
  rl_attempted_completion_function = complete;
  rl_completion_entry_function = no_match;
  using_history();
  stifle_history(1000);
}

/* Ctrl-C while a line is typed abandons that line, as in a shell: SIGINT's default would end
 * the REPL, and an in-memory database with it. libedit hands the signal on to this handler
 * and its read ends. */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int signo) {
  (void)signo;
  interrupted = 1;
}

/* readline.read(prompt) -> line (without its newline), nil at end of input, or false when
 * Ctrl-C abandoned the line.  [-1, +1, m] */
static int l_read(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  init_editor();
  lua_State *outer = read_L;
  read_L = L;
  struct sigaction sa, before;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &before);
  interrupted = 0;
  char *line = readline(prompt);
  sigaction(SIGINT, &before, NULL);
  read_L = outer;
  if (interrupted) {
    free(line);
    fputs("^C\n", stdout);
    fflush(stdout);
    lua_pushboolean(L, 0);
    return 1;
  }
  if (!line) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, line);
  free(line);
  return 1;
}

/* readline.add_history(line): appends to the history that Up and Down walk. Empty lines and
 * a repeat of the last entry are not added.  [-1, +0, -] */
static int l_add_history(lua_State *L) {
  const char *line = luaL_checkstring(L, 1);
  init_editor();
  if (*line == '\0') return 0;
  HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
  if (last && last->line && strcmp(last->line, line) == 0) return 0;
  add_history(line);
  return 0;
}

/* Pushes true, or nil and "PATH: reason" for a libedit history call's result (0 or an errno). */
static int push_file_result(lua_State *L, int rc, const char *path) {
  if (rc == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, strerror(rc));
  return 2;
}

/* readline.read_history(path) -> true | nil, message: appends the lines of a history file
 * written by write_history, so that Up walks back into earlier sessions. A file that does not
 * exist yet, or is empty, is an empty history.  [-1, +(1|2), m] */
static int l_read_history(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  init_editor();
  struct stat st;
  int found = stat(path, &st) == 0;
  if (found ? S_ISREG(st.st_mode) && st.st_size == 0 : errno == ENOENT)
    return push_file_result(L, 0, path);
  int rc = read_history(path);
  if (rc == EINVAL) {   /* libedit's word for a file without its header */
    lua_pushnil(L);
    lua_pushfstring(L, "%s: not a history file of mend repl (libedit's format)", path);
    return 2;
  }
  return push_file_result(L, rc, path);
}

/* readline.write_history(path) -> true | nil, message: replaces the file with the
 * history in memory (the last 1000 lines); libedit makes it readable by its owner only, as
 * what was typed may hold secrets.  [-1, +(1|2), m] */
static int l_write_history(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  init_editor();
  return push_file_result(L, write_history(path), path);
}

/* readline.set_completer(fn | nil): fn(text, line, start, finish) -> { full words } is called
 * on TAB with the word before the cursor; `text` is what the words replace.  [-1, +0, e] */
static int l_set_completer(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TFUNCTION);
  if (completer_ref != LUA_NOREF && main_thread(L) == completer_owner)
    luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  completer_ref = LUA_NOREF;
  if (!lua_isnoneornil(L, 1)) {
    lua_pushvalue(L, 1);
    completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    completer_owner = main_thread(L);
  }
  return 0;
}

/* Pushes the table of line-editing functions (mend.core's `readline` field).  [-0, +1, m] */
int mend_repl_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"read", l_read}, {"add_history", l_add_history}, {"read_history", l_read_history},
    {"write_history", l_write_history}, {"set_completer", l_set_completer}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
