/* Loss functions. Every reduced sum runs in one fixed order (element order,
 * or fixed blocks then block order), so results do not depend on threads. */
#include "kernels/nn/loss.h"

#include <math.h>
#include <string.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* ---- nll_loss ------------------------------------------------------------ */

typedef struct nll_view {
  const loom_tensor *input, *target, *weight;
  int64_t n, c, s;
  int64_t ignore_index;
} nll_view;

static int nll_view_of(const loom_kernel_args *args, int64_t ntensors,
                       nll_view *v) {
  if (args->num_tensors < (uint32_t)ntensors || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0];
  *v = (nll_view){.input = in, .target = &args->tensors[1],
                  .weight = &args->tensors[2], .ignore_index = args->scalars[1].i};
  if (v->target->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  v->n = v->target->sizes[0];
  v->s = v->target->sizes[1];
  v->c = in->rank == 3 ? in->sizes[1] : 0;
  return LOOM_OK;
}

/* The loss term -w[t] * x[n, t, s] of one (n, s), and its weight. */
static int nll_term(const nll_view *v, int64_t ns, double *loss, double *w) {
  const int64_t n = ns / v->s, s = ns % v->s;
  const loom_tensor *t = v->target, *in = v->input;
  const int64_t tgt = loom_nn_load_index(
      t->data, t->dtype, n * t->strides[0] + s * t->strides[1]);
  if (tgt == v->ignore_index) {
    *loss = 0.0;
    *w = 0.0;
    return LOOM_OK;
  }
  if (tgt < 0 || tgt >= v->c)
    return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                      "Target %lld is out of bounds (%lld classes).",
                      (long long)tgt, (long long)v->c);
  *w = v->weight->data ? loom_nn_load(v->weight->data, v->weight->dtype,
                                      tgt * v->weight->strides[0])
                       : 1.0;
  const double x = loom_nn_load(
      in->data, in->dtype,
      n * in->strides[0] + tgt * in->strides[1] + s * in->strides[2]);
  *loss = -(*w) * x;
  return LOOM_OK;
}

int loom_nll_loss_forward(const loom_kernel_args *args, int64_t begin,
                          int64_t end) {
  nll_view v;
  if (nll_view_of(args, 5, &v)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[3], *tw = &args->tensors[4];
  const int64_t reduction = args->scalars[0].i;
  if (reduction == LOOM_REDUCTION_NONE) {
    for (int64_t i = begin; i < end; ++i) {
      double loss = 0.0, w = 0.0;
      int st = nll_term(&v, i, &loss, &w);
      if (st) return st;
      loom_nn_store(out->data, out->dtype, i, loss);
    }
    return LOOM_OK;
  }
  if (begin != 0) return LOOM_OK;
  double sum = 0.0, wsum = 0.0;
  for (int64_t i = 0; i < v.n * v.s; ++i) {
    double loss = 0.0, w = 0.0;
    int st = nll_term(&v, i, &loss, &w);
    if (st) return st;
    sum += loss;
    wsum += w;
  }
  /* mean over zero total weight is 0/0 = NaN, as in PyTorch */
  loom_nn_store(out->data, out->dtype, 0,
                reduction == LOOM_REDUCTION_MEAN ? sum / wsum : sum);
  if (tw->data) loom_nn_store(tw->data, tw->dtype, 0, wsum);
  return LOOM_OK;
}

int loom_nll_loss_backward(const loom_kernel_args *args, int64_t begin,
                           int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *go = &args->tensors[0], *t = &args->tensors[1],
                    *wt = &args->tensors[2], *tw = &args->tensors[3],
                    *gi = &args->tensors[4];
  if (t->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t reduction = args->scalars[0].i, ignore = args->scalars[1].i;
  const int64_t s_len = t->sizes[1];
  const int64_t c_len = gi->rank == 3 ? gi->sizes[1] : 0;
  double scale = 1.0;
  if (reduction != LOOM_REDUCTION_NONE) {
    scale = loom_nn_load(go->data, go->dtype, 0);
    if (reduction == LOOM_REDUCTION_MEAN)
      scale /= loom_nn_load(tw->data, tw->dtype, 0);
  }
  for (int64_t ns = begin; ns < end; ++ns) {
    const int64_t n = ns / s_len, s = ns % s_len;
    const int64_t base = n * c_len * s_len + s;
    /* zero is all-zero bits in every float dtype */
    const int64_t esize = loom_dtype_size(gi->dtype);
    if (s_len == 1) {
      memset((char *)gi->data + base * esize, 0, (size_t)(c_len * esize));
    } else {
      for (int64_t c = 0; c < c_len; ++c)
        memset((char *)gi->data + (base + c * s_len) * esize, 0, (size_t)esize);
    }
    const int64_t tgt =
        loom_nn_load_index(t->data, t->dtype, n * t->strides[0] + s * t->strides[1]);
    if (tgt == ignore) continue;
    if (tgt < 0 || tgt >= c_len)
      return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                        "Target %lld is out of bounds (%lld classes).",
                        (long long)tgt, (long long)c_len);
    const double w = wt->data ? loom_nn_load(wt->data, wt->dtype, tgt * wt->strides[0]) : 1.0;
    const double g = reduction == LOOM_REDUCTION_NONE
                         ? loom_nn_load(go->data, go->dtype, ns)
                         : scale;
    loom_nn_store(gi->data, gi->dtype, base + tgt * s_len, -w * g);
  }
  return LOOM_OK;
}

/* ---- pointwise losses ----------------------------------------------------- */

static inline double loss_value(int64_t kind, double x, double y, double param) {
  const double d = x - y, z = fabs(d);
  switch (kind) {
    case LOOM_LOSS_MSE: return d * d;
    case LOOM_LOSS_SMOOTH_L1:
      return z < param ? 0.5 * d * d / param : z - 0.5 * param;
    case LOOM_LOSS_HUBER:
      return z < param ? 0.5 * d * d : param * (z - 0.5 * param);
    case LOOM_LOSS_BCE: {
      /* log clamped at -100 keeps 0 * log(0) finite, as PyTorch does */
      double lx = fmax(log(x), -100.0), l1x = fmax(log1p(-x), -100.0);
      return (y - 1.0) * l1x - y * lx;
    }
    default: return 0.0;
  }
}

/* d loss / d x */
static inline double loss_grad(int64_t kind, double x, double y, double param) {
  const double d = x - y;
  switch (kind) {
    case LOOM_LOSS_MSE: return 2.0 * d;
    case LOOM_LOSS_SMOOTH_L1:
      return d <= -param ? -1.0 : (d >= param ? 1.0 : d / param);
    case LOOM_LOSS_HUBER:
      return d <= -param ? -param : (d >= param ? param : d);
    case LOOM_LOSS_BCE: return d / fmax((1.0 - x) * x, 1e-12);
    default: return 0.0;
  }
}

static int check_bce_input(double x) {
  if (!(x >= 0.0 && x <= 1.0))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return LOOM_OK;
}

/* Element i of t as a double: a dense float32 tensor read in place. */
static inline double loss_load(const loom_tensor *t, int dense_f32, int64_t i) {
  return dense_f32 ? (double)((const float *)t->data)[i]
                   : loom_nn_load(t->data, t->dtype, loom_nn_offset(t, i, -1));
}

/* The sum of one block's terms for dense float32 inputs without weights,
 * in the order of the general loop below: term j to sum j mod 4. The loss
 * kind is fixed per loop, and the four sums are four chains of additions. */
static double loss_block_f32(int64_t kind, const float *x, const float *y, int64_t n,
                             double param) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
#define LOSS_BLOCK(K)                                                           \
  for (; j + 4 <= n; j += 4) {                                                  \
    s[0] += loss_value(K, (double)x[j], (double)y[j], param);                   \
    s[1] += loss_value(K, (double)x[j + 1], (double)y[j + 1], param);           \
    s[2] += loss_value(K, (double)x[j + 2], (double)y[j + 2], param);           \
    s[3] += loss_value(K, (double)x[j + 3], (double)y[j + 3], param);           \
  }                                                                             \
  for (; j < n; ++j) s[j & 3] += loss_value(K, (double)x[j], (double)y[j], param); \
  break;
  switch (kind) {
    case LOOM_LOSS_MSE: LOSS_BLOCK(LOOM_LOSS_MSE)
    case LOOM_LOSS_SMOOTH_L1: LOSS_BLOCK(LOOM_LOSS_SMOOTH_L1)
    case LOOM_LOSS_HUBER: LOSS_BLOCK(LOOM_LOSS_HUBER)
    default: break;
  }
#undef LOSS_BLOCK
  return (s[0] + s[1]) + (s[2] + s[3]);
}

int loom_pointwise_loss_forward(const loom_kernel_args *args, int64_t begin,
                                int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x = &args->tensors[0], *y = &args->tensors[1],
                    *w = &args->tensors[2], *out = &args->tensors[3];
  const int64_t kind = args->scalars[0].i, reduction = args->scalars[1].i;
  const double param = args->scalars[2].f;
  const int64_t numel = loom_nn_numel(x);
  /* Per block: with reduction none a block is one element. */
  const int64_t block = reduction == LOOM_REDUCTION_NONE ? 1 : LOOM_LOSS_BLOCK;
  const int xf = x->dtype == LOOM_FLOAT32 && loom_nn_dense_from(x, 0);
  const int yf = y->dtype == LOOM_FLOAT32 && loom_nn_dense_from(y, 0);
  const int fast = xf && yf && !w->data && reduction != LOOM_REDUCTION_NONE &&
                   kind != LOOM_LOSS_BCE;
  for (int64_t b = begin; b < end; ++b) {
    const int64_t i1 = (b + 1) * block < numel ? (b + 1) * block : numel;
    if (fast) {
      ((double *)out->data)[b] = loss_block_f32(kind, (const float *)x->data + b * block,
                                                (const float *)y->data + b * block,
                                                i1 - b * block, param);
      continue;
    }
    /* a block's terms go to four sums by position mod 4, added pairwise at
     * the end: four chains of additions instead of one */
    double sum[4] = {0.0, 0.0, 0.0, 0.0};
    for (int64_t i = b * block; i < i1; ++i) {
      const double xv = loss_load(x, xf, i);
      const double yv = loss_load(y, yf, i);
      if (kind == LOOM_LOSS_BCE) {
        int st = check_bce_input(xv);
        if (st) return st;
      }
      double l = loss_value(kind, xv, yv, param);
      if (w->data) l *= loom_nn_load(w->data, w->dtype, loom_nn_offset(w, i, -1));
      if (reduction == LOOM_REDUCTION_NONE)
        loom_nn_store(out->data, out->dtype, loom_nn_offset(out, i, -1), l);
      else
        sum[i & 3] += l;
    }
    if (reduction != LOOM_REDUCTION_NONE)
      ((double *)out->data)[b] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
  return LOOM_OK;
}

int loom_loss_sum_partials(const loom_kernel_args *args, int64_t begin,
                           int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (begin != 0) return LOOM_OK;
  const loom_tensor *p = &args->tensors[0], *out = &args->tensors[1];
  const int64_t n = loom_nn_numel(p);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += ((const double *)p->data)[i];
  /* mean of an empty tensor is 0/0 = NaN, as in PyTorch */
  loom_nn_store(out->data, out->dtype, 0, sum / args->scalars[0].f);
  return LOOM_OK;
}

int loom_pointwise_loss_backward(const loom_kernel_args *args, int64_t begin,
                                 int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *go = &args->tensors[0], *x = &args->tensors[1],
                    *y = &args->tensors[2], *w = &args->tensors[3],
                    *gi = &args->tensors[4];
  const int64_t kind = args->scalars[0].i, reduction = args->scalars[1].i;
  const double param = args->scalars[2].f;
  const int64_t numel = loom_nn_numel(x);
  double scale = 1.0;
  if (reduction != LOOM_REDUCTION_NONE) {
    scale = loom_nn_load(go->data, go->dtype, 0);
    if (reduction == LOOM_REDUCTION_MEAN) scale /= (double)numel;
  }
  const int xf = x->dtype == LOOM_FLOAT32 && loom_nn_dense_from(x, 0);
  const int yf = y->dtype == LOOM_FLOAT32 && loom_nn_dense_from(y, 0);
  const int gf = gi->dtype == LOOM_FLOAT32 && loom_nn_dense_from(gi, 0);
  for (int64_t i = begin; i < end; ++i) {
    const double xv = loss_load(x, xf, i), yv = loss_load(y, yf, i);
    double g = reduction == LOOM_REDUCTION_NONE
                   ? loom_nn_load(go->data, go->dtype, loom_nn_offset(go, i, -1))
                   : scale;
    if (w->data) g *= loom_nn_load(w->data, w->dtype, loom_nn_offset(w, i, -1));
    const double v = g * loss_grad(kind, xv, yv, param);
    if (gf) ((float *)gi->data)[i] = (float)v;
    else loom_nn_store(gi->data, gi->dtype, loom_nn_offset(gi, i, -1), v);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_loss_kernels[] = {
    {"nll_loss.forward", loom_nll_loss_forward, NULL},
    {"nll_loss.backward", loom_nll_loss_backward, NULL},
    {"pointwise_loss.forward", loom_pointwise_loss_forward, NULL},
    {"loss.sum_partials", loom_loss_sum_partials, NULL},
    {"pointwise_loss.backward", loom_pointwise_loss_backward, NULL},
    {NULL, NULL, NULL},
};
