/* Adaptive eager (loom/fuse.h): queued elementwise launches fused on the
 * stream give the bytes of running them one by one; memory shared through
 * another element map, events and copies keep launches apart; a launch
 * moves ahead only of library launches it shares no memory with (a kernel
 * registered at run time ends the look); a failing member's
 * error names it; LOOM_FUSE=verify compares; the trace shows one kernel.
 *
 * A stream held by a host callback queues what follows, so that the
 * executor sees the whole chain when the gate opens. */
#include <pthread.h>
#include <sched.h>
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


static void hold(loom_stream_t *s) { hold_named(s, "fuse_test.gate"); }


/* x -> y1 = x * 1.5 -> y2 = y1 + x -> y3 = sin(y2) -> y3 *= y3 -> out = y3 - y1,
 * held until all is queued; returns out's bytes. */
static float *run_chain(loom_stream_t *s, loom_fuse_mode mode, const float *input) {
  loom_fuse_set_mode(mode);
  float *x = dev_alloc(N * 4), *y1 = dev_alloc(N * 4), *y2 = dev_alloc(N * 4), *out = dev_alloc(N * 4);
  const loom_tensor tx = vec(x, LOOM_FLOAT32, N), t1 = vec(y1, LOOM_FLOAT32, N),
                    t2 = vec(y2, LOOM_FLOAT32, N), to = vec(out, LOOM_FLOAT32, N);
  loom_tensor c = {.data = NULL, .dtype = LOOM_FLOAT32, .rank = 0};
  upload(s, x, input, N * 4);
  hold(s);
  /* y1 = x * 1.5: a constant operand travels as scalar LOOM_PW_CONST + 1 */
  {
    static const loom_kernel_t *k;
    if (!k) CHECK_OK(loom_kernel_lookup("pointwise.apply", &k));
    loom_tensor t[3] = {t1, tx, c};
    loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = LOOM_PW_MUL}, {.i = LOOM_PW_F32}};
    sc[LOOM_PW_CONST + 1].f = 1.5;
    const loom_launch_desc d = {.name = "fuse_test.scale", .kernel = k, .tensors = t,
                                .num_tensors = 3, .scalars = sc, .num_scalars = LOOM_PW_CONST + 2,
                                .range = N, .grain = LOOM_PW_GRAIN};
    CHECK_OK(loom_launch(s, &d));
  }
  CHECK_OK(pw(s, "fuse_test.add", LOOM_PW_ADD, t2, t1, tx, 1.0));
  CHECK_OK(pw(s, "fuse_test.sin", LOOM_PW_SIN, t2, t2, NONE, 0));
  CHECK_OK(pw(s, "fuse_test.square", LOOM_PW_MUL, t2, t2, t2, 0));
  CHECK_OK(pw(s, "fuse_test.sub", LOOM_PW_SUB, to, t2, t1, 1.0));
  open_gate();
  float *result = malloc(N * 4);
  download(s, result, out, N * 4);
  CHECK_OK(loom_stream_synchronize(s));
  loom_free(x);
  loom_free(y1);
  loom_free(y2);
  loom_free(out);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  return result;
}

static void test_chain_is_bitwise_unfused(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N, 1);
  const loom_fuse_stats before = stats();
  float *ref = run_chain(s, LOOM_FUSE_OFF, input);
  const loom_fuse_stats off = stats();
  CHECK_EQ_INT(off.groups, before.groups);
  float *got = run_chain(s, LOOM_FUSE_ON, input);
  const loom_fuse_stats on = stats();
  CHECK(memcmp(ref, got, N * 4) == 0);
  if (fuses()) {
    CHECK_EQ_INT(on.groups - off.groups, 1);
    CHECK_EQ_INT(on.ops_fused - off.ops_fused, 5);
    CHECK(on.bytes_cached > off.bytes_cached);
  }
  /* verify: the same, compared in the driver */
  float *checked = run_chain(s, LOOM_FUSE_VERIFY, input);
  CHECK(memcmp(ref, checked, N * 4) == 0);
  if (fuses()) CHECK_EQ_INT(stats().verified - on.verified, 1);
  free(ref);
  free(got);
  free(checked);
  free(input);
  loom_stream_release(s);
}

/* b = x + 1 over [0, N) of a buffer of N + 1, then c = b[1..N] + 0: c reads
 * what the next chunk of the first launch writes, so they must not fuse. */
static void test_overlap_through_another_map_is_not_fused(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N + 1, 2);
  float *x = dev_alloc((N + 1) * 4), *b = dev_alloc((N + 1) * 4), *c = dev_alloc(N * 4);
  upload(s, x, input, (N + 1) * 4);
  upload(s, b, input, (N + 1) * 4);
  const loom_fuse_stats before = stats();
  hold(s);
  CHECK_OK(pw(s, "fuse_test.write", LOOM_PW_ADD, vec(b, LOOM_FLOAT32, N), vec(x, LOOM_FLOAT32, N),
              vec(x, LOOM_FLOAT32, N), 1.0));
  CHECK_OK(pw(s, "fuse_test.read_shifted", LOOM_PW_NEG, vec(c, LOOM_FLOAT32, N),
              vec(b + 1, LOOM_FLOAT32, N), NONE, 0));
  open_gate();
  float *got = malloc(N * 4);
  download(s, got, c, N * 4);
  CHECK_OK(loom_stream_synchronize(s));
  int wrong = 0;
  for (int i = 0; i < N; ++i) {
    const float want = i + 1 < N ? -(input[i + 1] + input[i + 1]) : -input[N];
    wrong += got[i] != want;
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(stats().groups, before.groups);
  free(got);
  free(input);
  loom_free(x);
  loom_free(b);
  loom_free(c);
  loom_stream_release(s);
}

/* A (range N on p), B (range N / 2 on q), C (range N on p, same map), D
 * (range N, reads q): C joins A ahead of B; D touches B's memory and
 * stays behind it. */
static void test_independent_launch_is_passed_over(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N, 3);
  float *p = dev_alloc(N * 4), *q = dev_alloc(N * 4), *r = dev_alloc(N * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, N), tq = vec(q, LOOM_FLOAT32, N / 2),
                    tq_full = vec(q, LOOM_FLOAT32, N), tr = vec(r, LOOM_FLOAT32, N);
  float *results[2];
  for (int pass = 0; pass < 2; ++pass) {
    loom_fuse_set_mode(pass ? LOOM_FUSE_ON : LOOM_FUSE_OFF);
    upload(s, p, input, N * 4);
    upload(s, q, input, N * 4);
    const loom_fuse_stats before = stats();
    hold(s);
    CHECK_OK(pw(s, "fuse_test.a", LOOM_PW_EXP, tp, tp, NONE, 0));
    CHECK_OK(pw(s, "fuse_test.b", LOOM_PW_NEG, tq, tq, NONE, 0));
    CHECK_OK(pw(s, "fuse_test.c", LOOM_PW_ADD, tp, tp, tp, 0.5));
    CHECK_OK(pw(s, "fuse_test.d", LOOM_PW_MUL, tr, tq_full, tp, 0));
    open_gate();
    results[pass] = malloc(N * 4);
    download(s, results[pass], r, N * 4);
    CHECK_OK(loom_stream_synchronize(s));
    const loom_fuse_stats after = stats();
    if (pass && fuses()) {
      CHECK_EQ_INT(after.groups - before.groups, 1);
      CHECK_EQ_INT(after.ops_fused - before.ops_fused, 2);
      CHECK_EQ_INT(after.reordered - before.reordered, 1);
    }
  }
  loom_fuse_set_mode(LOOM_FUSE_ON);
  CHECK(memcmp(results[0], results[1], N * 4) == 0);
  free(results[0]);
  free(results[1]);
  free(input);
  loom_free(p);
  loom_free(q);
  loom_free(r);
  loom_stream_release(s);
}

/* A kernel registered at run time may reach memory its descriptors do not
 * span (here through a pointer of its own, as a Triton-style kernel indexes
 * from a base): the look ends at it, so a later launch that writes that
 * memory never moves ahead of it. */
static const float *hidden_source;

static int read_hidden(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *dst = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) dst[i] = hidden_source[i];
  return 0;
}

static void test_run_time_kernel_ends_the_look(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  TEST_SKIP_IF(test_driver_has(TEST_DRIVER_GUARDED), "%s", "the kernel dereferences device memory itself");
  static const loom_kernel_t *k;
  if (!k) {
    CHECK_OK(loom_kernel_register("fuse_test.read_hidden", read_hidden));
    CHECK_OK(loom_kernel_lookup("fuse_test.read_hidden", &k));
  }
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N, 5);
  float *p = dev_alloc(N * 4), *r = dev_alloc(N * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, N), tr = vec(r, LOOM_FLOAT32, N);
  hidden_source = p;
  float *results[2];
  for (int pass = 0; pass < 2; ++pass) {
    loom_fuse_set_mode(pass ? LOOM_FUSE_ON : LOOM_FUSE_OFF);
    upload(s, p, input, N * 4);
    const loom_fuse_stats before = stats();
    hold(s);
    CHECK_OK(pw(s, "fuse_test.exp", LOOM_PW_EXP, tp, tp, NONE, 0));
    const loom_launch_desc d = {.name = "fuse_test.read_hidden", .kernel = k, .tensors = &tr,
                                .num_tensors = 1, .range = N, .grain = N};
    CHECK_OK(loom_launch(s, &d));
    CHECK_OK(pw(s, "fuse_test.neg", LOOM_PW_NEG, tp, tp, NONE, 0));
    open_gate();
    results[pass] = malloc(N * 4);
    download(s, results[pass], r, N * 4);
    CHECK_OK(loom_stream_synchronize(s));
    if (pass) CHECK_EQ_INT(stats().reordered - before.reordered, 0);
  }
  loom_fuse_set_mode(LOOM_FUSE_ON);
  CHECK(memcmp(results[0], results[1], N * 4) == 0);
  free(results[0]);
  free(results[1]);
  free(input);
  loom_free(p);
  loom_free(r);
  loom_stream_release(s);
}

/* Two launches that read one buffer through different element maps (x
 * and x reversed) fuse: neither writes it. Writing it through one of them
 * would not. */
static void test_reads_through_other_maps_fuse(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *input = random_floats(N, 6);
  float *x = dev_alloc(N * 4), *y = dev_alloc(N * 4), *z = dev_alloc(N * 4);
  const loom_tensor tx = vec(x, LOOM_FLOAT32, N), ty = vec(y, LOOM_FLOAT32, N),
                    tz = vec(z, LOOM_FLOAT32, N);
  const loom_tensor reversed = {.data = x + N - 1, .dtype = LOOM_FLOAT32, .rank = 1,
                                .sizes = {N}, .strides = {-1}};
  float *got[2][2];
  for (int pass = 0; pass < 2; ++pass) {
    loom_fuse_set_mode(pass ? LOOM_FUSE_ON : LOOM_FUSE_OFF);
    upload(s, x, input, N * 4);
    const loom_fuse_stats before = stats();
    hold(s);
    CHECK_OK(pw(s, "fuse_test.read", LOOM_PW_SIN, ty, tx, NONE, 0));
    CHECK_OK(pw(s, "fuse_test.read_reversed", LOOM_PW_ADD, tz, reversed, ty, 1.0));
    CHECK_OK(pw(s, "fuse_test.write_reversed", LOOM_PW_NEG, reversed, tz, NONE, 0));
    open_gate();
    for (int i = 0; i < 2; ++i) {
      got[pass][i] = malloc(N * 4);
      download(s, got[pass][i], i ? x : z, N * 4);
    }
    CHECK_OK(loom_stream_synchronize(s));
    if (pass && fuses()) {
      CHECK_EQ_INT(stats().groups - before.groups, 1);
      CHECK_EQ_INT(stats().ops_fused - before.ops_fused, 2);
    }
  }
  loom_fuse_set_mode(LOOM_FUSE_ON);
  for (int i = 0; i < 2; ++i) {
    CHECK(memcmp(got[0][i], got[1][i], N * 4) == 0);
    free(got[0][i]);
    free(got[1][i]);
  }
  free(input);
  loom_free(x);
  loom_free(y);
  loom_free(z);
  loom_stream_release(s);
}

/* An event record or a copy between two launches ends the look. */
static void test_event_and_copy_cut_groups(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  loom_event_t *e = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));
  float *p = dev_alloc(N * 4), *q = dev_alloc(N * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, N);
  float *input = random_floats(N, 4);
  float *got[2];
  for (int pass = 0; pass < 2; ++pass) {
    loom_fuse_set_mode(pass ? LOOM_FUSE_ON : LOOM_FUSE_OFF);
    upload(s, p, input, N * 4);
    const loom_fuse_stats before = stats();
    hold(s);
    CHECK_OK(pw(s, "fuse_test.before_event", LOOM_PW_SIN, tp, tp, NONE, 0));
    CHECK_OK(loom_event_record(e, s));
    CHECK_OK(pw(s, "fuse_test.after_event", LOOM_PW_COS, tp, tp, NONE, 0));
    CHECK_OK(loom_memcpy(s, q, p, N * 4));
    CHECK_OK(pw(s, "fuse_test.after_copy", LOOM_PW_EXP, tp, tp, NONE, 0));
    open_gate();
    CHECK_OK(loom_stream_synchronize(s));
    CHECK_OK(loom_event_query(e));
    CHECK_EQ_INT(stats().groups, before.groups);
    got[pass] = malloc(N * 4);
    download(s, got[pass], q, N * 4);
  }
  loom_fuse_set_mode(LOOM_FUSE_ON);
  CHECK(memcmp(got[0], got[1], N * 4) == 0);
  free(got[0]);
  free(got[1]);
  free(input);
  loom_free(p);
  loom_free(q);
  loom_event_release(e);
  loom_stream_release(s);
}

/* y = x; z = y / 0 (integer: fails); w = y + y: the error names the
 * failing member, and the members after it still ran. */
static void test_failing_member_is_named(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  int64_t *host = calloc(N, sizeof *host);
  for (int i = 0; i < N; ++i) host[i] = i;
  int64_t *x = dev_alloc(N * 8), *y = dev_alloc(N * 8), *z = dev_alloc(N * 8),
          *zero = dev_alloc(N * 8), *w = dev_alloc(N * 8);
  upload(s, x, host, N * 8);
  memset(host, 0, N * 8);
  upload(s, zero, host, N * 8);
  CHECK_OK(loom_stream_synchronize(s));
  const loom_tensor tx = vec(x, LOOM_INT64, N), ty = vec(y, LOOM_INT64, N),
                    tz = vec(z, LOOM_INT64, N), t0 = vec(zero, LOOM_INT64, N),
                    tw = vec(w, LOOM_INT64, N);
  const loom_fuse_stats before = stats();
  hold(s);
  CHECK_OK(pw(s, "fuse_test.plus_one", LOOM_PW_ADD, ty, tx, tx, 0));
  CHECK_OK(pw(s, "fuse_test.divide_by_zero", LOOM_PW_DIV_TRUNC, tz, ty, t0, 0));
  CHECK_OK(pw(s, "fuse_test.double", LOOM_PW_ADD, tw, ty, ty, 1));
  open_gate();
  const loom_status st = loom_stream_synchronize(s);
  CHECK_EQ_INT(st, LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(loom_last_error(), "fuse_test.divide_by_zero") != NULL, "message: %s",
            loom_last_error());
  if (fuses()) CHECK_EQ_INT(stats().ops_fused - before.ops_fused, 3);
  download(s, host, w, N * 8);
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += host[i] != 2 * (int64_t)i;
  CHECK_EQ_INT(wrong, 0);
  CHECK_OK(loom_stream_synchronize(s));
  free(host);
  loom_free(x);
  loom_free(y);
  loom_free(z);
  loom_free(zero);
  loom_free(w);
  loom_stream_release(s);
}

enum { MAX_RECORDS = 4096 };
static loom_trace_record records[MAX_RECORDS];

/* Three fused launches are one kernel in the trace, named for them. */
static void test_trace_shows_one_kernel(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *p = dev_alloc(N * 4);
  const loom_tensor tp = vec(p, LOOM_FLOAT32, N);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_trace_enable(0));
  hold(s);
  CHECK_OK(pw(s, "fuse_test.one", LOOM_PW_ABS, tp, tp, NONE, 0));
  CHECK_OK(pw(s, "fuse_test.two", LOOM_PW_SQRT, tp, tp, NONE, 0));
  CHECK_OK(pw(s, "fuse_test.three", LOOM_PW_EXP, tp, tp, NONE, 0));
  open_gate();
  CHECK_OK(loom_stream_synchronize(s));
  loom_trace_disable();
  size_t n = 0, got;
  while (n < MAX_RECORDS && (got = loom_trace_drain(records + n, MAX_RECORDS - n)) > 0) n += got;
  int kernels = 0;
  const loom_trace_record *k = NULL;
  for (size_t i = 0; i < n; ++i)
    if (records[i].kind == LOOM_TRACE_KERNEL) ++kernels, k = &records[i];
  if (fuses()) {
    CHECK_EQ_INT(kernels, 1);
    CHECK(k && strcmp(k->name, "fused(fuse_test.one, fuse_test.two, fuse_test.three)") == 0);
    CHECK(k && k->bytes == 3 * 2 * (uint64_t)N * 4);
    CHECK(k && k->end_ns >= k->start_ns);
  } else {
    CHECK_EQ_INT(kernels, 3);
  }
  loom_free(p);
  loom_stream_release(s);
}

/* Two streams fusing at once, each against its unfused bytes. */
typedef struct chain_job {
  loom_stream_t *stream;
  const float *input;
  float *out;
} chain_job;

static void *chain_thread(void *arg) {
  chain_job *j = arg;
  float *x = NULL, *y = NULL;
  if (loom_malloc(0, N * 4, j->stream, (void **)&x) != LOOM_OK ||
      loom_malloc(0, N * 4, j->stream, (void **)&y) != LOOM_OK)
    return NULL;
  const loom_tensor tx = vec(x, LOOM_FLOAT32, N), ty = vec(y, LOOM_FLOAT32, N);
  loom_memcpy(j->stream, x, j->input, N * 4);
  for (int round = 0; round < 8; ++round) {
    pw(j->stream, "fuse_test.t_exp", LOOM_PW_TANH, ty, tx, NONE, 0);
    pw(j->stream, "fuse_test.t_add", LOOM_PW_ADD, tx, tx, ty, 0.25);
  }
  loom_memcpy(j->stream, j->out, x, N * 4);
  loom_stream_synchronize(j->stream);
  loom_free(x);
  loom_free(y);
  return NULL;
}

static void test_streams_fuse_concurrently(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS | TEST_DRIVER_ASYNC, "no kernel library or threads");
  float *input = random_floats(N, 5);
  float *ref = malloc(N * 4);
  chain_job jobs[2];
  pthread_t threads[2];
  loom_fuse_set_mode(LOOM_FUSE_OFF);
  CHECK_OK(loom_stream_create(0, 0, &jobs[0].stream));
  jobs[0].input = input;
  jobs[0].out = ref;
  chain_thread(&jobs[0]);
  loom_fuse_set_mode(LOOM_FUSE_ON);
  CHECK_OK(loom_stream_create(0, 0, &jobs[1].stream));
  for (int i = 0; i < 2; ++i) {
    jobs[i].input = input;
    jobs[i].out = malloc(N * 4);
    CHECK(pthread_create(&threads[i], NULL, chain_thread, &jobs[i]) == 0);
  }
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < 2; ++i) {
    CHECK(memcmp(ref, jobs[i].out, N * 4) == 0);
    free(jobs[i].out);
    loom_stream_release(jobs[i].stream);
  }
  free(ref);
  free(input);
}

/* The parts of a group (members that share no memory with the others')
 * run one after another in its fork-join: every chunk of a part is taken
 * before the next part's first, so the workers stream one part's arrays at
 * a time (chunk k is chained across the members of its part only). A
 * row-wise kernel registered here logs which buffer each call walks. */
enum { ORDER_N = 64 * 4096, ORDER_GRAIN = 4096, ORDER_LOG = 4 * (ORDER_N / ORDER_GRAIN) };
static atomic_int order_next;
static const void *order_log[ORDER_LOG];

static int log_chunk(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const int i = atomic_fetch_add(&order_next, 1);
  if (i < ORDER_LOG) order_log[i] = args->tensors[0].data;
  float *x = args->tensors[0].data;
  for (int64_t e = begin; e < end; ++e) x[e] += 1.0f;
  return 0;
}

static int log_rows(const loom_kernel_args *args, struct loom_row_map *out) {
  (void)args;
  *out = (loom_row_map){.n = 1, .row_tensors = 1, .written = 1};
  return 1;
}

static void test_parts_run_one_after_another(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, "no kernel library");
  TEST_SKIP_IF(!fuses(), "%s", "the driver runs launches as they come");
  TEST_SKIP_IF(test_driver_has(TEST_DRIVER_GUARDED), "%s", "the kernel dereferences device memory itself");
  static const loom_kernel_t *k;
  if (!k) {
    CHECK_OK(loom_kernel_register("fuse_test.log_chunk", log_chunk));
    CHECK_OK(loom_kernel_lookup("fuse_test.log_chunk", &k));
    loom_kernel_declare_row_map(log_chunk, log_rows);
  }
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *x = dev_alloc(ORDER_N * 4), *y = dev_alloc(ORDER_N * 4);
  memset(x, 0, ORDER_N * 4);
  memset(y, 0, ORDER_N * 4);
  const loom_tensor tx = vec(x, LOOM_FLOAT32, ORDER_N), ty = vec(y, LOOM_FLOAT32, ORDER_N);
  atomic_store(&order_next, 0);
  const loom_fuse_stats before = stats();
  hold(s);
  const loom_tensor *order[3] = {&tx, &ty, &tx}; /* parts {x, x} and {y}, x's first */
  for (int i = 0; i < 3; ++i) {
    const loom_launch_desc d = {.name = "fuse_test.log_chunk", .kernel = k, .tensors = order[i],
                                .num_tensors = 1, .range = ORDER_N, .grain = ORDER_GRAIN};
    CHECK_OK(loom_launch(s, &d));
  }
  open_gate();
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_EQ_INT(stats().groups - before.groups, 1);
  CHECK_EQ_INT(stats().ops_fused - before.ops_fused, 3);
  const int calls = atomic_load(&order_next), chunks = ORDER_N / ORDER_GRAIN;
  CHECK_EQ_INT(calls, 3 * chunks);
  /* Before y's first call, x's 2 * chunks calls have all been taken; a
   * worker may still be between taking one chunk and logging it, which
   * leaves a few out, never half (chunk k of every part in turn would log
   * y's first call after about as many of x's as there are workers). */
  int x_before = 0;
  while (x_before < calls && x_before < ORDER_LOG && order_log[x_before] == x) ++x_before;
  CHECK(x_before >= chunks);
  int bad = 0;
  for (int64_t e = 0; e < ORDER_N; ++e) bad += x[e] != 2.0f || y[e] != 1.0f;
  CHECK_EQ_INT(bad, 0);
  loom_free(x);
  loom_free(y);
  loom_stream_release(s);
}

static void test_mode(void) {
  const loom_fuse_mode was = loom_fuse_get_mode();
  loom_fuse_set_mode(LOOM_FUSE_VERIFY);
  CHECK_EQ_INT(loom_fuse_get_mode(), LOOM_FUSE_VERIFY);
  loom_fuse_set_mode((loom_fuse_mode)7); /* ignored */
  CHECK_EQ_INT(loom_fuse_get_mode(), LOOM_FUSE_VERIFY);
  loom_fuse_set_mode(was);
  const char *names[8];
  const size_t n = loom_fuse_elementwise_kernels(names, 8);
  int pointwise = 0;
  for (size_t i = 0; i < n && i < 8; ++i) pointwise |= !strcmp(names[i], "pointwise.apply");
  CHECK(pointwise);
  const size_t rows = loom_kernel_library_row_kernels(names, 8);
  CHECK(rows >= 2);
  for (size_t i = 0; i < rows && i < 8; ++i) {
    const loom_kernel_entry *e = loom_kernel_library_find(names[i]);
    CHECK(e && loom_kernel_library_row_map(e->fn) != NULL);
  }
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_mode);
    RUN_TEST(test_chain_is_bitwise_unfused);
    RUN_TEST(test_overlap_through_another_map_is_not_fused);
    RUN_TEST(test_independent_launch_is_passed_over);
    RUN_TEST(test_reads_through_other_maps_fuse);
    RUN_TEST(test_run_time_kernel_ends_the_look);
    RUN_TEST(test_event_and_copy_cut_groups);
    RUN_TEST(test_failing_member_is_named);
    RUN_TEST(test_trace_shows_one_kernel);
    RUN_TEST(test_streams_fuse_concurrently);
    RUN_TEST(test_parts_run_one_after_another);
  }
  TEST_MAIN_END();
}
