/* tests/c/conv_util.h — what the convolution tests share beside the
 * harness (test_util.h): random numbers, geometries and a serial kernel
 * runner. */
#ifndef LOOM_TESTS_C_CONV_UTIL_H
#define LOOM_TESTS_C_CONV_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/conv/conv.h"
#include "loom/kernel_abi.h"
#include "tests/c/test_util.h"

static uint64_t rng = 12345;
static inline float rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

typedef struct geom {
  int64_t n, c, o, groups, in[3], k[3], s[3], p[3], d[3], out[3];
} geom;

static inline void finish(geom *g) {
  for (int i = 0; i < 3; ++i)
    g->out[i] = (g->in[i] + 2 * g->p[i] - g->d[i] * (g->k[i] - 1) - 1) / g->s[i] + 1;
}

static inline void scalars(const geom *g, loom_scalar sc[LOOM_CONV_NUM_SCALARS]) {
  for (int i = 0; i < 3; ++i) {
    sc[i].i = g->k[i], sc[3 + i].i = g->s[i], sc[6 + i].i = g->p[i];
    sc[9 + i].i = g->d[i], sc[12 + i].i = g->out[i];
  }
}

static inline loom_tensor image(float *data, int64_t n, int64_t c, const int64_t sp[3]) {
  loom_tensor t = {.data = data, .dtype = LOOM_FLOAT32, .rank = 5,
                   .sizes = {n, c, sp[0], sp[1], sp[2]}};
  t.strides[4] = 1;
  for (int i = 3; i >= 0; --i) t.strides[i] = t.strides[i + 1] * t.sizes[i + 1];
  return t;
}

static inline void run(loom_kernel_fn fn, loom_tensor *ts, int nt, loom_scalar *sc, int ns,
                       int64_t range) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = (uint32_t)nt,
                        .tensors = ts, .num_scalars = (uint32_t)ns, .scalars = sc,
                        .range = range, .grain = 3};
  for (int64_t s = 0; s < range; s += 3) {
    int rc = fn(&a, s, s + 3 < range ? s + 3 : range);
    CHECK_MSG(rc == 0, "kernel rc %d", rc);
  }
}

#endif /* LOOM_TESTS_C_CONV_UTIL_H */
