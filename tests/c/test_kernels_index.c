/* Scan, index and factory kernels against scalar references, including
 * duplicate scatter indices (applied in order) and out-of-range indices. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/factory.h"
#include "kernels/index.h"
#include "kernels/scan.h"
#include "loom/status.h"
#include "test_util.h"


static loom_tensor t2d(void *data, int32_t dtype, int64_t r, int64_t c) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 2};
  t.sizes[0] = r; t.sizes[1] = c; t.strides[0] = c; t.strides[1] = 1;
  return t;
}

static loom_tensor t1d(void *data, int32_t dtype, int64_t n) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 1};
  t.sizes[0] = n; t.strides[0] = 1;
  return t;
}

static int run(loom_kernel_fn fn, const loom_tensor *t, int nt, const loom_scalar *s,
               int ns, int64_t range, int64_t grain) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = (uint32_t)nt,
                        .tensors = t, .num_scalars = (uint32_t)ns, .scalars = s,
                        .range = range, .grain = grain};
  for (int64_t b = 0; b < range; b += grain) {
    int rc = fn(&a, b, b + grain < range ? b + grain : range);
    if (rc) return rc;
  }
  return 0;
}

static void test_scan(void) {
  float x[2][4] = {{1, 2, 3, 4}, {NAN, 1, 5, 5}}, out[2][4];
  int64_t idx[2][4];
  loom_tensor t[3] = {t2d(out, LOOM_FLOAT32, 2, 4), t2d(x, LOOM_FLOAT32, 2, 4),
                      t2d(idx, LOOM_INT64, 2, 4)};
  loom_scalar s[2] = {{.i = LOOM_SCAN_CUMSUM}, {.i = 1}};
  t[2].data = NULL;
  CHECK(run(loom_kernel_scan, t, 3, s, 2, 2, 1) == 0);
  CHECK(out[0][3] == 10.0f && isnan(out[1][2]));
  t[2].data = idx;
  s[0].i = LOOM_SCAN_CUMMAX;
  CHECK(run(loom_kernel_scan, t, 3, s, 2, 2, 1) == 0);
  CHECK(out[0][2] == 3.0f && idx[0][2] == 2);
  CHECK(isnan(out[1][3]) && idx[1][3] == 0); /* NaN stays once seen */
}

static void test_gather_scatter(void) {
  float self[3][4], out[2][4];
  for (int i = 0; i < 12; ++i) self[i / 4][i % 4] = (float)i;
  int64_t gidx[2][4] = {{2, 0, 1, 2}, {0, 0, 0, 1}};
  loom_tensor t[3] = {t2d(out, LOOM_FLOAT32, 2, 4), t2d(self, LOOM_FLOAT32, 3, 4),
                      t2d(gidx, LOOM_INT64, 2, 4)};
  loom_scalar s[4] = {{.i = LOOM_INDEX_GATHER}, {.i = 0}, {.f = 0}, {.i = 0}};
  CHECK(run(loom_kernel_index, t, 3, s, 4, 8, 3) == 0);
  CHECK(out[0][0] == 8.0f && out[0][1] == 1.0f && out[1][3] == 7.0f);

  /* scatter_add with duplicate indices: all contributions land, in order */
  float dst[3] = {0, 0, 0}, src[5] = {1, 2, 3, 4, 5};
  int64_t sidx[5] = {0, 2, 0, 0, 1};
  loom_tensor u[3] = {t1d(dst, LOOM_FLOAT32, 3), t1d(sidx, LOOM_INT64, 5), t1d(src, LOOM_FLOAT32, 5)};
  loom_scalar su[4] = {{.i = LOOM_INDEX_SCATTER}, {.i = 0}, {.f = 0}, {.i = LOOM_INDEX_SUM}};
  CHECK(run(loom_kernel_index, u, 3, su, 4, 1, 1) == 0);
  CHECK(dst[0] == 8.0f && dst[1] == 5.0f && dst[2] == 2.0f);
  /* out of range: the status (scatter's maps to RuntimeError, as the CPU
   * raises), and the index in the message */
  sidx[3] = 3;
  loom_clear_error();
  CHECK(run(loom_kernel_index, u, 3, su, 4, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "index 3 is out of bounds for dimension 0 with size 3") != NULL);
  sidx[3] = -1; /* negative: an error too, as on the CPU */
  CHECK(run(loom_kernel_index, u, 3, su, 4, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "index -1 ") != NULL);
  sidx[3] = 2;
  su[3].i = LOOM_INDEX_ASSIGN; /* duplicates: the last write wins */
  CHECK(run(loom_kernel_index, u, 3, su, 4, 1, 1) == 0 && dst[2] == 4.0f);
}

static void test_factories(void) {
  float lin[5];
  loom_tensor t[2] = {t1d(lin, LOOM_FLOAT32, 5)};
  loom_scalar s[4] = {{.i = LOOM_FACTORY_LINSPACE}, {.f = -1.0}, {.f = 1.0}, {.f = 0}};
  CHECK(run(loom_kernel_factory, t, 1, s, 4, 5, 2) == 0);
  CHECK(lin[0] == -1.0f && lin[2] == 0.0f && lin[4] == 1.0f);
  int32_t ar[6];
  t[0] = t1d(ar, LOOM_INT32, 6);
  loom_scalar sa[4] = {{.i = LOOM_FACTORY_ARANGE}, {.i = 3}, {.i = -2}, {.i = 0}};
  CHECK(run(loom_kernel_factory, t, 1, sa, 4, 6, 4) == 0 && ar[5] == -7);
  double m[3][3], tri[3][3];
  for (int i = 0; i < 9; ++i) m[i / 3][i % 3] = i + 1;
  t[0] = t2d(tri, LOOM_FLOAT64, 3, 3);
  t[1] = t2d(m, LOOM_FLOAT64, 3, 3);
  loom_scalar st[4] = {{.i = LOOM_FACTORY_TRIU}, {.i = 1}, {.i = 0}, {.i = 0}};
  CHECK(run(loom_kernel_factory, t, 2, st, 4, 9, 5) == 0);
  CHECK(tri[0][0] == 0 && tri[0][1] == 2 && tri[1][2] == 6 && tri[2][2] == 0);
}

int main(void) {
  test_scan();
  test_gather_scatter();
  test_factories();
  TEST_MAIN_END();
}
