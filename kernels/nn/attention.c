/* Scaled dot-product attention with an online softmax. Every sum runs in key
 * (or query) order inside one call, so results never depend on threads. */
#include "kernels/nn/attention.h"

#include <math.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

typedef struct attn_dims {
  int64_t bh, l, s, e, ev;
} attn_dims;

static int attn_dims_of(const loom_tensor *q, const loom_tensor *k,
                        const loom_tensor *v, attn_dims *d) {
  int64_t kbh, ke, vbh, vs;
  if (loom_attention_shape(q, &d->bh, &d->l, &d->e) || loom_attention_shape(k, &kbh, &d->s, &ke) ||
      loom_attention_shape(v, &vbh, &vs, &d->ev))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (kbh != d->bh || vbh != d->bh || ke != d->e ||
      vs != d->s || d->e > LOOM_ATTENTION_MAX_HEAD_DIM ||
      d->ev > LOOM_ATTENTION_MAX_HEAD_DIM)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return LOOM_OK;
}

static inline int64_t at3(const loom_tensor *t, int64_t b, int64_t i,
                          int64_t j) {
  return loom_attention_head(t, b) + i * loom_attention_row_stride(t) +
         j * loom_attention_col_stride(t);
}

static inline void load_row(double *dst, const loom_tensor *t, int64_t b,
                            int64_t i, int64_t n) {
  const int64_t base = at3(t, b, i, 0), st = loom_attention_col_stride(t);
  if (t->dtype == LOOM_FLOAT32 && st == 1) {
    const float *p = (const float *)t->data + base;
    for (int64_t e = 0; e < n; ++e) dst[e] = p[e];
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = loom_nn_load(t->data, t->dtype, base + e * st);
}

static inline double dot_row(const double *a, const loom_tensor *t, int64_t b,
                             int64_t i, int64_t n) {
  const int64_t base = at3(t, b, i, 0), st = loom_attention_col_stride(t);
  double acc = 0.0;
  if (t->dtype == LOOM_FLOAT32 && st == 1) {
    const float *p = (const float *)t->data + base;
    for (int64_t e = 0; e < n; ++e) acc += a[e] * p[e];
    return acc;
  }
  for (int64_t e = 0; e < n; ++e)
    acc += a[e] * loom_nn_load(t->data, t->dtype, base + e * st);
  return acc;
}

static inline void axpy_row(double *acc, double alpha, const loom_tensor *t,
                            int64_t b, int64_t i, int64_t n) {
  const int64_t base = at3(t, b, i, 0), st = loom_attention_col_stride(t);
  if (t->dtype == LOOM_FLOAT32 && st == 1) {
    const float *p = (const float *)t->data + base;
    for (int64_t e = 0; e < n; ++e) acc[e] += alpha * p[e];
    return;
  }
  for (int64_t e = 0; e < n; ++e)
    acc[e] += alpha * loom_nn_load(t->data, t->dtype, base + e * st);
}

static inline void store_row(const loom_tensor *t, int64_t b, int64_t i,
                             const double *src, double scale, int64_t n) {
  const int64_t base = at3(t, b, i, 0), st = loom_attention_col_stride(t);
  for (int64_t e = 0; e < n; ++e)
    loom_nn_store(t->data, t->dtype, base + e * st, src[e] * scale);
}

/* The scaled, masked score of query i and key j, or -inf when masked. */
static inline double score(const double *qrow, const loom_tensor *k,
                           const loom_tensor *mask, int64_t b, int64_t i,
                           int64_t j, int64_t e, double scale, int causal) {
  if (causal && j > i) return -INFINITY;
  double bias = 0.0;
  if (mask->data) {
    const int64_t off = at3(mask, b, i, j);
    if (mask->dtype == LOOM_BOOL) {
      if (!((const uint8_t *)mask->data)[off]) return -INFINITY;
    } else {
      bias = loom_nn_load(mask->data, mask->dtype, off);
    }
  }
  return dot_row(qrow, k, b, j, e) * scale + bias;
}

int loom_attention_forward(const loom_kernel_args *args, int64_t begin,
                           int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *q = &args->tensors[0], *k = &args->tensors[1],
                    *v = &args->tensors[2], *mask = &args->tensors[3],
                    *out = &args->tensors[4], *lse = &args->tensors[5];
  attn_dims d;
  if (attn_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const double scale = args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  double qrow[LOOM_ATTENTION_MAX_HEAD_DIM], acc[LOOM_ATTENTION_MAX_HEAD_DIM];
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / d.l, i = row % d.l;
    load_row(qrow, q, b, i, d.e);
    for (int64_t e = 0; e < d.ev; ++e) acc[e] = 0.0;
    double m = -INFINITY, l = 0.0;
    const int64_t s_end = causal && i + 1 < d.s ? i + 1 : d.s;
    for (int64_t j = 0; j < s_end; ++j) {
      const double s = score(qrow, k, mask, b, i, j, d.e, scale, causal);
      if (s == -INFINITY) continue;
      if (s > m) {
        const double c = exp(m - s); /* rescale what was summed so far */
        for (int64_t e = 0; e < d.ev; ++e) acc[e] *= c;
        l *= c;
        m = s;
      }
      const double p = exp(s - m);
      l += p;
      axpy_row(acc, p, v, b, j, d.ev);
    }
    store_row(out, b, i, acc, l > 0.0 ? 1.0 / l : 0.0, d.ev);
    loom_nn_store(lse->data, lse->dtype, b * lse->strides[0] + i * lse->strides[1],
                  l > 0.0 ? m + log(l) : -INFINITY);
  }
  return LOOM_OK;
}

int loom_attention_backward_q(const loom_kernel_args *args, int64_t begin,
                              int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dout = &args->tensors[0], *q = &args->tensors[1],
                    *k = &args->tensors[2], *v = &args->tensors[3],
                    *mask = &args->tensors[4], *out = &args->tensors[5],
                    *lse = &args->tensors[6], *dq = &args->tensors[7],
                    *delta = &args->tensors[8];
  attn_dims d;
  if (attn_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const double scale = args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  double qrow[LOOM_ATTENTION_MAX_HEAD_DIM], grow[LOOM_ATTENTION_MAX_HEAD_DIM];
  double acc[LOOM_ATTENTION_MAX_HEAD_DIM];
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / d.l, i = row % d.l;
    load_row(qrow, q, b, i, d.e);
    load_row(grow, dout, b, i, d.ev);
    const double di = dot_row(grow, out, b, i, d.ev);
    loom_nn_store(delta->data, delta->dtype, b * delta->strides[0] + i * delta->strides[1], di);
    const double li = loom_nn_load(lse->data, lse->dtype, b * lse->strides[0] + i * lse->strides[1]);
    for (int64_t e = 0; e < d.e; ++e) acc[e] = 0.0;
    if (li != -INFINITY) {
      const int64_t s_end = causal && i + 1 < d.s ? i + 1 : d.s;
      for (int64_t j = 0; j < s_end; ++j) {
        const double s = score(qrow, k, mask, b, i, j, d.e, scale, causal);
        if (s == -INFINITY) continue;
        const double p = exp(s - li);
        const double ds = p * (dot_row(grow, v, b, j, d.ev) - di);
        axpy_row(acc, ds, k, b, j, d.e);
      }
    }
    store_row(dq, b, i, acc, scale, d.e);
  }
  return LOOM_OK;
}

int loom_attention_backward_kv(const loom_kernel_args *args, int64_t begin,
                               int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dout = &args->tensors[0], *q = &args->tensors[1],
                    *k = &args->tensors[2], *v = &args->tensors[3],
                    *mask = &args->tensors[4], *lse = &args->tensors[5],
                    *delta = &args->tensors[6], *dk = &args->tensors[7],
                    *dv = &args->tensors[8];
  attn_dims d;
  if (attn_dims_of(q, k, v, &d)) return LOOM_ERROR_INVALID_ARGUMENT;
  const double scale = args->scalars[0].f;
  const int causal = args->scalars[1].i != 0;
  double krow[LOOM_ATTENTION_MAX_HEAD_DIM], vrow[LOOM_ATTENTION_MAX_HEAD_DIM];
  double qrow[LOOM_ATTENTION_MAX_HEAD_DIM];
  double acc_k[LOOM_ATTENTION_MAX_HEAD_DIM], acc_v[LOOM_ATTENTION_MAX_HEAD_DIM];
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / d.s, j = row % d.s;
    load_row(krow, k, b, j, d.e);
    load_row(vrow, v, b, j, d.ev);
    for (int64_t e = 0; e < d.e; ++e) acc_k[e] = 0.0;
    for (int64_t e = 0; e < d.ev; ++e) acc_v[e] = 0.0;
    for (int64_t i = causal ? j : 0; i < d.l; ++i) {
      const double li = loom_nn_load(lse->data, lse->dtype, b * lse->strides[0] + i * lse->strides[1]);
      if (li == -INFINITY) continue;
      load_row(qrow, q, b, i, d.e);
      const double s = score(qrow, k, mask, b, i, j, d.e, scale, causal);
      if (s == -INFINITY) continue;
      const double p = exp(s - li);
      const double di = loom_nn_load(delta->data, delta->dtype, b * delta->strides[0] + i * delta->strides[1]);
      axpy_row(acc_v, p, dout, b, i, d.ev);
      const double ds = p * (dot_row(vrow, dout, b, i, d.ev) - di);
      for (int64_t e = 0; e < d.e; ++e) acc_k[e] += ds * qrow[e];
    }
    store_row(dk, b, j, acc_k, scale, d.e);
    store_row(dv, b, j, acc_v, 1.0, d.ev);
  }
  return LOOM_OK;
}

/* ---- "attention.plan" ------------------------------------------------------ */

/* Chunk size of a row launch whose items each touch `work` elements: about
 * 16K elements a chunk. */
static int64_t attn_grain(int64_t work) {
  const int64_t g = ((int64_t)1 << 14) / (work > 1 ? work : 1);
  return g > 1 ? g : 1;
}

static int64_t attn_blocks(int64_t bh, int64_t n) {
  return bh * ((n + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
}

static int64_t attn_round32(int64_t x) { return (x + 31) / 32 * 32; }

int loom_attention_plan_for(const loom_kernel_args *args, int amx, loom_attention_plan *out) {
  memset(out, 0, sizeof *out);
  if (args->num_tensors < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *q = &args->tensors[0], *k = &args->tensors[1], *v = &args->tensors[2],
                    *mask = &args->tensors[3];
  int64_t bh, l, e, kbh, s, ke, vbh, vs, ev;
  if (loom_attention_shape(q, &bh, &l, &e) || loom_attention_shape(k, &kbh, &s, &ke) ||
      loom_attention_shape(v, &vbh, &vs, &ev))
    return LOOM_ERROR_INVALID_ARGUMENT;
  /* fp32/bf16/fp16 with head dims the tiles hold run on the blocked float
   * kernels; fp64 and wider heads on the exact row kernels. */
  const int blocked = q->dtype != LOOM_FLOAT64 && e <= LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM &&
                      ev <= LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM;
  out->backward = blocked ? LOOM_ATTENTION_BLOCKED : LOOM_ATTENTION_ROWS;
  out->backward_q_range = blocked ? attn_blocks(bh, l) : bh * l;
  out->backward_q_grain = blocked ? 1 : attn_grain(s * (e + ev));
  out->backward_kv_range = blocked ? attn_blocks(bh, s) : bh * s;
  out->backward_kv_grain = blocked ? 1 : attn_grain(l * (e + ev));
  /* bf16 attention without a mask runs fused where the GEMM runs bf16
   * pairs (on AMX tiles, or on vdpbf16ps): head dims within the tiles,
   * rows of unit stride, some keys. It rounds the weights to bf16 for
   * the second product, as the GEMM route does (the CPU's fused kernel may
   * keep them in float: results differ from it within bf16's precision). */
  const int tiles = amx && q->dtype == LOOM_BFLOAT16 && !mask->data && s > 0 &&
                    attn_round32(e) <= LOOM_ATTENTION_AMX_MAX_HEAD_DIM &&
                    attn_round32(ev) <= LOOM_ATTENTION_AMX_MAX_HEAD_DIM &&
                    loom_attention_col_stride(q) == 1 && loom_attention_col_stride(k) == 1 &&
                    loom_attention_col_stride(v) == 1;
  if (!tiles) {
    out->forward = out->backward;
    out->forward_range = blocked ? attn_blocks(bh, l) : bh * l;
    out->forward_grain = blocked ? 1 : attn_grain(s * (e + ev));
    return 0;
  }
  /* The key and value blocks are packed once, into the tiles' layout, when
   * several query items of a head read them; a head's only item packs them
   * as it goes (16 queries, 8 heads of 4096 keys: 0.75 -> 0.48 ms). Up to
   * 4 queries (decoding) read each key and value row once, with no tiles
   * at all (1 query: 0.41 -> 0.23 ms, the memory's pace). */
  const int64_t keys = LOOM_ATTENTION_AMX_KEYS, queries = LOOM_ATTENTION_AMX_QUERIES;
  const int64_t blocks = (s + keys - 1) / keys;
  out->forward_grain = 1;
  if (l <= LOOM_ATTENTION_DECODE_QUERIES && s <= LOOM_ATTENTION_DECODE_KEYS) {
    out->forward = LOOM_ATTENTION_BF16_DECODE;
    out->forward_range = bh;
    return 0;
  }
  out->forward = LOOM_ATTENTION_BF16;
  out->forward_range = bh * ((l + queries - 1) / queries);
  if (l > queries) {
    out->pack_range = bh * blocks;
    out->pack_grain = 1;
    out->k_pack = bh * blocks * keys * attn_round32(e);
    out->v_pack = bh * blocks * keys * attn_round32(ev);
  }
  return 0;
}

int loom_attention_planner(const loom_kernel_args *args, void *out_plan, uint64_t size) {
  if (size != sizeof(loom_attention_plan)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  return loom_attention_plan_for(args, isa == LOOM_GEMM_AMX || isa == LOOM_GEMM_AVX512BF16,
                                 (loom_attention_plan *)out_plan);
}

/* "attention.bf16_forward": on AMX tiles where the GEMM uses them, else on
 * vdpbf16ps (the plan names it only where one of them runs). */
static int loom_attention_bf16_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  if (isa == LOOM_GEMM_AMX) return loom_attention_amx_forward(args, begin, end);
  if (isa == LOOM_GEMM_AVX512BF16) return loom_attention_avx512bf16_forward(args, begin, end);
  return LOOM_ERROR_NOT_SUPPORTED;
}

const loom_kernel_entry loom_attention_kernels[] = {
    {"attention.plan", NULL, loom_attention_planner},
    {"attention.forward", loom_attention_forward, NULL},
    {"attention.backward_q", loom_attention_backward_q, NULL},
    {"attention.backward_kv", loom_attention_backward_kv, NULL},
    {"attention.blocked_forward", loom_attention_blocked_forward, NULL},
    {"attention.blocked_backward_q", loom_attention_blocked_backward_q, NULL},
    {"attention.blocked_backward_kv", loom_attention_blocked_backward_kv, NULL},
    {"attention.bf16_pack", loom_attention_amx_pack, NULL},
    {"attention.bf16_forward", loom_attention_bf16_forward, NULL},
    {"attention.bf16_decode", loom_attention_amx_decode, NULL},
    {NULL, NULL, NULL},
};
