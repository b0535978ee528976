/* embedding_bag's kernels against fp64 references from the definition:
 * each bag's sum / mean / column-wise max of its rows (padding skipped,
 * per-sample weights on sum), the weight's gradient (each occurrence's
 * bag gradient scaled by 1 / bag size for mean, times its weight), the max
 * gradient routed to the rows that won, and the per-sample weights'
 * gradient; one item at a time, in chunks of 3 or whole, the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/index/embedding.h"
#include "kernels/index/embedding_bag.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { W = 11, D = 5, N = 23, B = 6, PAD = 4 };
static const int64_t offs[B] = {0, 4, 4, 9, 10, 17}; /* bag 1 empty */

static int64_t bag_end(int64_t b) { return b + 1 < B ? offs[b + 1] : N; }

static void embag_case(int mode, int with_psw) {
  double w[W * D], psw[N], gy[B * D], out[B * D], gw[W * D], gpsw[N];
  int64_t idx[N], o2b[N], bsz[B], mi[B * D], order[N], boffs[W + 1];
  fill(w, W * D);
  fill(psw, N);
  fill(gy, B * D);
  for (int i = 0; i < N; ++i) idx[i] = rand() % W;
  idx[2] = PAD;
  idx[9] = PAD; /* bag 3 holds only padding */
  /* the reference */
  double want[B * D] = {0}, want_gw[W * D] = {0}, want_gpsw[N] = {0};
  int64_t want_mi[B * D] = {0}, count[B] = {0};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = offs[b]; i < bag_end(b); ++i) {
      if (idx[i] == PAD) continue;
      for (int j = 0; j < D; ++j) {
        const double v = w[idx[i] * D + j];
        if (mode == LOOM_EMBAG_MAX) {
          if (count[b] == 0 || v > want[b * D + j]) {
            want[b * D + j] = v;
            want_mi[b * D + j] = idx[i];
          }
        } else {
          want[b * D + j] += (with_psw ? psw[i] : 1.0) * v;
        }
      }
      ++count[b];
    }
  for (int64_t b = 0; b < B; ++b)
    if (mode == LOOM_EMBAG_MEAN && count[b])
      for (int j = 0; j < D; ++j) want[b * D + j] /= (double)count[b];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = offs[b]; i < bag_end(b); ++i) {
      if (idx[i] == PAD) continue;
      double s = mode == LOOM_EMBAG_MEAN ? 1.0 / (double)count[b] : 1.0;
      if (with_psw) s *= psw[i];
      for (int j = 0; j < D; ++j) {
        if (mode != LOOM_EMBAG_MAX) want_gw[idx[i] * D + j] += s * gy[b * D + j];
        want_gpsw[i] += gy[b * D + j] * w[idx[i] * D + j];
      }
    }
  if (mode == LOOM_EMBAG_MAX)
    for (int64_t b = 0; b < B; ++b)
      for (int j = 0; j < D && count[b]; ++j) want_gw[want_mi[b * D + j] * D + j] += gy[b * D + j];

  const int64_t sw[2] = {W, D}, so[2] = {B, D}, sn[1] = {N}, sb[1] = {B}, swo[1] = {W + 1};
  loom_tensor f[8] = {dense(out, LOOM_FLOAT64, 2, so), dense(o2b, LOOM_INT64, 1, sn),
                      dense(bsz, LOOM_INT64, 1, sb),
                      mode == LOOM_EMBAG_MAX ? dense(mi, LOOM_INT64, 2, so) : none(),
                      dense(w, LOOM_FLOAT64, 2, sw), dense(idx, LOOM_INT64, 1, sn),
                      dense((void *)offs, LOOM_INT64, 1, sb),
                      with_psw ? dense(psw, LOOM_FLOAT64, 1, sn) : none()};
  loom_scalar fs[3] = {si(mode), si(0), si(PAD)};
  double first[B * D];
  const int64_t grains[3] = {B, 1, 3};
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < N; ++i) o2b[i] = -1;
    CHECK_OK(run_chunks(loom_embedding_bag_forward, f, 8, fs, 3, B, grains[g]));
    if (g == 0) memcpy(first, out, sizeof out);
    else CHECK(memcmp(first, out, sizeof out) == 0);
  }
  for (int k = 0; k < B * D; ++k) CHECK_NEAR(out[k], want[k], 1e-12);
  for (int64_t b = 0; b < B; ++b) {
    CHECK_EQ_INT(bsz[b], count[b]);
    for (int64_t i = offs[b]; i < bag_end(b); ++i) CHECK_EQ_INT(o2b[i], b);
  }
  if (mode == LOOM_EMBAG_MAX)
    for (int k = 0; k < B * D; ++k) CHECK_EQ_INT(mi[k], want_mi[k]);

  if (mode == LOOM_EMBAG_MAX) {
    memset(gw, 0, sizeof gw);
    loom_tensor t[4] = {dense(gw, LOOM_FLOAT64, 2, sw), dense(gy, LOOM_FLOAT64, 2, so),
                        dense(mi, LOOM_INT64, 2, so), dense(bsz, LOOM_INT64, 1, sb)};
    CHECK_OK(run_chunks(loom_embedding_bag_backward_max, t, 4, NULL, 0, D, 2));
  } else {
    loom_tensor bk[3] = {dense(idx, LOOM_INT64, 1, sn), dense(boffs, LOOM_INT64, 1, swo),
                         dense(order, LOOM_INT64, 1, sn)};
    loom_scalar bs[1] = {si(W)};
    CHECK_OK(run_chunks(loom_embedding_backward_bucket, bk, 3, bs, 1, 1, 1));
    loom_tensor t[7] = {dense(gw, LOOM_FLOAT64, 2, sw), dense(gy, LOOM_FLOAT64, 2, so), bk[1],
                        bk[2], f[1], f[2], f[7]};
    loom_scalar s[3] = {si(mode), si(PAD), si(0)};
    CHECK_OK(run_chunks(loom_embedding_bag_backward_rows, t, 7, s, 3, W, 3));
  }
  for (int k = 0; k < W * D; ++k) CHECK_NEAR(gw[k], want_gw[k], 1e-12);
  if (mode == LOOM_EMBAG_SUM) {
    loom_tensor t[5] = {dense(gpsw, LOOM_FLOAT64, 1, sn), dense(gy, LOOM_FLOAT64, 2, so),
                        dense(w, LOOM_FLOAT64, 2, sw), f[5], f[1]};
    loom_scalar s[1] = {si(PAD)};
    CHECK_OK(run_chunks(loom_embedding_bag_psw_backward, t, 5, s, 1, N, 4));
    for (int i = 0; i < N; ++i) CHECK_NEAR(gpsw[i], idx[i] == PAD ? 0.0 : want_gpsw[i], 1e-12);
  }
}

static void test_embedding_bag(void) {
  embag_case(LOOM_EMBAG_SUM, 0);
  embag_case(LOOM_EMBAG_SUM, 1);
  embag_case(LOOM_EMBAG_MEAN, 0);
  embag_case(LOOM_EMBAG_MAX, 0);
}

static void test_embedding_bag_bad_input(void) {
  float w[6] = {0}, out[2];
  int64_t idx[2] = {0, 3}, o2b[2], bsz[1], offs1[1] = {0};
  const int64_t sw[2] = {3, 2}, so[2] = {1, 2}, s2[1] = {2}, s1[1] = {1};
  loom_tensor f[8] = {dense(out, LOOM_FLOAT32, 2, so), dense(o2b, LOOM_INT64, 1, s2),
                      dense(bsz, LOOM_INT64, 1, s1), none(), dense(w, LOOM_FLOAT32, 2, sw),
                      dense(idx, LOOM_INT64, 1, s2), dense(offs1, LOOM_INT64, 1, s1), none()};
  loom_scalar fs[3] = {si(LOOM_EMBAG_SUM), si(0), si(-1)};
  CHECK_EQ_INT(run_chunks(loom_embedding_bag_forward, f, 8, fs, 3, 1, 1),
               LOOM_ERROR_INDEX_OUT_OF_RANGE);
  idx[1] = 1;
  offs1[0] = 1; /* offsets must start at 0 */
  CHECK_EQ_INT(run_chunks(loom_embedding_bag_forward, f, 8, fs, 3, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);
  offs1[0] = 0;
  fs[0] = si(LOOM_EMBAG_MAX); /* max needs max_indices */
  CHECK_EQ_INT(run_chunks(loom_embedding_bag_forward, f, 8, fs, 3, 1, 1),
               LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(38);
  RUN_TEST(test_embedding_bag);
  RUN_TEST(test_embedding_bag_bad_input);
  TEST_MAIN_END();
}
