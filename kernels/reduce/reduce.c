/* Reductions: each output's reduced elements are visited in row-major order
 * as strided runs, staged in blocks and folded into a small state; states of
 * consecutive parts are combined in order. Nothing depends on which worker
 * runs which chunk, so results are bitwise reproducible. */
#include "kernels/reduce/reduce.h"

#include <math.h>
#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/base/iter.h"
#include "kernels/base/lanes.h"
#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

#define RD_BLOCK 512

typedef struct rd_state {
  double a, b;  /* sum / best / mean / running max; M2 / sum of exp */
  double spare;
  int64_t n;    /* elements seen */
  int64_t idx;  /* index of the best element */
  int64_t iv;   /* integral sum, product or best */
} rd_state;

typedef struct rd_ctx {
  int op;
  int integral;
  int32_t dtype;
  double p; /* correction or norm order */
  int avx512;
  int want_index; /* max / min: the index output is written */
} rd_ctx;

_Static_assert(sizeof(rd_state) == LOOM_REDUCE_STATE_DOUBLES * sizeof(double),
               "scratch layout");

static void rd_init(const rd_ctx *c, rd_state *s) {
  memset(s, 0, sizeof *s);
  if (c->op == LOOM_REDUCE_PROD) {
    s->a = 1.0;
    s->iv = 1;
  }
  if (c->op == LOOM_REDUCE_ALL) s->iv = 1;
}

static int rd_is_max(const rd_ctx *c) {
  return c->op == LOOM_REDUCE_MAX ||
         (c->op == LOOM_REDUCE_NORM && c->p == INFINITY);
}

/* Does candidate v replace best? NaN wins over numbers; ties keep the
 * earlier element. */
static inline int rd_better(double v, double best, int max) {
  if (best != best) return 0;
  if (v != v) return 1;
  return max ? v > best : v < best;
}

/* The largest of n > 0 doubles, NaN if any is NaN (which keeps NaN away
 * from the arithmetic e^x): 16 lanes, no chain of dependent choices. */
static double rd_max_f64(const double *x, int64_t n) {
  double lane[16];
  int nan = 0;
  for (int j = 0; j < 16; ++j) lane[j] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const double v = x[i + j];
      lane[j] = v > lane[j] ? v : lane[j];
      nan |= v != v;
    }
  for (; i < n; ++i) {
    lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    nan |= x[i] != x[i];
  }
  double m = lane[0];
  for (int j = 1; j < 16; ++j) m = lane[j] > m ? lane[j] : m;
  return nan ? NAN : m;
}

/* Joins a part whose elements have e^(x - r) summing to `sum` (r their
 * max, 0 when that is infinite; NaN when one is NaN) to logsumexp's state. */
static void rd_lse_join(rd_state *s, double r, double sum) {
  if (s->n == 0) {
    s->a = r;
    s->b = sum;
  } else if (r != r || s->a != s->a) {
    s->a = NAN;
  } else {
    const double ref = r > s->a ? r : s->a;
    s->b = s->b * exp(s->a - ref) + sum * exp(r - ref);
    s->a = ref;
  }
}

/* Folds a block of staged doubles (the elements at linear indices
 * lin..lin+n-1) into s. */
static void rd_block_f(const rd_ctx *c, rd_state *s, const double *x,
                       int64_t n, int64_t lin) {
  switch (c->op) {
    case LOOM_REDUCE_SUM:
    case LOOM_REDUCE_MEAN:
      s->a += c->avx512 ? loom_reduce_sum_f64_avx512(x, n, 0)
                        : loom_reduce_sum_f64(x, n, 0);
      break;
    case LOOM_REDUCE_NANSUM:
      for (int64_t i = 0; i < n; ++i) s->a += x[i] != x[i] ? 0.0 : x[i];
      break;
    case LOOM_REDUCE_PROD:
      s->a *= c->avx512 ? loom_reduce_prod_f64_avx512(x, n) : loom_reduce_prod_f64(x, n);
      break;
    case LOOM_REDUCE_MAX:
    case LOOM_REDUCE_MIN: {
      const int max = c->op == LOOM_REDUCE_MAX;
      int64_t i = 0;
      if (s->n == 0 && n > 0) { s->a = x[0]; s->idx = lin; i = 1; }
      for (; i < n; ++i)
        if (rd_better(x[i], s->a, max)) { s->a = x[i]; s->idx = lin + i; }
      break;
    }
    case LOOM_REDUCE_VAR:
    case LOOM_REDUCE_STD: { /* exact two-pass block, then Chan's merge */
      const double sum = c->avx512 ? loom_reduce_sum_f64_avx512(x, n, 0)
                                   : loom_reduce_sum_f64(x, n, 0);
      const double mean = sum / (double)n;
      double lane[16] = {0};
      int64_t i = 0;
      for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) lane[j] += (x[i + j] - mean) * (x[i + j] - mean);
      for (int j = 0; i < n; ++i, ++j) lane[j] += (x[i] - mean) * (x[i] - mean);
      const double m2 = loom_lanes16_fold_f64(lane);
      const double na = (double)s->n, nb = (double)n, nt = na + nb;
      const double delta = mean - s->a;
      s->a += delta * nb / nt;
      s->b += m2 + delta * delta * na * nb / nt;
      break;
    }
    case LOOM_REDUCE_NORM: {
      const double p = c->p;
      if (p == 0) {
        for (int64_t i = 0; i < n; ++i) s->a += x[i] != 0.0;
      } else if (p == 1) {
        for (int64_t i = 0; i < n; ++i) s->a += fabs(x[i]);
      } else if (p == 2) {
        s->a += c->avx512 ? loom_reduce_sum_f64_avx512(x, n, 1)
                          : loom_reduce_sum_f64(x, n, 1);
      } else if (isinf(p)) {
        const int max = p > 0;
        int64_t i = 0;
        if (s->n == 0 && n > 0) { s->a = fabs(x[0]); i = 1; }
        for (; i < n; ++i)
          if (rd_better(fabs(x[i]), s->a, max)) s->a = fabs(x[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) s->a += pow(fabs(x[i]), p);
      }
      break;
    }
    case LOOM_REDUCE_LOGSUMEXP: {
      /* a: reference point (the max, or 0 when it is infinite), b: sum of
       * exp(x - a). A block's state merges like any other part's. */
      const double m = rd_max_f64(x, n);
      const double r = isinf(m) ? 0.0 : m;
      double sum = 0.0;
      if (isfinite(m)) {
        sum = c->avx512 ? loom_reduce_exp_sum_f64_avx512(x, n, r) : loom_reduce_exp_sum_f64(x, n, r);
      } else {
        for (int64_t i = 0; i < n; ++i) sum += exp(x[i] - r);
      }
      rd_lse_join(s, r, sum);
      break;
    }
    case LOOM_REDUCE_ALL:
      for (int64_t i = 0; i < n; ++i) s->iv &= x[i] != 0.0;
      break;
    case LOOM_REDUCE_ANY:
      for (int64_t i = 0; i < n; ++i) s->iv |= x[i] != 0.0;
      break;
  }
  s->n += n;
}

static void rd_block_i(const rd_ctx *c, rd_state *s, const int64_t *x,
                       int64_t n, int64_t lin) {
  switch (c->op) {
    case LOOM_REDUCE_SUM:
    case LOOM_REDUCE_NANSUM:
    case LOOM_REDUCE_MEAN: {
      uint64_t acc = (uint64_t)s->iv;
      for (int64_t i = 0; i < n; ++i) acc += (uint64_t)x[i];
      s->iv = (int64_t)acc;
      break;
    }
    case LOOM_REDUCE_PROD: {
      uint64_t acc = (uint64_t)s->iv;
      for (int64_t i = 0; i < n; ++i) acc *= (uint64_t)x[i];
      s->iv = (int64_t)acc;
      break;
    }
    case LOOM_REDUCE_MAX:
    case LOOM_REDUCE_MIN: {
      const int max = c->op == LOOM_REDUCE_MAX;
      int64_t i = 0;
      if (s->n == 0 && n > 0) { s->iv = x[0]; s->idx = lin; i = 1; }
      for (; i < n; ++i)
        if (max ? x[i] > s->iv : x[i] < s->iv) { s->iv = x[i]; s->idx = lin + i; }
      break;
    }
    case LOOM_REDUCE_ALL:
      for (int64_t i = 0; i < n; ++i) s->iv &= x[i] != 0;
      break;
    case LOOM_REDUCE_ANY:
      for (int64_t i = 0; i < n; ++i) s->iv |= x[i] != 0;
      break;
    default: break; /* float-only ops never reach here */
  }
  s->n += n;
}

/* Folds a strided run; contiguous float32/float64 sums skip the staging. */
static int rd_run(const rd_ctx *c, rd_state *s, const char *p, int64_t stride,
                  int64_t n, int64_t lin) {
  const int fast_sum = c->op == LOOM_REDUCE_SUM || c->op == LOOM_REDUCE_MEAN ||
                       (c->op == LOOM_REDUCE_NORM && c->p == 2);
  const int sq = c->op == LOOM_REDUCE_NORM;
  if (fast_sum && c->dtype == LOOM_FLOAT32 && stride == 4) {
    s->a += c->avx512 ? loom_reduce_sum_f32_avx512((const float *)p, n, sq)
                      : loom_reduce_sum_f32((const float *)p, n, sq);
    s->n += n;
    return 1;
  }
  if (fast_sum && c->dtype == LOOM_FLOAT64 && stride == 8) {
    s->a += c->avx512 ? loom_reduce_sum_f64_avx512((const double *)p, n, sq)
                      : loom_reduce_sum_f64((const double *)p, n, sq);
    s->n += n;
    return 1;
  }
  if (fast_sum && c->dtype == LOOM_BFLOAT16 && stride == 2) { /* widened as it is read */
    s->a += c->avx512 ? loom_reduce_sum_bf16_avx512((const uint16_t *)p, n, sq)
                      : loom_reduce_sum_bf16((const uint16_t *)p, n, sq);
    s->n += n;
    return 1;
  }
  if (fast_sum && c->dtype == LOOM_FLOAT16 && stride == 2) {
    /* 16-bit floats widen exactly to float32 blocks, summed as float32
     * runs are: 64 lanes, no chain of dependent additions */
    float buf[RD_BLOCK];
    for (int64_t off = 0; off < n; off += RD_BLOCK) {
      const int64_t m = n - off < RD_BLOCK ? n - off : RD_BLOCK;
      if (!loom_pw_load(LOOM_PW_F32, buf, p + off * 2, c->dtype, 2, m)) return 0;
      s->a += c->avx512 ? loom_reduce_sum_f32_avx512(buf, m, sq) : loom_reduce_sum_f32(buf, m, sq);
    }
    s->n += n;
    return 1;
  }
  if (c->op == LOOM_REDUCE_LOGSUMEXP && c->dtype == LOOM_FLOAT32 && stride == 4 && n > 0 &&
      n < ((int64_t)1 << 31)) { /* rd_block_f's terms read in place; a run with
                                 * an inf or NaN max is staged as any other */
    const float *x = (const float *)p;
    const double m = c->avx512 ? loom_reduce_extreme_value_f32_avx512(x, n, 1)
                               : loom_reduce_extreme_value_f32(x, n, 1);
    if (isfinite(m)) {
      rd_lse_join(s, m, c->avx512 ? loom_reduce_exp_sum_f32_avx512(x, n, m)
                                  : loom_reduce_exp_sum_f32(x, n, m));
      s->n += n;
      return 1;
    }
  }
  if (c->op == LOOM_REDUCE_PROD && c->dtype == LOOM_FLOAT32 && stride == 4) {
    s->a *= c->avx512 ? loom_reduce_prod_f32_avx512((const float *)p, n)
                      : loom_reduce_prod_f32((const float *)p, n);
    s->n += n;
    return 1;
  }
  if (c->op == LOOM_REDUCE_PROD && c->dtype == LOOM_FLOAT64 && stride == 8) {
    s->a *= c->avx512 ? loom_reduce_prod_f64_avx512((const double *)p, n)
                      : loom_reduce_prod_f64((const double *)p, n);
    s->n += n;
    return 1;
  }
  if ((c->op == LOOM_REDUCE_MAX || c->op == LOOM_REDUCE_MIN) && c->dtype == LOOM_FLOAT32 &&
      stride == 4 && n > 0 && n < ((int64_t)1 << 31)) {
    const int max = c->op == LOOM_REDUCE_MAX;
    int64_t at = 0;
    const float v = !c->want_index
                        ? (c->avx512 ? loom_reduce_extreme_value_f32_avx512 : loom_reduce_extreme_value_f32)(
                              (const float *)p, n, max)
                    : c->avx512 ? loom_reduce_extreme_f32_avx512((const float *)p, n, max, &at)
                                : loom_reduce_extreme_f32((const float *)p, n, max, &at);
    if (s->n == 0 || rd_better(v, s->a, max)) {
      s->a = v;
      s->idx = lin + at;
    }
    s->n += n;
    return 1;
  }
  union { double f[RD_BLOCK]; int64_t i[RD_BLOCK]; } buf;
  for (int64_t off = 0; off < n; off += RD_BLOCK) {
    const int64_t m = n - off < RD_BLOCK ? n - off : RD_BLOCK;
    if (!loom_pw_load(c->integral ? LOOM_PW_I64 : LOOM_PW_F64, buf.f,
                      p + off * stride, c->dtype, stride, m))
      return 0;
    if (c->integral) rd_block_i(c, s, buf.i, m, lin + off);
    else rd_block_f(c, s, buf.f, m, lin + off);
  }
  return 1;
}

/* Merges state b (later elements) into a. */
static void rd_merge(const rd_ctx *c, rd_state *a, const rd_state *b) {
  if (b->n == 0) return;
  if (a->n == 0) {
    *a = *b;
    return;
  }
  switch (c->op) {
    case LOOM_REDUCE_MAX:
    case LOOM_REDUCE_MIN: {
      const int max = c->op == LOOM_REDUCE_MAX;
      if (c->integral ? (max ? b->iv > a->iv : b->iv < a->iv)
                      : rd_better(b->a, a->a, max)) {
        a->a = b->a; a->iv = b->iv; a->idx = b->idx;
      }
      break;
    }
    case LOOM_REDUCE_VAR:
    case LOOM_REDUCE_STD: {
      const double na = (double)a->n, nb = (double)b->n, nt = na + nb;
      const double delta = b->a - a->a;
      a->a += delta * nb / nt;
      a->b += b->b + delta * delta * na * nb / nt;
      break;
    }
    case LOOM_REDUCE_NORM:
      if (isinf(c->p)) {
        if (rd_better(b->a, a->a, rd_is_max(c))) a->a = b->a;
      } else {
        a->a += b->a;
      }
      break;
    case LOOM_REDUCE_LOGSUMEXP:
      if (a->a != a->a || b->a != b->a) {
        a->a = NAN;
      } else {
        const double ref = b->a > a->a ? b->a : a->a;
        a->b = a->b * exp(a->a - ref) + b->b * exp(b->a - ref);
        a->a = ref;
      }
      break;
    case LOOM_REDUCE_PROD:
      a->a *= b->a;
      a->iv = (int64_t)((uint64_t)a->iv * (uint64_t)b->iv);
      break;
    case LOOM_REDUCE_ALL: a->iv &= b->iv; break;
    case LOOM_REDUCE_ANY: a->iv |= b->iv; break;
    default: /* sums */
      a->a += b->a;
      a->iv = (int64_t)((uint64_t)a->iv + (uint64_t)b->iv);
      break;
  }
  a->n += b->n;
}

static int rd_store(const loom_tensor *t, int64_t off, int integral_value,
                    double f, int64_t i) {
  if (!t->data) return 1;
  char *dst = (char *)t->data + off * loom_dtype_size(t->dtype);
  return integral_value ? loom_pw_store(LOOM_PW_I64, dst, t->dtype, 0, &i, 1)
                        : loom_pw_store(LOOM_PW_F64, dst, t->dtype, 0, &f, 1);
}

static int rd_finish(const rd_ctx *c, const rd_state *s, int64_t count,
                     const loom_tensor *out, const loom_tensor *second,
                     int64_t out_off, int64_t second_off) {
  double v = s->a;
  switch (c->op) {
    case LOOM_REDUCE_MEAN: v = s->a / (double)count; break;
    case LOOM_REDUCE_VAR:
    case LOOM_REDUCE_STD: {
      double dof = (double)count - c->p;
      v = s->b / (dof > 0 ? dof : 0.0);
      if (c->op == LOOM_REDUCE_STD) v = sqrt(v);
      if (!rd_store(second, second_off, 0, count ? s->a : NAN, 0)) return 0;
      if (count == 0) v = NAN;
      break;
    }
    case LOOM_REDUCE_NORM:
      if (c->p == 2) v = sqrt(s->a);
      else if (!(c->p == 0 || c->p == 1 || isinf(c->p))) v = pow(s->a, 1.0 / c->p);
      break;
    case LOOM_REDUCE_LOGSUMEXP: v = log(s->b) + s->a; break;
    case LOOM_REDUCE_MAX:
    case LOOM_REDUCE_MIN:
      if (!rd_store(second, second_off, 1, 0.0, s->idx)) return 0;
      break;
    default: break;
  }
  const int integral_value = c->integral || c->op == LOOM_REDUCE_ALL ||
                             c->op == LOOM_REDUCE_ANY;
  return rd_store(out, out_off, integral_value, v, s->iv);
}

/* Element offsets of output o in out (and in `second`) and in the input. */
static void rd_offsets(const loom_tensor *out, const loom_tensor *second,
                       const loom_tensor *in, int64_t o, int64_t *out_off,
                       int64_t *second_off, int64_t *in_off) {
  int64_t oo = 0, so = 0, io = 0;
  for (int32_t d = out->rank - 1; d >= 0; --d) {
    const int64_t size = out->sizes[d], i = o % size;
    o /= size;
    oo += i * out->strides[d];
    if (second->rank == out->rank) so += i * second->strides[d];
    io += i * in->strides[d];
  }
  *out_off = oo;
  *second_off = so;
  *in_off = io;
}

/* Folds reduced elements [lin, lin + count) of one output into s. */
static int rd_span(const rd_ctx *c, rd_state *s, const loom_tensor *in,
                   int64_t in_off, int32_t keep, int64_t lin, int64_t count) {
  /* Reduced dims that lie densely (a sum over a row-major tensor's last
   * dims) are one run: no iterator to set up per output. */
  if (loom_nn_dense_from(in, keep)) {
    if (count <= 0) return 1;
    const int64_t es = loom_dtype_size(in->dtype);
    return rd_run(c, s, (const char *)in->data + (in_off + lin) * es, es, count, lin);
  }
  loom_tensor sub = {.data = (char *)in->data + in_off * loom_dtype_size(in->dtype),
                     .dtype = in->dtype, .rank = in->rank - keep};
  for (int32_t d = 0; d < sub.rank; ++d) {
    sub.sizes[d] = in->sizes[keep + d];
    sub.strides[d] = in->strides[keep + d];
  }
  if (count <= 0) return 1;
  const loom_tensor *ops[1] = {&sub};
  loom_iter it;
  if (loom_iter_init(&it, 1, ops)) return 0;
  loom_iter_seek(&it, lin, count);
  const int64_t stride = it.strides[0][it.rank - 1];
  char *p[1];
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) {
    if (!rd_run(c, s, p[0], stride, n, lin)) return 0;
    lin += n;
  }
  return 1;
}

#define RD_COLS 256
/* Rows a column block fetches ahead: each row's run starts a new page,
 * where the hardware's prefetch stops. */
#define RD_AHEAD 4

static void rd_prefetch_row(const char *p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

/* Outputs from w on that one block takes: up to the end of the range, of
 * the row of `inner` outputs, and RD_COLS. */
static int64_t rd_block_width(int64_t w, int64_t end, int64_t inner) {
  const int64_t col = w % inner;
  const int64_t width = inner - col < end - w ? inner - col : end - w;
  return width > RD_COLS ? RD_COLS : width;
}

/* best[j], idx[j]: the max (max 1) or min of `width` float32 columns of n
 * rows `stride` apart from x0, and its row (idx may be NULL): a NaN wins
 * and stays, the first of equal extremes keeps its index. */
static void rd_cols_best(const rd_ctx *c, const float *x0, int64_t stride, int64_t n,
                         int64_t width, int max, float *best, int64_t *idx) {
  for (int64_t j = 0; j < width; ++j) best[j] = x0[j];
  if (idx)
    for (int64_t j = 0; j < width; ++j) idx[j] = 0;
  for (int64_t k = 1; k < n; ++k) {
    if (k + RD_AHEAD < n) rd_prefetch_row((const char *)(x0 + (k + RD_AHEAD) * stride), width * 4);
    if (c->avx512) loom_reduce_cols_extreme_f32_avx512(best, idx, x0 + k * stride, width, k, max);
    else loom_reduce_cols_extreme_f32(best, idx, x0 + k * stride, width, k, max);
  }
}

/* logsumexp of float32 columns: each column's max m, then e^(x - m)
 * summed row by row in double, in index order; a column whose max is not
 * finite (inf, -inf, NaN) has it as its result. */
static int rd_columns_logsumexp(const rd_ctx *c, const loom_tensor *out, const loom_tensor *in,
                                int32_t keep, int64_t begin, int64_t end) {
  const int64_t inner = in->sizes[keep - 1], n = in->sizes[keep];
  const int64_t stride = in->strides[keep];
  for (int64_t w = begin; w < end;) {
    const int64_t width = rd_block_width(w, end, inner);
    int64_t out_off, second_off, in_off;
    rd_offsets(out, out, in, w, &out_off, &second_off, &in_off);
    const float *x0 = (const float *)in->data + in_off;
    float best[RD_COLS];
    double ref[RD_COLS], acc[RD_COLS];
    rd_cols_best(c, x0, stride, n, width, 1, best, NULL);
    for (int64_t j = 0; j < width; ++j) {
      ref[j] = isfinite(best[j]) ? (double)best[j] : 0.0;
      acc[j] = 0.0;
    }
    for (int64_t k = 0; k < n; ++k) {
      if (k + RD_AHEAD < n) rd_prefetch_row((const char *)(x0 + (k + RD_AHEAD) * stride), width * 4);
      if (c->avx512) loom_reduce_cols_exp_f32_avx512(acc, x0 + k * stride, ref, width);
      else loom_reduce_cols_exp_f32(acc, x0 + k * stride, ref, width);
    }
    for (int64_t j = 0; j < width; ++j) {
      const double v = isfinite(best[j]) ? log(acc[j]) + ref[j] : (double)best[j];
      if (!rd_store(out, out_off + j, 0, v, 0)) return 0;
    }
    w += width;
  }
  return 1;
}

/* max / min (values, and indices where `second` has data) of float32
 * columns, as rd_block_f takes them: a NaN wins and stays, and the first
 * of equal extremes keeps its index. Called by rd_columns, which has
 * checked the layout. */
static int rd_columns_extreme(const rd_ctx *c, const loom_tensor *out,
                              const loom_tensor *second, const loom_tensor *in,
                              int32_t keep, int64_t begin, int64_t end) {
  const int64_t inner = in->sizes[keep - 1], n = in->sizes[keep];
  const int64_t stride = in->strides[keep];
  const int max = c->op == LOOM_REDUCE_MAX;
  const int64_t ss = second->data && second->rank == out->rank ? second->strides[keep - 1] : 0;
  for (int64_t w = begin; w < end;) {
    const int64_t width = rd_block_width(w, end, inner);
    int64_t out_off, second_off, in_off;
    rd_offsets(out, second, in, w, &out_off, &second_off, &in_off);
    float best[RD_COLS];
    int64_t idx[RD_COLS];
    rd_cols_best(c, (const float *)in->data + in_off, stride, n, width, max, best,
                 second->data ? idx : NULL);
    for (int64_t j = 0; j < width; ++j) {
      if (!rd_store(out, out_off + j, 0, (double)best[j], 0)) return 0;
      if (second->data && !rd_store(second, second_off + j * ss, 1, 0.0, idx[j])) return 0;
    }
    w += width;
  }
  return 1;
}

/* Rows [k0, k0 + n) of `width` neighbouring columns from in_off (rows
 * `stride` apart) added into acc row by row in order: float32 sums 32 rows
 * at a time in strips of 64 columns held in registers, other sums and
 * products a row at a time. 0 when a 16-bit row cannot be widened. */
static int rd_cols_acc(const rd_ctx *c, const loom_tensor *in, int64_t in_off, int64_t stride,
                       int64_t k0, int64_t n, int64_t width, double *acc) {
  const int prod = c->op == LOOM_REDUCE_PROD;
  const int half = c->dtype == LOOM_BFLOAT16 || c->dtype == LOOM_FLOAT16;
  const int f32 = c->dtype == LOOM_FLOAT32;
  const int64_t es = loom_dtype_size(c->dtype), k1 = k0 + n;
  const int strips = f32 && !prod;
  if (strips)
    for (int64_t k = k0; k < k1; k += 32)
      for (int64_t j0 = 0; j0 < width; j0 += 64)
        (c->avx512 ? loom_reduce_cols_rows_f32_avx512 : loom_reduce_cols_rows_f32)(
            acc + j0, (const float *)in->data + in_off + k * stride + j0, stride,
            k1 - k < 32 ? k1 - k : 32, width - j0 < 64 ? width - j0 : 64);
  for (int64_t k = k0; !strips && k < k1; ++k) {
    if (k + RD_AHEAD < k1)
      rd_prefetch_row((const char *)in->data + (in_off + (k + RD_AHEAD) * stride) * es, width * es);
    if (c->dtype == LOOM_BFLOAT16 && !prod) {
      const uint16_t *xh = (const uint16_t *)in->data + in_off + k * stride;
      (c->avx512 ? loom_reduce_cols_bf16_avx512 : loom_reduce_cols_bf16)(acc, xh, width);
      continue;
    }
    float wide[RD_COLS];
    const float *xf = wide;
    if (half) { /* widened exactly to float32 */
      if (!loom_pw_load(LOOM_PW_F32, wide, (const char *)in->data + (in_off + k * stride) * 2,
                        c->dtype, 2, width))
        return 0;
    } else if (f32) {
      xf = (const float *)in->data + in_off + k * stride;
    }
    if (f32 || half) {
      if (prod) (c->avx512 ? loom_reduce_cols_prod_f32_avx512 : loom_reduce_cols_prod_f32)(acc, xf, width);
      else (c->avx512 ? loom_reduce_cols_f32_avx512 : loom_reduce_cols_f32)(acc, xf, width);
    } else {
      const double *x = (const double *)in->data + in_off + k * stride;
      if (prod) (c->avx512 ? loom_reduce_cols_prod_f64_avx512 : loom_reduce_cols_prod_f64)(acc, x, width);
      else (c->avx512 ? loom_reduce_cols_f64_avx512 : loom_reduce_cols_f64)(acc, x, width);
    }
  }
  return 1;
}

/* A column reduction rd_cols_acc takes: floats, one reduced dim under a
 * contiguous innermost kept dim. */
static int rd_cols_layout(const rd_ctx *c, const loom_tensor *in, int32_t keep) {
  return (c->dtype == LOOM_FLOAT32 || c->dtype == LOOM_FLOAT64 || c->dtype == LOOM_BFLOAT16 ||
          c->dtype == LOOM_FLOAT16) && keep >= 1 && in->rank == keep + 1 && in->strides[keep - 1] == 1;
}

/* Sums and products over one strided dim into outputs that are contiguous
 * in both the input and the output (e.g. a sum over dim 0 of a row-major
 * matrix; 16-bit floats widened to float32 rows): a block of neighbouring
 * outputs is accumulated row by row, so memory is read in order. Each
 * output still takes its elements in index order; max and min of float32
 * take rd_columns_extreme, logsumexp rd_columns_logsumexp.
 * Returns 0 when the layout does not fit (the caller takes the general
 * path). */
static int rd_columns(const rd_ctx *c, const loom_tensor *out,
                      const loom_tensor *second, const loom_tensor *in, int32_t keep,
                      int64_t begin, int64_t end) {
  const int extreme = c->op == LOOM_REDUCE_MAX || c->op == LOOM_REDUCE_MIN;
  const int lse = c->op == LOOM_REDUCE_LOGSUMEXP;
  const int prod = c->op == LOOM_REDUCE_PROD;
  const int half = c->dtype == LOOM_BFLOAT16 || c->dtype == LOOM_FLOAT16;
  if ((c->op != LOOM_REDUCE_SUM && c->op != LOOM_REDUCE_MEAN && !extreme && !prod && !lse) ||
      (c->dtype != LOOM_FLOAT32 && c->dtype != LOOM_FLOAT64 && !half) ||
      ((extreme || lse) && c->dtype != LOOM_FLOAT32) || !rd_cols_layout(c, in, keep) ||
      out->strides[keep - 1] != 1 || !out->data)
    return 0;
  const int64_t inner = in->sizes[keep - 1], n = in->sizes[keep];
  const int64_t stride = in->strides[keep];
  if (extreme) return rd_columns_extreme(c, out, second, in, keep, begin, end);
  if (lse) return rd_columns_logsumexp(c, out, in, keep, begin, end);
  for (int64_t w = begin; w < end;) {
    const int64_t width = rd_block_width(w, end, inner);
    int64_t out_off, second_off, in_off;
    rd_offsets(out, out, in, w, &out_off, &second_off, &in_off);
    double acc[RD_COLS];
    for (int64_t j = 0; j < width; ++j) acc[j] = prod ? 1.0 : 0.0;
    if (!rd_cols_acc(c, in, in_off, stride, 0, n, width, acc)) return 0;
    for (int64_t j = 0; j < width; ++j) {
      const double v = c->op == LOOM_REDUCE_MEAN ? acc[j] / (double)n : acc[j];
      if (!rd_store(out, out_off + j, 0, v, 0)) return 0;
    }
    w += width;
  }
  return 1;
}

/* Stage 1 of a column sum, mean, max or min (rd_cols_layout; max and min
 * of float32) into few outputs: the items of one part for neighbouring
 * outputs (item w: part w / outputs of output w % outputs) read its rows
 * once for all of them, row by row as rd_columns does: each partial is the
 * part's in-order sum, or its best and first row (rd_cols_best); stage 2
 * merges the parts in order. Returns 0 when the layout does not fit. */
static int rd_column_parts(const rd_ctx *c, const loom_tensor *out, const loom_tensor *in,
                           int32_t keep, rd_state *scratch, int64_t outputs, int64_t parts,
                           int64_t part, int64_t begin, int64_t end) {
  const int extreme = (c->op == LOOM_REDUCE_MAX || c->op == LOOM_REDUCE_MIN) &&
                      c->dtype == LOOM_FLOAT32;
  if ((c->op != LOOM_REDUCE_SUM && c->op != LOOM_REDUCE_MEAN && !extreme) ||
      !rd_cols_layout(c, in, keep))
    return 0;
  const int64_t inner = in->sizes[keep - 1], rows = in->sizes[keep], stride = in->strides[keep];
  for (int64_t w = begin; w < end;) {
    const int64_t j = w / outputs, o = w % outputs;
    const int64_t left = end - w < outputs - o ? end - w : outputs - o;
    const int64_t width = rd_block_width(o, o + left, inner);
    int64_t out_off, second_off, in_off;
    rd_offsets(out, out, in, o, &out_off, &second_off, &in_off);
    const int64_t k0 = j * part, n = rows - k0 < part ? rows - k0 : part;
    double acc[RD_COLS];
    float best[RD_COLS]; /* max / min: the part's rows from k0, idx from 0 */
    int64_t idx[RD_COLS];
    if (extreme)
      rd_cols_best(c, (const float *)in->data + in_off + k0 * stride, stride, n, width,
                   c->op == LOOM_REDUCE_MAX, best, idx);
    for (int64_t q = 0; q < width && !extreme; ++q) acc[q] = 0.0;
    if (!extreme && !rd_cols_acc(c, in, in_off, stride, k0, n, width, acc)) return 0;
    for (int64_t q = 0; q < width; ++q) {
      rd_state s;
      rd_init(c, &s);
      s.a = extreme ? (double)best[q] : acc[q];
      s.idx = extreme ? k0 + idx[q] : 0;
      s.n = n;
      scratch[(o + q) * parts + j] = s;
    }
    w += width;
  }
  return 1;
}

/* Sums and means of float32 rows that lie one after another (a contiguous
 * input reduced over its last dims: a global average pool, a loss's row
 * sums) into a dense output. The arithmetic is the generic loop's: each
 * row's sum from rd_run's function, added to a zero state, divided by the
 * count for a mean, stored through loom_pw_store; what goes is the
 * per-output work around it (offsets by division, state, one store call
 * per output), which costs more than the sum of a short row. */
#define RD_ROWS_BLOCK 256
static int rd_dense_rows(const rd_ctx *c, const loom_tensor *out, const loom_tensor *in,
                         int64_t count, int64_t begin, int64_t end) {
  if ((c->op != LOOM_REDUCE_SUM && c->op != LOOM_REDUCE_MEAN) || c->dtype != LOOM_FLOAT32 ||
      count <= 0 || !out->data || !loom_nn_dense_from(in, 0) || !loom_nn_dense_from(out, 0))
    return 0;
  double (*const sum)(const float *, int64_t, int) =
      c->avx512 ? loom_reduce_sum_f32_avx512 : loom_reduce_sum_f32;
  double (*const sum_short)(const float *, int64_t) =
      c->avx512 ? loom_reduce_sum_short_f32_avx512 : loom_reduce_sum_short_f32;
  const int64_t es = loom_dtype_size(out->dtype);
  double v[RD_ROWS_BLOCK];
  for (int64_t w = begin; w < end; w += RD_ROWS_BLOCK) {
    const int64_t m = end - w < RD_ROWS_BLOCK ? end - w : RD_ROWS_BLOCK;
    const float *x = (const float *)in->data + w * count;
    for (int64_t j = 0; j < m; ++j, x += count) {
      double a = 0.0;
      a += count < 1024 ? sum_short(x, count) : sum(x, count, 0);
      v[j] = c->op == LOOM_REDUCE_MEAN ? a / (double)count : a;
    }
    if (!loom_pw_store(LOOM_PW_F64, (char *)out->data + w * es, out->dtype, es, v, m)) return 0;
  }
  return 1;
}

/* `in` with its reduced dims (from `keep` on) as loom_iter_init takes them:
 * size-1 dims dropped, neighbours that lie back to back merged. Each
 * output's elements keep their row-major order, so no result changes; a
 * bias gradient's sum over (batch, sequence) of a contiguous (8, 128,
 * 1024) becomes the column sum of a (1024, 1024) (2.89 ms -> 0.11). */
static loom_tensor rd_coalesced(const loom_tensor *in, int32_t keep) {
  loom_tensor sub = {.data = in->data, .dtype = in->dtype, .rank = in->rank - keep};
  for (int32_t d = 0; d < sub.rank; ++d) {
    sub.sizes[d] = in->sizes[keep + d];
    sub.strides[d] = in->strides[keep + d];
  }
  const loom_tensor *ops[1] = {&sub};
  loom_iter it;
  if (sub.rank == 0 || !in->data || loom_iter_init(&it, 1, ops)) return *in;
  loom_tensor r = *in;
  const int64_t es = loom_dtype_size(in->dtype);
  r.rank = keep + it.rank;
  for (int32_t d = 0; d < it.rank; ++d) {
    r.sizes[keep + d] = it.sizes[d];
    r.strides[keep + d] = it.strides[0][d] / es;
  }
  return r;
}

int loom_kernel_reduce(const loom_kernel_args *args, int64_t begin,
                       int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 5)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0];
  const loom_tensor *second = &args->tensors[2];
  const int64_t r = args->scalars[1].i, parts = args->scalars[3].i;
  const int stage = (int)args->scalars[4].i;
  const int32_t keep = args->tensors[1].rank - (int32_t)r;
  if (r < 0 || keep != out->rank || parts < 1 || loom_dtype_size(args->tensors[1].dtype) == 0)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor coalesced = rd_coalesced(&args->tensors[1], keep), *in = &coalesced;
  const rd_ctx c = {.op = (int)args->scalars[0].i,
                    .integral = loom_dtype_is_integral(in->dtype),
                    .dtype = in->dtype,
                    .p = args->scalars[2].f,
                    .avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0,
                    .want_index = second->data != NULL};
  if (c.op < 0 || c.op >= LOOM_REDUCE_OP_COUNT) return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t count = 1;
  for (int32_t d = keep; d < in->rank; ++d) count *= in->sizes[d];
  rd_state *scratch = stage ? (rd_state *)args->tensors[3].data : NULL;
  if (stage && (args->num_tensors < 4 || !scratch)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t part = loom_reduce_part(count);
  if (stage == 1 && parts != (count + part - 1) / part) return LOOM_ERROR_INVALID_ARGUMENT;
  if (stage == 0 && count > 0 && rd_columns(&c, out, second, in, keep, begin, end)) return LOOM_OK;
  if (stage == 0 && rd_dense_rows(&c, out, in, count, begin, end)) return LOOM_OK;

  int64_t outputs = 1;
  for (int32_t d = 0; d < keep; ++d) outputs *= in->sizes[d];
  if (stage == 1 && count > 0 &&
      rd_column_parts(&c, out, in, keep, scratch, outputs, parts, part, begin, end))
    return LOOM_OK;
  for (int64_t w = begin; w < end; ++w) {
    const int64_t o = stage == 1 ? w % outputs : w; /* stage 1: part w / outputs */
    int64_t out_off, second_off, in_off;
    rd_offsets(out, second, in, o, &out_off, &second_off, &in_off);
    rd_state s;
    rd_init(&c, &s);
    if (stage == 1) {
      const int64_t j = w / outputs, lin = j * part;
      const int64_t n = count - lin < part ? count - lin : part;
      if (!rd_span(&c, &s, in, in_off, keep, lin, n)) return LOOM_ERROR_NOT_SUPPORTED;
      scratch[o * parts + j] = s;
      continue;
    }
    if (stage == 2) {
      for (int64_t j = 0; j < parts; ++j) rd_merge(&c, &s, &scratch[o * parts + j]);
    } else if (!rd_span(&c, &s, in, in_off, keep, 0, count)) {
      return LOOM_ERROR_NOT_SUPPORTED;
    }
    if (!rd_finish(&c, &s, count, out, second, out_off, second_off))
      return LOOM_ERROR_NOT_SUPPORTED;
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_reduce_kernels[] = {
    {"reduce.trailing_dims", loom_kernel_reduce, NULL},
    {NULL, NULL, NULL},
};
