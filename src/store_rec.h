/*
 * store_rec: what crosses the storage interface besides its calls: the records a write carries
 * (a run, a step, a history row, a dead letter; their fields copied by the store, their
 * strings the caller's) and the typed image a run is rebuilt from when it is taken (its
 * strings the image's own). Included by store.h, which is the door: nothing else includes it.
 * Must never: declare an operation (store.h's table of methods does), or hold a type of one
 * backend or of its library.
 */
#ifndef MEND_STORE_REC_H
#define MEND_STORE_REC_H

#include "transition.h"

/* Records written (fields copied; the caller keeps its strings). Nullable text is NULL; a delay
 * or due time < 0 is none. */
typedef struct mend_run_rec {
  const char *id, *workflow, *version, *source, *run_key, *status, *input, *error;
  int attention;
  double created, updated;
  /* NULL: any worker may take it; else held while the owner's lease lasts */
  const char *owner;
  const char *step_names;  /* JSON array of its steps' names: the rows not yet written */
  const char *script;      /* the version's text, kept with it (NULL: none, as registered) */
  /* The caller waits for the batch: the run key, and the number of a version not committed
   * before, may be looked up as the batch is written rather than at once (insert_run's 2), so
   * that the insert waits for nothing (another process's write lock). */
  int at_commit;
} mend_run_rec;

/* steps.custom_key: 0 the default key; else the step's own idempotency_key, and the step's
 * result either its own execution's or reused from the row of another that executed it (SPEC
 * section 6). Only an executing row is a source of reuse: its effect is its run's, compensated
 * by that run alone. 2 is read as 1 (a key of its own) by mends before it. */
typedef enum mend_key_kind {
  MEND_KEY_DEFAULT = 0,
  MEND_KEY_OWN = 1,
  MEND_KEY_REUSED = 2,
} mend_key_kind;

typedef struct mend_step_rec {
  const char *run_id;
  int idx;
  const char *name, *status;
  int attempts, comp_attempts;
  const char *idem_key;    /* in an update, NULL keeps the row's */
  int custom_key;          /* a mend_key_kind: how the row's custom idem_key came to be */
  const char *result;      /* JSON text or NULL */
  const char *error;
  const char *error_kind;  /* the kind of that error by its name ("fatal", as lerror.h's
                              mend_error_kind_name), kept beside its text; NULL with no error */
  int error_severity;      /* a compensable error's severity (1..3); 0: none (other kinds) */
  int error_stopped;       /* 1: the engine stopped the step's code (a limit): a workflow_error */
  double due;              /* when a wait ends; < 0 none */
  double last_delay;       /* last backoff delay chosen; < 0 none */
  double updated;
  int slept;               /* its `sleep` wait is over */
  const char *awaits;      /* the event a waiting step waits for; NULL otherwise */
  int new_row;             /* put_step only: 1 when the store holds no row of this step (the
                              engine never wrote one); 0 when one may be there, to replace */
} mend_step_rec;

typedef struct mend_history_rec {
  const char *run_id, *step;      /* step NULL for run-level events */
  double at;
  const char *event;              /* "step", "run", "attempt_failed", "alert", ... */
  const char *from_status, *to_status;
  int attempt;                    /* 0 when not about an attempt */
  const char *error;
  double delay;                   /* < 0 none */
  const char *detail;             /* free text or JSON */
  long seq;                       /* > 0: its number in the run's history, counted by the run's
                                     holder; 0: the next free one, looked up */
  const char *error_kind;         /* a step transition's error by its kind's name (as
                                     mend_step_rec's); NULL: none, or not a step's error */
} mend_history_rec;

typedef struct mend_dlq_rec {
  const char *run_id, *reason, *step, *error, *detail;
  double at;
} mend_dlq_rec;

/* A run as the engine rebuilds it when it takes the run (mend_store_run_image): typed, read
 * without the views for people. Every string is malloc'ed and owned by the image (NULL: none);
 * mend_run_image_free gives them back. */
typedef struct mend_step_image {
  int idx;                   /* the step's index; past the workflow's steps, a map's item */
  char *name;
  mend_step_status status;   /* running when an attempt was begun and has no outcome yet */
  int attempts, comp_attempts;
  int custom_key;            /* a mend_key_kind, as written */
  char *idem_key;            /* the key kept with the row; NULL: none kept */
  char *error;
  char *error_kind;          /* that error's kind by its name, as written; NULL: no error */
  int error_severity;        /* as written; 0: none */
  int error_stopped;         /* as written */
  double due, last_delay;    /* < 0: none */
  int slept;
  char *result;              /* JSON text */
} mend_step_image;

typedef struct mend_history_image {
  long seq;
  double at;
  char *step;                /* NULL: the run's own */
  char *event, *to;          /* names, as in mend_store_history */
  int attempt;
  char *detail;              /* a "map" row's list of items; NULL for every other event */
} mend_history_image;

typedef struct mend_run_image {
  char *workflow, *version, *reason, *error;
  char *input;               /* JSON text */
  char *unavailable;         /* why no engine could load its version; NULL: none said */
  mend_run_status status;
  int attention, cancel_requested;
  char *parent_run;          /* NULL: not a child run */
  mend_step_image *steps;    /* by idx: the workflow's steps (a step not begun reads pending,
                                no attempt), then the maps' items */
  int nsteps;
  mend_history_image *history;   /* the run's history, in seq order */
  int nhistory;
  long last_seq;             /* the last number in its history; 0: none */
  double last_at;            /* that row's time; -1: no history */
} mend_run_image;

void mend_run_image_free(mend_run_image *img);

#endif
