/*
 * test_log: the log's readable lines, written when a person watches its stream, show what a
 * workflow wrote (a step's name, an error, a ctx:log line) without letting it drive the
 * terminal: control characters are spelled out, but for the line breaks and tabs of a
 * traceback.
 */
#include "log.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *human_line(const mend_log_record *rec) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  mend_log_sink s = { .out = f, .human = 1 };
  mend_log_to_sink(&s, rec);
  fclose(f);
  return text;
}

static void it_spells_out_control_characters(void) {
  mend_log_record rec = { .level = "warn", .time = 1e9, .run = "r1", .step = "a\x1b]0;x\x07",
                          .attempt = 1, .event = "step",
                          .message = "l1\n\tl2\x1b[2J\r\xc2\x9b\x7f ok \xc3\xbc" };
  char *line = human_line(&rec);
  CHECK(line != NULL);
  CHECK(strstr(line, "r1 a\\x1b]0;x\\x07 #1 step: ") != NULL);
  CHECK(strstr(line, "l1\n\tl2\\x1b[2J\\r\\u{9b}\\x7f ok \xc3\xbc\n") != NULL);
  CHECK(strchr(line, '\x1b') == NULL);
  CHECK(strchr(line, '\x07') == NULL);
  CHECK(strstr(line, "\xc2\x9b") == NULL);
  free(line);
}

/* A raw C1 byte is an escape sequence's start to a terminal that is not UTF-8's; U+202E would
 * show the rest of a line reversed, U+2028 breaks it in a pager. Other characters stay. */
static void it_spells_out_stray_bytes_and_the_marks_a_terminal_lays_out(void) {
  mend_log_record rec = { .level = "info", .time = 1e9, .run = "r1", .step = "s\xe2\x80\xae" "b",
                          .attempt = 1, .event = "log",
                          .message = "x\x9b" "31m \xe2\x80\xa8 \xe2\x81\xa6 \xd8\x9c "
                                     "\xe2\x80\x94 \xc3" };
  char *line = human_line(&rec);
  CHECK(line != NULL);
  CHECK(strstr(line, "r1 s\\u{202e}b #1 log: ") != NULL);
  CHECK(strstr(line, "x\\x9b31m \\u{2028} \\u{2066} \\u{61c} \xe2\x80\x94 \\xc3\n") != NULL);
  free(line);
}

int main(void) {
  it_spells_out_control_characters();
  it_spells_out_stray_bytes_and_the_marks_a_terminal_lays_out();
  return check_done("log");
}
