/* Adaptive eager (loom/fuse.h) with row-wise members: a layer norm joins a
 * group when its chunks are whole rows, its per-row outputs are deferred
 * where an earlier member still reads their memory, and a small launch
 * runs ahead of a held group only where it shares no memory with it; every
 * program gives the bytes of running it unfused.
 *
 * A stream held by a host callback queues what follows, so that the
 * executor sees the whole chain when the gate opens. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "loom/kernels/pointwise.h"
#include "test_drivers.h"
#include "test_fuse_launch.h"
#include "test_gate.h"

enum { N = 1 << 16 };

static void hold(loom_stream_t *s) { hold_named(s, "fuse_rows_test.gate"); }

/* ---- row-wise members, deferred outputs, launches run ahead ------------------------- */

enum { ROWS = 96, COLS = 1000 }; /* 96 000 elements; a row is not a multiple of 64 */

/* norm.layer_forward over `rows` rows of COLS: y = layer_norm(x) * w + b. */
static void layer_norm(loom_stream_t *s, loom_tensor x, loom_tensor w, loom_tensor b,
                       loom_tensor y, loom_tensor mean, loom_tensor rstd, int64_t rows) {
  static const loom_kernel_t *k;
  if (!k) CHECK_OK(loom_kernel_lookup("norm.layer_forward", &k));
  const loom_tensor t[6] = {x, w, b, y, mean, rstd};
  const loom_scalar sc[3] = {{.i = COLS}, {.f = 1e-5}, {.i = 0}};
  const loom_launch_desc d = {.name = "fuse_test.layer_norm", .kernel = k, .tensors = t,
                              .num_tensors = 6, .scalars = sc, .num_scalars = 3,
                              .range = rows, .grain = rows};
  CHECK_OK(loom_launch(s, &d));
}

/* p (ROWS*COLS floats), w, b (COLS), then the outputs. Program:
 *   q = p * 2; layer_norm(q) -> y, mean, rstd; z = y + q;
 *   [cover] p = q * 0.5; u = p + y
 * mean lies in the last ROWS floats of p (memory the allocator may hand on
 * once p's tensor is freed): A's last chunk reads them before the layer
 * norm's first chunk would write them, so the statistics are deferred; a
 * later launch that overwrites p whole keeps its bytes there. Returns the
 * downloads of p, y, z, u, rstd, one after the other. */
static float *run_rows(loom_stream_t *s, loom_fuse_mode mode, const float *input, int cover,
                       loom_fuse_stats *delta) {
  enum { E = ROWS * COLS };
  loom_fuse_set_mode(mode);
  float *p = dev_alloc(E * 4), *w = dev_alloc(COLS * 4), *b = dev_alloc(COLS * 4);
  float *q = dev_alloc(E * 4), *y = dev_alloc(E * 4), *z = dev_alloc(E * 4), *u = dev_alloc(E * 4);
  float *rstd = dev_alloc(ROWS * 4);
  upload(s, p, input, E * 4);
  upload(s, w, input + E, COLS * 4);
  upload(s, b, input + E + COLS, COLS * 4);
  upload(s, y, input, E * 4); /* not what the layer norm writes: a row run late shows */
  upload(s, z, input, E * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, E), tq = vec(q, LOOM_FLOAT32, E),
                    ty = vec(y, LOOM_FLOAT32, E), tz = vec(z, LOOM_FLOAT32, E),
                    tu = vec(u, LOOM_FLOAT32, E);
  const loom_tensor mean = vec(p + E - ROWS, LOOM_FLOAT32, ROWS);
  const loom_fuse_stats before = stats();
  hold(s);
  CHECK_OK(pw(s, "fuse_test.double", LOOM_PW_ADD, tq, tp, tp, 1.0));
  layer_norm(s, tq, vec(w, LOOM_FLOAT32, COLS), vec(b, LOOM_FLOAT32, COLS), ty, mean,
             vec(rstd, LOOM_FLOAT32, ROWS), ROWS);
  CHECK_OK(pw(s, "fuse_test.residual", LOOM_PW_ADD, tz, ty, tq, 1.0));
  if (cover) {
    CHECK_OK(pw(s, "fuse_test.overwrite", LOOM_PW_MUL, tp, tq, tq, 0));
    CHECK_OK(pw(s, "fuse_test.read_over", LOOM_PW_SUB, tu, tp, ty, 1.0));
  }
  open_gate();
  float *out = malloc((4 * (size_t)E + ROWS) * 4);
  download(s, out, p, E * 4);
  download(s, out + E, y, E * 4);
  download(s, out + 2 * E, z, E * 4);
  download(s, out + 3 * E, cover ? u : z, E * 4);
  download(s, out + 4 * E, rstd, ROWS * 4);
  CHECK_OK(loom_stream_synchronize(s));
  const loom_fuse_stats after = stats();
  *delta = (loom_fuse_stats){.groups = after.groups - before.groups,
                             .ops_fused = after.ops_fused - before.ops_fused,
                             .verified = after.verified - before.verified};
  loom_free(p), loom_free(w), loom_free(b), loom_free(q), loom_free(y), loom_free(z);
  loom_free(u), loom_free(rstd);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  return out;
}

/* A layer norm joins the elementwise launches around it, chunked by whole
 * rows; its statistics, over memory an earlier member reads, land after
 * the chunks, but where a later member overwrote them. */
static void test_layer_norm_joins_by_rows(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  enum { E = ROWS * COLS };
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(E + 2 * COLS, 11);
  const size_t bytes = (4 * (size_t)E + ROWS) * 4;
  for (int cover = 0; cover < 2; ++cover) {
    loom_fuse_stats off, on, verify;
    float *ref = run_rows(s, LOOM_FUSE_OFF, input, cover, &off);
    float *got = run_rows(s, LOOM_FUSE_ON, input, cover, &on);
    float *checked = run_rows(s, LOOM_FUSE_VERIFY, input, cover, &verify);
    CHECK_EQ_INT(off.groups, 0);
    CHECK(memcmp(ref, got, bytes) == 0);
    CHECK(memcmp(ref, checked, bytes) == 0);
    if (fuses()) {
      CHECK_EQ_INT(on.groups, 1);
      CHECK_EQ_INT(on.ops_fused, cover ? 5 : 3);
      CHECK_EQ_INT(verify.verified, 1);
    }
    free(ref);
    free(got);
    free(checked);
  }
  free(input);
  loom_stream_release(s);
}

/* y = x * 2 (N as 256 x 256), then a small v = c + 1 (256), then z = y * v
 * with v broadcast over rows: the small launch runs before the group's
 * chunks and z joins. If the small launch wrote what the group reads
 * (x), it would stay behind. */
static void test_small_launch_runs_ahead(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  enum { C = 256 };
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N + C, 12);
  float *x = dev_alloc(N * 4), *y = dev_alloc(N * 4), *z = dev_alloc(N * 4);
  float *c = dev_alloc(C * 4), *v = dev_alloc(C * 4);
  const loom_tensor tx = vec(x, LOOM_FLOAT32, N), ty = vec(y, LOOM_FLOAT32, N),
                    tz = vec(z, LOOM_FLOAT32, N);
  const loom_tensor rows_v = {.data = v, .dtype = LOOM_FLOAT32, .rank = 2,
                              .sizes = {N / C, C}, .strides = {0, 1}};
  const loom_tensor ty2 = {.data = y, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {N / C, C},
                           .strides = {C, 1}};
  const loom_tensor tz2 = {.data = z, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {N / C, C},
                           .strides = {C, 1}};
  float *got[2][2];
  for (int writes_x = 0; writes_x < 2; ++writes_x) {
    for (int pass = 0; pass < 2; ++pass) {
      loom_fuse_set_mode(pass ? LOOM_FUSE_ON : LOOM_FUSE_OFF);
      upload(s, x, input, N * 4);
      upload(s, c, input + N, C * 4);
      const loom_fuse_stats before = stats();
      hold(s);
      CHECK_OK(pw(s, "fuse_test.twice", LOOM_PW_ADD, ty, tx, tx, 1.0));
      CHECK_OK(pw(s, "fuse_test.small", LOOM_PW_ADD,
                  writes_x ? vec(x + N - C, LOOM_FLOAT32, C) : vec(v, LOOM_FLOAT32, C),
                  vec(c, LOOM_FLOAT32, C), vec(c, LOOM_FLOAT32, C), 1.0));
      CHECK_OK(pw(s, "fuse_test.scale_rows", LOOM_PW_MUL, tz2, ty2,
                  writes_x ? (loom_tensor){.data = x + N - C, .dtype = LOOM_FLOAT32, .rank = 2,
                                           .sizes = {N / C, C}, .strides = {0, 1}}
                           : rows_v, 0));
      open_gate();
      got[writes_x][pass] = malloc(2 * N * 4);
      download(s, got[writes_x][pass], z, N * 4);
      download(s, got[writes_x][pass] + N, x, N * 4);
      CHECK_OK(loom_stream_synchronize(s));
      const loom_fuse_stats after = stats();
      if (pass && fuses()) {
        /* run ahead: twice, small, scale_rows in one group; else the small
         * launch ends twice's group alone and scale_rows follows it */
        CHECK_EQ_INT(after.groups - before.groups, writes_x ? 0 : 1);
        CHECK_EQ_INT(after.ops_fused - before.ops_fused, writes_x ? 0 : 3);
      }
    }
    CHECK(memcmp(got[writes_x][0], got[writes_x][1], 2 * N * 4) == 0);
    free(got[writes_x][0]);
    free(got[writes_x][1]);
  }
  loom_fuse_set_mode(LOOM_FUSE_ON);
  free(input);
  loom_free(x), loom_free(y), loom_free(z), loom_free(c), loom_free(v);
  loom_stream_release(s);
}

/* q = p + p; layer_norm(q) -> y, mean, rstd; then a small v = c + c
 * written over the mean's memory whole (the allocator hands a freed mean
 * to the next small tensor); z = y * v, v broadcast along each row. The
 * small launch runs before the group's chunks, the mean copied in after
 * them leaves its bytes, and z, which reads them, joins. */
static void test_small_launch_over_deferred_output(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  enum { E = ROWS * COLS };
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(E + 2 * COLS + ROWS, 13);
  float *p = dev_alloc(E * 4), *q = dev_alloc(E * 4), *y = dev_alloc(E * 4), *z = dev_alloc(E * 4);
  float *w = dev_alloc(COLS * 4), *b = dev_alloc(COLS * 4), *c = dev_alloc(ROWS * 4);
  float *st = dev_alloc(ROWS * 4), *rstd = dev_alloc(ROWS * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, E), tq = vec(q, LOOM_FLOAT32, E),
                    ty = vec(y, LOOM_FLOAT32, E);
  const loom_tensor per_row = {.data = st, .dtype = LOOM_FLOAT32, .rank = 2,
                               .sizes = {ROWS, COLS}, .strides = {1, 0}};
  const loom_tensor ty2 = {.data = y, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {ROWS, COLS},
                           .strides = {COLS, 1}};
  const loom_tensor tz2 = {.data = z, .dtype = LOOM_FLOAT32, .rank = 2, .sizes = {ROWS, COLS},
                           .strides = {COLS, 1}};
  const size_t bytes = (2 * (size_t)E + ROWS) * 4;
  float *got[3];
  const loom_fuse_mode modes[3] = {LOOM_FUSE_OFF, LOOM_FUSE_ON, LOOM_FUSE_VERIFY};
  for (int pass = 0; pass < 3; ++pass) {
    loom_fuse_set_mode(modes[pass]);
    upload(s, p, input, E * 4);
    upload(s, w, input + E, COLS * 4);
    upload(s, b, input + E + COLS, COLS * 4);
    upload(s, c, input + E + 2 * COLS, ROWS * 4);
    const loom_fuse_stats before = stats();
    hold(s);
    CHECK_OK(pw(s, "fuse_test.double", LOOM_PW_ADD, tq, tp, tp, 1.0));
    layer_norm(s, tq, vec(w, LOOM_FLOAT32, COLS), vec(b, LOOM_FLOAT32, COLS), ty,
               vec(st, LOOM_FLOAT32, ROWS), vec(rstd, LOOM_FLOAT32, ROWS), ROWS);
    CHECK_OK(pw(s, "fuse_test.small_over_mean", LOOM_PW_ADD, vec(st, LOOM_FLOAT32, ROWS),
                vec(c, LOOM_FLOAT32, ROWS), vec(c, LOOM_FLOAT32, ROWS), 1.0));
    CHECK_OK(pw(s, "fuse_test.scale_rows", LOOM_PW_MUL, tz2, ty2, per_row, 0));
    open_gate();
    got[pass] = malloc(bytes);
    download(s, got[pass], y, E * 4);
    download(s, got[pass] + E, z, E * 4);
    download(s, got[pass] + 2 * E, st, ROWS * 4);
    CHECK_OK(loom_stream_synchronize(s));
    const loom_fuse_stats after = stats();
    if (pass > 0 && fuses()) {
      /* double, layer_norm, scale_rows members, small_over_mean run ahead */
      CHECK_EQ_INT(after.groups - before.groups, 1);
      CHECK_EQ_INT(after.ops_fused - before.ops_fused, 4);
      if (pass == 2) CHECK_EQ_INT(after.verified - before.verified, 1);
    }
  }
  CHECK(memcmp(got[0], got[1], bytes) == 0);
  CHECK(memcmp(got[0], got[2], bytes) == 0);
  for (int pass = 0; pass < 3; ++pass) free(got[pass]);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  free(input);
  loom_free(p), loom_free(q), loom_free(y), loom_free(z), loom_free(w), loom_free(b);
  loom_free(c), loom_free(st), loom_free(rstd);
  loom_stream_release(s);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_layer_norm_joins_by_rows);
    RUN_TEST(test_small_launch_runs_ahead);
    RUN_TEST(test_small_launch_over_deferred_output);
  }
  TEST_MAIN_END();
}
