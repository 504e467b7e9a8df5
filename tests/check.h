/*
 * check: the smallest test harness that does the job. Each CHECK prints file:line and the
 * failed expression, counts the failure and goes on; check_done() prints the closing line
 * ("N passed, N failed") and returns the exit status.
 */
#ifndef MEND_CHECK_H
#define MEND_CHECK_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_passed, check_failed;

#define CHECK(cond) \
  do { \
    if (cond) \
      check_passed++; \
    else { \
      check_failed++; \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    } \
  } while (0)

#define CHECK_EQ_INT(a, b) do { \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b); \
    if (check_a_ == check_b_) check_passed++; \
    else { check_failed++; fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", \
                                   __FILE__, __LINE__, #a, #b, check_a_, check_b_); } \
  } while (0)

#define CHECK_NEAR(a, b, eps) do { \
    double check_a_ = (double)(a), check_b_ = (double)(b); \
    if (fabs(check_a_ - check_b_) <= (eps)) check_passed++; \
    else { check_failed++; fprintf(stderr, "%s:%d: %s ~= %s failed: %.9g != %.9g\n", \
                                   __FILE__, __LINE__, #a, #b, check_a_, check_b_); } \
  } while (0)

#define CHECK_STR(a, b) do { \
    const char *check_a_ = (a), *check_b_ = (b); \
    if (check_a_ && check_b_ && strcmp(check_a_, check_b_) == 0) check_passed++; \
    else { check_failed++; fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", \
                                   __FILE__, __LINE__, #a, #b, check_a_ ? check_a_ : "(null)", \
                                   check_b_ ? check_b_ : "(null)"); } \
  } while (0)

/* A fixed sequence of pseudo-random numbers (xorshift64), the same at every run: a test that
 * fails on one of them fails again. */
static uint64_t check_rng = 88172645463325252ULL;
static inline uint64_t check_next(void) {
  check_rng ^= check_rng << 13;
  check_rng ^= check_rng >> 7;
  check_rng ^= check_rng << 17;
  return check_rng;
}

/* A fresh directory /tmp/mend-NAME-XXXXXX into dir (len bytes), or the test ends (exit 2):
 * nothing it checks could be trusted without it. */
static inline void check_make_dir(char *dir, size_t len, const char *name) {
  snprintf(dir, len, "/tmp/mend-%s-XXXXXX", name);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
}

/* Writes text to path, or the test ends (exit 2). */
static inline void check_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    perror(path);
    exit(2);
  }
}

/* Removes every file a test made in dir, whatever its name (a list kept by hand forgets new
 * ones), then dir itself. */
static inline void check_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  if (rmdir(dir) != 0) perror(dir);
}

static int check_done(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
  return check_failed ? 1 : 0;
}

#endif
