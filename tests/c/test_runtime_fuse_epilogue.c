/* Adaptive eager, GEMM epilogues (runtime/drivers/host/host_fuse_epilogue.c):
 * a product's launches followed by elementwise launches that read its C
 * (bias add, GELU, a product with another tensor) give the bytes of the
 * launches one by one, intermediates included, also when the steps'
 * outputs take the memory of the product's freed workspace; values freed
 * before the group ran are not stored; LOOM_FUSE=verify compares; the
 * trace shows the product and its steps as one kernel.
 *
 * A stream held by a host callback queues what follows, so that the
 * executor sees the whole program when the gate opens. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom/fuse.h"
#include "loom/kernels/gemm.h"
#include "loom/kernels/pointwise.h"
#include "test_drivers.h"
#include "test_gate.h"

enum { M = 96, K = 64, N = 160 };


static int fuses(void) { return test_driver_has(TEST_DRIVER_ASYNC | TEST_DRIVER_KERNELS); }

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_OK(loom_malloc(0, bytes, NULL, &p));
  return p;
}

static loom_tensor mat(void *p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return (loom_tensor){.data = p, .dtype = LOOM_FLOAT32, .rank = 4,
                       .sizes = {1, 1, rows, cols}, .strides = {0, 0, rs, cs}};
}

static loom_tensor flat(void *p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return (loom_tensor){.data = p, .dtype = LOOM_FLOAT32, .rank = 2,
                       .sizes = {rows, cols}, .strides = {rs, cs}};
}

static const loom_kernel_t *kernel(const char *name) {
  const loom_kernel_t *k = NULL;
  CHECK_OK(loom_kernel_lookup(name, &k));
  return k;
}

/* out = op(a[, b]) through "pointwise.apply" in float. */
static void pw(loom_stream_t *s, const char *name, int op, loom_tensor out, loom_tensor a,
               const loom_tensor *b) {
  loom_tensor t[3] = {out, a, b ? *b : (loom_tensor){0}};
  loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = op}, {.i = LOOM_PW_F32}};
  sc[LOOM_PW_PARAM].f = 1.0;
  const uint32_t nt = b ? 3 : 2;
  const loom_launch_desc d = {.name = name, .kernel = kernel("pointwise.apply"), .tensors = t,
                              .num_tensors = nt, .scalars = sc,
                              .num_scalars = LOOM_PW_CONST + nt - 1,
                              .range = loom_tensor_numel(&out), .grain = LOOM_PW_GRAIN};
  CHECK_OK(loom_launch(s, &d));
}

/* C = A B as the binding launches it (plan, then pack and compute per
 * pass, on the transposed operands if the plan says so); the workspace is
 * freed at once, as the binding frees it. */
static void product(loom_stream_t *s, void *c, void *a, void *b) {
  loom_tensor t[3] = {mat(c, M, N, N, 1), mat(a, M, K, K, 1), mat(b, K, N, N, 1)};
  const loom_scalar request[2] = {{.i = LOOM_GEMM_MATH_EXACT}, {.i = 2}};
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                                 .tensors = t, .num_scalars = 2, .scalars = request};
  loom_gemm_plan p;
  CHECK_OK(loom_kernel_plan(kernel("gemm.plan"), &args, &p, sizeof p));
  CHECK_EQ_INT(p.route, LOOM_GEMM_ROUTE_TILES);
  if (p.transposed) {
    const loom_tensor c_t = mat(c, N, M, 1, N), a_t = mat(b, N, K, 1, N), b_t = mat(a, K, M, 1, K);
    t[0] = c_t, t[1] = a_t, t[2] = b_t;
  }
  void *ws = dev_alloc((size_t)(p.workspace_bytes > 0 ? p.workspace_bytes : 1));
  for (int pass = 0; pass < p.passes; ++pass) {
    loom_tensor lt[5] = {t[0], t[1], t[2],
                         {.data = ws, .dtype = LOOM_UINT8, .rank = 1,
                          .sizes = {p.workspace_bytes > 0 ? p.workspace_bytes : 1}, .strides = {1}},
                         t[0]};
    const loom_scalar sc[3] = {{.i = p.pass_variant[pass]}, {.f = 1.0}, {.f = pass ? 1.0 : 0.0}};
    const uint32_t nt = pass ? 5 : 4;
    const loom_launch_desc pack = {.name = "epi_test.pack", .kernel = kernel("gemm.pack"),
                                   .tensors = lt, .num_tensors = nt, .scalars = sc,
                                   .num_scalars = 3, .range = p.pack_range, .grain = p.pack_grain};
    const loom_launch_desc compute = {.name = "epi_test.mm", .kernel = kernel("gemm.compute"),
                                      .tensors = lt, .num_tensors = nt, .scalars = sc,
                                      .num_scalars = 3, .range = p.compute_range,
                                      .grain = p.compute_grain};
    CHECK_OK(loom_launch(s, &pack));
    CHECK_OK(loom_launch(s, &compute));
  }
  loom_free(ws);
}

static float *random_floats(size_t n, unsigned seed) {
  float *h = malloc(n * sizeof *h);
  srand(seed);
  for (size_t i = 0; i < n; ++i) h[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  return h;
}

static loom_fuse_stats stats(void) {
  loom_fuse_stats s;
  loom_fuse_stats_get(&s);
  return s;
}

/* h = A B + bias (rows), g = gelu(h), y = g * z, held until all is
 * queued; the three outputs are allocated after the product, so that the
 * first may take its freed workspace. Returns h, g and y, one after the
 * other. With `freed`, C, h and g are the stream's and freed as soon as
 * the step reading them is queued (y's memory is none of theirs), and only
 * y is returned (h and g zero). */
static float *run(loom_stream_t *s, loom_fuse_mode mode, const float *in, int freed) {
  loom_fuse_set_mode(mode);
  float *a = dev_alloc(M * K * 4), *b = dev_alloc(K * N * 4), *bias = dev_alloc(N * 4),
        *z = dev_alloc(M * N * 4);
  void *c = NULL, *h = NULL, *g = NULL;
  loom_stream_t *on = freed ? s : NULL;
  CHECK_OK(loom_malloc(0, M * N * 4, on, &c));
  CHECK_OK(loom_memcpy(s, a, in, M * K * 4));
  CHECK_OK(loom_memcpy(s, b, in + M * K, K * N * 4));
  CHECK_OK(loom_memcpy(s, bias, in + M * K + K * N, N * 4));
  CHECK_OK(loom_memcpy(s, z, in + M * K + K * N + N, M * N * 4));
  hold_named(s, "epi_test.gate");
  product(s, c, a, b);
  CHECK_OK(loom_malloc(0, M * N * 4, on, &h));
  CHECK_OK(loom_malloc(0, M * N * 4, on, &g));
  float *y = dev_alloc(M * N * 4);
  const loom_tensor tb = flat(bias, M, N, 0, 1), tz = flat(z, M, N, N, 1);
  const loom_tensor tg = flat(g, M, N, N, 1);
  pw(s, "epi_test.bias", LOOM_PW_ADD, flat(h, M, N, N, 1), flat(c, M, N, N, 1), &tb);
  if (freed) loom_free(c);
  pw(s, "epi_test.gelu", LOOM_PW_GELU, tg, flat(h, M, N, N, 1), NULL);
  if (freed) loom_free(h);
  pw(s, "epi_test.gate", LOOM_PW_MUL, flat(y, M, N, N, 1), tz, &tg); /* the value second */
  if (freed) loom_free(g);
  open_gate();
  float *out = calloc(3 * M * N, 4);
  if (!freed) {
    CHECK_OK(loom_memcpy(s, out, h, M * N * 4));
    CHECK_OK(loom_memcpy(s, out + M * N, g, M * N * 4));
  }
  CHECK_OK(loom_memcpy(s, out + 2 * M * N, y, M * N * 4));
  CHECK_OK(loom_stream_synchronize(s));
  loom_free(a), loom_free(b), loom_free(bias), loom_free(z), loom_free(y);
  if (!freed) loom_free(c), loom_free(h), loom_free(g);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  return out;
}

static void test_epilogue_is_bitwise_unfused(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *in = random_floats(M * K + K * N + N + M * N, 7);
  float *ref = run(s, LOOM_FUSE_OFF, in, 0);
  const loom_fuse_stats before = stats();
  float *got = run(s, LOOM_FUSE_ON, in, 0);
  const loom_fuse_stats on = stats();
  CHECK(memcmp(ref, got, 3 * M * N * 4) == 0);
  if (fuses()) {
    CHECK(on.groups > before.groups);
    CHECK(on.ops_fused - before.ops_fused >= 3);
  }
  float *checked = run(s, LOOM_FUSE_VERIFY, in, 0);
  CHECK(memcmp(ref, checked, 3 * M * N * 4) == 0);
  if (fuses()) CHECK(stats().verified > on.verified);
  free(ref), free(got), free(checked), free(in);
  loom_stream_release(s);
}

/* The freed values are not stored (not on the guarded driver, whose
 * kernels write through aliases: nothing is known freed there); y keeps
 * the unfused bytes; verify stores everything. */
static void test_freed_values_not_stored(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *in = random_floats(M * K + K * N + N + M * N, 11);
  float *ref = run(s, LOOM_FUSE_OFF, in, 1);
  const loom_fuse_stats before = stats();
  float *got = run(s, LOOM_FUSE_ON, in, 1);
  const loom_fuse_stats on = stats();
  CHECK(memcmp(ref, got, 3 * M * N * 4) == 0);
  if (fuses() && on.groups > before.groups)
    CHECK_EQ_INT(on.bytes_not_written - before.bytes_not_written,
                 test_driver_has(TEST_DRIVER_GUARDED) ? 0 : 3 * M * N * 4);
  float *checked = run(s, LOOM_FUSE_VERIFY, in, 1);
  CHECK(memcmp(ref, checked, 3 * M * N * 4) == 0);
  CHECK_EQ_INT(stats().bytes_not_written, on.bytes_not_written);
  free(ref), free(got), free(checked), free(in);
  loom_stream_release(s);
}

#define MAX_RECORDS 64
static loom_trace_record records[MAX_RECORDS];

static void test_trace_shows_one_kernel(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS | TEST_DRIVER_ASYNC, "no kernel library or no queues");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *in = random_floats(M * K + K * N + N + M * N, 9);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_trace_enable(0));
  float *out = run(s, LOOM_FUSE_ON, in, 0);
  loom_trace_disable();
  size_t n = 0, got;
  while (n < MAX_RECORDS && (got = loom_trace_drain(records + n, MAX_RECORDS - n)) > 0) n += got;
  int fused = 0, alone = 0;
  for (size_t i = 0; i < n; ++i) {
    if (records[i].kind != LOOM_TRACE_KERNEL) continue;
    const char *name = records[i].name;
    if (!strcmp(name, "fused(epi_test.mm, epi_test.bias, epi_test.gelu, epi_test.gate)")) ++fused;
    if (!strcmp(name, "epi_test.bias") || !strcmp(name, "epi_test.gelu")) ++alone;
  }
  CHECK_EQ_INT(fused, 1);
  CHECK_EQ_INT(alone, 0);
  free(out), free(in);
  loom_stream_release(s);
}

int main(void) {
  setenv("LOOM_FUSE_EPILOGUE", "1", 1); /* off by default */
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_epilogue_is_bitwise_unfused);
    RUN_TEST(test_trace_shows_one_kernel);
    RUN_TEST(test_freed_values_not_stored);
  }
  TEST_MAIN_END();
}
