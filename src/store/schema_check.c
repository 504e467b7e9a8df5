/*
 * schema_check: what the SQLite backend finds in a file as it opens it: a database at all, a
 * mend's (user_version and meta agree), a version this mend can read, and the schema created or
 * upgraded in one write transaction; then the labels history rows write as codes. Must never:
 * change anything in a database that is someone else's or newer (its journal mode included).
 */
#include "store_int.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Runs a one-row, one-column query through a temporary statement (open time only). */
static int query_int(mend_store *s, const char *sql, const char *what, int *out) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    mend__sql_err(s, what);
    return -1;
  }
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return 0;
  }
  if (rc == SQLITE_DONE) {
    mend__set_msg(s->err, sizeof s->err, "%s: %s: no row", s->path, what);
  } else if ((rc & 0xff) == SQLITE_NOTADB) {
    mend__set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
  } else {
    mend__sql_err(s, what);
  }
  sqlite3_finalize(q);
  return -1;
}

/* 1 when the database has tables of its own (not SQLite's), 0 when none; -1 on error. */
static int has_tables(mend_store *s) {
  int tables;
  if (query_int(s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                "read schema", &tables) != 0)
    return -1;
  return tables > 0;
}

/* The schema version meta names, or 0 when there is no meta table or row. */
static int meta_version(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &q,
                         NULL) != SQLITE_OK)
    return 0;
  int v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
  sqlite3_finalize(q);
  return v;
}

static int check_version(mend_store *s, int version) {
  if (version > MEND_SCHEMA_VERSION) {
    mend__set_msg(s->err, sizeof s->err, "%s: schema version %d is newer than this mend (%d)",
            s->path, version, MEND_SCHEMA_VERSION);
    return -1;
  }
  if (version < 0) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (user_version %d)", s->path,
            version);
    return -1;
  }
  return 0;
}

/* Creates or upgrades the schema inside one write transaction; the version is read again there
 * because another process may have created it since the first look. Two processes creating a
 * new file at once have been seen to find the other's tables with user_version still 0: meta,
 * written in the same transaction, then says which version they are; tables and no meta are
 * given a moment (the other's transaction may not be visible whole yet) before the file is
 * called someone else's. */
int mend__upgrade_schema(mend_store *s) {
  int version;
  for (int tries = 0;; tries++) {
    if (mend__exec_sql(s, "BEGIN IMMEDIATE", "create schema") != 0) return -1;
    if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) goto fail;
    if (check_version(s, version) != 0) goto fail;
    if (version != 0) break;
    int tables = has_tables(s);
    if (tables < 0) goto fail;
    if (!tables) break;
    version = meta_version(s);
    if (version > 0) {
      if (check_version(s, version) != 0) goto fail;
      break;
    }
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    if (tries == 40) {
      mend__set_msg(s->err, sizeof s->err,
                    "%s: not a mend database (it has tables of its own and no mend schema)",
                    s->path);
      return -1;
    }
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (version < MEND_SCHEMA_VERSION && mend__sqlite_digest_fn(s->db) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: create schema: %s", s->path, sqlite3_errmsg(s->db));
    goto fail;
  }
  for (int v = version; v < MEND_SCHEMA_VERSION; v++)
    if (mend__exec_sql(s, mend__migrations[v], "create schema") != 0) goto fail;
  /* No process can be running on a file that did not exist: a new one takes run_key's
   * partial index at once (schema.c, runs_key_layout). */
  if (version == 0 && mend__exec_sql(s, mend__runs_key_rebuild, "create schema") != 0) goto fail;
  if (version < MEND_SCHEMA_VERSION) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '%d');"
             "PRAGMA user_version = %d;", MEND_SCHEMA_VERSION, MEND_SCHEMA_VERSION);
    if (mend__exec_sql(s, sql, "write schema version") != 0) goto fail;
  }
  if (mend__exec_sql(s, "COMMIT", "create schema") != 0) goto fail;
  return 0;
fail:
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

/* user_version says mend; meta must agree, or this is someone else's database. */
int mend__check_meta(mend_store *s, int version) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &q,
                         NULL) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (no meta table: %s)", s->path,
            sqlite3_errmsg(s->db));
    return -1;
  }
  int rc = sqlite3_step(q), ok = 0;
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(q, 0);
    ok = v && atoi(v) == version;
    if (!ok)
      mend__set_msg(s->err, sizeof s->err,
              "%s: schema version in meta (%s) disagrees with user_version (%d)", s->path,
              v ? v : "null", version);
  } else if (rc == SQLITE_DONE) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (no schema_version in meta)",
            s->path);
  } else {
    mend__sql_err(s, "read meta");
  }
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

/* The schema version the file holds, in *version (0: a new file), once it is known to be a
 * mend's database this mend can read; -1 with errmsg otherwise. */
int mend__schema_found(mend_store *s, int *version) {
  /* First read of the file: a file that is not a database is refused here. */
  if (query_int(s, "PRAGMA user_version", "read schema version", version) != 0) return -1;
  if (check_version(s, *version) != 0) return -1;
  /* Someone else's database is refused before anything about it (its journal mode) changes.
   * The two reads are two snapshots: tables seen after a user_version of 0 may be those of a
   * mend that created the file in between, whose version is then read again. */
  if (*version == 0) {
    int tables = has_tables(s);
    if (tables < 0) return -1;
    if (tables && query_int(s, "PRAGMA user_version", "read schema version", version) != 0)
      return -1;
    if (tables && *version == 0 && meta_version(s) == 0) {
      mend__set_msg(s->err, sizeof s->err,
                    "%s: not a mend database (it has tables of its own and no mend schema)",
                    s->path);
      return -1;
    }
    if (check_version(s, *version) != 0) return -1;
  }
  if (*version > 0 && mend__check_meta(s, *version) != 0) return -1;
  return 0;
}

/* Whether a and b are the same text: a loop here, as labels are a few bytes long, where a
 * call of strcmp cost more than the comparing. */
static int same_text(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

/* Eleven look-ups a W9 run (a history row's event and two statuses): the names that share
 * its first byte, one or two, rather than all. */
int mend__label_code(const mend_store *s, const char *name) {
  for (int i = s->label_first[(unsigned char)name[0]]; i; i = s->label_next[i - 1])
    if (same_text(s->labels[i - 1].name, name)) return s->labels[i - 1].code;
  return -1;
}

int mend__load_labels(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT code, name FROM labels ORDER BY code", -1, &q, NULL)
      != SQLITE_OK) {
    mend__sql_err(s, "read labels");
    return -1;
  }
  int rc;
  s->nlabels = 0;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW && s->nlabels < LABELS_MAX) {
    const char *name = (const char *)sqlite3_column_text(q, 1);
    struct label *l = &s->labels[s->nlabels];
    if (!name || strlen(name) >= sizeof l->name) continue;
    strcpy(l->name, name);
    l->code = sqlite3_column_int(q, 0);
    s->nlabels++;
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) mend__sql_err(s, "read labels");
  sqlite3_finalize(q);
  memset(s->label_first, 0, sizeof s->label_first);
  for (int i = s->nlabels - 1; i >= 0; i--) {   /* each list in the order of the codes */
    unsigned char c = (unsigned char)s->labels[i].name[0];
    s->label_next[i] = s->label_first[c];
    s->label_first[c] = (unsigned char)(i + 1);
  }
  s->code_step = mend__label_code(s, "step");
  s->code_running = mend__label_code(s, "running");
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}
