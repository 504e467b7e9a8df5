/*
 * pg_view: the views for people of the PostgreSQL store (a run and its steps, history, dead
 * letters, breakers, runs, audit, workflow versions, a run's inbox, a token, a run's
 * children, prune, a version's script), in exactly the JSON shapes the SQLite store returns
 * (src/store/query.c), so that the same specs and the same CLI read either.
 *
 * The contract, for the methods of the PostgreSQL store (pg-core) that call these:
 * - `c` is a connection of the store, idle: not in pipeline mode, no result pending. Each
 *   function runs its statements synchronously (PQexecParams) and leaves `c` as it found it.
 * - If `c` is inside a transaction (PQTRANS_INTRANS: an open batch), the reads run in it and
 *   see its writes (read your own writes); it is left open. Otherwise a view that reads with
 *   several statements (run) takes a READ ONLY REPEATABLE READ transaction of its own, so that
 *   a worker's commit between them cannot show a step as pending and a later one as running.
 *   A connection in a failed transaction gets an error.
 * - prune is a transaction of its own: `c` must not be inside one (commit the batch first,
 *   as mend_store_prune does); it returns an error otherwise.
 * - On error they return NULL with "<what>: <the server's message>" in err (never the
 *   server's name or a password: the caller prefixes the name it shows). A missing run gives
 *   NULL, "no run <id>" and *not_found = 1 (0 otherwise).
 * - Times are read as the server prints double precision, which is exact (shortest
 *   round-trip digits) with extra_float_digits > 0, the default since PostgreSQL 12: a
 *   connection must not set it to 0 or less.
 * - The caller owns (json_decref, free) what is returned.
 */
#ifndef MEND_PG_VIEW_H
#define MEND_PG_VIEW_H

#include <stddef.h>
#include <jansson.h>
#include <libpq-fe.h>

json_t *mend__pg_view_run(PGconn *c, const char *id, char *err, size_t errlen, int *not_found);
json_t *mend__pg_view_history(PGconn *c, const char *id, char *err, size_t errlen,
                              int *not_found);
json_t *mend__pg_view_history_page(PGconn *c, const char *id, long after, long limit, long tail,
                                   char *err, size_t errlen, int *not_found);
json_t *mend__pg_view_dlq(PGconn *c, double after_at, const char *after_id, long limit, char *err,
                          size_t errlen);
json_t *mend__pg_view_breakers(PGconn *c, char *err, size_t errlen);
json_t *mend__pg_view_runs(PGconn *c, const char *status, const char *workflow, int limit,
                           char *err, size_t errlen);
json_t *mend__pg_view_runs_where(PGconn *c, const char *status, const char *workflow,
                                 double since, int attention_only, int limit, char *err,
                                 size_t errlen);
json_t *mend__pg_view_audit_list(PGconn *c, char *err, size_t errlen);
json_t *mend__pg_view_workflows(PGconn *c, const char *workflow, char *err, size_t errlen);
json_t *mend__pg_view_inbox(PGconn *c, const char *run_id, long long after, long limit,
                            char *err, size_t errlen);
/* A completion token's row {digest, run_id, step, attempt, made, used, outcome}; NULL with err
 * empty when there is none. */
json_t *mend__pg_view_token(PGconn *c, const char *digest, char *err, size_t errlen);
/* A parent's child runs [{run_id, step, workflow, status}], in the order started. */
json_t *mend__pg_view_children(PGconn *c, const char *parent, char *err, size_t errlen);
/* A run's holder: [] when no run has the id, else [{owner, lease_left}] (owner left out when
 * nobody holds it, lease_left when the owner has no lease row), lease_left in seconds on the
 * server's clock. */
json_t *mend__pg_view_owner(PGconn *c, const char *id, char *err, size_t errlen);
json_t *mend__pg_view_prune(PGconn *c, double before, const char *status, int dry_run,
                            char *err, size_t errlen);
/* The kept text of a version (malloc'ed) and where it was loaded from in *source (malloc'ed
 * or NULL) when source is not NULL; NULL when none is kept ("no script of workflow W version
 * V is kept", *none = 1) or on error (*none = 0). */
char *mend__pg_view_version_script(PGconn *c, const char *workflow, const char *version,
                                   char **source, char *err, size_t errlen, int *none);

#endif
