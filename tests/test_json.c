/*
 * test_json: the Lua <-> JSON mapping: round trips of nested values, integers that stay
 * integers, the null sentinel, empty tables, refusals with the path of the offending value,
 * decode errors with their position, and the mend.json module as Lua code sees it.
 */
#include "check.h"
#include "json.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

static lua_State *L;

/* Evaluates a Lua expression and leaves its value on the stack. */
static void eval(const char *expr) {
  char code[4096];
  snprintf(code, sizeof code, "return %s", expr);
  if (luaL_dostring(L, code) != LUA_OK) {
    fprintf(stderr, "eval %s: %s\n", expr, lua_tostring(L, -1));
    exit(2);
  }
}

/* Encodes a Lua expression; returns malloc'ed text or NULL with err filled. */
static char *enc(const char *expr, char *err, int errlen) {
  eval(expr);
  char *t = mend_json_encode(L, -1, "result", err, errlen);
  lua_pop(L, 1);
  return t;
}

static void check_encodes(const char *expr, const char *want) {
  char err[256] = "";
  char *t = enc(expr, err, sizeof err);
  CHECK_STR(t, want);
  if (!t) fprintf(stderr, "  encoding %s: %s\n", expr, err);
  free(t);
}

static void check_refuses(const char *expr, const char *want_err) {
  char err[256] = "";
  char *t = enc(expr, err, sizeof err);
  CHECK(t == NULL);
  free(t);
  CHECK_STR(err, want_err);
}

/* decode(text) then encode again: the same JSON comes back (key order aside: a Lua table has
 * none), with integers and reals kept apart. */
static void check_round_trip(const char *text) {
  char err[256] = "";
  int top = lua_gettop(L);
  CHECK_EQ_INT(mend_json_decode(L, text, strlen(text), err, sizeof err), 0);
  CHECK_EQ_INT(lua_gettop(L), top + 1);
  char *t = mend_json_encode(L, -1, "value", err, sizeof err);
  lua_pop(L, 1);
  json_t *want = json_loads(text, JSON_DECODE_ANY, NULL);
  json_t *got = t ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
  CHECK(want && got && json_equal(want, got));
  if (!strchr(text, '{') || !strchr(text, ',')) CHECK_STR(t, text);
  else if (!(want && got && json_equal(want, got))) fprintf(stderr, "  %s -> %s\n", text, t);
  json_decref(want);
  json_decref(got);
  free(t);
}

/* Runs a Lua chunk that returns true, or a message saying what went wrong. */
static void check_lua(const char *chunk) {
  if (luaL_dostring(L, chunk) != LUA_OK) {
    check_failed++;
    fprintf(stderr, "lua error: %s\n  in: %s\n", lua_tostring(L, -1), chunk);
  } else if (lua_toboolean(L, -1) && lua_type(L, -1) == LUA_TBOOLEAN) {
    check_passed++;
  } else {
    check_failed++;
    fprintf(stderr, "lua check failed: %s\n  in: %s\n",
            lua_isstring(L, -1) ? lua_tostring(L, -1) : luaL_typename(L, -1), chunk);
  }
  lua_settop(L, 0);
}

static void test_encode(void) {
  check_encodes("nil", "null");
  check_encodes("true", "true");
  check_encodes("false", "false");
  check_encodes("42", "42");
  check_encodes("-7", "-7");
  check_encodes("math.maxinteger", "9223372036854775807");
  check_encodes("1.0", "1.0");     /* a float stays a float */
  check_encodes("2.5", "2.5");
  check_encodes("0.1", "0.1");
  check_encodes("1/3", "0.3333333333333333");
  /* One real needing 17 digits gives all of them 17 (jansson has one precision per dump). */
  check_encodes("{0.1, 0.1 + 0.2}", "[0.10000000000000001,0.30000000000000004]");
  check_encodes("{0.1, 1e300, -2.5}", "[0.1,1e300,-2.5]");
  check_encodes("'he said \"hi\"\\n'", "\"he said \\\"hi\\\"\\n\"");
  check_encodes("{}", "{}");
  check_encodes("{1, 2, 3}", "[1,2,3]");
  check_encodes("{10, 'x', false, 1.5}", "[10,\"x\",false,1.5]");
  check_encodes("{a = 1}", "{\"a\":1}");
  check_encodes("{items = {{id = 1}, {id = 2}}}", "{\"items\":[{\"id\":1},{\"id\":2}]}");
  check_encodes("{1, mend_null, 3}", "[1,null,3]");
  check_encodes("{x = mend_null}", "{\"x\":null}");
  check_encodes("mend_null", "null");
  check_encodes("{[1] = 'a', [2] = 'b'}", "[\"a\",\"b\"]");
  check_encodes("{[2.0] = 'b', [1] = 'a'}", "[\"a\",\"b\"]");  /* 2.0 is the key 2 in Lua */
  /* A table shared by two branches is not a cycle. */
  check_encodes("(function() local t = {1} return {t, t} end)()", "[[1],[1]]");
  /* Metatables do not change what is encoded. */
  check_encodes("setmetatable({}, {__index = function() return 1 end})", "{}");
}

static void test_refusals(void) {
  check_refuses("print", "result: cannot encode a function");
  check_refuses("{items = {1, print}}", "result.items[2]: cannot encode a function");
  check_refuses("{a = {b = {0/0}}}", "result.a.b[1]: cannot encode NaN");
  check_refuses("{x = math.huge}", "result.x: cannot encode an infinity");
  check_refuses("{x = -math.huge}", "result.x: cannot encode an infinity");
  check_refuses("{1, 2, x = 3}", "result: cannot encode a table that mixes array and object keys");
  check_refuses("{[1] = 1, [3] = 3}", "result: cannot encode a sparse array (keys are not 1..2)");
  check_refuses("{[0] = 'zero'}",
                "result: cannot encode a table with integer key 0 (arrays start at 1)");
  check_refuses("{[true] = 1}", "result: cannot encode a table key of type boolean");
  check_refuses("{[1.5] = 1}", "result: cannot encode a table key of type float");
  check_refuses("{list = {coroutine.create(print)}}", "result.list[1]: cannot encode a thread");
  check_refuses("{['odd key'] = {f = print}}", "result[\"odd key\"].f: cannot encode a function");
  check_refuses("io.stdout", "result: cannot encode a userdata");
  check_refuses("'\\xff\\xfe'", "result: cannot encode a string that is not valid UTF-8");
  check_refuses("(function() local t = {} t.self = t return t end)()",
                "result.self: cannot encode a cycle (the table contains itself)");
  check_refuses("(function() local t = {a = {}} t.a[1] = t return t end)()",
                "result.a[1]: cannot encode a cycle (the table contains itself)");
}

/* 100 nested tables are fine, 101 are not. */
static void test_depth(void) {
  char err[256] = "";
  char *t = enc("(function() local t = {} for i = 2, 100 do t = {t} end return t end)()", err,
                sizeof err);
  CHECK(t != NULL);
  if (t) {
    CHECK_EQ_INT(strlen(t), 2 * 100 - 2 + 2);  /* 99 "[" + "{}" + 99 "]" */
    free(t);
  }
  t = enc("(function() local t = {} for i = 2, 101 do t = {t} end return t end)()", err,
          sizeof err);
  CHECK(t == NULL);
  CHECK(strstr(err, "cannot encode nesting deeper than 100") != NULL);
  CHECK(strncmp(err, "result[1][1][1]", 15) == 0);
  free(t);
  /* The stack is left as it was after a refusal deep inside. */
  CHECK_EQ_INT(lua_gettop(L), 0);
}

static void test_decode(void) {
  check_round_trip("{\"a\":1,\"b\":[1,2.5,\"x\",true,false,null],\"c\":{\"d\":{}}}");
  check_round_trip("[{},[[1]]]");
  check_round_trip("[0.1,0.2,2.5e-300]");
  check_round_trip("\"just a string\"");
  check_round_trip("12");
  check_round_trip("-3.25");
  check_round_trip("1.0");
  check_round_trip("9223372036854775807");

  char err[256] = "";
  /* [] and {} both become an empty table, and each is written back as it came: a run's input
   * {"items":[]} is recorded so, not as {"items":{}}. A table made in Lua is an object. */
  check_round_trip("[]");
  check_round_trip("{\"items\":[],\"none\":{}}");
  check_round_trip("[[],{},[[]]]");
  CHECK_EQ_INT(mend_json_decode(L, "[]", 2, err, sizeof err), 0);
  CHECK(lua_istable(L, -1) && lua_rawlen(L, -1) == 0);
  char *t = mend_json_encode(L, -1, "value", err, sizeof err);
  CHECK_STR(t, "[]");
  free(t);
  lua_pushinteger(L, 5);   /* filled, it is what its keys say */
  lua_rawseti(L, -2, 1);
  t = mend_json_encode(L, -1, "value", err, sizeof err);
  CHECK_STR(t, "[5]");
  free(t);
  lua_settop(L, 0);
  CHECK_EQ_INT(mend_json_decode(L, "{\"a\":[]}", 8, err, sizeof err), 0);
  lua_getfield(L, -1, "a");
  lua_pushliteral(L, "x");
  lua_setfield(L, -2, "k");
  lua_pop(L, 1);
  t = mend_json_encode(L, -1, "value", err, sizeof err);
  CHECK_STR(t, "{\"a\":{\"k\":\"x\"}}");
  free(t);
  lua_settop(L, 0);
  check_encodes("{}", "{}");

  /* Integers decode as Lua integers, reals as floats. */
  CHECK_EQ_INT(mend_json_decode(L, "[7, 7.0, 1e3]", 13, err, sizeof err), 0);
  lua_rawgeti(L, -1, 1);
  CHECK(lua_isinteger(L, -1));
  CHECK_EQ_INT(lua_tointeger(L, -1), 7);
  lua_rawgeti(L, -2, 2);
  CHECK(!lua_isinteger(L, -1) && lua_tonumber(L, -1) == 7.0);
  lua_rawgeti(L, -3, 3);
  CHECK(!lua_isinteger(L, -1) && lua_tonumber(L, -1) == 1000.0);
  lua_settop(L, 0);

  /* null: nil at the top, the sentinel inside containers. */
  CHECK_EQ_INT(mend_json_decode(L, "null", 4, err, sizeof err), 0);
  CHECK(lua_isnil(L, -1));
  lua_settop(L, 0);
  CHECK_EQ_INT(mend_json_decode(L, "{\"x\":null}", 10, err, sizeof err), 0);
  lua_getfield(L, -1, "x");
  CHECK(lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == NULL);
  lua_settop(L, 0);

  /* true and false at the top (read without jansson); longer texts that begin alike are not */
  CHECK_EQ_INT(mend_json_decode(L, "true", 4, err, sizeof err), 0);
  CHECK(lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1));
  CHECK_EQ_INT(mend_json_decode(L, "false", 5, err, sizeof err), 0);
  CHECK(lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1));
  lua_settop(L, 0);
  CHECK_EQ_INT(mend_json_decode(L, "truex", 5, err, sizeof err), -1);
  CHECK_EQ_INT(mend_json_decode(L, "nul", 3, err, sizeof err), -1);
  CHECK_EQ_INT(mend_json_decode(L, " true", 5, err, sizeof err), 0);   /* jansson's way */
  CHECK(lua_toboolean(L, -1));
  lua_settop(L, 0);

  /* Errors carry the position and push nothing. */
  CHECK_EQ_INT(mend_json_decode(L, "{\"a\": }", 7, err, sizeof err), -1);
  CHECK_EQ_INT(lua_gettop(L), 0);
  CHECK(strncmp(err, "line 1 column 7: ", 17) == 0);
  CHECK_EQ_INT(mend_json_decode(L, "[1,\n 2,\n x]", 11, err, sizeof err), -1);
  CHECK(strncmp(err, "line 3 column 2: ", 17) == 0);
  CHECK_EQ_INT(mend_json_decode(L, "", 0, err, sizeof err), -1);
  CHECK(strstr(err, "line 1") != NULL);
  CHECK_EQ_INT(mend_json_decode(L, "[1] [2]", 7, err, sizeof err), -1);
  CHECK(strstr(err, "end of file expected") != NULL);

  /* Pushing a jansson value directly; NULL pushes nil. */
  json_t *v = json_pack("{s:[i,f,n]}", "k", 1, 0.5);
  mend_json_push(L, v);
  json_decref(v);
  lua_getfield(L, -1, "k");
  lua_rawgeti(L, -1, 3);
  CHECK(lua_islightuserdata(L, -1));
  lua_settop(L, 0);
  mend_json_push(L, NULL);
  CHECK(lua_isnil(L, -1));
  lua_settop(L, 0);

  /* from_lua gives jansson values with the same types. */
  eval("{n = 3, f = 3.0, s = 'x', list = {true}}");
  v = mend_json_from_lua(L, -1, "input", err, sizeof err);
  lua_settop(L, 0);
  CHECK(json_is_integer(json_object_get(v, "n")));
  CHECK(json_is_real(json_object_get(v, "f")));
  CHECK(json_is_string(json_object_get(v, "s")));
  CHECK(json_is_true(json_array_get(json_object_get(v, "list"), 0)));
  json_decref(v);
  eval("{list = {1, 2, print}}");
  v = mend_json_from_lua(L, -1, "input", err, sizeof err);
  lua_settop(L, 0);
  CHECK(v == NULL);
  CHECK_STR(err, "input.list[3]: cannot encode a function");
}

/* The document a text was printed from pushes what decoding the text gives: the same types
 * (integers, floats like 7.0), the null sentinel inside, reals to the last bit. */
static void check_doc_as_text(const char *expr) {
  char err[256] = "";
  eval(expr);
  json_t *doc = NULL;
  char *text = mend_json_encode_doc(L, -1, "input", err, sizeof err, &doc);
  lua_pop(L, 1);
  CHECK(text != NULL);
  if (!text) return;
  int top = lua_gettop(L);
  if (doc) CHECK_EQ_INT(mend_json_push_doc(L, doc, err, sizeof err), 0);
  else CHECK_EQ_INT(mend_json_decode(L, text, strlen(text), err, sizeof err), 0);
  CHECK_EQ_INT(mend_json_decode(L, text, strlen(text), err, sizeof err), 0);
  if (lua_gettop(L) != top + 2) {   /* one of them failed: nothing to compare */
    fprintf(stderr, "%s (%s): %s\n", expr, text, err);
    lua_settop(L, top);
    json_decref(doc);
    free(text);
    return;
  }
  luaL_dostring(L,
    "local function same(a, b)\n"
    "  if type(a) ~= type(b) or math.type(a) ~= math.type(b) then return false end\n"
    "  if a == 0 and math.type(a) == 'float' then return 1 / a == 1 / b end  -- -0.0\n"
    "  if type(a) ~= 'table' then return a == b end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "return same");
  lua_insert(L, -3);
  lua_call(L, 2, 1);
  if (!lua_toboolean(L, -1)) fprintf(stderr, "doc and text differ for %s (%s)\n", expr, text);
  CHECK(lua_toboolean(L, -1));
  lua_pop(L, 1);
  json_decref(doc);
  free(text);
}

static void test_doc(void) {
  check_doc_as_text("{i = 1}");
  check_doc_as_text(
      "{a = 7.0, b = 0.1, c = 1e300, d = -0.0, e = 2^53, f = 1/3, g = 123456789012345678}");
  check_doc_as_text("{items = {1, 'two', {x = mend_null}, {}}, empty = {}, s = 'caf\\u{e9}'}");
  check_doc_as_text("{1, 2.5, mend_null, true, false}");
  check_doc_as_text("'text'");
  check_doc_as_text("42");
  check_doc_as_text("{s = 'a\\0b', list = {'\\0'}}");   /* NUL in a string: \u0000, read back */
}

/* Integers and plain strings are written and read without jansson: each text must read back
 * as jansson reads it (type, integer or float, value), or fail where jansson fails; read as
 * text handed in (mend_json_decode_in), a key given twice in one object is refused too. */
static void reads_as_jansson(const char *text, size_t len, int in) {
  char err[256] = "";
  json_error_t je;
  json_t *want = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL |
                                       (in ? JSON_REJECT_DUPLICATES : 0), &je);
  int top = lua_gettop(L);
  int rc = (in ? mend_json_decode_in : mend_json_decode)(L, text, len, err, sizeof err);
  CHECK_EQ_INT(rc, want ? 0 : -1);
  if (rc == 0 && want) {
    mend_json_push(L, want);
    int same = lua_type(L, -1) == lua_type(L, -2) &&
               lua_isinteger(L, -1) == lua_isinteger(L, -2) && lua_rawequal(L, -1, -2);
    if (!same) fprintf(stderr, "  %.*s reads otherwise than jansson reads it\n", (int)len, text);
    CHECK(same);
  }
  lua_settop(L, top);
  json_decref(want);
}

static void check_reads_as_jansson(const char *text, size_t len) {
  reads_as_jansson(text, len, 0);
  reads_as_jansson(text, len, 1);
}

/* ...and what is written is what jansson prints, also under a meter, which is charged. */
static int count_meter(void *ud, long values, size_t bytes) {
  long *seen = ud;
  seen[0] = values;
  seen[1] = (long)bytes;
  return seen[2];
}

static void check_writes_as_jansson(const char *expr, json_t *want_doc, long values) {
  char err[256] = "";
  char *want = json_dumps(want_doc, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(want_doc);
  char *t = enc(expr, err, sizeof err);
  CHECK_STR(t, want);
  free(t);
  long seen[3] = {0, 0, 0};
  eval(expr);
  t = mend_json_encode_metered(L, -1, "result", err, sizeof err, count_meter, seen);
  CHECK_STR(t, want);
  CHECK_EQ_INT(seen[0], 2 * values);   /* printing doubles what the walk charges */
  free(t);
  seen[2] = 1;   /* a meter that refuses stops it, with the walk's message */
  t = mend_json_encode_metered(L, -1, "result", err, sizeof err, count_meter, seen);
  lua_pop(L, 1);
  CHECK(t == NULL);
  char want_err[100];
  snprintf(want_err, sizeof want_err,
           "result: stopped by the limits of the call before printing %ld values", values);
  CHECK_STR(err, want_err);
  free(want);
}

/* A table read by the quick path is laid out as jansson's reading lays it out: the same keys
 * and values, met by lua_next in the same order (a later encoding follows that order). */
static void check_object_as_jansson(const char *text) {
  char err[256] = "";
  json_t *want = json_loads(text, JSON_DECODE_ANY, NULL);
  CHECK(want != NULL);
  int top = lua_gettop(L);
  CHECK_EQ_INT(mend_json_decode(L, text, strlen(text), err, sizeof err), 0);
  mend_json_push(L, want);
  json_decref(want);
  luaL_dostring(L,
    "return function(a, b)\n"
    "  local ka, kb = {}, {}\n"
    "  for k in next, a do ka[#ka + 1] = k end\n"
    "  for k in next, b do kb[#kb + 1] = k end\n"
    "  if #ka ~= #kb then return false end\n"
    "  for i = 1, #ka do\n"
    "    local k = ka[i]\n"
    "    if k ~= kb[i] then return false end\n"
    "    local x, y = a[k], b[k]\n"
    "    if type(x) ~= type(y) or math.type(x) ~= math.type(y) then return false end\n"
    "    if type(x) ~= 'table' and x ~= y then return false end\n"
    "  end\n"
    "  return true\n"
    "end");
  lua_insert(L, -3);
  lua_call(L, 2, 1);
  int same = lua_toboolean(L, -1);
  if (!same) fprintf(stderr, "  %s reads otherwise than jansson reads it\n", text);
  CHECK(same);
  lua_settop(L, top);
}

static void check_table_writes_as_walk(const char *expr) {
  char err[256] = "";
  eval(expr);
  json_t *doc = mend_json_from_lua(L, -1, "result", err, sizeof err);
  char *want = doc ? json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
  json_decref(doc);
  char *t = mend_json_encode(L, -1, "result", err, sizeof err);
  lua_pop(L, 1);
  CHECK_STR(t, want);
  if (t && want) check_object_as_jansson(t);
  free(t);
  free(want);
}

static void test_quick(void) {
  static const char *const texts[] = {
    "0", "-0", "7", "-7", "200", "01", "-01", "00", "-", "--1", "+1", "1-", "12a", " 12", "12 ",
    "123456789012345678", "-123456789012345678", "1234567890123456789",
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "1.5", "1e3",
    "\"\"", "\"abc\"", "\"a b/c~\"", "\"a\\\"b\"", "\"a\\nb\"", "\"caf\xc3\xa9\"",
    "\"\x7f\"", "\"a", "a\"", "\"", "\"a\"b\"", "\"\t\"",
  };
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
    check_reads_as_jansson(texts[i], strlen(texts[i]));
  check_reads_as_jansson("\"a\0b\"", 5);
  check_writes_as_jansson("0", json_integer(0), 1);
  check_writes_as_jansson("200", json_integer(200), 1);
  check_writes_as_jansson("-42", json_integer(-42), 1);
  check_writes_as_jansson("math.maxinteger", json_integer(INT64_MAX), 1);
  check_writes_as_jansson("math.mininteger", json_integer(INT64_MIN), 1);
  check_writes_as_jansson("''", json_string(""), 1);
  check_writes_as_jansson("'ok'", json_string("ok"), 1);
  check_writes_as_jansson("'a/b ~!'", json_string("a/b ~!"), 1);
  check_writes_as_jansson("'a\"b'", json_string("a\"b"), 1);
  check_writes_as_jansson("'tab\\there'", json_string("tab\there"), 2);
  check_writes_as_jansson("'caf\\u{e9}'", json_string("caf\xc3\xa9"), 1);
  char xs[301];
  memset(xs, 'x', 300);
  xs[300] = '\0';
  check_writes_as_jansson("string.rep('x', 300)", json_string(xs), 1);   /* too long to be quick */
  check_table_writes_as_walk("{}");
  check_table_writes_as_walk("{i = 1}");
  check_table_writes_as_walk("{ok = true, no = false, n = -12, s = 'a b', e = ''}");
  check_table_writes_as_walk("{['a\"b'] = 1, c = 'x\"y', d = 'tab\\t', ['caf\\u{e9}'] = 2}");
  check_table_writes_as_walk("{f = 1.5, g = 2}");
  check_table_writes_as_walk("{n = mend_null, t = {1}}");
  check_table_writes_as_walk("{1, 2, 3}");
  check_table_writes_as_walk(
      "(function() local t = {} for k = 1, 40 do t['k' .. k] = k end return t end)()");
  check_table_writes_as_walk(
      "(function() local t = {} for k = 1, 32 do t['k' .. k] = k end return t end)()");
  check_table_writes_as_walk("setmetatable({a = 1}, {__pairs = function() error('no') end})");
  static const char *const objects[] = {
      "{\"a\":1}",
      "{\"b\":\"x}y\",\"a\":true}",
      "{\"a\":1,\"a\":2}",
      "{\"a\":{\"b\":1}}",
      "{\"a\":[1,2]}",
      "{\"a\":1.0}",
      "{\"a\":null}",
      "{\"a\": 1}",
      "{ \"a\":1}",
      "{\"}\":-0}",
      "{\"a\":\"\\u0041\"}",
      "{\"a\":01}",
      "{\"a\":1}}",
      "{\"a\":1 }",
      "{\"a\":1,\"b\":{\"c\":2,\"d\":3}}",
  };
  for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
    json_t *ok = json_loads(objects[i], 0, NULL);
    if (ok) check_object_as_jansson(objects[i]);
    else check_reads_as_jansson(objects[i], strlen(objects[i]));
    json_decref(ok);
    json_t *in = json_loads(objects[i], JSON_REJECT_DUPLICATES, NULL);
    if (!in) reads_as_jansson(objects[i], strlen(objects[i]), 1);   /* refused as jansson does */
    json_decref(in);
  }
  static const char *const broken[] = {"{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":\"x}",
                                       "{\"a:1}", "{,}", "{\"a\":1 } x"};
  for (size_t i = 0; i < sizeof broken / sizeof *broken; i++)
    check_reads_as_jansson(broken[i], strlen(broken[i]));
}

static void test_module(void) {
  mend_json_open(L);
  lua_setglobal(L, "json");
  check_lua("return json.encode({a = {1, 2, 3}}) == '{\"a\":[1,2,3]}'");
  check_lua("return json.encode(json.null) == 'null' and json.null == mend_null");
  check_lua("return json.encode({}) == '{}'");
  check_lua("return math.type(json.decode('5')) == 'integer'"
            " and math.type(json.decode('5.0')) == 'float'");
  check_lua("local v = json.decode('{\"a\":[1,null,{\"b\":\"c\"}]}')"
            " return v.a[1] == 1 and v.a[2] == json.null and v.a[3].b == 'c' and #v.a == 3");
  check_lua("return json.decode('null') == nil");
  check_lua("local t = {name = 'x', tags = {'a', 'b'}, n = 1.5, ok = false}"
            " local u = json.decode(json.encode(t))"
            " return u.name == 'x' and u.tags[2] == 'b' and u.n == 1.5 and u.ok == false");
  check_lua("local ok, e = pcall(json.encode, {f = print})"
            " return not ok and e == 'mend.json.encode: value.f: cannot encode a function'"
            " or e");
  check_lua("local ok, e = pcall(json.encode, {1, 0/0})"
            " return not ok and e == 'mend.json.encode: value[2]: cannot encode NaN' or e");
  check_lua("local ok, e = pcall(json.decode, '{\"a\":')"
            " return not ok and e:find('^mend.json.decode: line 1 column %d+: ') ~= nil or e");
  check_lua("local ok, e = pcall(json.decode, {})"
            " return not ok and e:find('bad argument #1') ~= nil or e");
  check_lua("local ok, e = pcall(json.encode)"
            " return not ok and e:find('bad argument #1') ~= nil or e");
}

int main(void) {
  L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushlightuserdata(L, NULL);
  lua_setglobal(L, "mend_null");

  test_encode();
  test_refusals();
  test_depth();
  test_decode();
  test_doc();
  test_quick();
  test_module();
  CHECK_EQ_INT(lua_gettop(L), 0);

  lua_close(L);
  return check_done("json");
}
