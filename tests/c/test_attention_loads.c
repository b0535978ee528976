/* The blocked attention kernels read bf16 heads where they lie: rank-4
 * (B, H, n, d) views whose rows sit a padded token stride apart, as heads
 * split from a fused projection do. Widening bf16 to float is exact and the
 * math after the load is the float kernels', so every bf16 result is the
 * float kernels' result on the widened values, rounded once: output, dq,
 * dk and dv bit for bit, log-sum-exp and delta equal. Checked for the
 * baseline build and the AVX-512 build (whose transposed loads go through
 * registers 16 x 16), which must also agree with each other. Query counts
 * below 16 (the row layout, which transposes each key tile) and above,
 * head dims that leave a partial vector, key counts that leave a partial
 * tile, causal and not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/base/dtype.h"
#include "kernels/nn/attention.h"
#include "kernels/nn/attention_blocked.h"
#include "loom/status.h"
#include "test_util.h"


enum { B = 2, H = 3, MAXN = 83, MAXE = 40, PAD = 5 };
enum { CAP = B * MAXN * (H * MAXE + PAD) };

typedef struct isa {
  loom_kernel_fn fwd, bq, bkv;
} isa;

static int run(loom_kernel_fn fn, loom_tensor *t, int nt, double scale, int causal,
               int64_t range) {
  loom_scalar s[2] = {{.f = scale}, {.i = causal}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = (uint32_t)nt,
                        .tensors = t, .num_scalars = 2, .scalars = s, .range = range,
                        .grain = 1};
  for (int64_t i = 0; i < range; ++i) {
    const int rc = fn(&a, i, i + 1);
    if (rc) return rc;
  }
  return 0;
}

/* (B, H, n, d) heads of a [B][n][H * d + PAD] buffer */
static loom_tensor heads(void *data, int32_t dtype, int64_t n, int64_t d) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 4};
  const int64_t ts = H * d + PAD;
  t.sizes[0] = B; t.sizes[1] = H; t.sizes[2] = n; t.sizes[3] = d;
  t.strides[0] = n * ts; t.strides[1] = d; t.strides[2] = ts; t.strides[3] = 1;
  return t;
}
static loom_tensor rows3(void *data, int32_t dtype, int64_t n, int64_t d) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 3};
  t.sizes[0] = B * H; t.sizes[1] = n; t.sizes[2] = d;
  t.strides[0] = n * d; t.strides[1] = d; t.strides[2] = 1;
  return t;
}
static loom_tensor vec2(float *data, int64_t n) {
  loom_tensor t = {.data = data, .dtype = LOOM_FLOAT32, .rank = 2};
  t.sizes[0] = B * H; t.sizes[1] = n; t.strides[0] = n; t.strides[1] = 1;
  return t;
}

/* element (bh, i, e) of heads(n, d)'s buffer */
static int64_t at(int64_t bh, int64_t i, int64_t e, int64_t n, int64_t d) {
  return (bh / H * n + i) * (H * d + PAD) + bh % H * d + e;
}

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* bf16 values in a heads buffer, and their float copy in (BH, n, d) rows */
static void fill(uint16_t *h, float *f, int64_t n, int64_t d, float amp) {
  for (int64_t i = 0; i < CAP; ++i) h[i] = loom_f32_to_bf16(NAN); /* padding */
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < d; ++e) {
        const uint16_t v = loom_f32_to_bf16(amp * frand());
        h[at(bh, i, e, n, d)] = v;
        f[(bh * n + i) * d + e] = loom_bf16_to_f32(v);
      }
}

/* whether heads buffer h holds f's values rounded to bf16 */
static int rounded(const uint16_t *h, const float *f, int64_t n, int64_t d) {
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < d; ++e)
        if (h[at(bh, i, e, n, d)] != loom_f32_to_bf16(f[(bh * n + i) * d + e])) return 0;
  return 1;
}

static uint16_t hq[CAP], hk[CAP], hv[CAP], hdo[CAP];
static float fq[CAP], fk[CAP], fv[CAP], fdo[CAP], fo_bf[CAP];
/* results of one build: [0] bf16 heads, [1] float rows */
typedef struct results {
  uint16_t out[CAP], dq[CAP], dk[CAP], dv[CAP];
  float fout[CAP], fdq[CAP], fdk[CAP], fdv[CAP];
  float lse[2][B * H * MAXN], delta[2][B * H * MAXN];
} results;
static results res[2];

static void run_isa(const isa *k, results *r, int64_t l, int64_t s, int64_t e, int64_t ev,
                    int causal) {
  const double scale = 0.3;
  const int64_t nq = B * H * ((l + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  const int64_t nk = B * H * ((s + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  loom_tensor none = {.data = NULL};
  for (int64_t i = 0; i < CAP; ++i) r->out[i] = r->dq[i] = r->dk[i] = r->dv[i] = 0;
  /* bf16 heads where they lie */
  loom_tensor q = heads(hq, LOOM_BFLOAT16, l, e), kk = heads(hk, LOOM_BFLOAT16, s, e);
  loom_tensor v = heads(hv, LOOM_BFLOAT16, s, ev), o = heads(r->out, LOOM_BFLOAT16, l, ev);
  loom_tensor dO = heads(hdo, LOOM_BFLOAT16, l, ev), lse = vec2(r->lse[0], l);
  loom_tensor delta = vec2(r->delta[0], l);
  loom_tensor f[6] = {q, kk, v, none, o, lse};
  CHECK(run(k->fwd, f, 6, scale, causal, nq) == 0);
  loom_tensor g[9] = {dO, q, kk, v, none, o, lse, heads(r->dq, LOOM_BFLOAT16, l, e), delta};
  CHECK(run(k->bq, g, 9, scale, causal, nq) == 0);
  loom_tensor h[9] = {dO, q, kk, v, none, lse, delta, heads(r->dk, LOOM_BFLOAT16, s, e),
                      heads(r->dv, LOOM_BFLOAT16, s, ev)};
  CHECK(run(k->bkv, h, 9, scale, causal, nk) == 0);
  /* the float kernels on the widened values; the backward reads the bf16
   * output, widened, as the bf16 backward does */
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < l; ++i)
      for (int64_t c = 0; c < ev; ++c)
        fo_bf[(bh * l + i) * ev + c] = loom_bf16_to_f32(r->out[at(bh, i, c, l, ev)]);
  loom_tensor fq3 = rows3(fq, LOOM_FLOAT32, l, e), fk3 = rows3(fk, LOOM_FLOAT32, s, e);
  loom_tensor fv3 = rows3(fv, LOOM_FLOAT32, s, ev), fdo3 = rows3(fdo, LOOM_FLOAT32, l, ev);
  loom_tensor flse = vec2(r->lse[1], l), fdelta = vec2(r->delta[1], l);
  loom_tensor ff[6] = {fq3, fk3, fv3, none, rows3(r->fout, LOOM_FLOAT32, l, ev), flse};
  CHECK(run(k->fwd, ff, 6, scale, causal, nq) == 0);
  loom_tensor fob = rows3(fo_bf, LOOM_FLOAT32, l, ev);
  loom_tensor fg[9] = {fdo3, fq3, fk3, fv3, none, fob, flse, rows3(r->fdq, LOOM_FLOAT32, l, e),
                       fdelta};
  CHECK(run(k->bq, fg, 9, scale, causal, nq) == 0);
  loom_tensor fh[9] = {fdo3, fq3, fk3, fv3, none, flse, fdelta,
                       rows3(r->fdk, LOOM_FLOAT32, s, e), rows3(r->fdv, LOOM_FLOAT32, s, ev)};
  CHECK(run(k->bkv, fh, 9, scale, causal, nk) == 0);
  const size_t nl = sizeof(float) * (size_t)(B * H * l);
  int ok = rounded(r->out, r->fout, l, ev) && rounded(r->dq, r->fdq, l, e) &&
           rounded(r->dk, r->fdk, s, e) && rounded(r->dv, r->fdv, s, ev) &&
           memcmp(r->lse[0], r->lse[1], nl) == 0 && memcmp(r->delta[0], r->delta[1], nl) == 0;
  if (!ok)
    fprintf(stderr, "bf16 heads l %lld s %lld e %lld ev %lld causal %d: not the float bits\n",
            (long long)l, (long long)s, (long long)e, (long long)ev, causal);
  CHECK(ok);
}

static void case_(int64_t l, int64_t s, int64_t e, int64_t ev, int causal) {
  fill(hq, fq, l, e, 1.0f);
  fill(hk, fk, s, e, 1.0f);
  fill(hv, fv, s, ev, 2.0f);
  fill(hdo, fdo, l, ev, 1.0f);
  const isa base = {loom_attention_blocked_forward_impl, loom_attention_blocked_backward_q_impl,
                    loom_attention_blocked_backward_kv_impl};
  const isa avx512 = {loom_attention_blocked_forward_impl_avx512,
                      loom_attention_blocked_backward_q_impl_avx512,
                      loom_attention_blocked_backward_kv_impl_avx512};
  run_isa(&base, &res[0], l, s, e, ev, causal);
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  run_isa(&avx512, &res[1], l, s, e, ev, causal);
  CHECK(memcmp(res[0].out, res[1].out, sizeof res[0].out) == 0);
  CHECK(memcmp(res[0].dq, res[1].dq, sizeof res[0].dq) == 0);
  CHECK(memcmp(res[0].dk, res[1].dk, sizeof res[0].dk) == 0);
  CHECK(memcmp(res[0].dv, res[1].dv, sizeof res[0].dv) == 0);
  CHECK(memcmp(res[0].lse, res[1].lse, sizeof res[0].lse) == 0);
}

int main(void) {
  srand(11);
  for (int causal = 0; causal <= 1; ++causal) {
    case_(37, 83, 24, 40, causal); /* queries transposed, partial vectors */
    case_(64, 64, 32, 32, causal); /* whole tiles and vectors */
    case_(5, 83, 40, 24, causal);  /* the row layout: key tiles transposed */
    case_(80, 17, 16, 8, causal);  /* a partial block of 16 queries */
  }
  TEST_MAIN_END();
}
