/* Fused Adam/AdamW/SGD steps against the textbook update. */
#include <math.h>
#include <stdio.h>

#include "kernels/nn/optim.h"
#include "test_util.h"


enum { N = 37 };

static loom_tensor t1(void *data, int32_t dtype, int64_t n) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 1};
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

static int run(loom_kernel_fn fn, loom_tensor *t, int nt, loom_scalar *s, int ns) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = (uint32_t)nt,
                        .tensors = t, .num_scalars = (uint32_t)ns, .scalars = s,
                        .range = N, .grain = 8};
  for (int64_t b = 0; b < N; b += 8) {
    int rc = fn(&a, b, b + 8 < N ? b + 8 : N);
    if (rc) return rc;
  }
  return 0;
}

static void test_adam(int decoupled, int amsgrad) {
  double p[N], g[N], m[N], v[N], vmax[N], rp[N], rm[N], rv[N], rvmax[N];
  double step = 3, lr = 0.01, b1 = 0.9, b2 = 0.99, wd = 0.1, eps = 1e-8;
  for (int i = 0; i < N; ++i) {
    p[i] = rp[i] = sin(i + 1.0);
    g[i] = cos(3.0 * i);
    m[i] = rm[i] = 0.1 * sin(2.0 * i);
    v[i] = rv[i] = 0.01 * (1 + cos(i));
    vmax[i] = rvmax[i] = 0.015;
  }
  loom_tensor none = {.data = NULL};
  loom_tensor t[9] = {t1(p, LOOM_FLOAT64, N), t1(g, LOOM_FLOAT64, N), t1(m, LOOM_FLOAT64, N),
                      t1(v, LOOM_FLOAT64, N), amsgrad ? t1(vmax, LOOM_FLOAT64, N) : none,
                      t1(&step, LOOM_FLOAT64, 1), none, none, none};
  loom_scalar s[8] = {{.f = lr}, {.f = b1}, {.f = b2}, {.f = wd}, {.f = eps},
                      {.i = amsgrad}, {.i = 0}, {.i = decoupled}};
  CHECK(run(loom_adam_step, t, 9, s, 8) == 0);
  double worst = 0;
  for (int i = 0; i < N; ++i) {
    double gi = g[i], pi = rp[i];
    if (decoupled) pi *= 1 - lr * wd;
    else gi += wd * pi;
    rm[i] = b1 * rm[i] + (1 - b1) * gi;
    rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
    double den = rv[i];
    if (amsgrad) den = rvmax[i] = fmax(rvmax[i], rv[i]);
    double mhat = rm[i] / (1 - pow(b1, step)), vhat = den / (1 - pow(b2, step));
    pi -= lr * mhat / (sqrt(vhat) + eps);
    worst = fmax(worst, fabs(pi - p[i]) + fabs(rm[i] - m[i]) + fabs(rv[i] - v[i]));
  }
  CHECK(worst < 1e-6);
  /* found_inf set: nothing moves */
  double inf = 1.0, before = p[5];
  t[7] = t1(&inf, LOOM_FLOAT64, 1);
  CHECK(run(loom_adam_step, t, 9, s, 8) == 0);
  CHECK(p[5] == before);
}

static void test_sgd(int nesterov, int first) {
  float p[N], g[N], buf[N];
  double rp[N], rb[N];
  const double lr = 0.05, mom = 0.9, wd = 0.01, damp = 0.1;
  for (int i = 0; i < N; ++i) {
    p[i] = (float)sin(i * 0.3); rp[i] = p[i];
    g[i] = (float)cos(i * 0.7);
    buf[i] = (float)(0.2 * sin(i)); rb[i] = buf[i];
  }
  float scale = 2.0f;
  loom_tensor none = {.data = NULL};
  loom_tensor t[6] = {t1(p, LOOM_FLOAT32, N), t1(g, LOOM_FLOAT32, N), t1(buf, LOOM_FLOAT32, N),
                      t1(&scale, LOOM_FLOAT32, 1), none, none};
  loom_scalar s[7] = {{.f = wd}, {.f = mom}, {.f = lr}, {.f = damp}, {.i = nesterov}, {.i = 0}, {.i = first}};
  float g0[N];
  for (int i = 0; i < N; ++i) g0[i] = g[i];
  CHECK(run(loom_sgd_step, t, 6, s, 7) == 0);
  double worst = 0;
  for (int i = 0; i < N; ++i) {
    double gi = g0[i] / 2.0 + wd * rp[i];
    rb[i] = first ? gi : mom * rb[i] + (1 - damp) * gi;
    double d = nesterov ? gi + mom * rb[i] : rb[i];
    worst = fmax(worst, fabs(rp[i] - lr * d - p[i]) + fabs(rb[i] - buf[i]) + fabs(g0[i] / 2.0 - g[i]));
  }
  CHECK(worst < 1e-6);
}

int main(void) {
  for (int d = 0; d <= 1; ++d)
    for (int a = 0; a <= 1; ++a) test_adam(d, a);
  for (int n = 0; n <= 1; ++n)
    for (int f = 0; f <= 1; ++f) test_sgd(n, f);
  TEST_MAIN_END();
}
