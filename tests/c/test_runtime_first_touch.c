/* With LOOM_POPULATE=1, fresh device memory is populated as the host
 * driver maps it (runtime/drivers/host/host_memory.c): a segment loom_malloc
 * just mapped is resident before any kernel touches it (mincore), reads as
 * zeros and computes as before; where the kernel lacks MADV_POPULATE_WRITE
 * (LOOM_POPULATE=touch takes that path) the pages are written one by one;
 * by default (LOOM_POPULATE unset), with LOOM_POPULATE=0, a segment over
 * the limit and memory the driver maps for itself stay unpopulated. Host driver only: the others map no memory of
 * their own or none the host can see. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/hal.h"
#include "loom/kernels/pointwise.h"
#include "runtime/drivers/host/host_internal.h"
#include "test_util.h"

#define MiB ((size_t)1 << 20)

static loom_stream_t *stream; /* the default stream */

/* Pages of [p, p + size) that are resident. */
static size_t resident_pages(const void *p, size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (size + page - 1) / page;
  unsigned char *vec = calloc(n, 1);
  if (!vec || mincore((void *)p, size, vec) != 0) {
    free(vec);
    return (size_t)-1;
  }
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) count += vec[i] & 1;
  free(vec);
  return count;
}

static size_t pages(size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (size + page - 1) / page;
}

static host_populate_stats stats(void) {
  host_populate_stats s;
  host_memory_populate_stats(&s);
  return s;
}

/* A fresh segment: a size no cached block holds (emptied first). */
static void *fresh(size_t size) {
  CHECK_OK(loom_memory_empty_cache(0));
  void *p = NULL;
  CHECK_OK(loom_malloc(0, size, NULL, &p));
  return p;
}

static int all_zero(const void *p, size_t size) {
  unsigned char *host = malloc(size);
  int zero = host != NULL;
  if (host) {
    CHECK_OK(loom_memcpy(stream, host, p, size));
    for (size_t i = 0; i < size && zero; ++i) zero = host[i] == 0;
  }
  free(host);
  return zero;
}

/* out = a + b over n floats through "pointwise.apply", checked on the host. */
static void check_add(void *out, void *a, void *b, int64_t n) {
  float *ha = malloc((size_t)n * sizeof *ha), *hb = malloc((size_t)n * sizeof *hb),
        *hc = malloc((size_t)n * sizeof *hc);
  CHECK(ha && hb && hc);
  if (ha && hb && hc) {
    for (int64_t i = 0; i < n; ++i) ha[i] = (float)(i % 97) * 0.5f, hb[i] = (float)(i % 13);
    CHECK_OK(loom_memcpy(stream, a, ha, (size_t)n * sizeof *ha));
    CHECK_OK(loom_memcpy(stream, b, hb, (size_t)n * sizeof *hb));
    const loom_kernel_t *k = NULL;
    CHECK_OK(loom_kernel_lookup("pointwise.apply", &k));
    loom_tensor t[3];
    for (int i = 0; i < 3; ++i)
      t[i] = (loom_tensor){.data = i == 0 ? out : i == 1 ? a : b, .dtype = LOOM_FLOAT32,
                           .rank = 1, .sizes = {n}, .strides = {1}};
    loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = LOOM_PW_ADD}, {.i = LOOM_PW_F32}};
    sc[LOOM_PW_PARAM].f = 1.0;
    const loom_launch_desc d = {.name = "add", .kernel = k, .tensors = t, .num_tensors = 3,
                                .scalars = sc, .num_scalars = LOOM_PW_CONST + 2, .range = n,
                                .grain = LOOM_PW_GRAIN};
    CHECK_OK(loom_launch(stream, &d));
    CHECK_OK(loom_memcpy(stream, hc, out, (size_t)n * sizeof *hc));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += hc[i] != ha[i] + hb[i];
    CHECK_EQ_INT(wrong, 0);
  }
  free(ha);
  free(hb);
  free(hc);
}

static void test_fresh_segment_resident(void) {
  setenv("LOOM_POPULATE", "1", 1);
  const host_populate_stats before = stats();
  /* 3 MiB takes a 20 MiB segment, 6 MiB more blocks of it */
  void *p = fresh(3 * MiB);
  CHECK_EQ_INT(resident_pages(p, 3 * MiB), pages(3 * MiB));
  const host_populate_stats after = stats();
  CHECK(after.populated_bytes + after.touched_bytes >=
        before.populated_bytes + before.touched_bytes + 20 * MiB);
  CHECK_EQ_INT(after.failures, before.failures);
  CHECK(all_zero(p, 3 * MiB));
  void *q = NULL, *r = NULL;
  CHECK_OK(loom_malloc(0, 3 * MiB, NULL, &q));
  CHECK_OK(loom_malloc(0, 3 * MiB, NULL, &r));
  check_add(r, p, q, (int64_t)(3 * MiB / sizeof(float)));
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_free(r));
}

static void test_small_segment_resident(void) {
  setenv("LOOM_POPULATE", "1", 1);
  void *p = fresh(4096); /* a 2 MiB segment of the small pool */
  CHECK_EQ_INT(resident_pages(p, 2 * MiB), pages(2 * MiB));
  CHECK_OK(loom_free(p));
}

/* The path of a kernel without MADV_POPULATE_WRITE: every page written. */
static void test_fallback_touches(void) {
  setenv("LOOM_POPULATE", "touch", 1);
  const host_populate_stats before = stats();
  void *p = fresh(12 * MiB); /* a segment of 12 MiB */
  const host_populate_stats after = stats();
  CHECK_EQ_INT(resident_pages(p, 12 * MiB), pages(12 * MiB));
  CHECK_EQ_INT(after.touched_bytes - before.touched_bytes, 12 * MiB);
  CHECK_EQ_INT(after.populated_bytes, before.populated_bytes);
  CHECK_EQ_INT(after.failures, before.failures);
  CHECK(all_zero(p, 12 * MiB));
  void *q = NULL, *r = NULL;
  CHECK_OK(loom_malloc(0, 12 * MiB, NULL, &q));
  CHECK_OK(loom_malloc(0, 12 * MiB, NULL, &r));
  check_add(r, p, q, (int64_t)(12 * MiB / sizeof(float)));
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_free(r));
  unsetenv("LOOM_POPULATE");
}

/* Unpopulated, a fresh segment has no page resident: the check above can fail. */
static void test_off_leaves_memory_unpopulated(void) {
  setenv("LOOM_POPULATE", "0", 1);
  const host_populate_stats before = stats();
  void *p = fresh(14 * MiB);
  CHECK_EQ_INT(resident_pages(p, 14 * MiB), 0);
  const host_populate_stats after = stats();
  CHECK_EQ_INT(after.populated_bytes + after.touched_bytes,
               before.populated_bytes + before.touched_bytes);
  void *q = NULL, *r = NULL;
  CHECK_OK(loom_malloc(0, 14 * MiB, NULL, &q));
  CHECK_OK(loom_malloc(0, 14 * MiB, NULL, &r));
  check_add(r, p, q, (int64_t)(14 * MiB / sizeof(float)));
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_free(r));
  unsetenv("LOOM_POPULATE");
}

/* Unset, nothing is populated. */
static void test_off_by_default(void) {
  unsetenv("LOOM_POPULATE");
  void *p = fresh(16 * MiB);
  CHECK_EQ_INT(resident_pages(p, 16 * MiB), 0);
  CHECK_OK(loom_free(p));
}

/* A reservation over the limit (256 MiB) is left to fault in. */
static void test_large_segment_skipped(void) {
  setenv("LOOM_POPULATE", "1", 1);
  const host_populate_stats before = stats();
  void *p = fresh(300 * MiB);
  CHECK_EQ_INT(resident_pages(p, 300 * MiB), 0);
  CHECK_EQ_INT(stats().skipped, before.skipped + 1);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
}

/* Memory the driver maps for itself (no context: the GEMM epilogue's
 * scratch) is not populated. */
static void test_driver_scratch_unpopulated(void) {
  setenv("LOOM_POPULATE", "1", 1);
  void *p = NULL;
  CHECK_OK(host_segment_alloc(NULL, 0, 4 * MiB, &p));
  if (p) {
    CHECK_EQ_INT(resident_pages(p, 4 * MiB), 0);
    host_segment_free(NULL, 0, p, 4 * MiB);
  }
}

int main(void) {
  setenv("LOOM_DRIVER", "host", 1);
  unsetenv("LOOM_SHAREABLE_MEMORY");
  if (loom_init() != LOOM_OK) {
    fprintf(stderr, "loom_init failed: %s\n", loom_last_error());
    return 1;
  }
  test_label = "host";
  CHECK_OK(loom_stream_default(0, &stream));
  RUN_TEST(test_fresh_segment_resident);
  RUN_TEST(test_small_segment_resident);
  RUN_TEST(test_fallback_touches);
  RUN_TEST(test_off_leaves_memory_unpopulated);
  RUN_TEST(test_off_by_default);
  RUN_TEST(test_large_segment_skipped);
  RUN_TEST(test_driver_scratch_unpopulated);
  unsetenv("LOOM_POPULATE");
  loom_shutdown();
  TEST_MAIN_END();
}
