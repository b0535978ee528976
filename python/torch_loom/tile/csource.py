"""The C around a traced program: the prelude (reductions, the dot
micro-kernel) and the kernel entry point over the launch range."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ..compiler import emit_c

#: Reductions accumulate in lanes (32 for float32, 16 otherwise) in a fixed
#: order folded pairwise (the loop vectorizes without reassociating, results
#: do not depend on the chunking); the dot is register-blocked (8 rows x 32 columns of
#: accumulators) with fused multiply-adds where the CPU has them.
PRELUDE = r"""
/* exp of arguments known to be <= 0 (x - max x): the library's softmax and
 * attention exp, where the headers have it. */
#if __has_include("kernels/pointwise/exp_neg.h")
#include "kernels/pointwise/exp_neg.h"
#define LOOM_TILE_EXP_NEG(x) loom_exp_neg(x)
#define LOOM_TILE_HAVE_EXP_NEG 1
#else
#define LOOM_TILE_EXP_NEG(x) loom_expf_arith(x)
#endif
/* y = exp(x) over n such arguments; 16 lanes at a time where the library
 * has them (its vector form rounds as its scalar form). */
static inline void loom_tile_exp_neg_n(const float *x, float *y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(LOOM_TILE_HAVE_EXP_NEG)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, loom_exp_neg16(_mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = LOOM_TILE_EXP_NEG(x[i]);
}
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <string.h>
/* 16 floats from t to d, 64 bytes: past the cache (no read of the line for
 * ownership) when `stream` and d is a whole line; the kernel then fences
 * before it returns (LOOM_TILE_FENCE). The bits are the same either way. */
#define LOOM_TILE_STREAMING(A) (((A)->hints & LOOM_KERNEL_HINT_STREAM) != 0)
static inline void loom_tile_put16(float *d, const float *t, int stream) {
#if defined(__AVX512F__)
  if (stream && !((uintptr_t)d & 63)) _mm512_stream_ps(d, _mm512_load_ps(t));
  else _mm512_storeu_ps(d, _mm512_load_ps(t));
#else
  (void)stream;
  memcpy(d, t, 16 * sizeof *t);
#endif
}
#if defined(__AVX512F__)
#define LOOM_TILE_FENCE(A) do { if (LOOM_TILE_STREAMING(A)) _mm_sfence(); } while (0)
#else
#define LOOM_TILE_FENCE(A) ((void)(A))
#endif
#define LOOM_TILE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LOOM_TILE_MAX(a, b) ((a) > (b) ? (a) : (b))
/* t = exp(t), 16 arguments <= 0 (rowloop.py's chunks). */
static inline void loom_tile_exp16(float *t) {
#if defined(__AVX512F__) && defined(LOOM_TILE_HAVE_EXP_NEG)
  _mm512_store_ps(t, loom_exp_neg16(_mm512_load_ps(t)));
#else
  for (int k = 0; k < 16; ++k) t[k] = LOOM_TILE_EXP_NEG(t[k]);
#endif
}
/* Float sums in 32 lanes: lane l takes the elements at
 * l mod 32 in order, then the lanes fold pairwise (l with l + 16, 8, 4, 2,
 * 1); two accumulators of 16 halve the chain of dependent steps. Maxima
 * and minima keep one accumulator (lane l: elements at l mod 16): their
 * loops read memory first, and measured faster so.
 * A maximum steps v > a ? v : a and is NaN when any element is (a flag per
 * lane set apart from the chain). The same steps serve the reductions
 * rowloop.py fuses into the loops computing their operands and those over
 * stored arrays below, with AVX-512 or without, so all give the same bits. */
#if defined(__AVX512F__)
typedef __m512 loom_tv;
typedef __mmask16 loom_tn;
static inline loom_tv loom_tv_set1(float x) { return _mm512_set1_ps(x); }
static inline loom_tv loom_tv_load(const float *t) { return _mm512_load_ps(t); }
static inline loom_tv loom_tv_loadu(const float *t) { return _mm512_loadu_ps(t); }
static inline loom_tv loom_tv_sum(loom_tv a, loom_tv v) { return _mm512_add_ps(a, v); }
static inline loom_tv loom_tv_max(loom_tv a, loom_tv v) { return _mm512_max_ps(v, a); } /* v > a ? v : a */
static inline loom_tv loom_tv_min(loom_tv a, loom_tv v) { return _mm512_min_ps(v, a); } /* v < a ? v : a */
static inline loom_tn loom_tv_nan(loom_tn n, loom_tv v) { return n | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
#define LOOM_TV_FOLD(OP) \
static inline float loom_tv_fold1_##OP(loom_tv acc) { \
  acc = loom_tv_##OP(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(1, 0, 3, 2))); \
  acc = loom_tv_##OP(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(2, 3, 0, 1))); \
  acc = loom_tv_##OP(acc, _mm512_permute_ps(acc, _MM_SHUFFLE(1, 0, 3, 2))); \
  acc = loom_tv_##OP(acc, _mm512_permute_ps(acc, _MM_SHUFFLE(2, 3, 0, 1))); \
  return _mm512_cvtss_f32(acc); }
#else
typedef struct { float l[16]; } loom_tv;
typedef int loom_tn;
static inline loom_tv loom_tv_set1(float x) { loom_tv r; for (int k = 0; k < 16; ++k) r.l[k] = x; return r; }
static inline loom_tv loom_tv_load(const float *t) { loom_tv r; memcpy(r.l, t, sizeof r.l); return r; }
static inline loom_tv loom_tv_loadu(const float *t) { loom_tv r; memcpy(r.l, t, sizeof r.l); return r; }
static inline loom_tn loom_tv_nan(loom_tn n, loom_tv v) { for (int k = 0; k < 16; ++k) n |= v.l[k] != v.l[k]; return n; }
#define LOOM_TV_STEP_sum(a, v) (a + v)
#define LOOM_TV_STEP_max(a, v) (v > a ? v : a)
#define LOOM_TV_STEP_min(a, v) (v < a ? v : a)
#define LOOM_TV_FOLD(OP) \
static inline loom_tv loom_tv_##OP(loom_tv acc, loom_tv x) { \
  for (int k = 0; k < 16; ++k) { float a = acc.l[k], v = x.l[k]; acc.l[k] = LOOM_TV_STEP_##OP(a, v); } \
  return acc; } \
static inline float loom_tv_fold1_##OP(loom_tv acc) { \
  for (int w = 8; w; w >>= 1) for (int k = 0; k < w; ++k) { \
    float a = acc.l[k], v = acc.l[k + w]; acc.l[k] = LOOM_TV_STEP_##OP(a, v); } \
  return acc.l[0]; }
#endif
LOOM_TV_FOLD(sum)
LOOM_TV_FOLD(max)
LOOM_TV_FOLD(min)
static inline float loom_tv_fold_sum(loom_tv acc) { return loom_tv_fold1_sum(acc); }
static inline float loom_tv_fold_max(loom_tv acc, loom_tn nan) { return nan ? NAN : loom_tv_fold1_max(acc); }
static inline float loom_tv_fold_min(loom_tv acc, loom_tn nan) { return nan ? NAN : loom_tv_fold1_min(acc); }
/* The same over x[0], x[stride], ... x[(n - 1) * stride]: a last part chunk
 * is padded with the start value, which changes no lane. */
/* Two 16-lane accumulators: 32 lanes, element i in lane i mod 32 (chunks of
 * 16 alternate between them), folded as lane l with lane l + 16 first. */
static inline float loom_tv_fold2_sum(loom_tv a0, loom_tv a1) { return loom_tv_fold_sum(loom_tv_sum(a0, a1)); }
static inline float loom_tv_fold2_max(loom_tv a0, loom_tv a1, loom_tn nan) { return loom_tv_fold_max(loom_tv_max(a0, a1), nan); }
static inline float loom_tv_fold2_min(loom_tv a0, loom_tv a1, loom_tn nan) { return loom_tv_fold_min(loom_tv_min(a0, a1), nan); }
/* ODD: the accumulator of odd chunks (a1; a0 for maxima and minima, which
 * keep one accumulator of 16 lanes: a1 stays at the start value). */
#define LOOM_TILE_REDF(OP, INIT, NAN_STEP, FOLD_ARGS, ODD) \
static inline float loom_tile_##OP##f(const float *x, int64_t n, int64_t stride) { \
  loom_tv a0 = loom_tv_set1(INIT), a1 = a0; loom_tn nan = 0; (void)nan; \
  int64_t i = 0; \
  if (stride == 1) \
    for (; i + 32 <= n; i += 32) { \
      loom_tv v = loom_tv_loadu(x + i); a0 = loom_tv_##OP(a0, v); NAN_STEP; \
      v = loom_tv_loadu(x + i + 16); ODD = loom_tv_##OP(ODD, v); NAN_STEP; } \
  for (; i < n; i += 16) { \
    float t[16] __attribute__((aligned(64))); \
    for (int l = 0; l < 16; ++l) t[l] = i + l < n ? x[(i + l) * stride] : (INIT); \
    const loom_tv v = loom_tv_load(t); NAN_STEP; \
    if ((i >> 4) & 1) ODD = loom_tv_##OP(ODD, v); else a0 = loom_tv_##OP(a0, v); } \
  return loom_tv_fold2_##OP FOLD_ARGS; }
LOOM_TILE_REDF(sum, 0.0f, (void)0, (a0, a1), a1)
LOOM_TILE_REDF(max, -INFINITY, nan = loom_tv_nan(nan, v), (a0, a1, nan), a0)
LOOM_TILE_REDF(min, INFINITY, nan = loom_tv_nan(nan, v), (a0, a1, nan), a0)
#define LOOM_TILE_RED(NAME, T, INIT, STEP) \
static inline T NAME(const T *x, int64_t n, int64_t stride) { \
  T acc[16]; for (int l = 0; l < 16; ++l) acc[l] = INIT; \
  int64_t i = 0; \
  if (stride == 1) for (; i + 16 <= n; i += 16) for (int l = 0; l < 16; ++l) { T a = acc[l], v = x[i + l]; acc[l] = STEP; } \
  for (; i < n; ++i) { T a = acc[i & 15], v = x[i * stride]; acc[i & 15] = STEP; } \
  for (int w = 8; w; w >>= 1) for (int l = 0; l < w; ++l) { T a = acc[l], v = acc[l + w]; acc[l] = STEP; } \
  return acc[0]; }
LOOM_TILE_RED(loom_tile_sumd, double, 0.0, a + v)
LOOM_TILE_RED(loom_tile_maxd, double, -INFINITY, ((v != v || v > a) ? v : a))
LOOM_TILE_RED(loom_tile_mind, double, INFINITY, ((v != v || v < a) ? v : a))
LOOM_TILE_RED(loom_tile_sumi, int32_t, 0, (int32_t)(a + v))
LOOM_TILE_RED(loom_tile_sumI, int64_t, 0, a + v)
LOOM_TILE_RED(loom_tile_maxi, int32_t, INT32_MIN, (v > a ? v : a))
LOOM_TILE_RED(loom_tile_maxI, int64_t, INT64_MIN, (v > a ? v : a))
LOOM_TILE_RED(loom_tile_mini, int32_t, INT32_MAX, (v < a ? v : a))
LOOM_TILE_RED(loom_tile_minI, int64_t, INT64_MAX, (v < a ? v : a))
/* The first index of the largest (smallest) value; NaN counts as largest
 * (smallest), as torch.argmax has it. */
#define LOOM_TILE_ARG(NAME, T, BETTER) \
static inline int32_t NAME(const T *x, int64_t n, int64_t stride) { \
  int32_t best = 0; T a = x[0]; \
  for (int64_t i = 1; i < n; ++i) { T v = x[i * stride]; if (a == a && (BETTER)) { a = v; best = (int32_t)i; } } \
  return best; }
LOOM_TILE_ARG(loom_tile_argmaxf, float, (v != v || v > a))
LOOM_TILE_ARG(loom_tile_argmaxd, double, (v != v || v > a))
LOOM_TILE_ARG(loom_tile_argmaxi, int32_t, (v > a))
LOOM_TILE_ARG(loom_tile_argmaxI, int64_t, (v > a))
LOOM_TILE_ARG(loom_tile_argminf, float, (v != v || v < a))
LOOM_TILE_ARG(loom_tile_argmind, double, (v != v || v < a))
LOOM_TILE_ARG(loom_tile_argmini, int32_t, (v < a))
LOOM_TILE_ARG(loom_tile_argminI, int64_t, (v < a))

/* c[M][N] += a[M][K] . b[K][N] (c = ... when `zero`: c need not be
 * initialised), all row-major: tiles of 8 rows x 32 columns held in 16
 * registers (then 4 x 16, then plain loops). */
#if defined(__AVX512F__)
#define LOOM_TD_L(r) __m512 c##r##0 = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (i + r) * N + j), \
    c##r##1 = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (i + r) * N + j + 16);
#define LOOM_TD_F(r) { const __m512 av = _mm512_set1_ps(a[(i + r) * K + k]); \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0); c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1); }
#define LOOM_TD_S(r) _mm512_storeu_ps(c + (i + r) * N + j, c##r##0); _mm512_storeu_ps(c + (i + r) * N + j + 16, c##r##1);
#endif
static inline __attribute__((always_inline)) void loom_tile_dot(
    int64_t M, int64_t N, int64_t K, const float *a, const float *b, float *c, int zero) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if (N % 32 == 0) {
    /* column panels outside: a panel of b (K x 32) stays in L1 while the
     * row blocks of a stream past it */
    const int64_t m8 = M - M % 8;
    for (int64_t j = 0; j < N; j += 32)
      for (i = 0; i < m8; i += 8) {
        LOOM_TD_L(0) LOOM_TD_L(1) LOOM_TD_L(2) LOOM_TD_L(3) LOOM_TD_L(4) LOOM_TD_L(5) LOOM_TD_L(6) LOOM_TD_L(7)
        for (int64_t k = 0; k < K; ++k) {
          const __m512 b0 = _mm512_loadu_ps(b + k * N + j), b1 = _mm512_loadu_ps(b + k * N + j + 16);
          LOOM_TD_F(0) LOOM_TD_F(1) LOOM_TD_F(2) LOOM_TD_F(3) LOOM_TD_F(4) LOOM_TD_F(5) LOOM_TD_F(6) LOOM_TD_F(7)
        }
        LOOM_TD_S(0) LOOM_TD_S(1) LOOM_TD_S(2) LOOM_TD_S(3) LOOM_TD_S(4) LOOM_TD_S(5) LOOM_TD_S(6) LOOM_TD_S(7)
      }
    i = m8;
  }
#endif
  if (zero)
    for (int64_t r = i; r < M; ++r)
      for (int64_t j = 0; j < N; ++j) c[r * N + j] = 0.0f;
#if defined(__AVX512F__)
  if (N % 16 == 0) {
    for (; i + 4 <= M; i += 4)
      for (int64_t j = 0; j < N; j += 16) {
        __m512 acc0 = _mm512_loadu_ps(c + i * N + j), acc1 = _mm512_loadu_ps(c + (i + 1) * N + j);
        __m512 acc2 = _mm512_loadu_ps(c + (i + 2) * N + j), acc3 = _mm512_loadu_ps(c + (i + 3) * N + j);
        for (int64_t k = 0; k < K; ++k) {
          const __m512 bv = _mm512_loadu_ps(b + k * N + j);
          acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[i * K + k]), bv, acc0);
          acc1 = _mm512_fmadd_ps(_mm512_set1_ps(a[(i + 1) * K + k]), bv, acc1);
          acc2 = _mm512_fmadd_ps(_mm512_set1_ps(a[(i + 2) * K + k]), bv, acc2);
          acc3 = _mm512_fmadd_ps(_mm512_set1_ps(a[(i + 3) * K + k]), bv, acc3);
        }
        _mm512_storeu_ps(c + i * N + j, acc0); _mm512_storeu_ps(c + (i + 1) * N + j, acc1);
        _mm512_storeu_ps(c + (i + 2) * N + j, acc2); _mm512_storeu_ps(c + (i + 3) * N + j, acc3);
      }
  }
#endif
  for (; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[i * K + k];
      for (int64_t j = 0; j < N; ++j) c[i * N + j] = fmaf(av, b[k * N + j], c[i * N + j]);
    }
}
"""


@functools.cache
def _exp_neg_digest():
    path = Path(emit_c.math_root()) / "kernels/pointwise/exp_neg.h"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "none"


def module(kernel_name, program_lines, tensor_decls, scalar_decls):
    """The C source of a kernel: the program as a static function of the
    program ids, and the loom_kernel_fn calling it for each program of its
    chunk [begin, end) of the launch range (range = the grid's size)."""
    prelude = emit_c.CDialect().prelude()
    body = "\n".join(program_lines)
    decls = "\n".join("  " + d for d in tensor_decls + scalar_decls)
    # stores past the cache are weakly ordered: fenced before the chunk ends
    fence = "\n    LOOM_TILE_FENCE(A);" if "loom_tile_put16(" in body else ""
    fence2 = fence.replace("    ", "  ")
    return f"""{prelude}/* exp_neg.h {_exp_neg_digest()} */{PRELUDE}
static void loom_tile_program(const loom_kernel_args *A, int32_t pid0, int32_t pid1, int32_t pid2,
                              int32_t np0, int32_t np1, int32_t np2) {{
  (void)pid0; (void)pid1; (void)pid2; (void)np0; (void)np1; (void)np2;
{decls}
{body}
}}

int {kernel_name}(const loom_kernel_args *A, int64_t begin, int64_t end) {{
  const int64_t g0 = A->scalars[0].i, g1 = A->scalars[1].i, g2 = A->scalars[2].i;
  if (g1 == 1 && g2 == 1) {{ /* a 1-d grid: no divisions per program */
    for (int64_t p = begin; p < end; ++p) loom_tile_program(A, (int32_t)p, 0, 0, (int32_t)g0, 1, 1);{fence}
    return 0;
  }}
  for (int64_t p = begin; p < end; ++p)
    loom_tile_program(A, (int32_t)(p % g0), (int32_t)((p / g0) % g1), (int32_t)(p / (g0 * g1)),
                      (int32_t)g0, (int32_t)g1, (int32_t)g2);{fence2}
  return 0;
}}
"""


def kernel_name(fn_name, source):
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() else "_" for c in fn_name)
    return f"loom_tile_{safe}_{digest}"


def compile_flags():
    return emit_c.CDialect().compile_flags() + ["-fwrapv"]
