#include "kernels/random/random.h"

#include <math.h>

#include "kernels/base/convert.h"
#include "kernels/base/dtype.h"
#include "kernels/base/iter.h"
#include "kernels/registry.h"
#include "base/cpu.h"
#include "loom/status.h"

#define LOOM_TWO_PI 6.283185307179586476925286766559
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void loom_philox4x32(uint64_t seed, uint64_t c0, uint64_t c1, uint32_t out[4]) {
  uint32_t c[4] = {(uint32_t)c0, (uint32_t)(c0 >> 32), (uint32_t)c1,
                   (uint32_t)(c1 >> 32)};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

/* Uniform doubles in [0, 1) from two words (53 bits) or one word (24). */
static inline double u53(uint32_t lo, uint32_t hi) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}
static inline double u24(uint32_t w) { return (double)(w >> 8) * 0x1.0p-24; }

static int is_floating(int32_t dtype) {
  return dtype == LOOM_FLOAT32 || dtype == LOOM_FLOAT64 ||
         dtype == LOOM_FLOAT16 || dtype == LOOM_BFLOAT16;
}

/* `v` as the output dtype will store it (for the [from, to) bound check). */
static double round_to(int32_t dtype, double v) {
  switch (dtype) {
    case LOOM_FLOAT32: return (float)v;
    case LOOM_FLOAT16: return loom_f16_to_f32(loom_f32_to_f16((float)v));
    case LOOM_BFLOAT16: return loom_bf16_to_f32(loom_f32_to_bf16((float)v));
    default: return v;
  }
}

typedef struct draw_ctx {
  const loom_kernel_args *args;
  uint64_t seed, offset;
  int32_t dtype;
  const char *p;       /* tensors[1] run (bernoulli_tensor), else NULL */
  int64_t p_stride;
  int32_t p_dtype;
} draw_ctx;

/* Fills vals[0..n) (doubles, or int64 when the generator is integral) for
 * elements first..first+n-1. */
typedef void (*draw_fn)(const draw_ctx *ctx, int64_t first, int64_t n,
                        double *f, int64_t *i);

/* The Philox block `b` of this launch, recomputed only when it changes:
 * consecutive elements share a block when they use fewer than four words. */
typedef struct block_cache {
  uint64_t index;
  int valid;
  uint32_t r[4];
} block_cache;

static inline const uint32_t *block_at(const draw_ctx *ctx, block_cache *c,
                                       uint64_t b) {
  if (!c->valid || c->index != b) {
    loom_philox4x32(ctx->seed, ctx->offset + b, 0, c->r);
    c->index = b;
    c->valid = 1;
  }
  return c->r;
}

static void draw_uniform(const draw_ctx *ctx, int64_t first, int64_t n,
                         double *f, int64_t *iv) {
  const double from = ctx->args->scalars[2].f, to = ctx->args->scalars[3].f;
  const double span = to - from;
  const int wide = ctx->dtype == LOOM_FLOAT64;
  block_cache cache = {0};
  for (int64_t k = 0; k < n; ++k) {
    uint64_t e = (uint64_t)(first + k);
    double u;
    if (wide) { /* two words per element, two elements per block */
      const uint32_t *r = block_at(ctx, &cache, e >> 1);
      u = u53(r[2 * (e & 1)], r[2 * (e & 1) + 1]);
    } else { /* one word per element, four per block */
      u = u24(block_at(ctx, &cache, e >> 2)[e & 3]);
    }
    double v = from + u * span;
    /* Rounding to a narrow type may land on `to`; keep the range half-open. */
    if (span > 0 && round_to(ctx->dtype, v) >= to) v = from;
    f[k] = v;
  }
  (void)iv;
}

/* Box-Muller: one block gives a pair of normals, cos for the even element
 * and sin for the odd one. Outputs narrower than float64 take the radius
 * and the angle's sine and cosine from loom_box_muller (within 1e-11
 * relative, far below float's rounding), a block's pairs at a time;
 * float64 outputs the C library. */
static void draw_normal(const draw_ctx *ctx, int64_t first, int64_t n,
                        double *f, int64_t *iv) {
  const double mean = ctx->args->scalars[2].f, std = ctx->args->scalars[3].f;
  if (ctx->dtype != LOOM_FLOAT64) {
    enum { PAIRS = LOOM_CONVERT_BLOCK / 2 + 1 };
    const int64_t b0 = first >> 1, nb = ((first + n - 1) >> 1) - b0 + 1;
    double u[PAIRS], angle[PAIRS], radius[PAIRS], sine[PAIRS], cosine[PAIRS];
    for (int64_t j = 0; j < nb; ++j) {
      uint32_t r[4];
      loom_philox4x32(ctx->seed, ctx->offset + (uint64_t)(b0 + j), 0, r);
      u[j] = 1.0 - u53(r[0], r[1]); /* (0, 1]: log stays finite */
      angle[j] = LOOM_TWO_PI * u53(r[2], r[3]);
    }
    if (loom_cpu_features() & LOOM_FEATURE_AVX512F)
      loom_box_muller_avx512(u, angle, nb, radius, sine, cosine);
    else
      loom_box_muller(u, angle, nb, radius, sine, cosine);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t e = first + k, j = (e >> 1) - b0;
      f[k] = mean + std * radius[j] * ((e & 1) ? sine[j] : cosine[j]);
    }
    (void)iv;
    return;
  }
  block_cache cache = {0};
  double radius = 0, angle = 0;
  for (int64_t k = 0; k < n; ++k) {
    uint64_t e = (uint64_t)(first + k);
    if (!cache.valid || cache.index != (e >> 1)) {
      const uint32_t *r = block_at(ctx, &cache, e >> 1);
      double u1 = 1.0 - u53(r[0], r[1]); /* (0, 1]: log stays finite */
      radius = sqrt(-2.0 * log(u1));
      angle = LOOM_TWO_PI * u53(r[2], r[3]);
    }
    f[k] = mean + std * radius * ((e & 1) ? sin(angle) : cos(angle));
  }
  (void)iv;
}

static void draw_random(const draw_ctx *ctx, int64_t first, int64_t n,
                        double *f, int64_t *iv) {
  const int64_t from = ctx->args->scalars[2].i;
  const uint64_t range = ctx->args->scalars[3].u;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t r[4];
    loom_philox4x32(ctx->seed, ctx->offset + (uint64_t)(first + k), 0, r);
    uint64_t bits = ((uint64_t)r[1] << 32) | r[0];
    uint64_t v = range == 0 ? bits
                 : range <= UINT32_MAX ? r[0] % range
                                       : bits % range;
    iv[k] = (int64_t)((uint64_t)from + v);
  }
  (void)f;
}

static void draw_bernoulli(const draw_ctx *ctx, int64_t first, int64_t n,
                           double *f, int64_t *iv) {
  double pv[LOOM_CONVERT_BLOCK];
  if (ctx->p)
    loom_convert_run((char *)pv, LOOM_FLOAT64, sizeof(double), ctx->p,
                     ctx->p_dtype, ctx->p_stride, n);
  for (int64_t k = 0; k < n; ++k) {
    uint32_t r[4];
    loom_philox4x32(ctx->seed, ctx->offset + (uint64_t)(first + k), 0, r);
    double p = ctx->p ? pv[k] : ctx->args->scalars[2].f;
    iv[k] = u53(r[0], r[1]) < p;
  }
  (void)f;
}

static void draw_exponential(const draw_ctx *ctx, int64_t first, int64_t n,
                             double *f, int64_t *iv) {
  const double lambda = ctx->args->scalars[2].f;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t r[4];
    loom_philox4x32(ctx->seed, ctx->offset + (uint64_t)(first + k), 0, r);
    f[k] = -log1p(-u53(r[0], r[1])) / lambda;
  }
  (void)iv;
}

/* Walks out over [begin, end), draws a block at a time and stores it
 * converted to out's dtype. */
static int run(const loom_kernel_args *args, int64_t begin, int64_t end,
               draw_fn draw, int integral, int with_p) {
  const uint32_t listed = with_p ? 2 : 1;
  if (args->num_tensors < listed || args->num_tensors > listed + 1 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  uint64_t seed = args->scalars[0].u, offset = args->scalars[1].u;
  if (args->num_tensors == listed + 1) { /* the state cell: [seed, base] */
    const loom_tensor *cell = &args->tensors[listed];
    if (cell->dtype != LOOM_INT64 || cell->rank != 1 || cell->sizes[0] < 2 || !cell->data)
      return LOOM_ERROR_INVALID_ARGUMENT;
    const int64_t *c = (const int64_t *)cell->data;
    seed = (uint64_t)c[0];
    offset += (uint64_t)c[cell->strides[0]];
  }
  const loom_tensor *ops[2] = {&args->tensors[0],
                               with_p ? &args->tensors[1] : NULL};
  loom_iter it;
  if (loom_iter_init(&it, with_p ? 2 : 1, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  draw_ctx ctx = {.args = args,
                  .seed = seed,
                  .offset = offset,
                  .dtype = args->tensors[0].dtype,
                  .p_dtype = with_p ? args->tensors[1].dtype : 0};
  const int64_t ds = it.strides[0][it.rank - 1];
  if (with_p) ctx.p_stride = it.strides[1][it.rank - 1];

  double f[LOOM_CONVERT_BLOCK];
  int64_t iv[LOOM_CONVERT_BLOCK];
  char *p[2];
  int64_t n, index = begin;
  while ((n = loom_iter_next(&it, p)) > 0) {
    for (int64_t i = 0; i < n; i += LOOM_CONVERT_BLOCK) {
      int64_t m = n - i < LOOM_CONVERT_BLOCK ? n - i : LOOM_CONVERT_BLOCK;
      if (with_p) ctx.p = p[1] + i * ctx.p_stride;
      draw(&ctx, index + i, m, f, iv);
      int bad = integral
          ? loom_convert_run(p[0] + i * ds, ctx.dtype, ds, (const char *)iv,
                             LOOM_INT64, sizeof(int64_t), m)
          : loom_convert_run(p[0] + i * ds, ctx.dtype, ds, (const char *)f,
                             LOOM_FLOAT64, sizeof(double), m);
      if (bad) return LOOM_ERROR_NOT_SUPPORTED;
    }
    index += n;
  }
  return LOOM_OK;
}

int loom_kernel_uniform(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 4 || !is_floating(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_uniform, 0, 0);
}

int loom_kernel_normal(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 4 || !is_floating(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_normal, 0, 0);
}

int loom_kernel_random(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 4 || loom_dtype_is_complex(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_random, 1, 0);
}

int loom_kernel_bernoulli(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 3 || loom_dtype_is_complex(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_bernoulli, 1, 0);
}

int loom_kernel_bernoulli_tensor(const loom_kernel_args *args, int64_t begin,
                                 int64_t end) {
  if (loom_dtype_is_complex(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_bernoulli, 1, 1);
}

int loom_kernel_exponential(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  if (args->num_scalars < 3 || !is_floating(args->tensors[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return run(args, begin, end, draw_exponential, 0, 0);
}

const loom_kernel_entry loom_random_kernels[] = {
    {"random.uniform", loom_kernel_uniform, NULL},
    {"random.normal", loom_kernel_normal, NULL},
    {"random.integers", loom_kernel_random, NULL},
    {"random.bernoulli", loom_kernel_bernoulli, NULL},
    {"random.bernoulli_tensor", loom_kernel_bernoulli_tensor, NULL},
    {"random.exponential", loom_kernel_exponential, NULL},
    {NULL, NULL, NULL},
};
