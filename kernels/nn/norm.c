/* Layer norm and RMS norm over contiguous rows. */
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/base/convert.h"
#include "kernels/nn/nn_rows.h"
#include "kernels/nn/nn_util.h"
#include "kernels/nn/norm.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* The fp32 fast path applies when every given tensor is fp32. */
static int all_f32(const loom_tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i)
    if (ts[i]->data && ts[i]->dtype != LOOM_FLOAT32) return 0;
  return 1;
}

static inline const float *f32_or_null(const loom_tensor *t) {
  return t->data ? (const float *)t->data : NULL;
}

/* bf16/fp16 rows up to this length are staged through float buffers. */
#define LN_ROW_BUFFER 8192

#define LN_BLOCK_MAX_WIDTH 512
_Static_assert(LOOM_NN_NORM_ROWS * LN_BLOCK_MAX_WIDTH <= LN_ROW_BUFFER, "a block fits the buffers");

static int use_avx512(void) { return (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0; }

/* n values of t from element off as floats, and back: loom_nn_load_row_f32
 * and loom_nn_store_row_f32, through the AVX-512 converters (the same bits)
 * where the CPU has them */
static void load_f32(float *dst, const loom_tensor *t, int64_t off, int64_t n) {
  const uint16_t *src = (const uint16_t *)t->data + off;
  if (t->dtype == LOOM_BFLOAT16 && use_avx512()) loom_bf16_to_f32_avx512(dst, src, n);
  else if (t->dtype == LOOM_FLOAT16 && use_avx512()) loom_f16_to_f32_avx512(dst, src, n);
  else loom_nn_load_row_f32(dst, t->data, t->dtype, off, n);
}
static void store_f32(const loom_tensor *t, int64_t off, const float *src, int64_t n) {
  uint16_t *dst = (uint16_t *)t->data + off;
  if (t->dtype == LOOM_BFLOAT16 && use_avx512()) loom_f32_to_bf16_avx512(dst, src, n);
  else if (t->dtype == LOOM_FLOAT16 && use_avx512()) loom_f32_to_f16_avx512(dst, src, n);
  else loom_nn_store_row_f32(t->data, t->dtype, off, src, n);
}

static int all_f32_like(const loom_tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i)
    if (ts[i]->data && !loom_nn_is_f32_like(ts[i]->dtype)) return 0;
  return 1;
}

/* An optional vector of n elements as floats in buf, or NULL if absent. */
static const float *stage_vector(float *buf, const loom_tensor *t, int64_t n) {
  if (!t->data) return NULL;
  loom_nn_load_row_f32(buf, t->data, t->dtype, 0, n);
  return buf;
}

int loom_layer_norm_forward(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *w = &args->tensors[1],
                    *b = &args->tensors[2], *y = &args->tensors[3],
                    *mean = &args->tensors[4], *rstd = &args->tensors[5];
  const int64_t n = args->scalars[0].i;
  const double eps = args->scalars[1].f;
  const int rms = args->scalars[2].i != 0;
  const loom_tensor *const all[6] = {x, w, b, y, mean, rstd};
  /* Short rows in blocks whose statistics are taken side by side (the
   * values of a row do not depend on its block): a row's sums are chains
   * too short to hide their latency. A block of long rows would outgrow
   * the L1 cache between the passes over it. */
  const int64_t block = n <= LN_BLOCK_MAX_WIDTH ? LOOM_NN_NORM_ROWS : 1;
  float mu[LOOM_NN_NORM_ROWS], rs[LOOM_NN_NORM_ROWS];
  if (all_f32(all, 6)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    for (int64_t r = begin; r < end; r += block) {
      const int64_t k = end - r < block ? end - r : block;
      ops->norm_forward((const float *)x->data + r * n, k, n, rms, (float)eps, f32_or_null(w),
                        f32_or_null(b), (float *)y->data + r * n, mu, rs);
      if (mean->data) memcpy((float *)mean->data + r, mu, (size_t)k * sizeof(float));
      memcpy((float *)rstd->data + r, rs, (size_t)k * sizeof(float));
    }
    return LOOM_OK;
  }
  const loom_tensor *const rows[4] = {x, w, b, y};
  if (n <= LN_ROW_BUFFER && all_f32_like(rows, 4)) {
    const loom_nn_rows_ops *ops = loom_nn_rows();
    float xbuf[LN_ROW_BUFFER], ybuf[LN_ROW_BUFFER], wbuf[LN_ROW_BUFFER], bbuf[LN_ROW_BUFFER];
    const float *wf = stage_vector(wbuf, w, n), *bfp = stage_vector(bbuf, b, n);
    for (int64_t r = begin; r < end; r += block) {
      const int64_t k = end - r < block ? end - r : block;
      load_f32(xbuf, x, r * n, k * n);
      ops->norm_forward(xbuf, k, n, rms, (float)eps, wf, bfp, ybuf, mu, rs);
      for (int64_t i = 0; i < k; ++i) {
        if (mean->data) loom_nn_store(mean->data, mean->dtype, r + i, mu[i]);
        loom_nn_store(rstd->data, rstd->dtype, r + i, rs[i]);
      }
      store_f32(y, r * n, ybuf, k * n);
    }
    return LOOM_OK;
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t base = r * n;
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j) mu += loom_nn_load(x->data, x->dtype, base + j);
      mu /= (double)n;
    }
    for (int64_t j = 0; j < n; ++j) {
      double d = loom_nn_load(x->data, x->dtype, base + j) - mu;
      var += d * d;
    }
    var /= (double)n;
    const double rs = 1.0 / sqrt(var + eps);
    if (mean->data) loom_nn_store(mean->data, mean->dtype, r, mu);
    loom_nn_store(rstd->data, rstd->dtype, r, rs);
    for (int64_t j = 0; j < n; ++j) {
      double v = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      if (w->data) v *= loom_nn_load(w->data, w->dtype, j);
      if (b->data) v += loom_nn_load(b->data, b->dtype, j);
      loom_nn_store(y->data, y->dtype, base + j, v);
    }
  }
  return LOOM_OK;
}

/* Where grad_rows adds the rows' parameter sums: float32 accumulators, or
 * elements of part (float64) from off_b and off_w, or nowhere. */
typedef struct grad_rows_out {
  float *acc_b, *acc_w;          /* fp32 sums (acc_b NULL: no bias sums) */
  const loom_tensor *part;       /* or sums of part's dtype, part NULL: none */
  int64_t off_b, off_w;          /* off_b < 0: no bias sums */
} grad_rows_out;

/* The layer-norm backward over rows [r0, r1) of tensors [dy, x, mean?,
 * rstd, weight?, dx?]: dx when dx->data is set, and the rows' parameter
 * sums added to `out`'s accumulators in row order. */
static void grad_rows(const loom_tensor *t, int64_t n, int rms, int64_t r0, int64_t r1,
                      const grad_rows_out *out) {
  const loom_tensor *dy = &t[0], *x = &t[1], *mean = &t[2], *rstd = &t[3], *w = &t[4],
                    *dx = &t[5];
  const loom_tensor *const all[6] = {dy, x, mean, rstd, w, dx};
  const loom_nn_rows_ops *ops = loom_nn_rows();
  if (all_f32(all, 6) && !out->part) {
    for (int64_t r = r0; r < r1; ++r) {
      const float mu = (rms || !mean->data) ? 0.0f : ((const float *)mean->data)[r];
      const float rs = ((const float *)rstd->data)[r];
      const float *dyr = (const float *)dy->data + r * n;
      const float *xr = (const float *)x->data + r * n;
      if (!dx->data) {
        if (out->acc_w) ops->norm_param_acc(dyr, xr, n, mu, rs, out->acc_b, out->acc_w);
        continue;
      }
      float sums[2];
      if (out->acc_w)
        ops->norm_grad_sums_acc(dyr, xr, f32_or_null(w), n, mu, rs, sums, out->acc_b, out->acc_w);
      else
        ops->norm_grad_sums(dyr, xr, f32_or_null(w), n, mu, rs, sums);
      ops->norm_grad_apply(dyr, xr, f32_or_null(w), n, mu, rs,
                           rms ? 0.0f : sums[0] / (float)n, sums[1] / (float)n,
                           (float *)dx->data + r * n);
    }
    return;
  }
  const loom_tensor *const rows[4] = {dy, x, w, dx};
  if (n <= LN_ROW_BUFFER && all_f32_like(rows, 4) && !out->part) {
    float dybuf[LN_ROW_BUFFER], xbuf[LN_ROW_BUFFER], wbuf[LN_ROW_BUFFER];
    const float *wf = stage_vector(wbuf, w, n);
    for (int64_t r = r0; r < r1; ++r) {
      const float mu = (rms || !mean->data) ? 0.0f : (float)loom_nn_load(mean->data, mean->dtype, r);
      const float rs = (float)loom_nn_load(rstd->data, rstd->dtype, r);
      loom_nn_load_row_f32(dybuf, dy->data, dy->dtype, r * n, n);
      loom_nn_load_row_f32(xbuf, x->data, x->dtype, r * n, n);
      if (!dx->data) {
        if (out->acc_w) ops->norm_param_acc(dybuf, xbuf, n, mu, rs, out->acc_b, out->acc_w);
        continue;
      }
      float sums[2];
      if (out->acc_w)
        ops->norm_grad_sums_acc(dybuf, xbuf, wf, n, mu, rs, sums, out->acc_b, out->acc_w);
      else
        ops->norm_grad_sums(dybuf, xbuf, wf, n, mu, rs, sums);
      ops->norm_grad_apply(dybuf, xbuf, wf, n, mu, rs, rms ? 0.0f : sums[0] / (float)n,
                           sums[1] / (float)n, dybuf);
      loom_nn_store_row_f32(dx->data, dx->dtype, r * n, dybuf, n);
    }
    return;
  }
  const loom_tensor *part = out->part;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = r * n;
    const double mu = (rms || !mean->data) ? 0.0 : loom_nn_load(mean->data, mean->dtype, r);
    const double rs = loom_nn_load(rstd->data, rstd->dtype, r);
    double sum_g = 0.0, sum_gx = 0.0; /* sum(dy*w), sum(dy*w*xhat) */
    for (int64_t j = 0; j < n; ++j) {
      const double d = loom_nn_load(dy->data, dy->dtype, base + j);
      const double xh = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      if (out->acc_w) {
        if (out->acc_b) out->acc_b[j] += (float)d;
        out->acc_w[j] += (float)(d * xh);
      } else if (part) {
        if (out->off_b >= 0)
          loom_nn_store(part->data, part->dtype, out->off_b + j,
                        loom_nn_load(part->data, part->dtype, out->off_b + j) + d);
        loom_nn_store(part->data, part->dtype, out->off_w + j,
                      loom_nn_load(part->data, part->dtype, out->off_w + j) + d * xh);
      }
      const double g = w->data ? d * loom_nn_load(w->data, w->dtype, j) : d;
      sum_g += g;
      sum_gx += g * xh;
    }
    if (!dx->data) continue;
    const double a = rms ? 0.0 : sum_g / (double)n, c = sum_gx / (double)n;
    for (int64_t j = 0; j < n; ++j) {
      double g = loom_nn_load(dy->data, dy->dtype, base + j);
      if (w->data) g *= loom_nn_load(w->data, w->dtype, j);
      double xh = (loom_nn_load(x->data, x->dtype, base + j) - mu) * rs;
      loom_nn_store(dx->data, dx->dtype, base + j, rs * (g - a - xh * c));
    }
  }
}

int loom_layer_norm_backward_input(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const grad_rows_out none = {.off_b = -1};
  grad_rows(args->tensors, args->scalars[0].i, args->scalars[1].i != 0, begin, end, &none);
  return LOOM_OK;
}

#define LN_COMBINE_BLOCK 256

static int is_float_part(const loom_tensor *p) {
  return p->dtype == LOOM_FLOAT32 || p->dtype == LOOM_FLOAT64;
}

int loom_layer_norm_backward_rows(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 7 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *t = args->tensors, *part = &args->tensors[6];
  const int64_t m = args->scalars[0].i, n = args->scalars[1].i, rows = args->scalars[3].i;
  const int rms = args->scalars[2].i != 0;
  if (m < 0 || n < 0 || rows <= 0 || (part->data && !is_float_part(part)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int has_b = !rms;
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r0 = k * rows, r1 = r0 + rows < m ? r0 + rows : m;
    grad_rows_out out = {.off_b = -1};
    if (part->data) {
      const int64_t off = k * 2 * n;
      if (part->dtype == LOOM_FLOAT32) {
        float *p = (float *)part->data + off;
        memset(p, 0, (size_t)(2 * n) * sizeof(float));
        out.acc_b = has_b ? p : NULL;
        out.acc_w = p + n;
      } else {
        for (int64_t j = 0; j < 2 * n; ++j) loom_nn_store(part->data, part->dtype, off + j, 0.0);
        out.part = part;
        out.off_b = has_b ? off : -1;
        out.off_w = off + n;
      }
    }
    grad_rows(t, n, rms, r0, r1, &out);
  }
  return LOOM_OK;
}

int loom_layer_norm_backward_combine(const loom_kernel_args *args, int64_t begin,
                                     int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *part = &args->tensors[0], *dw = &args->tensors[1], *db = &args->tensors[2];
  const int64_t chunks = args->scalars[0].i, n = args->scalars[1].i;
  if (chunks < 0 || (chunks > 0 && (!part->data || !is_float_part(part))))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (part->dtype == LOOM_FLOAT32 && chunks > 0) {
    /* columns in blocks, the chunks' rows streamed in order */
    const float *p = (const float *)part->data;
    double sb[LN_COMBINE_BLOCK], sw[LN_COMBINE_BLOCK];
    for (int64_t j0 = begin; j0 < end; j0 += LN_COMBINE_BLOCK) {
      const int64_t c = end - j0 < LN_COMBINE_BLOCK ? end - j0 : LN_COMBINE_BLOCK;
      for (int64_t j = 0; j < c; ++j) sb[j] = sw[j] = 0.0;
      for (int64_t k = 0; k < chunks; ++k) {
        const float *pb = p + k * 2 * n + j0, *pw = pb + n;
        for (int64_t j = 0; j < c; ++j) {
          sb[j] += pb[j];
          sw[j] += pw[j];
        }
      }
      for (int64_t j = 0; j < c; ++j) {
        if (dw->data) loom_nn_store(dw->data, dw->dtype, j0 + j, sw[j]);
        if (db->data) loom_nn_store(db->data, db->dtype, j0 + j, sb[j]);
      }
    }
    return LOOM_OK;
  }
  for (int64_t j = begin; j < end; ++j) {
    double sb = 0.0, sw = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      sb += loom_nn_load(part->data, part->dtype, k * 2 * n + j);
      sw += loom_nn_load(part->data, part->dtype, k * 2 * n + n + j);
    }
    if (dw->data) loom_nn_store(dw->data, dw->dtype, j, sw);
    if (db->data) loom_nn_store(db->data, db->dtype, j, sb);
  }
  return LOOM_OK;
}

/* The whole family's names, batch norm (norm_batch.c) and group norm
 * (norm_group.c) included. */
const loom_kernel_entry loom_norm_kernels[] = {
    {"norm.layer_forward", loom_layer_norm_forward, NULL},
    {"norm.layer_backward_input", loom_layer_norm_backward_input, NULL},
    {"norm.layer_backward_rows", loom_layer_norm_backward_rows, NULL},
    {"norm.layer_backward_combine", loom_layer_norm_backward_combine, NULL},
    {"norm.batch_forward", loom_batch_norm_forward, NULL},
    {"norm.batch_backward", loom_batch_norm_backward, NULL},
    {"norm.group_forward", loom_group_norm_forward, NULL},
    {"norm.group_backward_input", loom_group_norm_backward_input, NULL},
    {"norm.group_backward_params", loom_group_norm_backward_params, NULL},
    {NULL, NULL, NULL},
};
