/* Graph capture and replay (loom/graph.h), over every driver. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "loom/graph.h"
#include "test_drivers.h"

/* out[i] = a[i] * scalars[0].f + b[i] */
static int axpy_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const float *a = args->tensors[0].data, *b = args->tensors[1].data;
  float *out = args->tensors[2].data;
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] * (float)args->scalars[0].f + b[i];
  return 0;
}

static int fail_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return LOOM_ERROR_INVALID_ARGUMENT;
}

static atomic_int gate, replayed;
static void mark_replayed(void *user) { atomic_store(&replayed, 1); }

static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  while (!atomic_load(&gate)) {
  }
  return 0;
}

enum { N = 1000 };

static loom_tensor vec(float *p) {
  loom_tensor t = {.data = p, .dtype = LOOM_FLOAT32, .rank = 1};
  t.sizes[0] = N;
  t.strides[0] = 1;
  return t;
}

static void launch_axpy(loom_stream_t *s, float *a, float *b, float *out, double alpha) {
  const loom_tensor t[3] = {vec(a), vec(b), vec(out)};
  const loom_scalar sc = {.f = alpha};
  const loom_launch_desc d = {.name = "axpy", .fn = axpy_kernel, .tensors = t, .num_tensors = 3,
                              .scalars = &sc, .num_scalars = 1, .range = N, .grain = 128,
                              .flags = LOOM_LAUNCH_MAY_RUN_INLINE};
  CHECK_OK(loom_launch(s, &d));
}

static void upload(loom_stream_t *s, float *dst, float base) {
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = base + (float)i;
  CHECK_OK(loom_memcpy(s, dst, host, sizeof host));
}

static void download(loom_stream_t *s, float *host, const float *src) {
  CHECK_OK(loom_memcpy(s, host, src, N * sizeof(float)));
}

/* Capture records without running; each replay runs the commands on the
 * captured buffers' current contents. */
static void test_replay_matches_eager(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *a, *b, *out;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&a));
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&b));
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&out));
  upload(s, a, 1.0f);
  upload(s, b, 100.0f);
  upload(s, out, -1.0f);
  CHECK_OK(loom_stream_synchronize(s));

  CHECK_OK(loom_stream_begin_capture(s, 0));
  CHECK_EQ_INT(loom_stream_is_capturing(s), 1);
  float *tmp = NULL;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&tmp));
  launch_axpy(s, a, b, tmp, 2.0);   /* tmp = 2a + b */
  launch_axpy(s, tmp, a, out, 3.0); /* out = 3tmp + a */
  CHECK_OK(loom_free(tmp));
  loom_graph_t *g = NULL;
  CHECK_OK(loom_stream_end_capture(s, &g));
  CHECK_EQ_INT(loom_stream_is_capturing(s), 0);
  CHECK_EQ_INT((int)loom_graph_num_commands(g), 2);
  CHECK(strcmp(loom_graph_command_name(g, 0), "axpy") == 0);
  CHECK(loom_graph_command_name(g, 2) == NULL);

  float host[N];
  download(s, host, out);
  CHECK(host[0] == -1.0f && host[N - 1] == -1.0f + (float)(N - 1)); /* nothing ran */

  loom_graph_exec_t *e = NULL;
  CHECK_OK(loom_graph_instantiate(g, &e));
  loom_graph_release(g); /* the executable form keeps it */
  CHECK_OK(loom_graph_launch(e, s));
  download(s, host, out);
  for (int i = 0; i < N; ++i) {
    const float av = 1.0f + (float)i, bv = 100.0f + (float)i;
    if (host[i] != 3.0f * (2.0f * av + bv) + av) {
      CHECK_MSG(0, "out[%d] = %g", i, host[i]);
      break;
    }
  }
  /* New input contents, same addresses: the replay computes from them. */
  upload(s, a, 5.0f);
  CHECK_OK(loom_graph_launch(e, s));
  CHECK_OK(loom_graph_launch(e, s));
  download(s, host, out);
  CHECK(host[7] == 3.0f * (2.0f * 12.0f + 107.0f) + 12.0f);
  loom_graph_exec_release(e);
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  CHECK_OK(loom_free(out));
  loom_stream_release(s);
}

/* Allocations of a capture come from its pool, which keeps the memory a
 * replay writes (freed during capture or not) until the graph goes; a
 * second graph can share the pool. */
static void test_private_pool(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  CHECK_OK(loom_memory_empty_cache(0));
  loom_memory_stats before;
  CHECK_OK(loom_memory_stats_get(0, &before));
  float *a;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&a));
  upload(s, a, 0.0f);

  CHECK_OK(loom_stream_begin_capture(s, 0));
  float *tmp = NULL, *kept = NULL;
  CHECK_OK(loom_malloc(0, 4 << 20, s, (void **)&tmp)); /* a large segment of its own */
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&kept));
  launch_axpy(s, a, a, tmp, 1.0);
  launch_axpy(s, tmp, a, kept, 1.0);
  CHECK_OK(loom_free(tmp));
  loom_graph_t *g = NULL;
  CHECK_OK(loom_stream_end_capture(s, &g));
  const uint64_t pool = loom_graph_pool(g);
  CHECK(pool != 0 && pool != loom_stream_id(s));

  /* Outside the capture, the stream's allocations never get pool memory. */
  float *other = NULL;
  CHECK_OK(loom_malloc(0, 4 << 20, s, (void **)&other));
  CHECK(other != tmp);
  CHECK_OK(loom_free(other));
  loom_memory_stats held;
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_stats_get(0, &held));
  /* tmp's free segment stays: replays write it. */
  CHECK(held.reserved_bytes[LOOM_POOL_LARGE].current >= (4 << 20));

  /* A second capture into the same pool reuses its free memory. */
  CHECK_OK(loom_stream_begin_capture(s, pool));
  float *tmp2 = NULL;
  CHECK_OK(loom_malloc(0, 4 << 20, s, (void **)&tmp2));
  CHECK(tmp2 == tmp);
  launch_axpy(s, kept, a, tmp2, 1.0);
  CHECK_OK(loom_free(tmp2));
  loom_graph_t *g2 = NULL;
  CHECK_OK(loom_stream_end_capture(s, &g2));
  CHECK(loom_graph_pool(g2) == pool);

  loom_graph_exec_t *e = NULL, *e2 = NULL;
  CHECK_OK(loom_graph_instantiate(g, &e));
  CHECK_OK(loom_graph_instantiate(g2, &e2));
  CHECK_OK(loom_graph_launch(e, s));
  CHECK_OK(loom_graph_launch(e2, s));
  float host[N];
  download(s, host, kept);
  CHECK(host[3] == 3.0f * 3.0f);

  loom_graph_exec_release(e);
  loom_graph_release(g);
  loom_graph_exec_release(e2);
  loom_graph_release(g2);
  /* The pool is gone: its free segments went back; `kept`, still
   * allocated, is ordinary memory now and returns with its free. */
  CHECK_OK(loom_free(kept));
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_memory_empty_cache(0));
  loom_memory_stats after;
  CHECK_OK(loom_memory_stats_get(0, &after));
  CHECK_EQ_INT((int)after.reserved_bytes[LOOM_POOL_ALL].current,
               (int)before.reserved_bytes[LOOM_POOL_ALL].current);
  CHECK_EQ_INT((int)after.allocated_bytes[LOOM_POOL_ALL].current,
               (int)before.allocated_bytes[LOOM_POOL_ALL].current);
  loom_stream_release(s);
}

/* A host wait or read during capture fails naming the call; the capture
 * then ends with that error, and the stream works as before. */
static void test_refused_calls(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *a;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&a));
  upload(s, a, 0.0f);

  static const char *const calls[] = {"loom_stream_synchronize", "loom_stream_query",
                                      "loom_memcpy", "loom_graph_launch"};
  for (int k = 0; k < 4; ++k) {
    loom_graph_t *g = NULL;
    loom_graph_exec_t *e = NULL;
    if (k == 3) { /* a replay inside a capture */
      CHECK_OK(loom_stream_begin_capture(s, 0));
      launch_axpy(s, a, a, a, 1.0);
      CHECK_OK(loom_stream_end_capture(s, &g));
      CHECK_OK(loom_graph_instantiate(g, &e));
      loom_graph_release(g);
      g = NULL;
    }
    CHECK_OK(loom_stream_begin_capture(s, 0));
    launch_axpy(s, a, a, a, 1.0);
    float x = 0;
    loom_status st = k == 0   ? loom_stream_synchronize(s)
                     : k == 1 ? loom_stream_query(s)
                     : k == 2 ? loom_memcpy(s, &x, a, sizeof x)
                              : loom_graph_launch(e, s);
    CHECK_EQ_INT(st, LOOM_ERROR_NOT_PERMITTED);
    CHECK_MSG(strstr(loom_last_error(), calls[k]) && strstr(loom_last_error(), "captures a graph"),
              "%s", loom_last_error());
    CHECK_EQ_INT(loom_device_synchronize(0), LOOM_ERROR_NOT_PERMITTED);
    CHECK_EQ_INT(loom_stream_end_capture(s, &g), LOOM_ERROR_NOT_PERMITTED);
    CHECK(g == NULL);
    CHECK_MSG(strstr(loom_last_error(), calls[k]) != NULL, "%s", loom_last_error());
    loom_graph_exec_release(e);
  }
  /* The stream is usable, and nothing captured ran. */
  float host[N];
  download(s, host, a);
  CHECK(host[5] == 5.0f);
  launch_axpy(s, a, a, a, 1.0);
  CHECK_OK(loom_stream_synchronize(s));
  download(s, host, a);
  CHECK(host[5] == 10.0f);
  CHECK_OK(loom_device_synchronize(0));
  CHECK_OK(loom_free(a));
  loom_stream_release(s);
}

static void test_bad_arguments(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  loom_graph_t *g = NULL;
  CHECK_EQ_INT(loom_stream_end_capture(s, &g), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "not capturing") != NULL);
  CHECK_EQ_INT(loom_stream_begin_capture(NULL, 0), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_stream_begin_capture(s, 0));
  CHECK_EQ_INT(loom_stream_begin_capture(s, 0), LOOM_ERROR_NOT_PERMITTED);
  CHECK(strstr(loom_last_error(), "capturing already") != NULL);
  CHECK_OK(loom_stream_end_capture(s, &g));
  CHECK_EQ_INT((int)loom_graph_num_commands(g), 0);
  loom_graph_exec_t *e = NULL;
  CHECK_EQ_INT(loom_graph_instantiate(NULL, &e), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_graph_launch(NULL, s), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_graph_instantiate(g, &e));
  CHECK_EQ_INT(loom_graph_launch(e, NULL), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_graph_launch(e, s)); /* an empty graph replays as nothing */
  loom_graph_exec_release(e);
  loom_graph_release(g);
  /* A capture never ended goes with its stream. */
  CHECK_OK(loom_stream_begin_capture(s, 0));
  loom_stream_release(s);
}

/* Events recorded in a capture are recorded by each replay; a wait on one
 * of them is stream order, a wait on another event waits at each replay.
 * Copies from pageable memory replay the bytes staged at capture. */
static void test_events_and_copies(void) {
  loom_stream_t *s = NULL, *other = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  CHECK_OK(loom_stream_create(0, 0, &other));
  loom_event_t *inside = NULL, *outside = NULL;
  CHECK_OK(loom_event_create(0, 0, &inside));
  CHECK_OK(loom_event_create(0, 0, &outside));
  float *a, *b;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&a));
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&b));
  upload(s, b, 0.0f);
  float *pinned = NULL;
  CHECK_OK(loom_host_malloc(N * sizeof(float), (void **)&pinned));

  float host[N];
  for (int i = 0; i < N; ++i) host[i] = 7.0f;
  CHECK_OK(loom_stream_begin_capture(s, 0));
  CHECK_OK(loom_memcpy(s, a, host, sizeof host)); /* staged now */
  CHECK_OK(loom_stream_wait_event(s, outside));
  CHECK_OK(loom_event_record(inside, s));
  CHECK_OK(loom_stream_wait_event(s, inside)); /* records nothing */
  launch_axpy(s, a, b, b, 1.0);
  CHECK_OK(loom_memcpy(s, pinned, b, N * sizeof(float))); /* to pinned: permitted */
  loom_graph_t *g = NULL;
  CHECK_OK(loom_stream_end_capture(s, &g));
  CHECK_EQ_INT((int)loom_graph_num_commands(g), 5);
  CHECK(strcmp(loom_graph_command_name(g, 0), "memcpy HtoD") == 0);
  CHECK(strcmp(loom_graph_command_name(g, 1), "event_wait") == 0);
  CHECK(strcmp(loom_graph_command_name(g, 2), "event_record") == 0);
  for (int i = 0; i < N; ++i) host[i] = -1.0f; /* too late for the graph */

  loom_graph_exec_t *e = NULL;
  CHECK_OK(loom_graph_instantiate(g, &e));
  loom_graph_release(g);
  CHECK_OK(loom_event_record(outside, other));
  CHECK_OK(loom_graph_launch(e, s));
  CHECK_OK(loom_graph_launch(e, s));
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_event_query(inside));
  CHECK(pinned[0] == 14.0f && pinned[N - 1] == 14.0f + (float)(N - 1));
  download(s, host, b);
  CHECK(host[1] == 15.0f);

  loom_graph_exec_release(e);
  loom_event_release(inside);
  loom_event_release(outside);
  CHECK_OK(loom_host_free(pinned));
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  loom_stream_release(other);
  loom_stream_release(s);
}

/* Releasing a graph waits for its queued replays; a replay's failing
 * kernel is the stream's asynchronous error, as an eager launch's. */
static void test_release_waits_and_errors(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *a;
  CHECK_OK(loom_malloc(0, N * sizeof(float), s, (void **)&a));
  upload(s, a, 1.0f);
  const loom_launch_desc gate_desc = {.name = "gate", .fn = gate_kernel, .range = 1, .grain = 1};
  const loom_launch_desc fail_desc = {.name = "aten::failing", .fn = fail_kernel, .range = 1,
                                      .grain = 1};
  loom_graph_t *g = NULL;
  loom_graph_exec_t *e = NULL;
  const int async = test_driver_has(TEST_DRIVER_ASYNC);
  atomic_store(&gate, !async);
  CHECK_OK(loom_stream_begin_capture(s, 0));
  CHECK_OK(loom_launch(s, &gate_desc));
  launch_axpy(s, a, a, a, 1.0);
  CHECK_OK(loom_host_callback(s, mark_replayed, NULL, "mark"));
  CHECK_OK(loom_stream_end_capture(s, &g));
  atomic_store(&replayed, 0);
  CHECK_OK(loom_graph_instantiate(g, &e));
  loom_graph_release(g);
  CHECK_OK(loom_graph_launch(e, s));
  if (async) {
    CHECK_EQ_INT(loom_stream_query(s), LOOM_ERROR_NOT_READY);
    atomic_store(&gate, 1);
  }
  loom_graph_exec_release(e); /* waits for the replay */
  CHECK_EQ_INT(atomic_load(&replayed), 1);
  float host[N];
  download(s, host, a);
  CHECK(host[2] == 6.0f);

  CHECK_OK(loom_stream_begin_capture(s, 0));
  CHECK_OK(loom_launch(s, &fail_desc));
  CHECK_OK(loom_stream_end_capture(s, &g));
  CHECK_OK(loom_graph_instantiate(g, &e));
  CHECK_OK(loom_graph_launch(e, s));
  CHECK_EQ_INT(loom_stream_synchronize(s), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "aten::failing") != NULL);
  CHECK_OK(loom_stream_synchronize(s));
  loom_graph_exec_release(e);
  loom_graph_release(g);
  CHECK_OK(loom_free(a));
  loom_stream_release(s);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_replay_matches_eager);
    RUN_TEST(test_private_pool);
    RUN_TEST(test_refused_calls);
    RUN_TEST(test_bad_arguments);
    RUN_TEST(test_events_and_copies);
    RUN_TEST(test_release_waits_and_errors);
  }
  TEST_MAIN_END();
}
