/* The CTC loss. One sample per item, its recursions in order: the alphas
 * over t ascending, the betas over t descending with s descending, exactly
 * the steps of PyTorch's CPU kernel (LossCTC.cpp), so -inf, empty targets
 * and empty inputs come out the same. */
#include "kernels/nn/ctc_loss.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* What the kernels share: the operands and one sample's place in them. */
typedef struct ctc_view {
  const loom_tensor *lp, *targets;
  int64_t n, c, blank;
  int zero_infinity;
  const loom_scalar *in_lens, *tgt_lens;
} ctc_view;

typedef struct ctc_sample {
  int64_t b, in_len, tgt_len;
  int64_t tgt_base, tgt_step; /* element offset of target i: base + i * step */
} ctc_sample;

/* log_probs and targets are tensors lp_at and lp_at + 1 of the launch. */
static int ctc_view_of(const loom_kernel_args *args, uint32_t ntensors, uint32_t lp_at,
                       ctc_view *v) {
  if (args->num_tensors < ntensors || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *lp = &args->tensors[lp_at], *tg = &args->tensors[lp_at + 1];
  if (lp->rank != 3 || (lp->dtype != LOOM_FLOAT32 && lp->dtype != LOOM_FLOAT64) ||
      (tg->rank != 1 && tg->rank != 2) ||
      (tg->dtype != LOOM_INT32 && tg->dtype != LOOM_INT64))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ctc_loss: bad log_probs or targets");
  *v = (ctc_view){.lp = lp, .targets = tg, .n = lp->sizes[1], .c = lp->sizes[2],
                  .blank = args->scalars[0].i, .zero_infinity = args->scalars[1].i != 0};
  if ((int64_t)args->num_scalars < 2 + 2 * v->n || args->range != v->n ||
      v->blank < 0 || v->blank >= v->c)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ctc_loss: bad lengths or blank");
  v->in_lens = args->scalars + 2;
  v->tgt_lens = args->scalars + 2 + v->n;
  return LOOM_OK;
}

/* The sum of the target lengths before sample b: where its targets start
 * in a concatenated targets tensor. */
static int64_t ctc_offset_before(const ctc_view *v, int64_t b) {
  int64_t off = 0;
  for (int64_t i = 0; i < b; ++i) off += v->tgt_lens[i].i;
  return off;
}

static inline int64_t ctc_target(const ctc_view *v, const ctc_sample *s, int64_t i) {
  return loom_nn_load_index(v->targets->data, v->targets->dtype, s->tgt_base + i * s->tgt_step);
}

/* l'_s: blank at even s, target s/2 at odd s. */
static inline int64_t ctc_prime(const ctc_view *v, const ctc_sample *s, int64_t idx) {
  return idx % 2 == 0 ? v->blank : ctc_target(v, s, idx / 2);
}

/* Sample b, its lengths checked against T, the targets and the width of
 * log_alpha, and its targets against [0, C). `offset` is where its targets
 * start in concatenated targets. */
static int ctc_sample_at(const ctc_view *v, int64_t b, int64_t offset, int64_t width,
                         ctc_sample *s) {
  const loom_tensor *tg = v->targets;
  *s = (ctc_sample){.b = b, .in_len = v->in_lens[b].i, .tgt_len = v->tgt_lens[b].i};
  const int64_t avail = tg->rank == 2 ? tg->sizes[1] : tg->sizes[0] - offset;
  if (s->in_len < 0 || s->in_len > v->lp->sizes[0] || s->tgt_len < 0 ||
      s->tgt_len > avail || 2 * s->tgt_len + 1 > width || (tg->rank == 2 && b >= tg->sizes[0]))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "ctc_loss: lengths of sample %lld out of range", (long long)b);
  if (tg->rank == 2) {
    s->tgt_base = b * tg->strides[0];
    s->tgt_step = tg->strides[1];
  } else {
    s->tgt_base = offset * tg->strides[0];
    s->tgt_step = tg->strides[0];
  }
  for (int64_t i = 0; i < s->tgt_len; ++i) {
    const int64_t t = ctc_target(v, s, i);
    if (t < 0 || t >= v->c)
      return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                        "target %lld at position %lld of sample %lld is out of bounds "
                        "for %lld classes", (long long)t, (long long)i, (long long)b,
                        (long long)v->c);
  }
  return LOOM_OK;
}

static inline double ctc_lp(const ctc_view *v, int64_t t, int64_t b, int64_t c) {
  const loom_tensor *lp = v->lp;
  return loom_nn_load(lp->data, lp->dtype,
                      t * lp->strides[0] + b * lp->strides[1] + c * lp->strides[2]);
}

/* log(exp(a) + exp(b) + exp(c)) as the CPU computes it: shifted by the
 * largest, with a shift of 0 when all are -inf. */
static inline double ctc_lse3(double a, double b, double c) {
  double m = a;
  if (b > m) m = b;
  if (c > m) m = c;
  if (m == -INFINITY) m = 0.0;
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}

/* ---- forward ---------------------------------------------------------------- */

int loom_ctc_loss_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  ctc_view v;
  int st = ctc_view_of(args, 4, 0, &v);
  if (st) return st;
  const loom_tensor *nll = &args->tensors[2], *la = &args->tensors[3];
  if (la->rank != 3 || la->sizes[0] != v.n || la->sizes[1] != v.lp->sizes[0] ||
      nll->rank != 1 || nll->sizes[0] != v.n || !loom_nn_is_float(la->dtype) ||
      !loom_nn_is_float(nll->dtype))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ctc_loss: bad output shapes");
  const int64_t width = la->sizes[2], tmax = la->sizes[1];
  int64_t offset = ctc_offset_before(&v, begin);
  for (int64_t b = begin; b < end; offset += v.tgt_lens[b].i, ++b) {
    ctc_sample s;
    if ((st = ctc_sample_at(&v, b, offset, width, &s))) return st;
    const int64_t base = b * la->strides[0], ts = la->strides[1], ss = la->strides[2];
    for (int64_t t = 0; t < tmax; ++t)
      for (int64_t i = 0; i < width; ++i)
        loom_nn_store(la->data, la->dtype, base + t * ts + i * ss, -INFINITY);
    const int64_t T = s.in_len, L = s.tgt_len;
    double loss;
    if (T == 0) {
      loss = L == 0 ? -0.0 : INFINITY;
    } else {
      loom_nn_store(la->data, la->dtype, base, ctc_lp(&v, 0, b, v.blank));
      if (L > 0)
        loom_nn_store(la->data, la->dtype, base + ss, ctc_lp(&v, 0, b, ctc_prime(&v, &s, 1)));
      for (int64_t t = 1; t < T; ++t) {
        const int64_t prev = base + (t - 1) * ts;
        for (int64_t i = 0; i < 2 * L + 1; ++i) {
          const int64_t tp = ctc_prime(&v, &s, i);
          const double la1 = loom_nn_load(la->data, la->dtype, prev + i * ss);
          const double la2 = i > 0 ? loom_nn_load(la->data, la->dtype, prev + (i - 1) * ss)
                                   : -INFINITY;
          const double la3 = i > 1 && ctc_prime(&v, &s, i - 2) != tp
                                 ? loom_nn_load(la->data, la->dtype, prev + (i - 2) * ss)
                                 : -INFINITY;
          loom_nn_store(la->data, la->dtype, base + t * ts + i * ss,
                        ctc_lse3(la1, la2, la3) + ctc_lp(&v, t, b, tp));
        }
      }
      const int64_t last = base + (T - 1) * ts;
      if (L == 0) {
        /* no label: the only path ends in the first blank */
        loss = -loom_nn_load(la->data, la->dtype, last);
      } else {
        const double l1 = loom_nn_load(la->data, la->dtype, last + 2 * L * ss);
        const double l2 = loom_nn_load(la->data, la->dtype, last + (2 * L - 1) * ss);
        double m = l1 > l2 ? l1 : l2;
        if (m == -INFINITY) m = 0.0;
        loss = -(log(exp(l1 - m) + exp(l2 - m)) + m);
      }
    }
    loom_nn_store(nll->data, nll->dtype, b * nll->strides[0], loss);
  }
  return LOOM_OK;
}

/* ---- backward --------------------------------------------------------------- */

typedef struct ctc_grad {
  const loom_tensor *la, *grad;
  double nll, scale;
} ctc_grad;

/* Row t of sample b's gradient from the collected log(sum alpha * beta) per
 * class, in the CPU's form. */
static void ctc_grad_row(const ctc_view *v, const ctc_grad *g, int64_t b, int64_t t,
                         const double *coll) {
  const loom_tensor *gr = g->grad;
  const int64_t row = t * gr->strides[0] + b * gr->strides[1];
  for (int64_t c = 0; c < v->c; ++c) {
    const double lp = ctc_lp(v, t, b, c);
    loom_nn_store(gr->data, gr->dtype, row + c * gr->strides[2],
                  (exp(lp) - exp(coll[c] + g->nll - lp)) * g->scale);
  }
}

static void ctc_zero_rows(const ctc_view *v, const loom_tensor *gr, int64_t b,
                          int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t c = 0; c < v->c; ++c)
      loom_nn_store(gr->data, gr->dtype,
                    t * gr->strides[0] + b * gr->strides[1] + c * gr->strides[2], 0.0);
}

/* "collected[c] log+= x": the first term is taken as it is. */
static inline void ctc_log_add(double *acc, double x) {
  if (*acc == -INFINITY) {
    *acc = x;
  } else {
    const double m = *acc > x ? *acc : x;
    *acc = log(exp(*acc - m) + exp(x - m)) + m;
  }
}

/* The betas of sample s from its last input step down, each row's
 * collected alpha * beta turned into gradient row t as soon as it is
 * complete. prev/cur hold two rows of betas, coll one per class. */
static void ctc_backward_sample(const ctc_view *v, const ctc_grad *g, const ctc_sample *s,
                                double *prev, double *cur, double *coll, int64_t width) {
  const loom_tensor *la = g->la;
  const int64_t b = s->b, T = s->in_len, L = s->tgt_len;
  const int64_t base = b * la->strides[0], ts = la->strides[1], ss = la->strides[2];
  for (int64_t i = 0; i < width; ++i) cur[i] = -INFINITY;
  for (int64_t c = 0; c < v->c; ++c) coll[c] = -INFINITY;
  const int64_t last = base + (T - 1) * ts;
  cur[2 * L] = ctc_lp(v, T - 1, b, v->blank);
  coll[v->blank] = loom_nn_load(la->data, la->dtype, last + 2 * L * ss) + cur[2 * L];
  if (L > 0) {
    const int64_t tp = ctc_prime(v, s, 2 * L - 1);
    cur[2 * L - 1] = ctc_lp(v, T - 1, b, tp);
    /* a blank and a label: different classes, so a plain assignment */
    coll[tp] = loom_nn_load(la->data, la->dtype, last + (2 * L - 1) * ss) + cur[2 * L - 1];
  }
  ctc_grad_row(v, g, b, T - 1, coll);
  for (int64_t t = T - 2; t >= 0; --t) {
    double *swap = prev;
    prev = cur;
    cur = swap;
    for (int64_t c = 0; c < v->c; ++c) coll[c] = -INFINITY;
    for (int64_t i = 2 * L; i >= 0; --i) {
      const int64_t tp = ctc_prime(v, s, i);
      const double lb1 = prev[i];
      const double lb2 = i < 2 * L ? prev[i + 1] : -INFINITY;
      const double lb3 = i < 2 * L - 1 && ctc_prime(v, s, i + 2) != tp ? prev[i + 2] : -INFINITY;
      cur[i] = ctc_lse3(lb1, lb2, lb3) + ctc_lp(v, t, b, tp);
      ctc_log_add(&coll[tp], loom_nn_load(la->data, la->dtype, base + t * ts + i * ss) + cur[i]);
    }
    ctc_grad_row(v, g, b, t, coll);
  }
}

int loom_ctc_loss_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  ctc_view v;
  int st = ctc_view_of(args, 7, 1, &v);
  if (st) return st;
  const loom_tensor *go = &args->tensors[0], *nll = &args->tensors[3],
                    *la = &args->tensors[4], *gr = &args->tensors[5],
                    *scratch = &args->tensors[6];
  const int64_t tmax = v.lp->sizes[0];
  const int64_t width = la->rank == 3 ? la->sizes[2] : 0;
  if (la->rank != 3 || la->sizes[0] != v.n || la->sizes[1] != tmax || go->rank != 1 ||
      go->sizes[0] != v.n || nll->rank != 1 || nll->sizes[0] != v.n || gr->rank != 3 ||
      gr->sizes[0] != tmax || gr->sizes[1] != v.n || gr->sizes[2] != v.c ||
      !loom_nn_is_float(go->dtype) || !loom_nn_is_float(nll->dtype) ||
      !loom_nn_is_float(la->dtype) || !loom_nn_is_float(gr->dtype) ||
      scratch->dtype != LOOM_FLOAT64 || scratch->rank != 2 || scratch->sizes[0] != v.n ||
      scratch->sizes[1] < 2 * width + v.c || !loom_nn_dense_from(scratch, 1))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ctc_loss_backward: bad tensor arguments");
  int64_t offset = ctc_offset_before(&v, begin);
  for (int64_t b = begin; b < end; offset += v.tgt_lens[b].i, ++b) {
    ctc_sample s;
    if ((st = ctc_sample_at(&v, b, offset, width, &s))) return st;
    const ctc_grad g = {
        .la = la, .grad = gr,
        .nll = loom_nn_load(nll->data, nll->dtype, b * nll->strides[0]),
        .scale = loom_nn_load(go->data, go->dtype, b * go->strides[0])};
    if (v.zero_infinity && g.nll == INFINITY) {
      ctc_zero_rows(&v, gr, b, 0, tmax);
      continue;
    }
    double *row = (double *)scratch->data + b * scratch->strides[0];
    if (s.in_len > 0) ctc_backward_sample(&v, &g, &s, row, row + width, row + 2 * width, width);
    ctc_zero_rows(&v, gr, b, s.in_len, tmax);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_ctc_loss_kernels[] = {
    {"ctc_loss.forward", loom_ctc_loss_forward, NULL},
    {"ctc_loss.backward", loom_ctc_loss_backward, NULL},
    {NULL, NULL, NULL},
};
