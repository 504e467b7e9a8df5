/*
 * test_blocks_sizes: every block src/blocks.c hands out holds its whole
 * class, whichever way it was made (new, moved to another class, a large one made small, a
 * small one grown large and back), checked with the C library's own size of the block, so
 * that a plain build fails too: test_blocks sees a short block only under AddressSanitizer,
 * where neither it nor test_threads is run (tests/sanitize/run.sh's list).
 */
#include "blocks.h"
#include "check.h"

#include <malloc.h>

static int holds_class(void *p, size_t n) {
  size_t cls = mend_blocks_class_size(mend_blocks_class_of(n));
  return p && malloc_usable_size(p) >= cls;
}

int main(void) {
  mend_blocks b;
  mend_blocks_init(&b);
  int short_blocks = 0;
  for (size_t n = 1; n <= MEND_BLOCKS_MAX; n += 7) {
    void *p = mend_blocks_alloc(&b, NULL, 0, n);
    short_blocks += !holds_class(p, n);
    size_t up = n + 300 <= MEND_BLOCKS_MAX ? n + 300 : n;   /* another class */
    p = mend_blocks_alloc(&b, p, n, up);
    short_blocks += !holds_class(p, up);
    p = mend_blocks_alloc(&b, p, up, 70000);   /* large */
    p = mend_blocks_alloc(&b, p, 70000, n);    /* made small again, no kept block to take */
    short_blocks += !holds_class(p, n);
    mend_blocks_alloc(&b, p, n, 0);
    mend_blocks_drop(&b);   /* so that the next round's moves find no kept block */
  }
  CHECK_EQ_INT(short_blocks, 0);
  mend_blocks_drop(&b);
  return check_done("blocks_sizes");
}
