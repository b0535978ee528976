/* Scan, index, advanced index, nonzero, sort and factory kernels against
 * scalar references, including duplicate scatter indices (applied in
 * order), out-of-range indices and equal sort keys. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/base/factory.h"
#include "kernels/index/index.h"
#include "kernels/index/index_advanced.h"
#include "kernels/reduce/search.h"
#include "kernels/reduce/sort.h"
#include "kernels/reduce/scan.h"
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

static void test_advanced_index(void) {
  /* out[e] = src[idx[e]] over a 1-d view; then put and accumulate */
  float src[5] = {10, 11, 12, 13, 14}, out[4];
  int64_t idx[4] = {4, -1, 0, 0};
  loom_tensor g[3] = {t1d(out, LOOM_FLOAT32, 4), t1d(src, LOOM_FLOAT32, 4), t1d(idx, LOOM_INT64, 4)};
  g[1].strides[0] = 0; /* the indexed dim, restrided */
  loom_scalar s[4] = {{.i = LOOM_INDEX_ADVANCED_GET}, {.i = 1}, {.i = 5}, {.i = 1}};
  CHECK(run(loom_kernel_index_advanced, g, 3, s, 4, 4, 3) == 0);
  CHECK(out[0] == 14 && out[1] == 14 && out[2] == 10 && out[3] == 10);
  float vals[4] = {1, 2, 3, 4};
  loom_tensor p[3] = {t1d(src, LOOM_FLOAT32, 4), t1d(vals, LOOM_FLOAT32, 4), t1d(idx, LOOM_INT64, 4)};
  p[0].strides[0] = 0;
  s[0].i = LOOM_INDEX_ADVANCED_PUT_ADD;
  CHECK(run(loom_kernel_index_advanced, p, 3, s, 4, 4, 4) == 0);
  CHECK(src[0] == 17 && src[4] == 17 && src[2] == 12);
  idx[2] = 5;
  CHECK(run(loom_kernel_index_advanced, p, 3, s, 4, 4, 4) == LOOM_ERROR_INDEX_OUT_OF_RANGE);
}

static void test_nonzero(void) {
  /* (3, 5) with -0.0 (zero) and NaN (nonzero), in chunks of 4 elements */
  float x[3][5] = {{0, 1, -0.0f, 0, 2}, {NAN, 0, 0, 0, 0}, {0, 0, 0, 3, 4}};
  int64_t counts[4], first[4], out[6][2];
  loom_tensor c[2] = {t2d(x, LOOM_FLOAT32, 3, 5), t1d(counts, LOOM_INT64, 4)};
  loom_scalar s[1] = {{.i = 4}};
  CHECK(run(loom_kernel_nonzero_count, c, 2, s, 1, 4, 1) == 0);
  CHECK(counts[0] == 1 && counts[1] == 2 && counts[2] == 0 && counts[3] == 2);
  memcpy(first, counts, sizeof first);
  CHECK(loom_nonzero_first_rows(first, 4) == 5);
  CHECK(first[0] == 0 && first[1] == 1 && first[2] == 3 && first[3] == 3);
  loom_tensor w[3] = {c[0], t1d(first, LOOM_INT64, 4), t2d(out, LOOM_INT64, 5, 2)};
  CHECK(run(loom_kernel_nonzero_write, w, 3, s, 1, 4, 3) == 0);
  const int64_t want[5][2] = {{0, 1}, {0, 4}, {1, 0}, {2, 3}, {2, 4}};
  CHECK(memcmp(out, want, sizeof want) == 0);
}

/* Sorts 300 keys with many equals in every mode; checks the order, that
 * the indices are a permutation, and that the stable sort keeps equal
 * keys in index order. */
static void test_sort(void) {
  enum { N = 300, K = 40 };
  static float x[N], v[N];
  static int64_t ind[N];
  static unsigned char ws[2 * N * LOOM_SORT_WORKSPACE_PER_ELEMENT];
  for (int i = 0; i < N; ++i) x[i] = (float)((i * 7919) % 13) - 6;
  x[17] = NAN;
  for (int mode = LOOM_SORT_STABLE; mode <= LOOM_SORT_TOPK_UNSORTED; ++mode) {
    for (int desc = 0; desc < 2; ++desc) {
      const int64_t k = mode >= LOOM_SORT_TOPK_SORTED ? K : N;
      loom_tensor t[4] = {t1d(v, LOOM_FLOAT32, k), t1d(ind, LOOM_INT64, k), t1d(x, LOOM_FLOAT32, N),
                          t1d(ws, LOOM_UINT8, sizeof ws)};
      loom_scalar s[5] = {{.i = 0}, {.i = desc}, {.i = k}, {.i = 1}, {.i = mode}};
      CHECK(run(loom_kernel_sort, t, 4, s, 5, 1, 1) == 0);
      int seen[N] = {0}, ordered = 1, stable = 1;
      for (int64_t i = 0; i < k; ++i) {
        ordered &= ind[i] >= 0 && ind[i] < N && !seen[ind[i]];
        if (ind[i] >= 0 && ind[i] < N) seen[ind[i]] = 1;
        ordered &= memcmp(&v[i], &x[ind[i]], sizeof(float)) == 0;
        if (i == 0 || mode == LOOM_SORT_TOPK_UNSORTED) continue;
        const float a = v[i - 1], b = v[i];
        /* NaN is greatest: last ascending, first descending */
        if (desc) ordered &= isnan(a) || (!isnan(b) && a >= b);
        else ordered &= isnan(b) || (!isnan(a) && a <= b);
        if (a == b) stable &= ind[i - 1] < ind[i];
      }
      CHECK(ordered);
      if (mode == LOOM_SORT_STABLE) CHECK(stable);
      if (mode == LOOM_SORT_TOPK_UNSORTED) { /* the k selected are the top k */
        float lo = INFINITY, hi = -INFINITY;
        int nan_in = 0;
        for (int64_t i = 0; i < k; ++i) {
          if (isnan(v[i])) { nan_in = 1; continue; }
          lo = v[i] < lo ? v[i] : lo;
          hi = v[i] > hi ? v[i] : hi;
        }
        CHECK(nan_in == desc);
        for (int i = 0; i < N; ++i)
          if (!seen[i] && !isnan(x[i])) CHECK(desc ? x[i] <= lo : x[i] >= hi);
      }
    }
  }
}

/* One element per slice: kthvalue, median, nanmedian, mode of 300 keys
 * from -6 to 6 with one NaN. */
static void test_sort_picks(void) {
  enum { N = 300 };
  static float x[N], sorted[N];
  static unsigned char ws[2 * N * LOOM_SORT_WORKSPACE_PER_ELEMENT];
  int count[13] = {0};
  for (int i = 0; i < N; ++i) {
    x[i] = (float)((i * 7919) % 13) - 6;
    if (i != 17) ++count[(int)x[i] + 6];
  }
  x[17] = NAN;
  int64_t idx[N];
  loom_tensor t[4] = {t1d(sorted, LOOM_FLOAT32, N), t1d(idx, LOOM_INT64, N), t1d(x, LOOM_FLOAT32, N),
                      t1d(ws, LOOM_UINT8, sizeof ws)};
  loom_scalar s[5] = {{.i = 0}, {.i = 0}, {.i = N}, {.i = 1}, {.i = LOOM_SORT_STABLE}};
  CHECK(run(loom_kernel_sort, t, 4, s, 5, 1, 1) == 0);
  int most = 0;
  for (int v = 1; v < 13; ++v) most = count[v] > count[most] ? v : most;
  float v1;
  int64_t i1;
  t[0] = t1d(&v1, LOOM_FLOAT32, 1);
  t[1] = t1d(&i1, LOOM_INT64, 1);
  const struct { int mode, k; float want; } picks[] = {
      {LOOM_SORT_KTHVALUE, 1, sorted[0]}, {LOOM_SORT_KTHVALUE, 150, sorted[149]},
      {LOOM_SORT_KTHVALUE, N, NAN}, {LOOM_SORT_MEDIAN, 1, NAN},
      {LOOM_SORT_NANMEDIAN, 1, sorted[(N - 2) / 2]}, {LOOM_SORT_MODE, 1, (float)(most - 6)}};
  for (size_t p = 0; p < sizeof picks / sizeof picks[0]; ++p) {
    s[2].i = picks[p].k;
    s[4].i = picks[p].mode;
    CHECK(run(loom_kernel_sort, t, 4, s, 5, 1, 1) == 0);
    CHECK(i1 >= 0 && i1 < N && memcmp(&v1, &x[i1], sizeof v1) == 0);
    CHECK(isnan(picks[p].want) ? isnan(v1) : v1 == picks[p].want);
  }
}

/* searchsorted: left/right bounds over two rows, NaN past every number,
 * and a sorter over a shuffled row. */
static void test_searchsorted(void) {
  float bd[2][4] = {{1, 2, 2, 5}, {0, 0, 3, NAN}}, v[2][3] = {{2, NAN, 9}, {0, 3, -1}};
  int64_t out[2][3];
  loom_tensor t[4] = {t2d(out, LOOM_INT64, 2, 3), t2d(v, LOOM_FLOAT32, 2, 3),
                      t2d(bd, LOOM_FLOAT32, 2, 4), {.data = NULL}};
  loom_scalar s[2] = {{.i = 0}, {.i = 3}};
  CHECK(run(loom_kernel_searchsorted, t, 4, s, 2, 6, 4) == 0);
  const int64_t left[2][3] = {{1, 4, 4}, {0, 2, 0}}, right[2][3] = {{3, 4, 4}, {2, 4, 0}};
  CHECK(memcmp(out, left, sizeof out) == 0);
  s[0].i = 1;
  CHECK(run(loom_kernel_searchsorted, t, 4, s, 2, 6, 4) == 0);
  CHECK(memcmp(out, right, sizeof out) == 0);
  int64_t keys[4] = {5, 1, 3, 2}, order[4] = {1, 3, 2, 0}, q[2] = {3, 6}, pos[2];
  loom_tensor u[4] = {t1d(pos, LOOM_INT64, 2), t1d(q, LOOM_INT64, 2), t1d(keys, LOOM_INT64, 4),
                      t1d(order, LOOM_INT64, 4)};
  s[0].i = 0;
  s[1].i = 0;
  CHECK(run(loom_kernel_searchsorted, u, 4, s, 2, 2, 1) == 0);
  CHECK(pos[0] == 2 && pos[1] == 4);
}

int main(void) {
  test_scan();
  test_gather_scatter();
  test_advanced_index();
  test_nonzero();
  test_sort();
  test_sort_picks();
  test_searchsorted();
  test_factories();
  TEST_MAIN_END();
}
