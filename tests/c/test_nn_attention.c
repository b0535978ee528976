/* Attention kernels against a naive softmax(q k^T * scale + mask) v, and
 * their gradients against central differences in fp64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/attention.h"
#include "kernels/nn/attention_blocked.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "test_util.h"


enum { BH = 2, L = 5, S = 7, E = 3, EV = 4 };

static loom_tensor t3(void *data, int32_t dtype, int64_t a, int64_t b, int64_t c) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 3};
  t.sizes[0] = a; t.sizes[1] = b; t.sizes[2] = c;
  t.strides[0] = b * c; t.strides[1] = c; t.strides[2] = 1;
  return t;
}
static loom_tensor t2(void *data, int32_t dtype, int64_t a, int64_t b) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 2};
  t.sizes[0] = a; t.sizes[1] = b; t.strides[0] = b; t.strides[1] = 1;
  return t;
}

static int run(loom_kernel_fn fn, loom_tensor *t, int nt, loom_scalar *s,
               int64_t range, int64_t grain) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                        .num_tensors = (uint32_t)nt, .tensors = t,
                        .num_scalars = 2, .scalars = s, .range = range, .grain = grain};
  for (int64_t b = 0; b < range; b += grain) {
    int rc = fn(&a, b, b + grain < range ? b + grain : range);
    if (rc) return rc;
  }
  return 0;
}

static double q[BH * L * E], k[BH * S * E], v[BH * S * EV], mask[BH * L * S];
static uint8_t bmask[BH * L * S];
static double out[BH * L * EV], lse[BH * L], dout[BH * L * EV], delta[BH * L];
static double dq[BH * L * E], dk[BH * S * E], dv[BH * S * EV];

static double frand(void) { return (double)rand() / RAND_MAX * 2.0 - 1.0; }

/* Naive reference for one configuration; returns max abs error of out. */
static double check_forward(int causal, int use_mask, int use_bool, double scale) {
  double err = 0;
  for (int b = 0; b < BH; ++b)
    for (int i = 0; i < L; ++i) {
      double sc[S], m = -INFINITY, sum = 0;
      for (int j = 0; j < S; ++j) {
        double s = 0;
        for (int e = 0; e < E; ++e) s += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        s *= scale;
        if (use_mask && !use_bool) s += mask[(b * L + i) * S + j];
        if (use_mask && use_bool && !bmask[(b * L + i) * S + j]) s = -INFINITY;
        if (causal && j > i) s = -INFINITY;
        sc[j] = s;
        m = fmax(m, s);
      }
      for (int j = 0; j < S; ++j) sum += m == -INFINITY ? 0 : exp(sc[j] - m);
      for (int e = 0; e < EV; ++e) {
        double o = 0;
        for (int j = 0; j < S; ++j)
          if (sum > 0) o += exp(sc[j] - m) / sum * v[(b * S + j) * EV + e];
        err = fmax(err, fabs(o - out[(b * L + i) * EV + e]));
      }
    }
  return err;
}

static void forward(loom_tensor *f, loom_scalar *s) { run(loom_attention_forward, f, 6, s, BH * L, 3); }

static double objective(loom_tensor *f, loom_scalar *s) {
  forward(f, s);
  double acc = 0;
  for (int i = 0; i < BH * L * EV; ++i) acc += out[i] * dout[i];
  return acc;
}

static void test_attention(int causal, int use_mask, int use_bool) {
  const double scale = 0.7;
  loom_tensor none = {.data = NULL};
  loom_tensor m = use_mask ? (use_bool ? t3(bmask, LOOM_BOOL, BH, L, S) : t3(mask, LOOM_FLOAT64, BH, L, S)) : none;
  loom_tensor f[6] = {t3(q, LOOM_FLOAT64, BH, L, E), t3(k, LOOM_FLOAT64, BH, S, E),
                      t3(v, LOOM_FLOAT64, BH, S, EV), m, t3(out, LOOM_FLOAT64, BH, L, EV),
                      t2(lse, LOOM_FLOAT64, BH, L)};
  loom_scalar s[2] = {{.f = scale}, {.i = causal}};
  CHECK(run(loom_attention_forward, f, 6, s, BH * L, 3) == 0);
  CHECK(check_forward(causal, use_mask, use_bool, scale) < 1e-12);

  loom_tensor bq[9] = {t3(dout, LOOM_FLOAT64, BH, L, EV), f[0], f[1], f[2], m, f[4], f[5],
                       t3(dq, LOOM_FLOAT64, BH, L, E), t2(delta, LOOM_FLOAT64, BH, L)};
  CHECK(run(loom_attention_backward_q, bq, 9, s, BH * L, 2) == 0);
  loom_tensor bkv[9] = {bq[0], f[0], f[1], f[2], m, f[5], bq[8],
                        t3(dk, LOOM_FLOAT64, BH, S, E), t3(dv, LOOM_FLOAT64, BH, S, EV)};
  CHECK(run(loom_attention_backward_kv, bkv, 9, s, BH * S, 4) == 0);
  struct { double *x, *g; int n; } params[3] = {{q, dq, BH * L * E}, {k, dk, BH * S * E}, {v, dv, BH * S * EV}};
  const double h = 1e-6;
  for (int p = 0; p < 3; ++p) {
    double worst = 0;
    for (int i = 0; i < params[p].n; ++i) {
      double keep = params[p].x[i];
      params[p].x[i] = keep + h;
      double fp = objective(f, s);
      params[p].x[i] = keep - h;
      double fm = objective(f, s);
      params[p].x[i] = keep;
      double num = (fp - fm) / (2 * h);
      worst = fmax(worst, fabs(num - params[p].g[i]) / (1e-3 + fabs(num)));
    }
    if (!(worst < 1e-6)) fprintf(stderr, "param %d causal %d mask %d/%d: %g\n", p, causal, use_mask, use_bool, worst);
    CHECK(worst < 1e-6);
  }
  forward(f, s);
}

/* The blocked float path against the exact path, on sizes that are not
 * multiples of the tiles, with every masking mode. */
enum { BB = 3, BL = 37, BS = 70, BE = 24, BEV = 20 };

static float fq[BB * BL * BE], fk[BB * BS * BE], fv[BB * BS * BEV], fmask[BB * BL * BS];
static float fout[BB * BL * BEV], flse[BB * BL], fdout[BB * BL * BEV], fdelta[BB * BL];
static float fdq[BB * BL * BE], fdk[BB * BS * BE], fdv[BB * BS * BEV];
static double xq[BB * BL * BE], xk[BB * BS * BE], xv[BB * BS * BEV], xmask[BB * BL * BS];
static double xout[BB * BL * BEV], xlse[BB * BL], xdout[BB * BL * BEV], xdelta[BB * BL];
static double xdq[BB * BL * BE], xdk[BB * BS * BE], xdv[BB * BS * BEV];
static uint8_t xbmask[BB * BL * BS];

static double worst_f(const float *a, const double *b, int n) {
  double w = 0;
  for (int i = 0; i < n; ++i) {
    double d = fabs(a[i] - b[i]) / (1e-2 + fabs(b[i]));
    if (d > w || d != d) w = d != d ? INFINITY : d;
  }
  return w;
}

static void test_blocked(int causal, int mask_kind) {
  const int64_t blocks_q = BB * ((BL + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  const int64_t blocks_k = BB * ((BS + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  loom_tensor none = {.data = NULL};
  loom_tensor mf = mask_kind == 1 ? t3(xbmask, LOOM_BOOL, BB, BL, BS)
                 : mask_kind == 2 ? t3(fmask, LOOM_FLOAT32, BB, BL, BS) : none;
  loom_tensor mx = mask_kind == 1 ? t3(xbmask, LOOM_BOOL, BB, BL, BS)
                 : mask_kind == 2 ? t3(xmask, LOOM_FLOAT64, BB, BL, BS) : none;
  loom_scalar s[2] = {{.f = 0.3}, {.i = causal}};
  loom_tensor ff[6] = {t3(fq, LOOM_FLOAT32, BB, BL, BE), t3(fk, LOOM_FLOAT32, BB, BS, BE),
                       t3(fv, LOOM_FLOAT32, BB, BS, BEV), mf, t3(fout, LOOM_FLOAT32, BB, BL, BEV),
                       t2(flse, LOOM_FLOAT32, BB, BL)};
  loom_tensor fx[6] = {t3(xq, LOOM_FLOAT64, BB, BL, BE), t3(xk, LOOM_FLOAT64, BB, BS, BE),
                       t3(xv, LOOM_FLOAT64, BB, BS, BEV), mx, t3(xout, LOOM_FLOAT64, BB, BL, BEV),
                       t2(xlse, LOOM_FLOAT64, BB, BL)};
  CHECK(run(loom_attention_blocked_forward, ff, 6, s, blocks_q, 2) == 0);
  CHECK(run(loom_attention_forward, fx, 6, s, BB * BL, 7) == 0);
  CHECK(worst_f(fout, xout, BB * BL * BEV) < 1e-4);
  double wl = 0;
  for (int i = 0; i < BB * BL; ++i)
    wl = (flse[i] == xlse[i]) ? wl : fmax(wl, fabs(flse[i] - xlse[i]));
  CHECK(wl < 1e-4);
  loom_tensor bqf[9] = {t3(fdout, LOOM_FLOAT32, BB, BL, BEV), ff[0], ff[1], ff[2], mf, ff[4], ff[5],
                        t3(fdq, LOOM_FLOAT32, BB, BL, BE), t2(fdelta, LOOM_FLOAT32, BB, BL)};
  loom_tensor bqx[9] = {t3(xdout, LOOM_FLOAT64, BB, BL, BEV), fx[0], fx[1], fx[2], mx, fx[4], fx[5],
                        t3(xdq, LOOM_FLOAT64, BB, BL, BE), t2(xdelta, LOOM_FLOAT64, BB, BL)};
  CHECK(run(loom_attention_blocked_backward_q, bqf, 9, s, blocks_q, 3) == 0);
  CHECK(run(loom_attention_backward_q, bqx, 9, s, BB * BL, 5) == 0);
  loom_tensor bkf[9] = {bqf[0], ff[0], ff[1], ff[2], mf, ff[5], bqf[8],
                        t3(fdk, LOOM_FLOAT32, BB, BS, BE), t3(fdv, LOOM_FLOAT32, BB, BS, BEV)};
  loom_tensor bkx[9] = {bqx[0], fx[0], fx[1], fx[2], mx, fx[5], bqx[8],
                        t3(xdk, LOOM_FLOAT64, BB, BS, BE), t3(xdv, LOOM_FLOAT64, BB, BS, BEV)};
  CHECK(run(loom_attention_blocked_backward_kv, bkf, 9, s, blocks_k, 1) == 0);
  CHECK(run(loom_attention_backward_kv, bkx, 9, s, BB * BS, 9) == 0);
  const double wq = worst_f(fdq, xdq, BB * BL * BE), wk = worst_f(fdk, xdk, BB * BS * BE),
               wv = worst_f(fdv, xdv, BB * BS * BEV);
  if (!(wq < 1e-3 && wk < 1e-3 && wv < 1e-3))
    fprintf(stderr, "blocked causal %d mask %d: dq %g dk %g dv %g\n", causal, mask_kind, wq, wk, wv);
  CHECK(wq < 1e-3 && wk < 1e-3 && wv < 1e-3);
}

/* The AVX-512 build gives the baseline build's bits: forward and both
 * backward kernels, head dims that fill whole vectors and ones that do
 * not, row counts that leave a tail after the four-row blocks. */

enum { IB = 2, IL = 45, IS = 83, IE = 64 };

/* `poison`: one query row holds a NaN, so that row's maximum is NaN. */
static void isa_case(int causal, int e, int ev, int poison) {
  static float iq[IB * IL * IE], ik[IB * IS * IE], iv[IB * IS * IE], ido[IB * IL * IE];
  static float out[2][IB * IL * IE], lse[2][IB * IL], dq[2][IB * IL * IE], delta[2][IB * IL];
  static float dk[2][IB * IS * IE], dv[2][IB * IS * IE];
  for (int i = 0; i < IB * IL * IE; ++i) iq[i] = (float)frand(), ido[i] = (float)frand();
  for (int i = 0; i < IB * IS * IE; ++i) ik[i] = (float)frand(), iv[i] = 2.0f * (float)frand();
  if (poison) iq[5 * e] = NAN;
  loom_kernel_fn fwd[2] = {loom_attention_blocked_forward_impl,
                           loom_attention_blocked_forward_impl_avx512};
  loom_kernel_fn bq[2] = {loom_attention_blocked_backward_q_impl,
                          loom_attention_blocked_backward_q_impl_avx512};
  loom_kernel_fn bkv[2] = {loom_attention_blocked_backward_kv_impl,
                           loom_attention_blocked_backward_kv_impl_avx512};
  const int64_t nq = IB * ((IL + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  const int64_t nk = IB * ((IS + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  loom_scalar s[2] = {{.f = 0.125}, {.i = causal}};
  loom_tensor none = {.data = NULL};
  for (int b = 0; b < 2; ++b) {
    loom_tensor q3 = t3(iq, LOOM_FLOAT32, IB, IL, e), k3 = t3(ik, LOOM_FLOAT32, IB, IS, e);
    loom_tensor v3 = t3(iv, LOOM_FLOAT32, IB, IS, ev), o3 = t3(out[b], LOOM_FLOAT32, IB, IL, ev);
    loom_tensor l2 = t2(lse[b], LOOM_FLOAT32, IB, IL), do3 = t3(ido, LOOM_FLOAT32, IB, IL, ev);
    loom_tensor f[6] = {q3, k3, v3, none, o3, l2};
    CHECK(run(fwd[b], f, 6, s, nq, 3) == 0);
    loom_tensor g[9] = {do3, q3, k3, v3, none, o3, l2, t3(dq[b], LOOM_FLOAT32, IB, IL, e),
                        t2(delta[b], LOOM_FLOAT32, IB, IL)};
    CHECK(run(bq[b], g, 9, s, nq, 2) == 0);
    loom_tensor h[9] = {do3, q3, k3, v3, none, l2, g[8], t3(dk[b], LOOM_FLOAT32, IB, IS, e),
                        t3(dv[b], LOOM_FLOAT32, IB, IS, ev)};
    CHECK(run(bkv[b], h, 9, s, nk, 5) == 0);
  }
  CHECK(memcmp(out[0], out[1], sizeof(float) * IB * IL * ev) == 0);
  CHECK(memcmp(lse[0], lse[1], sizeof lse[0]) == 0);
  CHECK(memcmp(dq[0], dq[1], sizeof(float) * IB * IL * e) == 0);
  CHECK(memcmp(dk[0], dk[1], sizeof(float) * IB * IS * e) == 0);
  CHECK(memcmp(dv[0], dv[1], sizeof(float) * IB * IS * ev) == 0);
}

static void test_blocked_isas_agree(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  for (int causal = 0; causal <= 1; ++causal) {
    isa_case(causal, 64, 64, 0);
    isa_case(causal, 24, 40, 0);
    isa_case(causal, 64, 64, 1);
  }
}

static void blocked_inputs(void) {
  for (int i = 0; i < BB * BL * BE; ++i) xq[i] = fq[i] = (float)frand();
  for (int i = 0; i < BB * BS * BE; ++i) xk[i] = fk[i] = (float)frand();
  for (int i = 0; i < BB * BS * BEV; ++i) xv[i] = fv[i] = (float)frand();
  for (int i = 0; i < BB * BL * BS; ++i) {
    xmask[i] = fmask[i] = (float)frand();
    xbmask[i] = rand() % 4 != 0;
  }
  for (int j = 0; j < BS; ++j) xbmask[(2 * BL + 5) * BS + j] = 0; /* a row with no key */
  for (int i = 0; i < BB * BL * BEV; ++i) xdout[i] = fdout[i] = (float)frand();
}

/* Heads split from a fused projection, read and written where they lie:
 * rank-4 [B, H, n, d] views of a [B][n][3][H][d] buffer (q, k, v), the
 * output and the output gradient in [B][n][H][d], the three gradients
 * written into a [B][n][3][H][d] buffer, against rank-3 contiguous copies,
 * bit for bit, on the blocked (fp32) and row (fp64) kernels. */
enum { HB = 2, HH = 3, HN = 37, HD = 24, HC = HH * HD };

static loom_tensor heads4(void *data, int32_t dtype, int64_t token_stride) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 4};
  t.sizes[0] = HB; t.sizes[1] = HH; t.sizes[2] = HN; t.sizes[3] = HD;
  t.strides[0] = HN * token_stride; t.strides[1] = HD; t.strides[2] = token_stride;
  t.strides[3] = 1;
  return t;
}

/* element (b, h, i, e) of a [B][n][parts][H][d] buffer's part p */
static int64_t fused_at(int parts, int p, int b, int h, int i, int e) {
  return ((((int64_t)b * HN + i) * parts + p) * HH + h) * HD + e;
}

#define HEADS_CASE(T, DT, FWD, BQ, BKV, RQ, RK)                                            \
  static void heads_case_##T(int causal) {                                                \
    static T x[HB * HN * 3 * HC], go[HB * HN * HC], o4[HB * HN * HC], g4[HB * HN * 3 * HC]; \
    static T c3[3][HB * HH * HN * HD], go3[HB * HH * HN * HD], o3[HB * HH * HN * HD];    \
    static T g3[3][HB * HH * HN * HD];                                                    \
    static T lse4[HB * HH * HN], lse3[HB * HH * HN], d4[HB * HH * HN], d3[HB * HH * HN];  \
    for (int i = 0; i < HB * HN * 3 * HC; ++i) x[i] = (T)frand();                          \
    for (int i = 0; i < HB * HN * HC; ++i) go[i] = (T)frand();                            \
    for (int b = 0; b < HB; ++b)                                                           \
      for (int h = 0; h < HH; ++h)                                                         \
        for (int i = 0; i < HN; ++i)                                                       \
          for (int e = 0; e < HD; ++e) {                                                   \
            const int64_t r = (((int64_t)b * HH + h) * HN + i) * HD + e;                   \
            for (int p = 0; p < 3; ++p) c3[p][r] = x[fused_at(3, p, b, h, i, e)];          \
            go3[r] = go[fused_at(1, 0, b, h, i, e)];                                       \
          }                                                                                \
    loom_tensor none = {.data = NULL};                                                     \
    loom_scalar s[2] = {{.f = 0.3}, {.i = causal}};                                        \
    loom_tensor f4[6] = {heads4(x, DT, 3 * HC), heads4(x + HC, DT, 3 * HC),                \
                         heads4(x + 2 * HC, DT, 3 * HC), none, heads4(o4, DT, HC),         \
                         t2(lse4, DT, HB * HH, HN)};                                       \
    loom_tensor f3[6] = {t3(c3[0], DT, HB * HH, HN, HD), t3(c3[1], DT, HB * HH, HN, HD),   \
                         t3(c3[2], DT, HB * HH, HN, HD), none,                             \
                         t3(o3, DT, HB * HH, HN, HD), t2(lse3, DT, HB * HH, HN)};          \
    CHECK(run(FWD, f4, 6, s, RQ, 1) == 0);                                                 \
    CHECK(run(FWD, f3, 6, s, RQ, 1) == 0);                                                 \
    loom_tensor q4[9] = {heads4(go, DT, HC), f4[0], f4[1], f4[2], none, f4[4], f4[5],      \
                         heads4(g4, DT, 3 * HC), t2(d4, DT, HB * HH, HN)};                 \
    loom_tensor q3[9] = {t3(go3, DT, HB * HH, HN, HD), f3[0], f3[1], f3[2], none, f3[4],   \
                         f3[5], t3(g3[0], DT, HB * HH, HN, HD), t2(d3, DT, HB * HH, HN)};  \
    CHECK(run(BQ, q4, 9, s, RQ, 1) == 0);                                                  \
    CHECK(run(BQ, q3, 9, s, RQ, 1) == 0);                                                  \
    loom_tensor k4[9] = {q4[0], f4[0], f4[1], f4[2], none, f4[5], q4[8],                   \
                         heads4(g4 + HC, DT, 3 * HC), heads4(g4 + 2 * HC, DT, 3 * HC)};    \
    loom_tensor k3[9] = {q3[0], f3[0], f3[1], f3[2], none, f3[5], q3[8],                   \
                         t3(g3[1], DT, HB * HH, HN, HD), t3(g3[2], DT, HB * HH, HN, HD)};  \
    CHECK(run(BKV, k4, 9, s, RK, 1) == 0);                                                 \
    CHECK(run(BKV, k3, 9, s, RK, 1) == 0);                                                 \
    int same = memcmp(lse4, lse3, sizeof lse3) == 0;                                       \
    for (int b = 0; b < HB; ++b)                                                           \
      for (int h = 0; h < HH; ++h)                                                         \
        for (int i = 0; i < HN; ++i)                                                       \
          for (int e = 0; e < HD; ++e) {                                                   \
            const int64_t r = (((int64_t)b * HH + h) * HN + i) * HD + e;                   \
            same &= memcmp(&o4[fused_at(1, 0, b, h, i, e)], &o3[r], sizeof(T)) == 0;       \
            for (int p = 0; p < 3; ++p)                                                    \
              same &= memcmp(&g4[fused_at(3, p, b, h, i, e)], &g3[p][r], sizeof(T)) == 0;  \
          }                                                                                \
    CHECK(same);                                                                           \
  }

HEADS_CASE(float, LOOM_FLOAT32, loom_attention_blocked_forward, loom_attention_blocked_backward_q,
           loom_attention_blocked_backward_kv, HB * HH * ((HN + 63) / 64),
           HB * HH * ((HN + 63) / 64))
HEADS_CASE(double, LOOM_FLOAT64, loom_attention_forward, loom_attention_backward_q,
           loom_attention_backward_kv, HB * HH * HN, HB * HH * HN)

int main(void) {
  srand(3);
  for (int i = 0; i < BH * L * E; ++i) q[i] = frand();
  for (int i = 0; i < BH * S * E; ++i) k[i] = frand();
  for (int i = 0; i < BH * S * EV; ++i) v[i] = frand();
  for (int i = 0; i < BH * L * S; ++i) { mask[i] = frand(); bmask[i] = rand() % 3 != 0; }
  for (int i = 0; i < BH * L * EV; ++i) dout[i] = frand();
  /* one query row sees no key at all: output 0, lse -inf, no NaN anywhere */
  for (int j = 0; j < S; ++j) bmask[(1 * L + 2) * S + j] = 0;
  for (int causal = 0; causal <= 1; ++causal)
    for (int use_mask = 0; use_mask <= 1; ++use_mask)
      for (int use_bool = 0; use_bool <= use_mask; ++use_bool) test_attention(causal, use_mask, use_bool);
  CHECK(lse[1 * L + 2] == -INFINITY && out[(1 * L + 2) * EV] == 0.0);
  for (int i = 0; i < BH * L * E; ++i) CHECK(!isnan(dq[i]));
  blocked_inputs();
  for (int causal = 0; causal <= 1; ++causal)
    for (int mask_kind = 0; mask_kind <= 2; ++mask_kind) test_blocked(causal, mask_kind);
  test_blocked_isas_agree();
  for (int causal = 0; causal <= 1; ++causal) heads_case_float(causal), heads_case_double(causal);
  TEST_MAIN_END();
}
