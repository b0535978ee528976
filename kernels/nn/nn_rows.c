/* fp32 row primitives. Built as is for the baseline ISA and again by
 * nn_rows_avx512.c with LOOM_NN_ROWS_ISA set. Every loop works on 16
 * independent lanes so the compiler can keep them in vector registers. */
/* No contraction into FMA: both builds must round the same way. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/pointwise/exp_neg.h"
#include "kernels/nn/nn_rows.h"
#if defined(__AVX512F__)
#include "kernels/gemm/transpose_avx512.h"
#endif

#ifdef LOOM_NN_ROWS_ISA
#define ROWS_CAT2(a, b) a##b
#define ROWS_CAT(a, b) ROWS_CAT2(a, b)
#define ROWS_NAME(base) ROWS_CAT(base, LOOM_NN_ROWS_ISA)
#else
#define ROWS_NAME(base) base
#endif

#define LANES 16

static inline float lanes_total(const float *acc) {
  float s = 0.0f;
  for (int l = 0; l < LANES; ++l) s += acc[l];
  return s;
}

static float ROWS_NAME(row_max)(const float *x, int64_t n) {
  float acc[LANES];
  int nan = 0;
  int64_t i = 0;
#if defined(__AVX512F__)
  /* max_ps(v, a) is v > a ? v : a in each lane, the choice of the loop
   * below, which the compiler leaves scalar because of the NaN test. */
  __m512 va = _mm512_set1_ps(-INFINITY);
  __mmask16 vnan = 0;
  for (; i + LANES <= n; i += LANES) {
    const __m512 v = _mm512_loadu_ps(x + i);
    va = _mm512_max_ps(v, va);
    vnan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  _mm512_storeu_ps(acc, va);
  nan = vnan != 0;
#else
  for (int l = 0; l < LANES; ++l) acc[l] = -INFINITY;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      const float v = x[i + l];
      acc[l] = v > acc[l] ? v : acc[l];
      nan |= v != v;
    }
#endif
  float m = -INFINITY;
  for (int l = 0; l < LANES; ++l) m = acc[l] > m ? acc[l] : m;
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? NAN : m;
}

static float ROWS_NAME(row_exp_sum)(const float *x, int64_t n, float m,
                                    float *y) {
  float acc[LANES] = {0};
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 vacc = _mm512_setzero_ps();
  const __m512 vm = _mm512_set1_ps(m);
  for (; i + LANES <= n; i += LANES) {
    const __m512 e = loom_exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(y + i, e);
    vacc = _mm512_add_ps(vacc, e);
  }
  _mm512_storeu_ps(acc, vacc);
#else
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      const float e = loom_exp_neg(x[i + l] - m);
      y[i + l] = e;
      acc[l] += e;
    }
#endif
  float s = lanes_total(acc);
  for (; i < n; ++i) {
    const float e = loom_exp_neg(x[i] - m);
    y[i] = e;
    s += e;
  }
  return s;
}

static void ROWS_NAME(row_affine)(const float *x, int64_t n, float a, float b,
                                  float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

static float ROWS_NAME(row_sum)(const float *x, int64_t n) {
  float acc[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) acc[l] += x[i + l];
  float s = lanes_total(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

static float ROWS_NAME(row_dot)(const float *x, const float *y, int64_t n) {
  float acc[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) acc[l] += x[i + l] * y[i + l];
  float s = lanes_total(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

static float ROWS_NAME(row_sq_dev)(const float *x, int64_t n, float c) {
  float acc[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      const float d = x[i + l] - c;
      acc[l] += d * d;
    }
  float s = lanes_total(acc);
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

static void ROWS_NAME(row_softmax_grad)(const float *g, const float *y,
                                        int64_t n, float dot, float *gi) {
  for (int64_t i = 0; i < n; ++i) gi[i] = y[i] * (g[i] - dot);
}

static void ROWS_NAME(row_log_softmax_grad)(const float *g, const float *y,
                                            int64_t n, float sum, float *gi) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(sum);
  for (; i + LANES <= n; i += LANES)
    _mm512_storeu_ps(gi + i, _mm512_sub_ps(_mm512_loadu_ps(g + i),
                                           _mm512_mul_ps(loom_exp_neg16(_mm512_loadu_ps(y + i)), vs)));
#endif
  for (; i < n; ++i) gi[i] = g[i] - loom_exp_neg(y[i]) * sum;
}

static void ROWS_NAME(row_norm_apply)(const float *x, int64_t n, float mean,
                                      float rstd, const float *w,
                                      const float *b, float *y) {
  if (w && b) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  } else if (b) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd;
  }
}

static void ROWS_NAME(row_norm_grad_sums)(const float *dy, const float *x,
                                          const float *w, int64_t n,
                                          float mean, float rstd,
                                          float out[2]) {
  float acc_h[LANES] = {0}, acc_hx[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      const float h = w ? dy[i + l] * w[i + l] : dy[i + l];
      acc_h[l] += h;
      acc_hx[l] += h * ((x[i + l] - mean) * rstd);
    }
  float sh = lanes_total(acc_h), shx = lanes_total(acc_hx);
  for (; i < n; ++i) {
    const float h = w ? dy[i] * w[i] : dy[i];
    sh += h;
    shx += h * ((x[i] - mean) * rstd);
  }
  out[0] = sh;
  out[1] = shx;
}

static void ROWS_NAME(row_norm_grad_apply)(const float *dy, const float *x,
                                           const float *w, int64_t n,
                                           float mean, float rstd, float a,
                                           float c, float *dx) {
  if (w) {
    for (int64_t i = 0; i < n; ++i)
      dx[i] = rstd * (dy[i] * w[i] - a - (x[i] - mean) * rstd * c);
  } else {
    for (int64_t i = 0; i < n; ++i)
      dx[i] = rstd * (dy[i] - a - (x[i] - mean) * rstd * c);
  }
}

/* norm_grad_sums and the parameter sums in one pass; has_w and has_b are
 * constants at each call, so each case compiles to its own loop. */
static inline __attribute__((always_inline)) void ROWS_NAME(grad_sums_acc)(
    const float *dy, const float *x, const float *w, int64_t n, float mean, float rstd,
    float out[2], float *restrict acc_b, float *restrict acc_w, const int has_w,
    const int has_b) {
  float acc_h[LANES] = {0}, acc_hx[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      const float d = dy[i + l], xh = (x[i + l] - mean) * rstd;
      const float h = has_w ? d * w[i + l] : d;
      acc_h[l] += h;
      acc_hx[l] += h * xh;
      if (has_b) acc_b[i + l] += d;
      acc_w[i + l] += d * xh;
    }
  float sh = lanes_total(acc_h), shx = lanes_total(acc_hx);
  for (; i < n; ++i) {
    const float d = dy[i], xh = (x[i] - mean) * rstd;
    const float h = has_w ? d * w[i] : d;
    sh += h;
    shx += h * xh;
    if (has_b) acc_b[i] += d;
    acc_w[i] += d * xh;
  }
  out[0] = sh;
  out[1] = shx;
}

static void ROWS_NAME(row_norm_grad_sums_acc)(const float *dy, const float *x, const float *w,
                                              int64_t n, float mean, float rstd, float out[2],
                                              float *acc_b, float *acc_w) {
  if (w && acc_b) ROWS_NAME(grad_sums_acc)(dy, x, w, n, mean, rstd, out, acc_b, acc_w, 1, 1);
  else if (w) ROWS_NAME(grad_sums_acc)(dy, x, w, n, mean, rstd, out, acc_b, acc_w, 1, 0);
  else if (acc_b) ROWS_NAME(grad_sums_acc)(dy, x, w, n, mean, rstd, out, acc_b, acc_w, 0, 1);
  else ROWS_NAME(grad_sums_acc)(dy, x, w, n, mean, rstd, out, acc_b, acc_w, 0, 0);
}

static void ROWS_NAME(row_norm_param_acc)(const float *dy, const float *x, int64_t n,
                                          float mean, float rstd, float *restrict acc_b,
                                          float *restrict acc_w) {
  if (acc_b) {
    for (int64_t i = 0; i < n; ++i) {
      acc_b[i] += dy[i];
      acc_w[i] += dy[i] * ((x[i] - mean) * rstd);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) acc_w[i] += dy[i] * ((x[i] - mean) * rstd);
  }
}

#if defined(__AVX512F__)
/* The 16 lanes of each of 16 rows' accumulators totalled as lanes_total
 * totals one row's (0, then lane 0, lane 1, ...), one row per lane of the
 * result: the accumulators transposed, then added in lane order. */
static inline __m512 lane_totals16(const __m512 acc[16]) {
  __m512i t[16];
  for (int r = 0; r < 16; ++r) t[r] = _mm512_castps_si512(acc[r]);
  loom_gemm_transpose16(t);
  __m512 s = _mm512_setzero_ps();
  for (int l = 0; l < LANES; ++l) s = _mm512_add_ps(s, _mm512_castsi512_ps(t[l]));
  return s;
}

/* per row: c[r] == NULL ? sum of x_r : sum of (x_r - c[r])^2, as row_sum and
 * row_sq_dev take them; the rows' chains are independent, so they overlap */
static void rows_sums16(const float *x, int64_t rows, int64_t n, const float *c, float *out) {
  __m512 acc[16];
  const int64_t nv = n - n % LANES;
  for (int64_t r = 0; r < 16; ++r) {
    __m512 a = _mm512_setzero_ps();
    if (r < rows) {
      const float *xr = x + r * n;
      if (c) {
        const __m512 vc = _mm512_set1_ps(c[r]);
        for (int64_t i = 0; i < nv; i += LANES) {
          const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xr + i), vc);
          a = _mm512_add_ps(a, _mm512_mul_ps(d, d));
        }
      } else {
        for (int64_t i = 0; i < nv; i += LANES) a = _mm512_add_ps(a, _mm512_loadu_ps(xr + i));
      }
    }
    acc[r] = a;
  }
  float s[16];
  _mm512_storeu_ps(s, lane_totals16(acc));
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float t = s[r];
    if (c)
      for (int64_t i = nv; i < n; ++i) t += (xr[i] - c[r]) * (xr[i] - c[r]);
    else
      for (int64_t i = nv; i < n; ++i) t += xr[i];
    out[r] = t;
  }
}
#endif

static void ROWS_NAME(row_norm_forward)(const float *x, int64_t rows, int64_t n, int rms,
                                        float eps, const float *w, const float *b, float *y,
                                        float *mean, float *rstd) {
#if defined(__AVX512F__)
  /* the transposes pay for themselves from about four rows on */
  if (rows < 4) {
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * n;
      mean[r] = rms ? 0.0f : ROWS_NAME(row_sum)(xr, n) / (float)n;
      rstd[r] = 1.0f / sqrtf(ROWS_NAME(row_sq_dev)(xr, n, mean[r]) / (float)n + eps);
      ROWS_NAME(row_norm_apply)(xr, n, mean[r], rstd[r], w, b, y + r * n);
    }
    return;
  }
  float s[16];
  const __m512 vn = _mm512_set1_ps((float)n);
  const __mmask16 live = (__mmask16)((1u << rows) - 1u);
  if (rms) {
    _mm512_mask_storeu_ps(mean, live, _mm512_setzero_ps());
  } else {
    rows_sums16(x, rows, n, NULL, s);
    _mm512_mask_storeu_ps(mean, live, _mm512_div_ps(_mm512_loadu_ps(s), vn));
  }
  rows_sums16(x, rows, n, mean, s);
  const __m512 var = _mm512_div_ps(_mm512_loadu_ps(s), vn);
  _mm512_mask_storeu_ps(rstd, live,
                        _mm512_div_ps(_mm512_set1_ps(1.0f),
                                      _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(eps)))));
#else
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    mean[r] = rms ? 0.0f : ROWS_NAME(row_sum)(xr, n) / (float)n;
    rstd[r] = 1.0f / sqrtf(ROWS_NAME(row_sq_dev)(xr, n, mean[r]) / (float)n + eps);
  }
#endif
  for (int64_t r = 0; r < rows; ++r)
    ROWS_NAME(row_norm_apply)(x + r * n, n, mean[r], rstd[r], w, b, y + r * n);
}

const loom_nn_rows_ops ROWS_NAME(loom_nn_rows_table) = {
    .max = ROWS_NAME(row_max),
    .exp_sum = ROWS_NAME(row_exp_sum),
    .affine = ROWS_NAME(row_affine),
    .sum = ROWS_NAME(row_sum),
    .dot = ROWS_NAME(row_dot),
    .sq_dev = ROWS_NAME(row_sq_dev),
    .softmax_grad = ROWS_NAME(row_softmax_grad),
    .log_softmax_grad = ROWS_NAME(row_log_softmax_grad),
    .norm_apply = ROWS_NAME(row_norm_apply),
    .norm_grad_sums = ROWS_NAME(row_norm_grad_sums),
    .norm_grad_apply = ROWS_NAME(row_norm_grad_apply),
    .norm_grad_sums_acc = ROWS_NAME(row_norm_grad_sums_acc),
    .norm_param_acc = ROWS_NAME(row_norm_param_acc),
    .norm_forward = ROWS_NAME(row_norm_forward),
};

#ifndef LOOM_NN_ROWS_ISA
#include "base/cpu.h"

extern const loom_nn_rows_ops loom_nn_rows_table_avx512;

const loom_nn_rows_ops *loom_nn_rows(void) {
  return (loom_cpu_features() & LOOM_FEATURE_AVX512F) ? &loom_nn_rows_table_avx512
                                                      : &loom_nn_rows_table;
}
#endif
