/* Adaptive eager, level 2 (loom/fuse.h): a group of float pointwise
 * launches becomes a compile request with its signature; the kernel
 * installed for it runs the group (with the members' parameters and
 * constants as its scalars); a member output whose block was freed while
 * the group waited in the queue is not stored, one still allocated is.
 *
 * The installed kernel stands in for the compiler's: it is written here for
 * the chain's signature (y1 = x * c; y2 = y1 + p0 * x; out = y2 * y2) and
 * stores an argument only where the signature says so. A row vector (a
 * tensor broadcast over the rows) is an argument of its own kind: the loop
 * gets it as one row and the contiguous tensors as rows of its width. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom/fuse.h"
#include "loom/kernels/pointwise.h"
#include "test_drivers.h"
#include "test_gate.h"

enum { N = 1 << 15 };


static void hold(loom_stream_t *s) { hold_named(s, "fuse_region_test.gate"); }

static loom_tensor vec(void *p, int64_t n) {
  return (loom_tensor){.data = p, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {n}, .strides = {1}};
}

/* A float32 pointwise.apply launch named `name` over `range` elements. */
static loom_status launch_pw(loom_stream_t *s, const char *name, int op, loom_tensor out,
                             loom_tensor a, loom_tensor b, double p0, double c1, int64_t range) {
  static const loom_kernel_t *k;
  if (!k && loom_kernel_lookup("pointwise.apply", &k) != LOOM_OK) return LOOM_ERROR_NOT_SUPPORTED;
  loom_tensor t[3] = {out, a, b};
  loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = op}, {.i = LOOM_PW_F32}};
  sc[LOOM_PW_PARAM].f = p0;
  sc[LOOM_PW_CONST + 1].f = c1;
  const loom_launch_desc d = {.name = name, .kernel = k, .tensors = t,
                              .num_tensors = 3, .scalars = sc, .num_scalars = LOOM_PW_CONST + 2,
                              .range = range, .grain = LOOM_PW_GRAIN};
  return loom_launch(s, &d);
}

static loom_status pw(loom_stream_t *s, int op, loom_tensor out, loom_tensor a, loom_tensor b,
                      double p0, double c1) {
  return launch_pw(s, "fuse_region_test.op", op, out, a, b, p0, c1, N);
}

/* What the installed kernel stores (the signature's written flags). */
static int store_arg[4];
static atomic_int region_calls;

/* The chain's region: arguments x, y1, y2, out; scalars 7 per member
 * (parameters, then constants). */
static int chain_region(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 4 || args->num_scalars != 3 * LOOM_FUSE_REGION_MEMBER_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int a = 0; a < 4; ++a)
    if (args->tensors[a].rank != 1 || args->tensors[a].sizes[0] != N ||
        args->tensors[a].dtype != LOOM_FLOAT32)
      return LOOM_ERROR_INVALID_ARGUMENT;
  atomic_fetch_add(&region_calls, 1);
  const float *x = args->tensors[0].data;
  float *y1 = args->tensors[1].data, *y2 = args->tensors[2].data, *out = args->tensors[3].data;
  const float c = (float)args->scalars[0 * 7 + 4 + 1].f;  /* member 0's constant */
  const float p0 = (float)args->scalars[1 * 7 + 0].f;     /* member 1's alpha */
  for (int64_t i = begin; i < end; ++i) {
    const float v1 = x[i] * c, v2 = v1 + p0 * x[i], v3 = v2 * v2;
    if (store_arg[1]) y1[i] = v1;
    if (store_arg[2]) y2[i] = v2;
    if (store_arg[3]) out[i] = v3;
  }
  return 0;
}

/* Fresh region tables that compile groups of mul and add members the first
 * time their signature is seen. */
static void regions_of_mul_and_add_at_first_sight(void) {
  loom_fuse_region_reset();
  uint64_t bits[4] = {0, 0, 0, 0};
  bits[LOOM_PW_MUL / 64] |= (uint64_t)1 << LOOM_PW_MUL % 64;
  bits[LOOM_PW_ADD / 64] |= (uint64_t)1 << LOOM_PW_ADD % 64;
  loom_fuse_region_set_ops(bits, 4);
  loom_fuse_region_set_sightings(1);
}

static loom_fuse_stats stats(void) {
  loom_fuse_stats s;
  loom_fuse_stats_get(&s);
  return s;
}

/* Runs the chain held; frees y1 and y2 before the gate opens when
 * `free_temps` (else copies them out to y1h, y2h). */
static void run(loom_stream_t *s, const float *xh, float *outh, float *y1h, float *y2h,
                int free_temps, float scale) {
  void *x, *y1, *y2, *out;
  CHECK_OK(loom_malloc(0, N * 4, s, &x));
  CHECK_OK(loom_malloc(0, N * 4, s, &y1));
  CHECK_OK(loom_malloc(0, N * 4, s, &y2));
  CHECK_OK(loom_malloc(0, N * 4, s, &out));
  CHECK_OK(loom_memcpy(s, x, xh, N * 4));
  hold(s);
  const loom_tensor none = {.data = NULL, .dtype = LOOM_FLOAT32, .rank = 0};
  CHECK_OK(pw(s, LOOM_PW_MUL, vec(y1, N), vec(x, N), none, 0.0, scale));
  CHECK_OK(pw(s, LOOM_PW_ADD, vec(y2, N), vec(y1, N), vec(x, N), 0.5, 0.0));
  CHECK_OK(pw(s, LOOM_PW_MUL, vec(out, N), vec(y2, N), vec(y2, N), 0.0, 0.0));
  if (free_temps) {
    CHECK_OK(loom_free(y1));
    CHECK_OK(loom_free(y2));
  }
  open_gate();
  CHECK_OK(loom_memcpy(s, outh, out, N * 4));
  if (!free_temps) {
    CHECK_OK(loom_memcpy(s, y1h, y1, N * 4));
    CHECK_OK(loom_memcpy(s, y2h, y2, N * 4));
  }
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_free(x));
  CHECK_OK(loom_free(out));
  if (!free_temps) {
    CHECK_OK(loom_free(y1));
    CHECK_OK(loom_free(y2));
  }
}

/* Takes the request the last run made and installs chain_region for it;
 * returns the signature's stored flags of y1 and y2 (as 2 bits). */
static int install_chain(void) {
  int32_t words[LOOM_FUSE_REGION_MAX_WORDS];
  uint64_t id = 0;
  const int n = loom_fuse_region_next(&id, words, LOOM_FUSE_REGION_MAX_WORDS, 2000);
  CHECK_EQ_INT(n, 2 + 4 * 3 + 3 * LOOM_FUSE_REGION_MEMBER_WORDS);
  CHECK_EQ_INT(words[0], 3); /* members */
  CHECK_EQ_INT(words[1], 4); /* x, y1, y2, out */
  const int32_t *m = words + 2 + 4 * 3;
  CHECK_EQ_INT(m[0], LOOM_PW_MUL);
  CHECK_EQ_INT(m[4], LOOM_FUSE_REGION_ARG << 16 | 0);   /* x */
  CHECK_EQ_INT(m[5], LOOM_FUSE_REGION_CONST << 16 | 1); /* the constant */
  m += LOOM_FUSE_REGION_MEMBER_WORDS;
  CHECK_EQ_INT(m[0], LOOM_PW_ADD);
  CHECK_EQ_INT(m[4], LOOM_FUSE_REGION_VALUE << 16 | 0); /* y1, from the loop */
  CHECK_EQ_INT(m[5], LOOM_FUSE_REGION_ARG << 16 | 0);
  m += LOOM_FUSE_REGION_MEMBER_WORDS;
  CHECK_EQ_INT(m[4], LOOM_FUSE_REGION_VALUE << 16 | 1);
  CHECK_EQ_INT(m[5], LOOM_FUSE_REGION_VALUE << 16 | 1);
  CHECK_EQ_INT(m[3], 1); /* out is stored */
  for (int a = 0; a < 4; ++a) store_arg[a] = words[2 + 3 * a + 2];
  CHECK_EQ_INT(loom_fuse_region_pending(), 1);
  loom_fuse_region_install(id, chain_region);
  CHECK_EQ_INT(loom_fuse_region_pending(), 0);
  return store_arg[1] | store_arg[2] << 1;
}

static void test_region_runs_and_skips_freed_outputs(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  TEST_REQUIRE(TEST_DRIVER_ASYNC, "no queues to fuse on");
  /* The guarded driver's kernels see device memory through an alias: the
   * blocks the allocator frees are not at the addresses they write, so
   * every value stays stored (as it must: nothing is known freed). */
  const int guarded = test_driver_has(TEST_DRIVER_GUARDED);
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *xh = malloc(N * 4), *ref = malloc(N * 4), *got = malloc(N * 4);
  float *y1h = malloc(N * 4), *y2h = malloc(N * 4), *y1r = malloc(N * 4), *y2r = malloc(N * 4);
  for (int i = 0; i < N; ++i) xh[i] = (float)(i % 97) * 0.125f - 3.0f;
  regions_of_mul_and_add_at_first_sight();

  /* unfused reference */
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  run(s, xh, ref, y1r, y2r, 0, 1.5f);
  loom_fuse_set_mode(LOOM_FUSE_ON);

  /* freed temporaries: the first run asks, the second runs the region */
  loom_fuse_stats before = stats();
  run(s, xh, got, NULL, NULL, 1, 1.5f);
  CHECK(memcmp(ref, got, N * 4) == 0);
  float *ref2 = malloc(N * 4);
  if (stats().groups == before.groups) goto done; /* a driver that does not fuse */
  CHECK_EQ_INT(install_chain(), guarded ? 3 : 0); /* y1, y2 not stored */
  before = stats();
  atomic_store(&region_calls, 0);
  run(s, xh, got, NULL, NULL, 1, 1.5f);
  loom_fuse_stats after = stats();
  CHECK(memcmp(ref, got, N * 4) == 0);
  CHECK_EQ_INT(after.compiled_regions - before.compiled_regions, 1);
  CHECK_EQ_INT(after.bytes_not_written - before.bytes_not_written, guarded ? 0 : 2 * N * 4);
  CHECK(atomic_load(&region_calls) > 0);

  /* the constant is a scalar of the loop, not of its signature */
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  run(s, xh, ref2, y1r, y2r, 0, -0.75f);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  before = stats();
  run(s, xh, got, NULL, NULL, 1, -0.75f);
  CHECK_EQ_INT(stats().compiled_regions - before.compiled_regions, 1);
  CHECK(memcmp(ref2, got, N * 4) == 0);
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  run(s, xh, ref, y1r, y2r, 0, 1.5f);
  loom_fuse_set_mode(LOOM_FUSE_ON);

  /* held temporaries: another signature, every value stored */
  run(s, xh, got, y1h, y2h, 0, 1.5f);
  if (!guarded) CHECK_EQ_INT(install_chain(), 3);
  before = stats();
  run(s, xh, got, y1h, y2h, 0, 1.5f);
  after = stats();
  CHECK_EQ_INT(after.compiled_regions - before.compiled_regions, 1);
  CHECK_EQ_INT(after.bytes_not_written - before.bytes_not_written, 0);
  CHECK(memcmp(ref, got, N * 4) == 0);
  CHECK(memcmp(y1r, y1h, N * 4) == 0);
  CHECK(memcmp(y2r, y2h, N * 4) == 0);

  /* without the ops, nothing is counted or run compiled */
  loom_fuse_region_set_ops(NULL, 0);
  before = stats();
  run(s, xh, got, y1h, y2h, 0, 1.5f);
  CHECK_EQ_INT(stats().compiled_regions - before.compiled_regions, 0);
  CHECK(memcmp(ref, got, N * 4) == 0);

done:
  loom_fuse_region_set_ops(NULL, 0);
  loom_fuse_region_set_sightings(0);
  loom_fuse_region_reset();
  free(xh);
  free(ref);
  free(ref2);
  free(got);
  free(y1h);
  free(y2h);
  free(y1r);
  free(y2r);
  loom_stream_release(s);
}

/* ---- a row vector: v of W floats read at i % W over ROWS x W ---------------- */

enum { ROWS = 252, W = 130, RN = ROWS * W };

static loom_status pw_rows(loom_stream_t *s, int op, loom_tensor out, loom_tensor a,
                           loom_tensor b, double p0) {
  return launch_pw(s, "fuse_region_test.row_op", op, out, a, b, p0, 0.0, RN);
}

static loom_tensor rows2(void *p) {
  return (loom_tensor){.data = p, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {ROWS, W},
                       .strides = {W, 1}};
}

static atomic_int row_calls;
static int row_store_y1;

/* y1 = x * v (v broadcast over the rows); out = y1 + p0 * x. Arguments x,
 * v, y1, out: the contiguous ones as (ROWS, W), v as (W). */
static int row_region(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const loom_tensor *t = args->tensors;
  if (args->num_tensors != 4 || args->num_scalars != 2 * LOOM_FUSE_REGION_MEMBER_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int a = 0; a < 4; ++a) {
    const int row = a == 1;
    if (t[a].dtype != LOOM_FLOAT32 || t[a].rank != (row ? 1 : 2) ||
        (row ? t[a].sizes[0] != W || t[a].strides[0] != 1
             : t[a].sizes[0] != ROWS || t[a].sizes[1] != W || t[a].strides[0] != W ||
                   t[a].strides[1] != 1))
      return LOOM_ERROR_INVALID_ARGUMENT;
  }
  if (begin == end) return 0;
  atomic_fetch_add(&row_calls, 1);
  const float *x = t[0].data, *v = t[1].data;
  float *y1 = t[2].data, *out = t[3].data;
  const float p0 = (float)args->scalars[1 * 7 + 0].f; /* member 1's alpha */
  for (int64_t i = begin; i < end; ++i) {
    const float v1 = x[i] * v[i % W];
    if (row_store_y1) y1[i] = v1;
    out[i] = v1 + p0 * x[i];
  }
  return 0;
}

static void run_rows(loom_stream_t *s, const float *xh, const float *vh, float *outh, float alpha) {
  void *x, *v, *y1, *out;
  CHECK_OK(loom_malloc(0, RN * 4, s, &x));
  CHECK_OK(loom_malloc(0, W * 4, s, &v));
  CHECK_OK(loom_malloc(0, RN * 4, s, &y1));
  CHECK_OK(loom_malloc(0, RN * 4, s, &out));
  CHECK_OK(loom_memcpy(s, x, xh, RN * 4));
  CHECK_OK(loom_memcpy(s, v, vh, W * 4));
  hold(s);
  const loom_tensor vrow = {.data = v, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {ROWS, W},
                            .strides = {0, 1}};
  CHECK_OK(pw_rows(s, LOOM_PW_MUL, rows2(y1), rows2(x), vrow, 0.0));
  CHECK_OK(pw_rows(s, LOOM_PW_ADD, rows2(out), rows2(y1), rows2(x), alpha));
  CHECK_OK(loom_free(y1));
  open_gate();
  CHECK_OK(loom_memcpy(s, outh, out, RN * 4));
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_free(x));
  CHECK_OK(loom_free(v));
  CHECK_OK(loom_free(out));
}

static void test_row_vector_is_an_argument_of_the_loop(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  TEST_REQUIRE(TEST_DRIVER_ASYNC, "no queues to fuse on");
  const int guarded = test_driver_has(TEST_DRIVER_GUARDED);
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *xh = malloc(RN * 4), *vh = malloc(W * 4), *ref = malloc(RN * 4), *got = malloc(RN * 4);
  for (int i = 0; i < RN; ++i) xh[i] = (float)(i % 89) * 0.25f - 7.0f;
  for (int i = 0; i < W; ++i) vh[i] = (float)(i % 13) * 0.375f - 2.0f;
  regions_of_mul_and_add_at_first_sight();
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  run_rows(s, xh, vh, ref, 0.5f);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  loom_fuse_stats before = stats();
  run_rows(s, xh, vh, got, 0.5f);
  CHECK(memcmp(ref, got, RN * 4) == 0);
  if (stats().groups == before.groups) goto done; /* a driver that does not fuse */
  {
    int32_t words[LOOM_FUSE_REGION_MAX_WORDS];
    uint64_t id = 0;
    const int n = loom_fuse_region_next(&id, words, LOOM_FUSE_REGION_MAX_WORDS, 2000);
    CHECK_EQ_INT(n, 2 + 4 * 3 + 2 * LOOM_FUSE_REGION_MEMBER_WORDS);
    CHECK_EQ_INT(words[1], 4);                /* x, v, y1, out */
    CHECK_EQ_INT(words[2 + 3 * 0 + 1], 0);    /* x: contiguous */
    CHECK_EQ_INT(words[2 + 3 * 1 + 1], 2);    /* v: a row vector */
    const int32_t *m = words + 2 + 4 * 3;
    CHECK_EQ_INT(m[4], LOOM_FUSE_REGION_ARG << 16 | 0);
    CHECK_EQ_INT(m[5], LOOM_FUSE_REGION_ARG << 16 | 1);
    row_store_y1 = words[2 + 3 * 2 + 2];
    CHECK_EQ_INT(row_store_y1, guarded); /* y1 was freed: not stored */
    loom_fuse_region_install(id, row_region);
  }
  before = stats();
  atomic_store(&row_calls, 0);
  run_rows(s, xh, vh, got, 0.5f);
  loom_fuse_stats after = stats();
  CHECK(memcmp(ref, got, RN * 4) == 0);
  CHECK_EQ_INT(after.compiled_regions - before.compiled_regions, 1);
  CHECK_EQ_INT(after.bytes_not_written - before.bytes_not_written, guarded ? 0 : RN * 4);
  CHECK(atomic_load(&row_calls) > 0);
  /* alpha is a scalar of the loop */
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  run_rows(s, xh, vh, ref, -1.25f);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  before = stats();
  run_rows(s, xh, vh, got, -1.25f);
  CHECK_EQ_INT(stats().compiled_regions - before.compiled_regions, 1);
  CHECK(memcmp(ref, got, RN * 4) == 0);
done:
  loom_fuse_region_set_ops(NULL, 0);
  loom_fuse_region_set_sightings(0);
  loom_fuse_region_reset();
  free(xh);
  free(vh);
  free(ref);
  free(got);
  loom_stream_release(s);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_region_runs_and_skips_freed_outputs);
    RUN_TEST(test_row_vector_is_an_argument_of_the_loop);
  }
  TEST_MAIN_END();
}
