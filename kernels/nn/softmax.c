/* Softmax rows: each row is walked by one call, start to end, so the result
 * is the same however the rows are split among threads. */
#include "kernels/nn/softmax.h"

#include <math.h>
#include <string.h>

#include "kernels/nn/nn_rows.h"
#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* Longest bf16/fp16 row staged through float buffers (longer rows take the
 * exact double path). */
#define SOFTMAX_ROW_BUFFER 8192
/* Strided rows whose neighbours lie next to them in memory (a softmax over
 * dim 0 of a matrix) are staged up to this many at a time, so that each
 * cache line read serves them all, when a row has too many elements for
 * the lines of one row to stay in L1 until the next row reads them. Tile
 * rows are padded by a line: a power-of-two stride would put them all in
 * one cache set. */
#define SOFTMAX_TILE_ROWS 16
#define SOFTMAX_TILE_MIN 256
#define SOFTMAX_TILE_FLOATS (16384 + 16 * SOFTMAX_TILE_ROWS)

typedef struct softmax_row {
  int64_t n, stride;
} softmax_row;

static softmax_row row_of(const loom_tensor *t, int32_t dim) {
  if (t->rank == 0) return (softmax_row){.n = 1, .stride = 1};
  return (softmax_row){.n = t->sizes[dim], .stride = t->strides[dim]};
}

/* n elements of t at element offset off, step stride, as floats / back. */
static void load_row(float *dst, const loom_tensor *t, int64_t off, int64_t stride, int64_t n) {
  if (stride == 1) {
    loom_nn_load_row_f32(dst, t->data, t->dtype, off, n);
  } else if (t->dtype == LOOM_FLOAT32) {
    const float *src = (const float *)t->data + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = (float)loom_nn_load(t->data, t->dtype, off + i * stride);
  }
}

static void store_row(const loom_tensor *t, int64_t off, int64_t stride, const float *src,
                      int64_t n) {
  if (stride == 1) {
    loom_nn_store_row_f32(t->data, t->dtype, off, src, n);
  } else if (t->dtype == LOOM_FLOAT32) {
    float *dst = (float *)t->data + off;
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) loom_nn_store(t->data, t->dtype, off + i * stride, src[i]);
  }
}

static int check_args(const loom_kernel_args *args, uint32_t ntensors,
                      int32_t *dim) {
  if (args->num_tensors < ntensors || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t d = args->scalars[0].i;
  int32_t rank = args->tensors[0].rank;
  if (rank == 0 ? (d != 0 && d != -1) : (d < 0 || d >= rank))
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (uint32_t t = 1; t < ntensors; ++t)
    if (args->tensors[t].rank != rank) return LOOM_ERROR_INVALID_ARGUMENT;
  *dim = rank == 0 ? -1 : (int32_t)d;
  return LOOM_OK;
}

/* Row r in double precision through the C library: rows with NaN or inf,
 * and those the float paths do not take. */
static void softmax_exact(const loom_tensor *in, const loom_tensor *out, int32_t dim, int64_t r,
                          int64_t n, int64_t xs, int64_t ys, int take_log) {
  const int64_t xo = loom_nn_offset(in, r, dim), yo = loom_nn_offset(out, r, dim);
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double v = loom_nn_load(in->data, in->dtype, xo + i * xs);
    if (v > m || v != v) m = v; /* a NaN poisons the row, as in PyTorch */
  }
  /* An all -inf row yields NaN (-inf - -inf), matching PyTorch. */
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += exp(loom_nn_load(in->data, in->dtype, xo + i * xs) - m);
  const double logsum = log(sum), inv = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) {
    double v = loom_nn_load(in->data, in->dtype, xo + i * xs) - m;
    loom_nn_store(out->data, out->dtype, yo + i * ys, take_log ? v - logsum : exp(v) * inv);
  }
}

/* (log-)softmax of a staged float row x into y (x and y distinct); 0 when
 * the row holds NaN or inf, which the caller's exact path takes. */
static int staged_row(const loom_nn_rows_ops *ops, const float *x, int64_t n, int take_log,
                      float *y) {
  const float m = ops->max(x, n);
  if (!isfinite(m)) return 0;
  const float sum = ops->exp_sum(x, n, m, y);
  if (take_log) {
    ops->affine(x, n, 1.0f, -m, y);
    ops->affine(y, n, 1.0f, -logf(sum), y);
  } else {
    ops->affine(y, n, 1.0f / sum, 0.0f, y);
  }
  return 1;
}

/* Rows r, r + 1, ... that lie one element apart in both tensors, up to
 * `most`: how many a tile may take. */
static int64_t tile_rows(const loom_tensor *in, const loom_tensor *out, int32_t dim, int64_t r,
                         int64_t most) {
  const int64_t xo = loom_nn_offset(in, r, dim), yo = loom_nn_offset(out, r, dim);
  int64_t b = 1;
  while (b < most && loom_nn_offset(in, r + b, dim) == xo + b &&
         loom_nn_offset(out, r + b, dim) == yo + b)
    ++b;
  return b;
}

/* Moves element k of rows 0..b-1 between a tile (row j at tile + j * ld)
 * and a tensor (row j at off + j, step stride). */
static void tile_load(float *tile, int64_t ld, const loom_tensor *t, int64_t off, int64_t stride,
                      int64_t n, int64_t b) {
  if (t->dtype == LOOM_FLOAT32) {
    const float *x = (const float *)t->data + off;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < b; ++j) tile[j * ld + k] = x[k * stride + j];
    return;
  }
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < b; ++j)
      tile[j * ld + k] = (float)loom_nn_load(t->data, t->dtype, off + k * stride + j);
}
static void tile_store(const loom_tensor *t, int64_t off, int64_t stride, const float *tile,
                       int64_t ld, int64_t n, int64_t b, const int *done) {
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < b; ++j) {
      if (!done[j]) continue;
      if (t->dtype == LOOM_FLOAT32) ((float *)t->data)[off + k * stride + j] = tile[j * ld + k];
      else loom_nn_store(t->data, t->dtype, off + k * stride + j, tile[j * ld + k]);
    }
}

int loom_softmax_forward(const loom_kernel_args *args, int64_t begin,
                         int64_t end) {
  int32_t dim;
  int status = check_args(args, 2, &dim);
  if (status) return status;
  const loom_tensor *in = &args->tensors[0], *out = &args->tensors[1];
  const int take_log = args->scalars[1].i != 0;
  const softmax_row ri = row_of(in, dim), ro = row_of(out, dim);
  const int64_t n = ri.n;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  const int fast = in->dtype == LOOM_FLOAT32 && out->dtype == LOOM_FLOAT32 &&
                   ri.stride == 1 && ro.stride == 1;
  /* bf16/fp16 rows, and strided rows (a softmax over another dim than the
   * last), go through float buffers on the stack */
  const int staged = !fast && loom_nn_is_f32_like(in->dtype) &&
                     loom_nn_is_f32_like(out->dtype) && n <= SOFTMAX_ROW_BUFFER;
  float xbuf[SOFTMAX_ROW_BUFFER], ybuf[SOFTMAX_ROW_BUFFER];
  const int64_t ld = n + 16;
  const int64_t tile_most = staged && ri.stride != 1 && n >= SOFTMAX_TILE_MIN
                                ? (SOFTMAX_TILE_FLOATS / ld < SOFTMAX_TILE_ROWS ? SOFTMAX_TILE_FLOATS / ld
                                                                               : SOFTMAX_TILE_ROWS)
                                : 0;
  float tile[SOFTMAX_TILE_FLOATS];
  for (int64_t r = begin; r < end; ++r) {
    const int64_t xo = loom_nn_offset(in, r, dim);
    const int64_t yo = loom_nn_offset(out, r, dim);
    const int64_t b = tile_most > 1 ? tile_rows(in, out, dim, r, end - r < tile_most ? end - r : tile_most) : 1;
    if (b > 1) { /* the same rows' values as one at a time, read and written together */
      int done[SOFTMAX_TILE_ROWS];
      tile_load(tile, ld, in, xo, ri.stride, n, b);
      for (int64_t j = 0; j < b; ++j) {
        done[j] = staged_row(ops, tile + j * ld, n, take_log, ybuf);
        if (done[j]) memcpy(tile + j * ld, ybuf, (size_t)n * sizeof(float));
      }
      tile_store(out, yo, ro.stride, tile, ld, n, b, done);
      /* rows with NaN or inf: the exact path, one at a time */
      for (int64_t j = 0; j < b; ++j)
        if (!done[j]) softmax_exact(in, out, dim, r + j, n, ri.stride, ro.stride, take_log);
      r += b - 1;
      continue;
    }
    if (staged) {
      load_row(xbuf, in, xo, ri.stride, n);
      if (staged_row(ops, xbuf, n, take_log, ybuf)) {
        store_row(out, yo, ro.stride, ybuf, n);
        continue;
      }
    }
    if (fast) {
      const float *x = (const float *)in->data + xo;
      float *y = (float *)out->data + yo;
      const float m = ops->max(x, n);
      /* log-softmax in place would lose x to the exp terms: exact path */
      if (isfinite(m) && !(take_log && (const void *)x == (void *)y)) { /* NaN and inf rows take the exact path below */
        if (take_log) {
          /* y holds exp(x - m) until it is overwritten; x may alias y */
          const float logsum = logf(ops->exp_sum(x, n, m, y));
          ops->affine(x, n, 1.0f, -m, y);
          ops->affine(y, n, 1.0f, -logsum, y);
        } else {
          const float sum = ops->exp_sum(x, n, m, y);
          ops->affine(y, n, 1.0f / sum, 0.0f, y);
        }
        continue;
      }
    }
    softmax_exact(in, out, dim, r, n, ri.stride, ro.stride, take_log);
  }
  return LOOM_OK;
}

int loom_softmax_backward(const loom_kernel_args *args, int64_t begin,
                          int64_t end) {
  int32_t dim;
  int status = check_args(args, 3, &dim);
  if (status) return status;
  const loom_tensor *g = &args->tensors[0], *y = &args->tensors[1],
                    *gi = &args->tensors[2];
  const int take_log = args->scalars[1].i != 0;
  const softmax_row rg = row_of(g, dim), ry = row_of(y, dim),
                    rgi = row_of(gi, dim);
  const int64_t n = rg.n;
  const loom_nn_rows_ops *ops = loom_nn_rows();
  const int fast = g->dtype == LOOM_FLOAT32 && y->dtype == LOOM_FLOAT32 &&
                   gi->dtype == LOOM_FLOAT32 && rg.stride == 1 &&
                   ry.stride == 1 && rgi.stride == 1;
  const int staged = !fast && loom_nn_is_f32_like(g->dtype) &&
                     loom_nn_is_f32_like(y->dtype) && loom_nn_is_f32_like(gi->dtype) &&
                     rg.stride == 1 && ry.stride == 1 && rgi.stride == 1 &&
                     n <= SOFTMAX_ROW_BUFFER;
  float gbuf[SOFTMAX_ROW_BUFFER], ybuf[SOFTMAX_ROW_BUFFER];
  for (int64_t r = begin; r < end; ++r) {
    const int64_t go = loom_nn_offset(g, r, dim);
    const int64_t yo = loom_nn_offset(y, r, dim);
    const int64_t gio = loom_nn_offset(gi, r, dim);
    if (staged) {
      loom_nn_load_row_f32(gbuf, g->data, g->dtype, go, n);
      loom_nn_load_row_f32(ybuf, y->data, y->dtype, yo, n);
      if (take_log)
        ops->log_softmax_grad(gbuf, ybuf, n, ops->sum(gbuf, n), gbuf);
      else
        ops->softmax_grad(gbuf, ybuf, n, ops->dot(gbuf, ybuf, n), gbuf);
      loom_nn_store_row_f32(gi->data, gi->dtype, gio, gbuf, n);
      continue;
    }
    if (fast) {
      const float *gp = (const float *)g->data + go;
      const float *yp = (const float *)y->data + yo;
      float *gip = (float *)gi->data + gio;
      if (take_log)
        ops->log_softmax_grad(gp, yp, n, ops->sum(gp, n), gip);
      else
        ops->softmax_grad(gp, yp, n, ops->dot(gp, yp, n), gip);
      continue;
    }
    double dot = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double gv = loom_nn_load(g->data, g->dtype, go + i * rg.stride);
      dot += take_log
                 ? gv
                 : gv * loom_nn_load(y->data, y->dtype, yo + i * ry.stride);
    }
    for (int64_t i = 0; i < n; ++i) {
      double gv = loom_nn_load(g->data, g->dtype, go + i * rg.stride);
      double yv = loom_nn_load(y->data, y->dtype, yo + i * ry.stride);
      loom_nn_store(gi->data, gi->dtype, gio + i * rgi.stride,
                    take_log ? gv - exp(yv) * dot : yv * (gv - dot));
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_softmax_kernels[] = {
    {"softmax.forward", loom_softmax_forward, NULL},
    {"softmax.backward", loom_softmax_backward, NULL},
    {NULL, NULL, NULL},
};
