/* Fused optimizer updates: pure elementwise, so any split is deterministic. */
#include "kernels/nn/optim.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

static inline double opt_scalar(const loom_tensor *t, double dflt) {
  return t->data ? loom_nn_load(t->data, t->dtype, 0) : dflt;
}

int loom_adam_step(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 9 || args->num_scalars < 8)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *p = &args->tensors[0], *g = &args->tensors[1],
                    *m = &args->tensors[2], *v = &args->tensors[3],
                    *vmax = &args->tensors[4], *step_t = &args->tensors[5],
                    *scale_t = &args->tensors[6], *inf_t = &args->tensors[7],
                    *lr_t = &args->tensors[8];
  if (opt_scalar(inf_t, 0.0) != 0.0) return LOOM_OK;
  const double lr = opt_scalar(lr_t, args->scalars[0].f);
  const double beta1 = args->scalars[1].f, beta2 = args->scalars[2].f;
  const double wd = args->scalars[3].f, eps = args->scalars[4].f;
  const int amsgrad = args->scalars[5].i != 0, maximize = args->scalars[6].i != 0;
  const int decoupled = args->scalars[7].i != 0;
  const double step = opt_scalar(step_t, 1.0);
  const double bc1 = 1.0 - pow(beta1, step);
  const double bc2_sqrt = sqrt(1.0 - pow(beta2, step));
  const double step_size = lr / bc1;
  const double gscale = opt_scalar(scale_t, 1.0);
  const int f32 = p->dtype == LOOM_FLOAT32 && g->dtype == LOOM_FLOAT32 &&
                  m->dtype == LOOM_FLOAT32 && v->dtype == LOOM_FLOAT32 &&
                  (!amsgrad || !vmax->data || vmax->dtype == LOOM_FLOAT32);
  if (f32) {
    /* fp32 in float arithmetic, as PyTorch's fused step does it on the CPU
     * (constants worked out in double, then rounded), and without a dtype
     * switch per access, so the loop vectorizes. */
    float *restrict pf = p->data, *restrict gf = g->data, *restrict mf = m->data;
    float *restrict vf = v->data, *restrict xf = amsgrad ? vmax->data : NULL;
    const float fb1 = (float)(1.0 - beta1), fb2 = (float)beta2, fc2 = (float)(1.0 - beta2);
    const float fdecay = (float)(lr * wd), fwd = (float)wd, fgs = (float)gscale;
    const float fstep = (float)step_size, fbc2 = (float)bc2_sqrt, feps = (float)eps;
    const float sign = maximize ? -1.0f : 1.0f;
    const int scaled = scale_t->data != NULL, couple = wd != 0.0 && !decoupled;
    const int decay = wd != 0.0 && decoupled;
    if (!scaled && !xf) { /* the usual case, free of stores under a condition */
      for (int64_t i = begin; i < end; ++i) {
        const float pv = decay ? pf[i] - fdecay * pf[i] : pf[i];
        const float gv = couple ? sign * gf[i] + fwd * pf[i] : sign * gf[i];
        const float mv = mf[i] + fb1 * (gv - mf[i]);
        const float vv = fb2 * vf[i] + fc2 * gv * gv;
        pf[i] = pv - fstep * mv / (sqrtf(vv) / fbc2 + feps);
        mf[i] = mv;
        vf[i] = vv;
      }
      return LOOM_OK;
    }
    for (int64_t i = begin; i < end; ++i) {
      float gv = gf[i];
      if (scaled) {
        gv /= fgs;
        gf[i] = gv;
      }
      gv *= sign;
      float pv = pf[i];
      if (decay) pv -= fdecay * pv;
      if (couple) gv += fwd * pv;
      const float mv = mf[i] + fb1 * (gv - mf[i]);
      const float vv = fb2 * vf[i] + fc2 * gv * gv;
      float denom_sq = vv;
      if (xf) {
        denom_sq = xf[i] > vv ? xf[i] : vv;
        xf[i] = denom_sq;
      }
      pf[i] = pv - fstep * mv / (sqrtf(denom_sq) / fbc2 + feps);
      mf[i] = mv;
      vf[i] = vv;
    }
    return LOOM_OK;
  }
  for (int64_t i = begin; i < end; ++i) {
    double gv = loom_nn_load(g->data, g->dtype, i);
    if (scale_t->data) {
      gv /= gscale;
      loom_nn_store(g->data, g->dtype, i, gv);
    }
    if (maximize) gv = -gv;
    double pv = loom_nn_load(p->data, p->dtype, i);
    if (wd != 0.0) {
      if (decoupled) pv -= lr * wd * pv;
      else gv += wd * pv;
    }
    double mv = loom_nn_load(m->data, m->dtype, i);
    mv += (1.0 - beta1) * (gv - mv);
    double vv = loom_nn_load(v->data, v->dtype, i);
    vv = beta2 * vv + (1.0 - beta2) * gv * gv;
    double denom_sq = vv;
    if (amsgrad && vmax->data) {
      double mx = fmax(loom_nn_load(vmax->data, vmax->dtype, i), vv);
      loom_nn_store(vmax->data, vmax->dtype, i, mx);
      denom_sq = mx;
    }
    pv -= step_size * mv / (sqrt(denom_sq) / bc2_sqrt + eps);
    loom_nn_store(m->data, m->dtype, i, mv);
    loom_nn_store(v->data, v->dtype, i, vv);
    loom_nn_store(p->data, p->dtype, i, pv);
  }
  return LOOM_OK;
}

int loom_sgd_step(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 7)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *p = &args->tensors[0], *g = &args->tensors[1],
                    *buf = &args->tensors[2], *scale_t = &args->tensors[3],
                    *inf_t = &args->tensors[4], *lr_t = &args->tensors[5];
  if (opt_scalar(inf_t, 0.0) != 0.0) return LOOM_OK;
  const double wd = args->scalars[0].f, momentum = args->scalars[1].f;
  const double lr = opt_scalar(lr_t, args->scalars[2].f);
  const double dampening = args->scalars[3].f;
  const int nesterov = args->scalars[4].i != 0, maximize = args->scalars[5].i != 0;
  const int first = args->scalars[6].i != 0;
  const double gscale = opt_scalar(scale_t, 1.0);
  const int with_buf = momentum != 0.0 && buf->data;
  if (p->dtype == LOOM_FLOAT32 && g->dtype == LOOM_FLOAT32 &&
      (!with_buf || buf->dtype == LOOM_FLOAT32) && !scale_t->data) {
    /* fp32 in float arithmetic, as for Adam above; the gradient is only
     * read, so the loop vectorizes. */
    float *restrict pf = p->data, *restrict bf = with_buf ? buf->data : NULL;
    const float *restrict gf = g->data;
    const float sign = maximize ? -1.0f : 1.0f, fwd = (float)wd, fm = (float)momentum;
    const float fd = (float)(1.0 - dampening), flr = (float)lr;
    const int decay = wd != 0.0;
    if (!bf) {
      for (int64_t i = begin; i < end; ++i)
        pf[i] = pf[i] - flr * (decay ? sign * gf[i] + fwd * pf[i] : sign * gf[i]);
      return LOOM_OK;
    }
    for (int64_t i = begin; i < end; ++i) {
      const float gv = decay ? sign * gf[i] + fwd * pf[i] : sign * gf[i];
      const float b = first ? gv : fm * bf[i] + fd * gv;
      bf[i] = b;
      pf[i] = pf[i] - flr * (nesterov ? gv + fm * b : b);
    }
    return LOOM_OK;
  }
  for (int64_t i = begin; i < end; ++i) {
    double gv = loom_nn_load(g->data, g->dtype, i);
    if (scale_t->data) {
      gv /= gscale;
      loom_nn_store(g->data, g->dtype, i, gv);
    }
    if (maximize) gv = -gv;
    const double pv = loom_nn_load(p->data, p->dtype, i);
    if (wd != 0.0) gv += wd * pv;
    if (momentum != 0.0 && buf->data) {
      double b = first ? gv
                       : momentum * loom_nn_load(buf->data, buf->dtype, i) +
                             (1.0 - dampening) * gv;
      loom_nn_store(buf->data, buf->dtype, i, b);
      gv = nesterov ? gv + momentum * b : b;
    }
    loom_nn_store(p->data, p->dtype, i, pv - lr * gv);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_optim_kernels[] = {
    {"optim.adam_step", loom_adam_step, NULL},
    {"optim.sgd_step", loom_sgd_step, NULL},
    {NULL, NULL, NULL},
};
