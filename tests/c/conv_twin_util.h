/* tests/c/conv_twin_util.h — what the tests of the generic convolution
 * twins share (kernels/conv/conv_variants.h): a convolution case with its
 * reference in double, im2col + GEMM to hold the twins to, runs of the
 * implicit kernels, and a rerun of the test under LOOM_CPU_FEATURES=generic. */
#ifndef LOOM_TESTS_C_CONV_TWIN_UTIL_H
#define LOOM_TESTS_C_CONV_TWIN_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "tests/c/conv_util.h"

enum { GEN = LOOM_GEMM_GENERIC, AVX = LOOM_GEMM_AVX512 };
/* Twins and AVX-512 variants lie within TOL of the sum of the products'
 * magnitudes of a double reference. */
static const double TOL = 1e-5;

static inline float *randoms(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; ++i) p[i] = rnd();
  return p;
}

static inline int same(const float *a, const float *b, int64_t n) {
  return test_same_bits(a, b, sizeof(float) * (size_t)n);
}

/* How many of got[i] miss ref[i] by more than TOL * mag[i]. */
static inline int misses(const float *got, const double *ref, const double *mag, int64_t n) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !(fabs(got[i] - ref[i]) <= TOL * (mag[i] + 1e-30));
  return bad;
}

static inline loom_tensor t4(void *data, int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t st0,
                      int64_t st1, int64_t st2, int64_t st3) {
  return (loom_tensor){.data = data, .dtype = LOOM_FLOAT32, .rank = 4,
                       .sizes = {s0, s1, s2, s3}, .strides = {st0, st1, st2, st3}};
}

static inline loom_tensor bytes(void *data, int64_t n) {
  return (loom_tensor){.data = data, .dtype = LOOM_UINT8, .rank = 1, .sizes = {n}, .strides = {1}};
}

/* The input index read by output o through tap t along one axis, or -1. */
static inline int64_t src_at(const geom *g, int axis, int64_t o, int64_t t) {
  const int64_t i = o * g->s[axis] - g->p[axis] + t * g->d[axis];
  return i >= 0 && i < g->in[axis] ? i : -1;
}

/* x's element read by output position l through tap t of channel c, or -1. */
static inline int64_t x_at(const geom *g, int64_t n, int64_t c, int64_t l, int64_t t) {
  const int64_t od = l / (g->out[1] * g->out[2]), oh = l / g->out[2] % g->out[1],
                ow = l % g->out[2];
  const int64_t kd = t / (g->k[1] * g->k[2]), kh = t / g->k[2] % g->k[1], kw = t % g->k[2];
  const int64_t id = src_at(g, 0, od, kd), ih = src_at(g, 1, oh, kh), iw = src_at(g, 2, ow, kw);
  if (id < 0 || ih < 0 || iw < 0) return -1;
  return (((n * g->c + c) * g->in[0] + id) * g->in[1] + ih) * g->in[2] + iw;
}

/* The case: x (N, C, D, H, W), w (O, C/G, K), bias (O), dy (O, N, L), and
 * in double the forward y (N, O, L) with bias and the weight gradient gw
 * (O, C/G * K), each with its products' magnitudes. */
typedef struct conv_case {
  geom g;
  int64_t kk, len, cg, og, ck;
  float *x, *w, *bias, *dy;
  double *y, *ymag, *gw, *gwmag;
} conv_case;

static inline conv_case make_case(geom g) {
  finish(&g);
  conv_case k = {.g = g, .kk = g.k[0] * g.k[1] * g.k[2], .len = g.out[0] * g.out[1] * g.out[2],
                 .cg = g.c / g.groups, .og = g.o / g.groups};
  k.ck = k.cg * k.kk;
  k.x = randoms(g.n * g.c * g.in[0] * g.in[1] * g.in[2]);
  k.w = randoms(g.o * k.ck), k.bias = randoms(g.o), k.dy = randoms(g.o * g.n * k.len);
  k.y = calloc((size_t)(g.n * g.o * k.len), sizeof(double));
  k.ymag = calloc((size_t)(g.n * g.o * k.len), sizeof(double));
  k.gw = calloc((size_t)(g.o * k.ck), sizeof(double));
  k.gwmag = calloc((size_t)(g.o * k.ck), sizeof(double));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t l = 0; l < k.len; ++l) {
        const int64_t yi = (n * g.o + o) * k.len + l;
        k.y[yi] = k.bias[o], k.ymag[yi] = fabs(k.bias[o]);
        for (int64_t ci = 0; ci < k.cg; ++ci)
          for (int64_t t = 0; t < k.kk; ++t) {
            const int64_t xi = x_at(&g, n, o / k.og * k.cg + ci, l, t);
            if (xi < 0) continue;
            const int64_t wi = o * k.ck + ci * k.kk + t;
            const double p = (double)k.w[wi] * k.x[xi];
            const double q = (double)k.dy[(o * g.n + n) * k.len + l] * k.x[xi];
            k.y[yi] += p, k.ymag[yi] += fabs(p);
            k.gw[wi] += q, k.gwmag[wi] += fabs(q);
          }
      }
  return k;
}

static inline void free_case(conv_case *k) {
  free(k->x), free(k->w), free(k->bias), free(k->dy);
  free(k->y), free(k->ymag), free(k->gw), free(k->gwmag);
}

/* im2col + the GEMM of `isa` into y (N, O, L), with bias. */
static inline void gemm_forward(const conv_case *k, int isa, float *y) {
  const geom *g = &k->g;
  float *col = malloc(sizeof(float) * (size_t)(g->c * k->kk * g->n * k->len));
  loom_scalar sc[LOOM_CONV_NUM_SCALARS];
  scalars(g, sc);
  loom_tensor its[2] = {{.data = col, .dtype = LOOM_FLOAT32, .rank = 3,
                         .sizes = {g->c * k->kk, g->n, k->len},
                         .strides = {g->n * k->len, k->len, 1}},
                        image(k->x, g->n, g->c, g->in)};
  run(loom_im2col_kernel, its, 2, sc, LOOM_CONV_NUM_SCALARS, g->c * k->kk * g->n);
  loom_tensor ts[5] = {
      t4(y, g->n, g->groups, k->og, k->len, g->o * k->len, k->og * k->len, k->len, 1),
      t4(k->w, g->n, g->groups, k->og, k->ck, 0, k->og * k->ck, k->ck, 1),
      t4(col, g->n, g->groups, k->ck, k->len, k->len, k->ck * g->n * k->len, g->n * k->len, 1),
      {0},
      t4(k->bias, g->n, g->groups, k->og, k->len, 0, k->og, 1, 0)};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], isa, &p) == 0, "im2col plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  ts[3] = bytes(ws, p.workspace_bytes);
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 1.0}};
  run(loom_gemm_pack_kernel, ts, 5, gsc, 3, p.pack_range);
  run(loom_gemm_compute_kernel, ts, 5, gsc, 3, p.compute_range);
  free(ws), free(col);
}

/* The implicit forward `fn` under `isa` into y (N, O, L), tiles of tpos
 * positions, the last in `pieces`. */
static inline void implicit_forward(const conv_case *k, int isa, loom_kernel_fn fn, int64_t tpos,
                             int64_t pieces, float *y) {
  const geom *g = &k->g;
  loom_tensor ts[6] = {
      t4(y, g->n, g->groups, k->og, k->len, g->o * k->len, k->og * k->len, k->len, 1),
      t4(k->w, g->n, g->groups, k->og, k->ck, 0, k->og * k->ck, k->ck, 1),
      t4(NULL, g->n, g->groups, k->ck, k->len, 0, 0, 0, 0), {0},
      image(k->x, g->n, g->c, g->in),
      {.data = k->bias, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {g->o}, .strides = {1}}};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], isa, &p) == 0, "implicit plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  memset(ws, 0xff, (size_t)p.workspace_bytes + 1); /* NaNs where nothing was packed */
  ts[3] = bytes(ws, p.workspace_bytes);
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, ts, 4, gsc, 3, p.pack_units_a);
  loom_scalar sc[3 + LOOM_CONV_NUM_SCALARS] = {{.i = isa}, {.i = tpos}};
  scalars(g, sc + 2);
  sc[2 + LOOM_CONV_NUM_SCALARS].i = pieces;
  memset(y, 0xff, sizeof(float) * (size_t)(g->n * g->o * k->len));
  run(fn, ts, 6, sc, 3 + LOOM_CONV_NUM_SCALARS,
      g->n * g->groups * ((k->len + tpos - 1) / tpos - 1 + pieces));
  free(ws);
}

/* dW = dy @ col^T, by the GEMM over the materialised col (fn NULL) or by
 * the implicit weight gradient `fn`, under `isa`, into gw (O, C/G * K). */
static inline void wgrad(const conv_case *k, int isa, loom_kernel_fn fn, float *gw) {
  const geom *g = &k->g;
  const int64_t nl = g->n * k->len;
  float *col = malloc(sizeof(float) * (size_t)(g->c * k->kk * nl));
  loom_scalar sc[2 + LOOM_CONV_NUM_SCALARS] = {{.i = isa}};
  scalars(g, sc + 2);
  loom_tensor its[2] = {{.data = col, .dtype = LOOM_FLOAT32, .rank = 3,
                         .sizes = {g->c * k->kk, g->n, k->len},
                         .strides = {nl, k->len, 1}},
                        image(k->x, g->n, g->c, g->in)};
  run(loom_im2col_kernel, its, 2, sc + 2, LOOM_CONV_NUM_SCALARS, g->c * k->kk * g->n);
  loom_tensor ts[5] = {t4(gw, 1, g->groups, k->og, k->ck, 0, k->og * k->ck, k->ck, 1),
                       t4(k->dy, 1, g->groups, k->og, nl, 0, k->og * nl, nl, 1),
                       t4(col, 1, g->groups, nl, k->ck, 0, k->ck * nl, 1, nl), {0},
                       image(k->x, g->n, g->c, g->in)};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], isa, &p) == 0, "wgrad plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  ts[3] = bytes(ws, p.workspace_bytes);
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  memset(gw, 0xff, sizeof(float) * (size_t)(g->o * k->ck));
  if (fn) {
    run(loom_gemm_pack_kernel, ts, 4, gsc, 3, p.pack_units_a);
    run(fn, ts, 5, sc, 2 + LOOM_CONV_NUM_SCALARS, g->groups * p.n_panels);
  } else {
    run(loom_gemm_pack_kernel, ts, 4, gsc, 3, p.pack_range);
    run(loom_gemm_compute_kernel, ts, 4, gsc, 3, p.compute_range);
  }
  free(ws), free(col);
}

/* Runs this test again in a child process under LOOM_CPU_FEATURES=generic
 * with arguments "capped" and whether the CPU runs AVX-512 (which the
 * child can no longer ask); returns 1 if the child passed. */
static inline int rerun_capped(char **argv, int hw_avx512) {
  fflush(stdout), fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("LOOM_CPU_FEATURES", "generic", 1);
    const char hw[2] = {(char)('0' + (hw_avx512 != 0)), 0};
    execl("/proc/self/exe", argv[0], "capped", hw, (char *)NULL);
    _exit(127);
  }
  int status = -1;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

#endif /* LOOM_TESTS_C_CONV_TWIN_UTIL_H */
