/* tests/c/test_fuse_launch.h — what the fusion tests launch with: device
 * buffers, flat tensors, "pointwise.apply" launches, transfers, random
 * inputs and the fusion counters. */
#ifndef LOOM_TEST_FUSE_LAUNCH_H
#define LOOM_TEST_FUSE_LAUNCH_H

#include <stdint.h>
#include <stdlib.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "loom/kernels/pointwise.h"
#include "test_drivers.h"

static inline int fuses(void) { return test_driver_has(TEST_DRIVER_ASYNC | TEST_DRIVER_KERNELS); }

static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_OK(loom_malloc(0, bytes, NULL, &p));
  return p;
}

static inline loom_tensor vec(void *p, int32_t dtype, int64_t n) {
  return (loom_tensor){.data = p, .dtype = dtype, .rank = 1, .sizes = {n}, .strides = {1}};
}

/* A tensor slot left out of a launch. */
static const loom_tensor NONE = {.rank = -1};

/* out = op(a[, b]) through "pointwise.apply", in float (or int64 for
 * integer tensors), p0 its first parameter. */
static inline loom_status pw(loom_stream_t *s, const char *name, int op, loom_tensor out, loom_tensor a,
                      loom_tensor b, double p0) {
  static const loom_kernel_t *k;
  if (!k && loom_kernel_lookup("pointwise.apply", &k) != LOOM_OK) return LOOM_ERROR_NOT_SUPPORTED;
  const int integer = out.dtype == LOOM_INT64;
  loom_tensor t[3] = {out, a, b};
  loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = op}, {.i = integer ? LOOM_PW_I64 : LOOM_PW_F32}};
  if (integer) sc[LOOM_PW_PARAM].i = (int64_t)p0;
  else sc[LOOM_PW_PARAM].f = p0;
  const uint32_t nt = b.rank < 0 ? 2 : 3;
  const loom_launch_desc d = {.name = name, .kernel = k, .tensors = t, .num_tensors = nt,
                              .scalars = sc, .num_scalars = LOOM_PW_CONST + nt - 1,
                              .range = loom_tensor_numel(&out), .grain = LOOM_PW_GRAIN};
  return loom_launch(s, &d);
}

static inline void upload(loom_stream_t *s, void *dev, const void *host, size_t bytes) {
  CHECK_OK(loom_memcpy(s, dev, host, bytes));
}

static inline void download(loom_stream_t *s, void *host, const void *dev, size_t bytes) {
  CHECK_OK(loom_memcpy(s, host, dev, bytes));
}

static inline float *random_floats(size_t n, unsigned seed) {
  float *h = malloc(n * sizeof *h);
  srand(seed);
  for (size_t i = 0; i < n; ++i) h[i] = (float)rand() / (float)RAND_MAX * 4.0f - 2.0f;
  return h;
}

static inline loom_fuse_stats stats(void) {
  loom_fuse_stats s;
  loom_fuse_stats_get(&s);
  return s;
}

#endif
