/* Blocked attention in float: tiles of queries and keys are converted to
 * float, scores come from small matrix products vectorized over the tile's
 * inner dim, and softmax terms from the vectorized exp of exp_neg.h. Built for
 * the baseline ISA and again by attention_blocked_avx512.c; the entry points
 * at the end pick a build at run time. The tile products are explicit
 * fused multiply-adds in both builds (fmaf in the baseline one, which is
 * exact whatever the hardware), taken in the same order; nothing else is
 * contracted. So both builds give the same bits. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "kernels/nn/attention.h"
#include "kernels/nn/attention_blocked.h"
#include "kernels/pointwise/exp_neg.h"
#include "kernels/nn/nn_rows.h"
#include "kernels/nn/nn_util.h"
#include "loom/status.h"

#ifdef LOOM_ATTN_ISA
#define ATTN_CAT2(a, b) a##b
#define ATTN_CAT(a, b) ATTN_CAT2(a, b)
#define ATTN_NAME(base) ATTN_CAT(base, LOOM_ATTN_ISA)
#else
#define ATTN_NAME(base) base
#endif

#define BQ LOOM_ATTENTION_BLOCK /* rows owned by one item */
#define BK 64                   /* rows of the other side per inner tile */
#define MAXD LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM

typedef struct tile_dims {
  int64_t bh, l, s, e, ev;
} tile_dims;

static int tile_dims_of(const loom_tensor *q, const loom_tensor *k,
                        const loom_tensor *v, tile_dims *d) {
  int64_t kbh, ke, vbh, vs;
  if (loom_attention_shape(q, &d->bh, &d->l, &d->e) || loom_attention_shape(k, &kbh, &d->s, &ke) ||
      loom_attention_shape(v, &vbh, &vs, &d->ev))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (kbh != d->bh || vbh != d->bh || ke != d->e || vs != d->s || d->e > MAXD || d->ev > MAXD)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return LOOM_OK;
}

static inline int64_t at3(const loom_tensor *t, int64_t b, int64_t i, int64_t j) {
  return loom_attention_head(t, b) + i * loom_attention_row_stride(t) +
         j * loom_attention_col_stride(t);
}

/* rows [r0, r0 + nr) of t[b] as floats, row r at dst + r * ld */
static void load_rows(float *dst, int64_t ld, const loom_tensor *t, int64_t b,
                      int64_t r0, int64_t nr, int64_t n) {
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t base = at3(t, b, r0 + r, 0), st = loom_attention_col_stride(t);
    float *row = dst + r * ld;
    if (t->dtype == LOOM_FLOAT32 && st == 1) {
      memcpy(row, (const float *)t->data + base, (size_t)n * sizeof(float));
    } else if (t->dtype == LOOM_BFLOAT16 && st == 1) {
      const uint16_t *src = (const uint16_t *)t->data + base;
      for (int64_t e = 0; e < n; ++e) row[e] = loom_bf16_to_f32(src[e]);
    } else {
      for (int64_t e = 0; e < n; ++e)
        row[e] = (float)loom_nn_load(t->data, t->dtype, base + e * st);
    }
  }
}

/* Rows [r0, r0 + nr) of t[b] for reading: t's own memory when its rows are
 * contiguous floats (*ld is then t's row stride), else a float copy in
 * scratch (*ld = MAXD). */
static const float *rows_view(float *scratch, const loom_tensor *t, int64_t b, int64_t r0,
                              int64_t nr, int64_t n, int64_t *ld) {
  if (t->dtype == LOOM_FLOAT32 && loom_attention_col_stride(t) == 1) {
    *ld = loom_attention_row_stride(t);
    return (const float *)t->data + at3(t, b, r0, 0);
  }
  load_rows(scratch, MAXD, t, b, r0, nr, n);
  *ld = MAXD;
  return scratch;
}

#ifdef __AVX512F__
#include <immintrin.h>

#include "kernels/gemm/transpose_avx512.h"

static inline __mmask16 lanes_below(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

/* The values [e0, e0 + 16) of one row with unit element stride as float
 * bits, lanes past `cols` zero: bf16 widened exactly (its bits are a
 * float's upper half), as loom_bf16_to_f32 does. */
static inline __m512i row_vector(const loom_tensor *t, int64_t off, __mmask16 cols) {
  if (t->dtype == LOOM_BFLOAT16)
    return _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cols, (const uint16_t *)t->data + off)), 16);
  return _mm512_maskz_loadu_epi32(cols, (const float *)t->data + off);
}
#endif

/* the same rows transposed: element (r, e) at dst[e * ld + r]; columns
 * nr..ld-1 are zeroed so whole-width loops never read garbage */
static void load_rows_t(float *dst, int64_t ld, const loom_tensor *t,
                        int64_t b, int64_t r0, int64_t nr, int64_t n) {
#ifdef __AVX512F__
  if ((t->dtype == LOOM_FLOAT32 || t->dtype == LOOM_BFLOAT16) &&
      loom_attention_col_stride(t) == 1 && ld % 16 == 0) {
    /* 16 x 16 blocks through registers; rows past nr load as zeros */
    for (int64_t rb = 0; rb < ld; rb += 16)
      for (int64_t eb = 0; eb < n; eb += 16) {
        __m512i blk[16];
        const __mmask16 cols = lanes_below(n - eb);
        for (int64_t i = 0; i < 16; ++i)
          blk[i] = rb + i < nr ? row_vector(t, at3(t, b, r0 + rb + i, eb), cols)
                               : _mm512_setzero_si512();
        loom_gemm_transpose16(blk);
        for (int64_t i = 0; i < 16 && eb + i < n; ++i)
          _mm512_storeu_si512(dst + (eb + i) * ld + rb, blk[i]);
      }
    return;
  }
#endif
  for (int64_t e = 0; e < n; ++e)
    for (int64_t r = nr; r < ld; ++r) dst[e * ld + r] = 0.0f;
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t base = at3(t, b, r0 + r, 0), st = loom_attention_col_stride(t);
    if (t->dtype == LOOM_FLOAT32 && st == 1) {
      const float *src = (const float *)t->data + base;
      for (int64_t e = 0; e < n; ++e) dst[e * ld + r] = src[e];
    } else if (t->dtype == LOOM_BFLOAT16 && st == 1) {
      const uint16_t *src = (const uint16_t *)t->data + base;
      for (int64_t e = 0; e < n; ++e) dst[e * ld + r] = loom_bf16_to_f32(src[e]);
    } else {
      for (int64_t e = 0; e < n; ++e)
        dst[e * ld + r] = (float)loom_nn_load(t->data, t->dtype, base + e * st);
    }
  }
}

static void store_rows(const loom_tensor *t, int64_t b, int64_t r0, int64_t nr,
                       int64_t n, const float *src, int64_t ld,
                       const float *row_scale) {
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t base = at3(t, b, r0 + r, 0), st = loom_attention_col_stride(t);
    const float sc = row_scale ? row_scale[r] : 1.0f;
    if (t->dtype == LOOM_FLOAT32 && st == 1) {
      float *dst = (float *)t->data + base;
      for (int64_t e = 0; e < n; ++e) dst[e] = src[r * ld + e] * sc;
    } else if (t->dtype == LOOM_BFLOAT16 && st == 1) {
      uint16_t *dst = (uint16_t *)t->data + base;
      for (int64_t e = 0; e < n; ++e) dst[e] = loom_f32_to_bf16(src[r * ld + e] * sc);
    } else {
      for (int64_t e = 0; e < n; ++e)
        loom_nn_store(t->data, t->dtype, base + e * st, src[r * ld + e] * sc);
    }
  }
}

/* out[i * BK + j] = sum_e a[i * lda + e] * bt[e * BK + j] for the columns
 * j < cols (a multiple of 16, at most BK; bt is zero-padded), each step one
 * fused multiply-add: the row of sums stays in registers. A decode step's
 * one query takes one vector of the four. */
static void tile_mm(float *out, const float *a, int64_t lda, const float *bt,
                    int64_t rows, int64_t cols, int64_t inner) {
#ifdef __AVX512F__
  _Static_assert(BK == 64, "four vectors per row");
  int64_t i = 0;
  for (; i + 4 <= rows && cols < BK; i += 4)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512 o[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
      for (int64_t e = 0; e < inner; ++e) {
        const __m512 b0 = _mm512_loadu_ps(bt + e * BK + c0);
        for (int r = 0; r < 4; ++r)
          o[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[(i + r) * lda + e]), b0, o[r]);
      }
      for (int r = 0; r < 4; ++r) _mm512_storeu_ps(out + (i + r) * BK + c0, o[r]);
    }
  for (; i + 4 <= rows; i += 4) {
    __m512 o[4][4];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) o[r][c] = _mm512_setzero_ps();
    for (int64_t e = 0; e < inner; ++e) {
      const float *b = bt + e * BK;
      const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
      const __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
      for (int r = 0; r < 4; ++r) {
        const __m512 ae = _mm512_set1_ps(a[(i + r) * lda + e]);
        o[r][0] = _mm512_fmadd_ps(ae, b0, o[r][0]);
        o[r][1] = _mm512_fmadd_ps(ae, b1, o[r][1]);
        o[r][2] = _mm512_fmadd_ps(ae, b2, o[r][2]);
        o[r][3] = _mm512_fmadd_ps(ae, b3, o[r][3]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + (i + r) * BK + 16 * c, o[r][c]);
  }
#else
  int64_t i = 0;
#endif
  for (; i < rows; ++i) {
    float o[BK];
    for (int64_t j = 0; j < cols; ++j) o[j] = 0.0f;
    for (int64_t e = 0; e < inner; ++e) {
      const float ae = a[i * lda + e];
      const float *b = bt + e * BK;
      for (int64_t j = 0; j < cols; ++j) o[j] = fmaf(ae, b[j], o[j]);
    }
    memcpy(out + i * BK, o, (size_t)cols * sizeof(float));
  }
}

#ifdef __AVX512F__
/* Whether rows [0, rows) of v (row stride ld, n values each) are all
 * finite, by their sums: an infinite or NaN value makes a sum non-finite,
 * and a sum that overflows only answers no for finite rows, which is
 * safe. Four sums per row for throughput. */
static int rows_finite(const float *v, int64_t ld, int64_t rows, int64_t n) {
  __m512 z[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t e = 0; e < n; e += 16)
      z[(e >> 4) & 3] = _mm512_add_ps(z[(e >> 4) & 3],
                                      _mm512_maskz_loadu_ps(lanes_below(n - e), v + j * ld + e));
  const __m512 t = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(z[0], z[1]), _mm512_add_ps(z[2], z[3])),
                                 _mm512_setzero_ps());
  return _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q) == 0;
}

/* Four rows of tile_acc's sums over 64 columns from c0, in registers
 * across the j loop. `guard` skips zero p's; without it they add 0 * v,
 * which leaves every sum's bits as they are when v is finite (a sum
 * starts at +0 and never becomes -0). */
static inline __attribute__((always_inline)) void acc_rows4(
    float *acc, int64_t ldc, const float *p, int64_t ldp, int64_t pj, const float *v,
    int64_t ldv, int64_t cols, int64_t n, int64_t c0, const int guard) {
  __mmask16 m[4];
  __m512 o[4][4];
  for (int c = 0; c < 4; ++c) m[c] = lanes_below(n - c0 - 16 * c);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) o[r][c] = _mm512_maskz_loadu_ps(m[c], acc + r * ldc + c0 + 16 * c);
  for (int64_t j = 0; j < cols; ++j) {
    const float *vr = v + j * ldv + c0;
    const __m512 v0 = _mm512_maskz_loadu_ps(m[0], vr), v1 = _mm512_maskz_loadu_ps(m[1], vr + 16);
    const __m512 v2 = _mm512_maskz_loadu_ps(m[2], vr + 32), v3 = _mm512_maskz_loadu_ps(m[3], vr + 48);
    for (int r = 0; r < 4; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * ldp + j * pj]);
      if (guard) {
        const __mmask16 k = _mm512_cmp_ps_mask(pv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        o[r][0] = _mm512_mask3_fmadd_ps(pv, v0, o[r][0], k);
        o[r][1] = _mm512_mask3_fmadd_ps(pv, v1, o[r][1], k);
        o[r][2] = _mm512_mask3_fmadd_ps(pv, v2, o[r][2], k);
        o[r][3] = _mm512_mask3_fmadd_ps(pv, v3, o[r][3], k);
      } else {
        o[r][0] = _mm512_fmadd_ps(pv, v0, o[r][0]);
        o[r][1] = _mm512_fmadd_ps(pv, v1, o[r][1]);
        o[r][2] = _mm512_fmadd_ps(pv, v2, o[r][2]);
        o[r][3] = _mm512_fmadd_ps(pv, v3, o[r][3]);
      }
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(acc + r * ldc + c0 + 16 * c, m[c], o[r][c]);
}
#endif

/* acc[i * ldc + e] += sum_j p[i * ldp + j * pj] * v[j * ldv + e], e < n,
 * one fused multiply-add per j in j order; a zero p adds nothing (0 * inf
 * would be NaN). */
static void tile_acc(float *acc, int64_t ldc, const float *p, int64_t ldp, int64_t pj,
                     const float *v, int64_t ldv, int64_t rows, int64_t cols,
                     int64_t n) {
#ifdef __AVX512F__
  int64_t i = 0;
  const int finite = rows_finite(v, ldv, cols, n);
  for (; i + 4 <= rows; i += 4)
    for (int64_t c0 = 0; c0 < n; c0 += 64) {
      if (finite)
        acc_rows4(acc + i * ldc, ldc, p + i * ldp, ldp, pj, v, ldv, cols, n, c0, 0);
      else
        acc_rows4(acc + i * ldc, ldc, p + i * ldp, ldp, pj, v, ldv, cols, n, c0, 1);
    }
#else
  int64_t i = 0;
#endif
  for (; i < rows; ++i) {
    float *a = acc + i * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      const float pv = p[i * ldp + j * pj];
      if (pv == 0.0f) continue;
      const float *vr = v + j * ldv;
      for (int64_t e = 0; e < n; ++e) a[e] = fmaf(pv, vr[e], a[e]);
    }
  }
}

/* Scales raw scores, adds the mask, and sets masked or padding entries to
 * -inf. s[r * lds + c] is (query i0 + qi, key j0 + kj) where (qi, kj) is
 * (r, c), or (c, r) when `transposed`. */
static void finish_scores(float *s, int64_t lds, int64_t rows, int64_t cols,
                          int64_t valid_cols, float scale,
                          const loom_tensor *mask, int causal, int64_t b,
                          int64_t i0, int64_t j0, int transposed) {
  if (!mask->data || mask->dtype == LOOM_BOOL || mask->dtype == LOOM_FLOAT32) {
    /* A row is one query (one key when transposed): the causal boundary is
     * one column, and its mask entries are a strided run. */
    const int64_t step = !mask->data ? 0
                       : transposed ? loom_attention_row_stride(mask)
                                    : loom_attention_col_stride(mask);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * lds;
      int64_t lo = 0, hi = valid_cols; /* visible columns [lo, hi) */
      if (causal) {
        if (transposed) { /* row = key j0 + r, column = query i0 + c */
          const int64_t first = j0 + r - i0;
          lo = first > 0 ? (first < hi ? first : hi) : 0;
        } else { /* row = query i0 + r, column = key j0 + c */
          const int64_t last = i0 + r - j0 + 1;
          hi = last < hi ? (last > 0 ? last : 0) : hi;
        }
      }
      for (int64_t c = 0; c < lo; ++c) row[c] = -INFINITY;
      const int64_t base = transposed ? at3(mask, b, i0, j0 + r) : at3(mask, b, i0 + r, j0);
      if (!mask->data) {
        for (int64_t c = lo; c < hi; ++c) row[c] *= scale;
      } else if (mask->dtype == LOOM_BOOL) {
        const uint8_t *mk = (const uint8_t *)mask->data + base;
        for (int64_t c = lo; c < hi; ++c) row[c] = mk[c * step] ? row[c] * scale : -INFINITY;
      } else {
        const float *mk = (const float *)mask->data + base;
        for (int64_t c = lo; c < hi; ++c) row[c] = row[c] * scale + mk[c * step];
      }
      for (int64_t c = hi; c < cols; ++c) row[c] = -INFINITY;
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float *row = s + r * lds;
    for (int64_t c = 0; c < cols; ++c) {
      if (c >= valid_cols) {
        row[c] = -INFINITY;
        continue;
      }
      const int64_t qi = i0 + (transposed ? c : r), kj = j0 + (transposed ? r : c);
      float v = row[c] * scale;
      if (causal && kj > qi) v = -INFINITY;
      else if (mask->data) {
        const int64_t off = at3(mask, b, qi, kj);
        if (mask->dtype == LOOM_BOOL) {
          if (!((const uint8_t *)mask->data)[off]) v = -INFINITY;
        } else {
          v += (float)loom_nn_load(mask->data, mask->dtype, off);
        }
      }
      row[c] = v;
    }
  }
}

/* Whether the mask hides every key of [j0, j0 + nk) from every query of
 * [i0, i0 + nq), a bool mask by false, a float one by -inf (PyTorch hands
 * a bool attn_mask over as such, in the query's dtype): the tile's scores
 * would all be -inf, adding nothing to any row of the forward, and the
 * tile is skipped. A KV cache's mask hides the slots past the last
 * position, and the causal triangle's far side. (A key that is inf or NaN
 * behind such a mask is thereby dropped, as the bool mask's scores
 * already drop it.) */
static int tile_hidden(const loom_tensor *mask, int64_t b, int64_t i0, int64_t nq,
                       int64_t j0, int64_t nk) {
  if (!mask->data) return 0;
  const uint16_t neg_inf16 = mask->dtype == LOOM_BFLOAT16 ? 0xff80u : 0xfc00u;
  if (mask->dtype != LOOM_BOOL && mask->dtype != LOOM_FLOAT32 &&
      mask->dtype != LOOM_BFLOAT16 && mask->dtype != LOOM_FLOAT16)
    return 0;
  const int64_t step = loom_attention_col_stride(mask);
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t base = at3(mask, b, i0 + r, j0);
    int any = 0;
    if (mask->dtype == LOOM_BOOL) {
      const uint8_t *mk = (const uint8_t *)mask->data + base;
      for (int64_t c = 0; c < nk; ++c) any |= mk[c * step];
    } else if (mask->dtype == LOOM_FLOAT32) {
      const float *mk = (const float *)mask->data + base;
      for (int64_t c = 0; c < nk; ++c) any |= mk[c * step] != -INFINITY;
    } else {
      const uint16_t *mk = (const uint16_t *)mask->data + base;
      for (int64_t c = 0; c < nk; ++c) any |= mk[c * step] != neg_inf16;
    }
    if (any) return 0;
  }
  return 1;
}

static inline float lse_load(const loom_tensor *lse, int64_t b, int64_t i) {
  return (float)loom_nn_load(lse->data, lse->dtype, b * lse->strides[0] + i * lse->strides[1]);
}

/* The online-softmax step of query i over a tile of transposed scores St
 * (key j's row BQ apart, nk keys): the maximum of its scores (a NaN or
 * +inf among them sets *bad: the query's result is NaN, as on the CPU),
 * the rescale of its running sum l and accumulator row a (ev values) when
 * the maximum grows, and its terms exp(s - m) in place, summed in key
 * order. A query that sees no key of the tile (all -inf), or a bad one,
 * gets terms 0. */
static void softmax_col(float *St, int64_t nk, int64_t i, float *m, float *l, float *a,
                        int64_t ev, int *bad) {
  float mb = -INFINITY;
  int nan = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const float v = St[j * BQ + i];
    nan |= v != v;
    mb = v > mb ? v : mb;
  }
  if (nan || mb == INFINITY) *bad = 1;
  if (mb == -INFINITY || *bad) {
    for (int64_t j = 0; j < nk; ++j) St[j * BQ + i] = 0.0f;
    return;
  }
  const float mn = mb > *m ? mb : *m;
  if (mn != *m) {
    const float c = loom_exp_neg(*m - mn); /* 0 from m = -inf */
    for (int64_t e = 0; e < ev; ++e) a[e] *= c;
    *l *= c;
    *m = mn;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < nk; ++j) {
    const float t = loom_exp_neg(St[j * BQ + i] - mn);
    St[j * BQ + i] = t;
    sum += t;
  }
  *l += sum;
}

/* The online-softmax step of a row of nk scores s, one query's, in the row
 * layout of a block of few queries: as softmax_col, the maximum taken and
 * the terms summed by nn_rows' vector steps. */
static void softmax_row(float *s, int64_t nk, float *m, float *l, float *a, int64_t ev, int *bad,
                        const loom_nn_rows_ops *ops) {
  float mb = ops->max(s, nk);
  for (int64_t j = 0; j < nk; ++j) mb = s[j] != s[j] ? s[j] : mb;
  if (mb != mb || mb == INFINITY) *bad = 1;
  if (mb == -INFINITY || *bad) {
    for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
    return;
  }
  const float mn = mb > *m ? mb : *m;
  if (mn != *m) {
    const float c = loom_exp_neg(*m - mn); /* 0 from m = -inf */
    for (int64_t e = 0; e < ev; ++e) a[e] *= c;
    *l *= c;
    *m = mn;
  }
  *l += ops->exp_sum(s, nk, mn, s);
}

#ifdef __AVX512F__
/* softmax_col for queries [i0, i0 + 16), one per lane, the same operations
 * in the same order: a query's scores are a column, so its maximum and sum
 * need no reduction across lanes. */
static void softmax_cols16(float *St, int64_t nk, int64_t i0, float *m, float *l, float *acc,
                           int64_t ev, int *bad) {
  __m512 mb = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const __m512 v = _mm512_loadu_ps(St + j * BQ + i0);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mb = _mm512_mask_mov_ps(mb, _mm512_cmp_ps_mask(v, mb, _CMP_GT_OQ), v);
  }
  __mmask16 badm = nan | _mm512_cmp_ps_mask(mb, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
  for (int r = 0; r < 16; ++r) {
    if (badm >> r & 1) bad[i0 + r] = 1;
    if (bad[i0 + r]) badm |= (__mmask16)(1u << r);
  }
  const __mmask16 live = (__mmask16)(~badm & _mm512_cmp_ps_mask(mb, _mm512_set1_ps(-INFINITY),
                                                                 _CMP_NEQ_OQ));
  const __m512 mold = _mm512_loadu_ps(m + i0);
  const __m512 mn = _mm512_mask_mov_ps(mold, live & _mm512_cmp_ps_mask(mb, mold, _CMP_GT_OQ), mb);
  const __mmask16 grow = live & _mm512_cmp_ps_mask(mn, mold, _CMP_NEQ_OQ);
  if (grow) {
    float c[16];
    _mm512_storeu_ps(c, loom_exp_neg16(_mm512_sub_ps(mold, mn)));
    for (int r = 0; r < 16; ++r) {
      if (!(grow >> r & 1)) continue;
      float *a = acc + (i0 + r) * MAXD;
      const __m512 vc = _mm512_set1_ps(c[r]);
      for (int64_t e = 0; e < ev; e += 16) {
        const __mmask16 k = lanes_below(ev - e);
        _mm512_mask_storeu_ps(a + e, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + e), vc));
      }
      l[i0 + r] *= c[r];
    }
    _mm512_mask_storeu_ps(m + i0, grow, mn);
  }
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < nk; ++j) {
    float *row = St + j * BQ + i0;
    const __m512 t = _mm512_maskz_mov_ps(live, loom_exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(row), mn)));
    _mm512_storeu_ps(row, t);
    sum = _mm512_add_ps(sum, t);
  }
  _mm512_mask_storeu_ps(l + i0, live, _mm512_add_ps(_mm512_loadu_ps(l + i0), sum));
}
#endif

/* Each item is BQ queries of one matrix, against the keys in tiles of BK:
 * the scores come transposed (a key per row: K's rows are read where they
 * lie, and only the item's queries are transposed, once), so each query's
 * softmax runs down a column. Fewer than 16 queries (a decode step's one)
 * would leave most of each column vector padding: their scores stay in
 * rows, a query per row, against K transposed tile by tile (one query
 * over 576 keys: 20 against 30 us in columns). */
int ATTN_NAME(loom_attention_blocked_forward_impl)(const loom_kernel_args *args,
                                                   int64_t begin, int64_t end) {
  _Static_assert(BQ == BK, "the transposed scores are a square tile");
  if (args->num_tensors < 6 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *q = &args->tensors[0], *k = &args->tensors[1], *v = &args->tensors[2],
                    *mask = &args->tensors[3], *out = &args->tensors[4], *lse = &args->tensors[5];
  tile_dims d;
  if (tile_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const float scale = (float)args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  const int64_t nqb = (d.l + BQ - 1) / BQ;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  float Qt[MAXD * BQ], K[BK * MAXD], V[BK * MAXD], St[BK * BQ], acc[BQ * MAXD];
  float m[BQ], l[BQ], inv[BQ];
  int bad[BQ];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / nqb, i0 = (item % nqb) * BQ;
    const int64_t nq = d.l - i0 < BQ ? d.l - i0 : BQ;
    const int rows = nq < 16; /* the row layout: Qt holds the queries' rows */
    if (rows) load_rows(Qt, MAXD, q, b, i0, nq, d.e);
    else load_rows_t(Qt, BQ, q, b, i0, nq, d.e);
    for (int64_t i = 0; i < BQ; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.0f;
      bad[i] = 0;
    }
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t e = 0; e < d.ev; ++e) acc[i * MAXD + e] = 0.0f;
    const int64_t kend = causal && i0 + nq < d.s ? i0 + nq : d.s;
    const int64_t cols = (nq + 15) / 16 * 16; /* the queries' vectors */
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
      const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
      if (tile_hidden(mask, b, i0, nq, j0, nk)) continue;
      int64_t ldk, ldv;
      const float *vr = rows_view(V, v, b, j0, nk, d.ev, &ldv);
      if (rows) {
        load_rows_t(K, BK, k, b, j0, nk, d.e); /* the tile's keys transposed */
        tile_mm(St, Qt, MAXD, K, nq, BK, d.e);
        finish_scores(St, BK, nq, BK, nk, scale, mask, causal, b, i0, j0, 0);
        for (int64_t i = 0; i < nq; ++i)
          softmax_row(St + i * BK, nk, &m[i], &l[i], acc + i * MAXD, d.ev, &bad[i], ops);
        tile_acc(acc, MAXD, St, BK, 1, vr, ldv, nq, nk, d.ev);
        continue;
      }
      const float *kr = rows_view(K, k, b, j0, nk, d.e, &ldk);
      tile_mm(St, kr, ldk, Qt, nk, cols, d.e);
      finish_scores(St, BQ, nk, cols, nq, scale, mask, causal, b, i0, j0, 1);
      int64_t i = 0;
#ifdef __AVX512F__
      for (; i < nq; i += 16) softmax_cols16(St, nk, i, m, l, acc, d.ev, bad);
#endif
      for (; i < nq; ++i) softmax_col(St, nk, i, &m[i], &l[i], acc + i * MAXD, d.ev, &bad[i]);
      tile_acc(acc, MAXD, St, 1, BQ, vr, ldv, nq, nk, d.ev);
    }
    for (int64_t i = 0; i < nq; ++i) {
      inv[i] = bad[i] ? NAN : l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
      loom_nn_store(lse->data, lse->dtype, b * lse->strides[0] + (i0 + i) * lse->strides[1],
                    bad[i]         ? NAN
                    : l[i] > 0.0f ? (double)m[i] + log((double)l[i])
                                  : -INFINITY);
    }
    store_rows(out, b, i0, nq, d.ev, acc, MAXD, inv);
  }
  return LOOM_OK;
}

/* s = exp(s - m) over n values: exp_sum's terms without their sum, whose
 * chain over 16 lanes would cost as much as the terms of a short row. */
static void row_exp(float *s, int64_t n, float m, const loom_nn_rows_ops *ops) {
#ifdef __AVX512F__
  if (n % 16 == 0) {
    const __m512 vm = _mm512_set1_ps(m);
    for (int64_t c = 0; c < n; c += 16)
      _mm512_storeu_ps(s + c, loom_exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(s + c), vm)));
    return;
  }
#endif
  ops->exp_sum(s, n, m, s);
}

/* Each item is BQ queries' gradient, against the keys in tiles of BK. As
 * in the forward, the scores and dP come transposed: K's and V's rows are
 * read where they lie, and only the item's queries and output gradients
 * are transposed, once. */
int ATTN_NAME(loom_attention_blocked_backward_q_impl)(const loom_kernel_args *args,
                                                      int64_t begin, int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dout = &args->tensors[0], *q = &args->tensors[1], *k = &args->tensors[2],
                    *v = &args->tensors[3], *mask = &args->tensors[4], *out = &args->tensors[5],
                    *lse = &args->tensors[6], *dq = &args->tensors[7], *delta = &args->tensors[8];
  tile_dims d;
  if (tile_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const float scale = (float)args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  const int64_t nqb = (d.l + BQ - 1) / BQ;
  float Qt[MAXD * BQ], dOt[MAXD * BQ], K[BK * MAXD], V[BK * MAXD];
  float St[BK * BQ], dPt[BK * BQ], acc[BQ * MAXD], D[BQ], L[BQ], O[MAXD], dOi[MAXD];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / nqb, i0 = (item % nqb) * BQ;
    const int64_t nq = d.l - i0 < BQ ? d.l - i0 : BQ;
    load_rows_t(Qt, BQ, q, b, i0, nq, d.e);
    load_rows_t(dOt, BQ, dout, b, i0, nq, d.ev);
    for (int64_t i = 0; i < nq; ++i) {
      load_rows(O, MAXD, out, b, i0 + i, 1, d.ev);
      load_rows(dOi, MAXD, dout, b, i0 + i, 1, d.ev);
      D[i] = ops->dot(dOi, O, d.ev);
      loom_nn_store(delta->data, delta->dtype, b * delta->strides[0] + (i0 + i) * delta->strides[1], D[i]);
      const float li = lse_load(lse, b, i0 + i);
      L[i] = li == -INFINITY ? INFINITY : li; /* a row that saw no key keeps P = 0 */
      for (int64_t e = 0; e < d.e; ++e) acc[i * MAXD + e] = 0.0f;
    }
    const int64_t kend = causal && i0 + nq < d.s ? i0 + nq : d.s;
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
      const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
      int64_t ldk, ldv;
      const float *kr = rows_view(K, k, b, j0, nk, d.e, &ldk);
      const float *vr = rows_view(V, v, b, j0, nk, d.ev, &ldv);
      tile_mm(St, kr, ldk, Qt, nk, BQ, d.e);
      finish_scores(St, BQ, nk, BQ, nq, scale, mask, causal, b, i0, j0, 1);
      tile_mm(dPt, vr, ldv, dOt, nk, BQ, d.ev);
      for (int64_t j = 0; j < nk; ++j) {
        float *s = St + j * BQ;
        for (int64_t i = 0; i < nq; ++i) s[i] -= L[i];
        row_exp(s, nq, 0.0f, ops); /* P^T */
        for (int64_t i = 0; i < nq; ++i) s[i] *= dPt[j * BQ + i] - D[i]; /* dS^T */
      }
      tile_acc(acc, MAXD, St, 1, BQ, kr, ldk, nq, nk, d.e);
    }
    for (int64_t i = 0; i < nq; ++i) D[i] = scale; /* row scale for the store */
    store_rows(dq, b, i0, nq, d.e, acc, MAXD, D);
  }
  return LOOM_OK;
}

/* Each item is BQ keys' gradients, against the queries in tiles of BK: the
 * item's keys and values are transposed, once, and the queries' and output
 * gradients' rows are read where they lie. */
int ATTN_NAME(loom_attention_blocked_backward_kv_impl)(const loom_kernel_args *args,
                                                       int64_t begin, int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dout = &args->tensors[0], *q = &args->tensors[1], *k = &args->tensors[2],
                    *v = &args->tensors[3], *mask = &args->tensors[4], *lse = &args->tensors[5],
                    *delta = &args->tensors[6], *dk = &args->tensors[7], *dv = &args->tensors[8];
  tile_dims d;
  if (tile_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const float scale = (float)args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  const int64_t nkb = (d.s + BQ - 1) / BQ;
  float Kt[MAXD * BQ], Vt[MAXD * BQ], Qr[BK * MAXD], dO[BK * MAXD];
  float S[BK * BQ], dP[BK * BQ], acc_k[BQ * MAXD], acc_v[BQ * MAXD], L[BK], D[BK], sc[BQ];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / nkb, j0 = (item % nkb) * BQ;
    const int64_t nk = d.s - j0 < BQ ? d.s - j0 : BQ;
    load_rows_t(Kt, BQ, k, b, j0, nk, d.e);
    load_rows_t(Vt, BQ, v, b, j0, nk, d.ev);
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t e = 0; e < d.e; ++e) acc_k[j * MAXD + e] = 0.0f;
      for (int64_t e = 0; e < d.ev; ++e) acc_v[j * MAXD + e] = 0.0f;
    }
    /* with a causal mask, queries before j0 see none of these keys */
    for (int64_t i0 = causal ? (j0 / BK) * BK : 0; i0 < d.l; i0 += BK) {
      const int64_t nq = d.l - i0 < BK ? d.l - i0 : BK;
      int64_t ldq, ldo;
      const float *qr = rows_view(Qr, q, b, i0, nq, d.e, &ldq);
      const float *dor = rows_view(dO, dout, b, i0, nq, d.ev, &ldo);
      for (int64_t i = 0; i < nq; ++i) {
        const float li = lse_load(lse, b, i0 + i);
        L[i] = li == -INFINITY ? INFINITY : li;
        D[i] = (float)loom_nn_load(delta->data, delta->dtype,
                                   b * delta->strides[0] + (i0 + i) * delta->strides[1]);
      }
      tile_mm(S, qr, ldq, Kt, nq, BQ, d.e);
      finish_scores(S, BQ, nq, BQ, nk, scale, mask, causal, b, i0, j0, 0);
      tile_mm(dP, dor, ldo, Vt, nq, BQ, d.ev);
      for (int64_t i = 0; i < nq; ++i) {
        float *s = S + i * BQ;
        for (int64_t j = 0; j < nk; ++j) s[j] -= L[i];
        row_exp(s, nk, 0.0f, ops); /* P */
        /* A row the forward made NaN (NaN log-sum-exp) weighs NaN on every
         * key of the tile, as its output did: exp took its NaN for 0. */
        if (L[i] != L[i])
          for (int64_t j = 0; j < nk; ++j) s[j] = NAN;
      }
      tile_acc(acc_v, MAXD, S, 1, BQ, dor, ldo, nk, nq, d.ev);
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) S[i * BQ + j] *= dP[i * BQ + j] - D[i]; /* dS */
      tile_acc(acc_k, MAXD, S, 1, BQ, qr, ldq, nk, nq, d.e);
    }
    for (int64_t j = 0; j < nk; ++j) sc[j] = scale;
    store_rows(dk, b, j0, nk, d.e, acc_k, MAXD, sc);
    store_rows(dv, b, j0, nk, d.ev, acc_v, MAXD, NULL);
  }
  return LOOM_OK;
}

#ifndef LOOM_ATTN_ISA
#include "base/cpu.h"

static int use_avx512(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

int loom_attention_blocked_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return use_avx512() ? loom_attention_blocked_forward_impl_avx512(args, begin, end)
                      : loom_attention_blocked_forward_impl(args, begin, end);
}
int loom_attention_blocked_backward_q(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return use_avx512() ? loom_attention_blocked_backward_q_impl_avx512(args, begin, end)
                      : loom_attention_blocked_backward_q_impl(args, begin, end);
}
int loom_attention_blocked_backward_kv(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return use_avx512() ? loom_attention_blocked_backward_kv_impl_avx512(args, begin, end)
                      : loom_attention_blocked_backward_kv_impl(args, begin, end);
}
#endif
