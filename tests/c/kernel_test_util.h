/* tests/c/kernel_test_util.h — what the kernel tests share beside the
 * harness (test_util.h, with its near-equality measures): tensors over
 * caller memory, a launch run chunk by chunk, random fills and scalars. */
#ifndef LOOM_TESTS_KERNEL_TEST_UTIL_H
#define LOOM_TESTS_KERNEL_TEST_UTIL_H

#include <math.h>
#include <stdlib.h>

#include "loom/kernel_abi.h"
#include "test_util.h"

static inline loom_tensor tensor(void *data, int32_t dtype, int rank, const int64_t *sizes,
                                 const int64_t *strides) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = rank};
  for (int d = 0; d < rank; ++d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = strides[d];
  }
  return t;
}

/* Contiguous strides for `sizes`. */
static inline loom_tensor dense(void *data, int32_t dtype, int rank, const int64_t *sizes) {
  int64_t strides[LOOM_MAX_DIMS], s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= sizes[d];
  }
  return tensor(data, dtype, rank, sizes, strides);
}

/* An absent optional tensor. */
static inline loom_tensor none(void) { return (loom_tensor){.data = NULL}; }

/* Runs a kernel over [0, range) in chunks of `grain`, like the runtime. */
static inline int run_chunks(loom_kernel_fn fn, loom_tensor *t, int nt, loom_scalar *s,
                             int ns, int64_t range, int64_t grain) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                        .num_tensors = (uint32_t)nt, .tensors = t,
                        .num_scalars = (uint32_t)ns, .scalars = s,
                        .range = range, .grain = grain};
  for (int64_t b = 0; b < range; b += grain) {
    int64_t e = b + grain < range ? b + grain : range;
    int rc = fn(&a, b, e);
    if (rc) return rc;
  }
  return 0;
}

static inline double frand(void) { return (double)rand() / RAND_MAX * 2.0 - 1.0; }
static inline void fill(double *p, int64_t n) { for (int64_t i = 0; i < n; ++i) p[i] = frand(); }
static inline loom_scalar si(int64_t v) { loom_scalar s; s.i = v; return s; }
static inline loom_scalar sf(double v) { loom_scalar s; s.f = v; return s; }

#endif /* LOOM_TESTS_KERNEL_TEST_UTIL_H */
