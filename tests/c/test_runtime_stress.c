/* Concurrency stress: many host threads, each with its own streams (of
 * mixed priority), driving events, cross-stream and cross-thread waits,
 * allocations freed while other streams still use them (loom_record_stream),
 * pinned host buffers, host callbacks, asynchronous errors and synchronizes,
 * all at once.
 *
 * Every result is checked: a producer stream fills a buffer with values
 * known from (thread, iteration), a consumer stream waits on an event and
 * derives a second buffer from it, and the thread reads that back. A wait
 * released early, or a block handed out again while another stream still
 * reads it, shows as a wrong value (and, under ThreadSanitizer, as a data
 * race). The work per thread is fixed; a deadline only shortens it on a
 * very slow machine (sanitizers), never decides a result. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_drivers.h"

enum {
  THREADS = 6,
  ITERATIONS = 1000,
  MAX_N = 6000,
  GRAIN = 512,
  SHARED_EVENTS = THREADS,
};
#define DEADLINE_S 60.0

/* out[i] = base + i. Exact in float for the sizes used here. */
static int fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *out = args->tensors[0].data;
  const float base = (float)args->scalars[0].f;
  for (int64_t i = begin; i < end; ++i) out[i] = base + (float)i;
  return 0;
}

/* y = 2x + 1 */
static int axpb_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *y = args->tensors[0].data;
  const float *x = args->tensors[1].data;
  for (int64_t i = begin; i < end; ++i) y[i] = 2.0f * x[i] + 1.0f;
  return 0;
}

static int fail_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return begin == 0 ? loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE, "stress: injected") : 0;
}

static void count_callback(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

/* Events every thread records on and waits on. */
static loom_event_t *shared_events[SHARED_EVENTS];

typedef struct worker {
  int index;
  unsigned rng;
  int failures, iterations, errors_seen;
  atomic_int callbacks_run;
  int callbacks_queued;
  double deadline;
  int can_hold; /* the driver runs commands off the submitting thread */
} worker;

static unsigned next_rand(worker *w) {
  w->rng = w->rng * 1103515245u + 12345u;
  return (w->rng >> 8) & 0xffffffu;
}

#define EXPECT(w, cond, what)                                                        \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      if ((w)->failures++ < 5)                                                       \
        fprintf(stderr, "thread %d: %s failed: %s\n", (w)->index, what, loom_last_error()); \
    }                                                                                \
  } while (0)

static loom_tensor vec(float *data, int64_t n) {
  return (loom_tensor){.data = data, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {n}, .strides = {1}};
}

/* Holds a stream until the thread opens the gate. */
static void hold_callback(void *arg) {
  atomic_int *gate = arg;
  while (!atomic_load(gate)) {
    struct timespec us = {0, 20000};
    nanosleep(&us, NULL);
  }
}

/* One round: produce x on s[0], consume it on s[1] after an event, read
 * the result back. With `hold`, s[1] is held until x has been freed and a
 * block of the same size allocated and filled on s[0]: without
 * loom_record_stream that block would be x, and s[1] would read the wrong
 * values. */
static void round_trip(worker *w, loom_stream_t **s, loom_event_t *e, float *host, int it,
                       int hold) {
  const int64_t n = 1 + next_rand(w) % MAX_N;
  float *x = NULL, *y = NULL, *x2 = NULL;
  EXPECT(w, loom_malloc(0, (size_t)n * sizeof(float), s[0], (void **)&x) == LOOM_OK, "malloc x");
  EXPECT(w, loom_malloc(0, (size_t)n * sizeof(float), s[1], (void **)&y) == LOOM_OK, "malloc y");
  if (!x || !y) {
    loom_free(x);
    loom_free(y);
    return;
  }
  const float base = (float)(w->index * 1000 + it % 1000);
  loom_tensor tx = vec(x, n), ty[2] = {vec(y, n), vec(x, n)};
  loom_scalar sc = {.f = base};
  loom_launch_desc fill = {.name = "stress_fill", .fn = fill_kernel, .tensors = &tx,
                           .num_tensors = 1, .scalars = &sc, .num_scalars = 1, .range = n,
                           .grain = GRAIN};
  loom_launch_desc axpb = {.name = "stress_axpb", .fn = axpb_kernel, .tensors = ty,
                           .num_tensors = 2, .range = n, .grain = GRAIN};
  atomic_int gate = 0;
  EXPECT(w, loom_launch(s[0], &fill) == LOOM_OK, "fill");
  EXPECT(w, loom_event_record(e, s[0]) == LOOM_OK, "record");
  EXPECT(w, loom_stream_wait_event(s[1], e) == LOOM_OK, "wait");
  /* Re-recorded elsewhere before s[1] runs: s[1] still waits for the fill. */
  if (next_rand(w) % 2) EXPECT(w, loom_event_record(e, s[2]) == LOOM_OK, "re-record");
  if (hold) EXPECT(w, loom_host_callback(s[1], hold_callback, &gate, "hold") == LOOM_OK, "hold");
  EXPECT(w, loom_launch(s[1], &axpb) == LOOM_OK, "axpb");
  EXPECT(w, loom_record_stream(x, s[1]) == LOOM_OK, "record_stream");
  EXPECT(w, loom_free(x) == LOOM_OK, "free x");
  if (hold) {
    /* The same size on the same stream: the cache's first candidate is x. */
    EXPECT(w, loom_malloc(0, (size_t)n * sizeof(float), s[0], (void **)&x2) == LOOM_OK, "malloc x2");
    loom_tensor t2 = vec(x2, n);
    loom_scalar minus = {.f = -1.0f - base};
    loom_launch_desc clobber = {.name = "stress_clobber", .fn = fill_kernel, .tensors = &t2,
                                .num_tensors = 1, .scalars = &minus, .num_scalars = 1,
                                .range = n, .grain = GRAIN};
    if (x2) EXPECT(w, loom_launch(s[0], &clobber) == LOOM_OK, "clobber");
    EXPECT(w, loom_stream_synchronize(s[0]) == LOOM_OK, "sync s0");
    atomic_store(&gate, 1);
  }
  if (next_rand(w) % 4 == 0) {
    EXPECT(w, loom_host_callback(s[1], count_callback, &w->callbacks_run, "count") == LOOM_OK,
           "callback");
    w->callbacks_queued++;
  }
  /* Pageable memory: the copy waits. Pinned: it is asynchronous, and the
   * stream's synchronize orders it before the read. */
  float *out = host, *pinned = NULL;
  if (next_rand(w) % 3 == 0 &&
      loom_host_malloc((size_t)n * sizeof(float), (void **)&pinned) == LOOM_OK)
    out = pinned;
  EXPECT(w, loom_memcpy(s[1], out, y, (size_t)n * sizeof(float)) == LOOM_OK, "read back");
  if (pinned) EXPECT(w, loom_stream_synchronize(s[1]) == LOOM_OK, "sync pinned read");
  int bad = 0;
  for (int64_t i = 0; i < n && !bad; ++i) bad = out[i] != 2.0f * (base + (float)i) + 1.0f;
  EXPECT(w, loom_host_free(pinned) == LOOM_OK, "host free");
  EXPECT(w, !bad, "values");
  EXPECT(w, loom_free(x2) == LOOM_OK, "free x2");
  EXPECT(w, loom_free(y) == LOOM_OK, "free y");
}

/* Allocations of every size class on random streams, some used, some
 * freed with work still queued. */
static void churn(worker *w, loom_stream_t **s) {
  void *blocks[4] = {0};
  for (int i = 0; i < 4; ++i) {
    const size_t size = (next_rand(w) % 3 == 0) ? (size_t)(1 + next_rand(w) % 3) << 20
                                                 : 1 + next_rand(w) % 65536;
    loom_stream_t *on = s[next_rand(w) % 3];
    EXPECT(w, loom_malloc(0, size, on, &blocks[i]) == LOOM_OK, "churn malloc");
    if (blocks[i] && next_rand(w) % 2)
      EXPECT(w, loom_record_stream(blocks[i], s[next_rand(w) % 3]) == LOOM_OK, "churn record");
  }
  for (int i = 0; i < 4; ++i) EXPECT(w, loom_free(blocks[i]) == LOOM_OK, "churn free");
}

/* Waits on other threads' events, records this thread's. */
static void cross_thread(worker *w, loom_stream_t **s) {
  const int other = (int)(next_rand(w) % SHARED_EVENTS);
  EXPECT(w, loom_stream_wait_event(s[2], shared_events[other]) == LOOM_OK, "cross wait");
  EXPECT(w, loom_event_record(shared_events[w->index % SHARED_EVENTS], s[0]) == LOOM_OK,
         "cross record");
  if (next_rand(w) % 8 == 0) {
    const loom_status st = loom_event_query(shared_events[other]);
    EXPECT(w, st == LOOM_OK || st == LOOM_ERROR_NOT_READY, "cross query");
  }
}

/* An error raised on s[2] surfaces at its synchronize, once. */
static void inject_error(worker *w, loom_stream_t **s) {
  loom_launch_desc bad = {.name = "stress_fail", .fn = fail_kernel, .range = 4 * GRAIN,
                          .grain = GRAIN};
  EXPECT(w, loom_launch(s[2], &bad) == LOOM_OK, "launch failing kernel");
  const loom_status st = loom_stream_synchronize(s[2]);
  EXPECT(w, st == LOOM_ERROR_INDEX_OUT_OF_RANGE, "error surfaces");
  if (st == LOOM_ERROR_INDEX_OUT_OF_RANGE) w->errors_seen++;
  EXPECT(w, loom_stream_synchronize(s[2]) == LOOM_OK, "error cleared");
}

/* A stream and an event that live for one round. */
static void short_lived(worker *w, float *host) {
  loom_stream_t *t[3] = {0};
  loom_event_t *e = NULL;
  EXPECT(w, loom_stream_create(0, -(int)(next_rand(w) % 2), &t[0]) == LOOM_OK, "create");
  t[1] = t[2] = t[0];
  EXPECT(w, loom_event_create(0, LOOM_EVENT_TIMING, &e) == LOOM_OK, "event create");
  if (t[0] && e) round_trip(w, t, e, host, w->iterations, 0);
  if (e) EXPECT(w, loom_event_synchronize(e) == LOOM_OK, "event sync");
  loom_event_release(e);
  loom_stream_release(t[0]); /* waits for its work */
}

static void *worker_main(void *arg) {
  worker *w = arg;
  loom_stream_t *s[3] = {0};
  /* Thread 0 uses the default stream as its consumer: shared by nobody
   * else here, but created by the runtime, not the thread. */
  EXPECT(w, loom_stream_create(0, 0, &s[0]) == LOOM_OK, "stream 0");
  if (w->index == 0) EXPECT(w, loom_stream_default(0, &s[1]) == LOOM_OK, "default");
  else EXPECT(w, loom_stream_create(0, -(w->index % 2), &s[1]) == LOOM_OK, "stream 1");
  EXPECT(w, loom_stream_create(0, w->index % 3 == 0 ? -1 : 0, &s[2]) == LOOM_OK, "stream 2");
  loom_event_t *e = NULL;
  EXPECT(w, loom_event_create(0, LOOM_EVENT_DEFAULT, &e) == LOOM_OK, "event");
  float *host = malloc(MAX_N * sizeof *host);
  if (!s[0] || !s[1] || !s[2] || !e || !host) {
    w->failures++;
    goto out;
  }
  for (int it = 0; it < ITERATIONS && test_now() < w->deadline; ++it) {
    round_trip(w, s, e, host, it, w->can_hold && it % 2);
    switch (next_rand(w) % 8) {
      case 0: churn(w, s); break;
      case 1: cross_thread(w, s); break;
      case 2: EXPECT(w, loom_stream_synchronize(s[2]) == LOOM_OK, "sync s2"); break;
      case 3: EXPECT(w, loom_event_synchronize(e) == LOOM_OK, "event sync"); break;
      case 4: if (it % 5 == 0) short_lived(w, host); break;
      case 5: if (it % 7 == 0) inject_error(w, s); break;
      default: break;
    }
    w->iterations++;
  }
  for (int i = 0; i < 3; ++i) EXPECT(w, loom_stream_synchronize(s[i]) == LOOM_OK, "final sync");
out:
  free(host);
  loom_event_release(e);
  loom_stream_release(s[2]);
  if (w->index != 0) loom_stream_release(s[1]);
  loom_stream_release(s[0]);
  return NULL;
}

static void test_stress(void) {
  for (int i = 0; i < SHARED_EVENTS; ++i)
    CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &shared_events[i]));
  CHECK_OK(loom_memory_reset_accumulated(0));
  pthread_t threads[THREADS];
  static worker workers[THREADS];
  const double deadline = test_now() + DEADLINE_S;
  /* Holding a stream until the thread opens its gate needs a driver whose
   * commands run off the submitting thread; elsewhere every round runs
   * unheld. */
  const int can_hold = test_driver_has(TEST_DRIVER_ASYNC);
  if (!can_hold) printf("  (no held rounds: commands run inside their submission)\n");
  for (int i = 0; i < THREADS; ++i) {
    workers[i] = (worker){.index = i, .rng = 2654435761u * (unsigned)(i + 1), .deadline = deadline,
                          .can_hold = can_hold};
    CHECK_EQ_INT(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
  }
  int iterations = 0;
  for (int i = 0; i < THREADS; ++i) {
    pthread_join(threads[i], NULL);
    CHECK_EQ_INT(workers[i].failures, 0);
    CHECK_EQ_INT(atomic_load(&workers[i].callbacks_run), workers[i].callbacks_queued);
    iterations += workers[i].iterations;
  }
  CHECK(iterations > 0);
  CHECK_OK(loom_device_synchronize(0));
  for (int i = 0; i < SHARED_EVENTS; ++i) {
    CHECK_OK(loom_event_synchronize(shared_events[i]));
    loom_event_release(shared_events[i]);
  }
  loom_memory_stats st;
  CHECK_OK(loom_memory_stats_get(0, &st));
  CHECK_EQ_INT(st.allocation[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(st.allocated_bytes[LOOM_POOL_ALL].current, 0);
  printf("  %d rounds on %d threads\n", iterations, THREADS);
}

int main(void) {
  /* More workers than cores, so that launches of several streams share the
   * pool and chunks of one launch run on several threads. */
  setenv("LOOM_NUM_THREADS", "4", 0);
  TEST_FOR_EACH_DRIVER RUN_TEST(test_stress);
  TEST_MAIN_END();
}
