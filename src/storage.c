/*
 * storage: which backend a database name opens. It owns only that choice: a libpq connection
 * URI (postgres://, postgresql://) is PostgreSQL's, anything else is a SQLite file (or
 * ":memory:"), and the one reading of which file a SQLite name opens (mend_store_where), as
 * SQLite reads it, for every check made before a database is opened (trust.c, the CLI's
 * `mend.db_where`), and the refusal of a name with no database behind it where one must be
 * there already (opening would make an empty one). Every other operation goes through the
 * backend's table of methods (store.h).
 * It must never hold state of its own or know a backend's insides.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "store/sqlite.h"
#ifdef MEND_WITH_PG
#include "store/pg/pg.h"
#endif

/* 1 if `name` is a PostgreSQL connection URI (libpq's own two prefixes). */
int mend_store_is_postgres(const char *name) {
  return name && (strncmp(name, "postgres://", 11) == 0 || strncmp(name, "postgresql://", 13) == 0);
}

static int hex(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One part of a "file:" URI (its path, a query's key or value), decoded into out as SQLite's
 * sqlite3ParseUri decodes it: %HH only when two hex digits follow; %00 ends the part, the rest
 * of it up to the next of `stops` ignored. Stops at '#', at one of `stops` or at the end; *p is
 * left on it. The length decoded (at most cap - 1 kept). */
static size_t uri_part(const char **p, const char *stops, char *out, size_t cap) {
  size_t n = 0;
  const char *q = *p;
  while (*q && *q != '#' && !strchr(stops, *q)) {
    int c = (unsigned char)*q++;
    if (c == '%' && hex(q[0]) >= 0 && hex(q[1]) >= 0) {
      c = hex(q[0]) << 4 | hex(q[1]);
      q += 2;
      if (c == 0) {
        while (*q && *q != '#' && !strchr(stops, *q)) q++;
        break;
      }
    }
    if (n + 1 < cap) out[n++] = (char)c;
  }
  if (cap) out[n < cap ? n : cap - 1] = 0;
  *p = q;
  return n;
}

/* Whether a "file:" URI's query (from its '?' on, to its '#') opens memory: its last mode=
 * is "memory" (SQLite applies each mode= in turn), keys and values decoded. */
static int uri_memory(const char *q) {
  int memory = 0;
  if (*q != '?') return 0;
  for (q++; *q && *q != '#';) {
    char key[8], val[8];
    size_t nk = uri_part(&q, "=&", key, sizeof key), nv = 0;
    val[0] = 0;
    if (*q == '=') {
      q++;
      nv = uri_part(&q, "&", val, sizeof val);
    }
    if (nk == 4 && strcmp(key, "mode") == 0) memory = nv == 6 && strcmp(val, "memory") == 0;
    if (*q == '&') q++;
  }
  return memory;
}

mend_db_kind mend_store_where(const char *name, char *file, size_t cap) {
  if (cap) file[0] = 0;
  if (mend_store_is_postgres(name)) return MEND_DB_POSTGRES;
  if (!name || !*name || strcmp(name, ":memory:") == 0) return MEND_DB_MEMORY;
  if (strncmp(name, "file:", 5) != 0) {
    snprintf(file, cap, "%s", name);
    return MEND_DB_FILE;
  }
  /* "file://host/path": SQLite refuses any host but "localhost" or none at its open; the path
   * is what follows it, the host ending only at a '/' */
  const char *p = name + 5;
  if (p[0] == '/' && p[1] == '/') p += 2 + strcspn(p + 2, "/");
  size_t n = uri_part(&p, "?", file, cap);
  p += strcspn(p, "?#");
  /* an empty path (or one cut by %00) is SQLite's private temporary database: no file */
  if (n == 0 || strcmp(file, ":memory:") == 0 || uri_memory(p)) {
    if (cap) file[0] = 0;
    return MEND_DB_MEMORY;
  }
  return MEND_DB_FILE;
}

static mend_store *open_store(const char *path, mend_durability durability, int *none, char *err,
                              int errlen) {
  if (mend_store_is_postgres(path)) {
#ifdef MEND_WITH_PG
    return mend__pg_open_ex(path, durability, none, err, errlen);
#else
    /* The name may carry a password (user:secret@host): only what follows the '@' is shown. */
    const char *rest = strstr(path, "://") + 3;
    const char *at = strchr(rest, '@'), *slash = strchr(rest, '/');
    if (at && (!slash || at < slash)) rest = at + 1;
    snprintf(err, (size_t)errlen, "postgresql://%s: this mend was built without PostgreSQL (libpq)",
             rest);
    return NULL;
#endif
  }
  /* SQLite would open "" as a private temporary file, gone when closed, and fail only on WAL
   * mode, with a message naming no file */
  if (!path || !*path) {
    snprintf(err, (size_t)errlen, "the database name is empty: give a file (or :memory:, or a "
             "postgresql:// URI)");
    return NULL;
  }
  return mend__sqlite_open_ex(path, durability, none, err, errlen);
}

mend_store *mend_store_open(const char *path, mend_durability durability, char *err, int errlen) {
  return open_store(path, durability, NULL, err, errlen);
}

/* SQLite would make a missing file: refused before anything opens it. */
mend_store *mend_store_open_existing(const char *path, mend_durability durability, int *none,
                                     char *err, int errlen) {
  char file[4096];
  mend_db_kind kind = mend_store_where(path, file, sizeof file);
  int no = 0;
  mend_store *s = NULL;
  if (kind == MEND_DB_MEMORY || (kind == MEND_DB_FILE && access(file, F_OK) != 0)) {
    snprintf(err, (size_t)errlen, "no database at %s", path ? path : "(NULL)");
    no = 1;
  } else {
    s = open_store(path, durability, &no, err, errlen);
  }
  if (none) *none = no;
  return s;
}
