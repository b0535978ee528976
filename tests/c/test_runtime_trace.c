/* Tracing: the per-stream rings the profiler drains. Launches, fills,
 * copies and callbacks on two streams record where they execute, in
 * stream order, with their enqueue; nothing is recorded while tracing is
 * off; a full ring drops and counts, and concurrent producers and a
 * concurrent drain lose nothing. */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_drivers.h"

enum { MAX_RECORDS = 1 << 14 };
static loom_trace_record records[MAX_RECORDS];

static int nop_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) { return 0; }

/* Runs for at least 2 ms: its record must span that where it executes. */
static int spin_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  const uint64_t until = loom_trace_now() + 2000000;
  while (loom_trace_now() < until) {
  }
  return 0;
}

static const loom_kernel_t *registered_kernel(void) {
  static const loom_kernel_t *k;
  if (!k && loom_kernel_register("trace_test.registered", nop_kernel) != LOOM_OK) return NULL;
  if (!k) loom_kernel_lookup("trace_test.registered", &k);
  return k;
}

static size_t drain_all(void) {
  size_t n = 0, got;
  while (n < MAX_RECORDS && (got = loom_trace_drain(records + n, MAX_RECORDS - n)) > 0) n += got;
  return n;
}

/* The executed record of sequence `seq` (kind != ENQUEUE) or its ENQUEUE. */
static const loom_trace_record *find(size_t n, uint64_t seq, int enqueue) {
  for (size_t i = 0; i < n; ++i)
    if (records[i].sequence == seq && (records[i].kind == LOOM_TRACE_ENQUEUE) == enqueue)
      return &records[i];
  return NULL;
}

static loom_launch_desc nop_launch(loom_tensor *t, const char *name) {
  return (loom_launch_desc){.name = name, .fn = nop_kernel, .tensors = t, .num_tensors = 1,
                            .range = 1, .grain = 1};
}

static void callback_nothing(void *user) { (void)user; }

static void test_records_on_two_streams(void) {
  float *dev = NULL;
  float host[64] = {0};
  CHECK_OK(loom_malloc(0, sizeof host, NULL, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64}, .strides = {1}};
  loom_stream_t *s0 = NULL, *s1 = NULL;
  CHECK_OK(loom_stream_default(0, &s0));
  CHECK_OK(loom_stream_create(0, 0, &s1));
  const loom_kernel_t *k = registered_kernel();
  CHECK(k != NULL);
  drain_all();

  const uint64_t before = loom_trace_now();
  CHECK_OK(loom_trace_enable(0));
  CHECK(loom_trace_enabled());
  loom_trace_set_correlation(42);
  loom_launch_desc a = nop_launch(&t, "trace_a");
  a.flops = 123;
  a.flags = LOOM_LAUNCH_MAY_RUN_INLINE;
  for (int i = 0; i < 3; ++i) CHECK_OK(loom_launch(s0, &a));
  loom_launch_desc spin = nop_launch(&t, "trace_spin");
  spin.fn = spin_kernel;
  CHECK_OK(loom_launch(s0, &spin));
  loom_launch_desc named = nop_launch(&t, "my_op");
  named.fn = NULL;
  named.kernel = k;
  CHECK_OK(loom_launch(s0, &named));
  loom_trace_set_correlation(43);
  loom_launch_desc fill = nop_launch(&t, "trace_fill");
  fill.flags = LOOM_LAUNCH_FILL;
  CHECK_OK(loom_launch(s1, &fill));
  CHECK_OK(loom_memcpy(s1, dev, host, sizeof host));
  CHECK_OK(loom_memcpy(s1, host, dev, sizeof host));
  CHECK_OK(loom_host_callback(s1, callback_nothing, NULL, "trace_callback"));
  loom_trace_set_correlation(0);
  CHECK_OK(loom_stream_synchronize(s0));
  CHECK_OK(loom_stream_synchronize(s1));
  loom_trace_disable();
  CHECK(!loom_trace_enabled());
  const uint64_t after = loom_trace_now();

  const size_t n = drain_all();
  CHECK_EQ_INT(n, 2 * 9);
  CHECK_EQ_INT(loom_trace_dropped(), 0);
  /* Per stream, executed records in enqueue order and back to back. */
  static const char *names0[] = {"trace_a", "trace_a", "trace_a", "trace_spin",
                                 "trace_test.registered"};
  static const char *names1[] = {"trace_fill", "memcpy HtoD", "memcpy DtoH", "trace_callback"};
  static const uint32_t kinds1[] = {LOOM_TRACE_FILL, LOOM_TRACE_COPY, LOOM_TRACE_COPY,
                                    LOOM_TRACE_CALLBACK};
  const loom_trace_record *prev = NULL;
  uint64_t stream0 = 0, stream1 = 0, seq = 0;
  int seen0 = 0, seen1 = 0;
  for (size_t i = 0; i < n; ++i) {
    const loom_trace_record *r = &records[i];
    if (r->kind == LOOM_TRACE_ENQUEUE) continue;
    CHECK(r->sequence > 0 && r->device == 0);
    CHECK(r->start_ns >= before && r->start_ns <= r->end_ns && r->end_ns <= after);
    const int on0 = r->correlation == 42;
    const int k_index = on0 ? seen0++ : seen1++;
    if (on0 ? k_index >= 5 : k_index >= 4) {
      CHECK_MSG(0, "unexpected record %s", r->name);
      continue;
    }
    uint64_t *stream = on0 ? &stream0 : &stream1;
    if (!*stream) *stream = r->stream;
    CHECK(r->stream == *stream);
    CHECK_MSG(!strcmp(r->name, on0 ? names0[k_index] : names1[k_index]), "record %zu is %s", i,
              r->name);
    if (on0) {
      CHECK_EQ_INT(r->kind, LOOM_TRACE_KERNEL);
      CHECK_EQ_INT(r->bytes, sizeof host);
      CHECK_EQ_INT(r->flops, k_index < 3 ? 123 : 0);
      if (k_index == 3) CHECK(r->end_ns - r->start_ns >= 2000000);
      if (k_index == 4) CHECK(!strcmp(r->op, "my_op"));
      /* Stream order: each starts after the previous one ended. */
      if (prev) CHECK(r->sequence > seq && r->start_ns >= prev->end_ns);
      prev = r;
      seq = r->sequence;
    } else {
      CHECK_EQ_INT(r->kind, kinds1[k_index]);
      CHECK_EQ_INT(r->bytes, k_index == 3 ? 0 : sizeof host);
      CHECK_EQ_INT(r->flops, 0);
    }
    /* Its enqueue: the same command, begun before it ran, on this thread. */
    const loom_trace_record *e = find(n, r->sequence, 1);
    CHECK(e != NULL);
    if (!e) continue;
    CHECK(e->stream == r->stream && e->correlation == r->correlation);
    CHECK(e->start_ns <= r->start_ns && e->start_ns <= e->end_ns);
    CHECK_EQ_INT(e->thread, (uint64_t)syscall(SYS_gettid));
    CHECK(!strcmp(e->name, r->kind == LOOM_TRACE_COPY       ? "loom_memcpy"
                           : r->kind == LOOM_TRACE_CALLBACK ? "loom_host_callback"
                                                            : "loom_launch"));
  }
  CHECK_EQ_INT(seen0, 5);
  CHECK_EQ_INT(seen1, 4);
  CHECK(stream0 && stream1 && stream0 != stream1);
  loom_stream_release(s1);
  CHECK_OK(loom_free(dev));
}

static void test_nothing_recorded_when_off(void) {
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, 256, NULL, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64}, .strides = {1}};
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  loom_launch_desc d = nop_launch(&t, "trace_off");
  /* A traced launch first, so that the stream has its ring. */
  CHECK_OK(loom_trace_enable(0));
  CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_stream_synchronize(s));
  loom_trace_disable();
  CHECK_EQ_INT(drain_all(), 2);
  float host[64] = {0};
  for (int i = 0; i < 10; ++i) {
    CHECK_OK(loom_launch(s, &d));
    CHECK_OK(loom_memcpy(s, dev, host, sizeof host));
  }
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_EQ_INT(drain_all(), 0);
  CHECK_EQ_INT(loom_trace_dropped(), 0);
  CHECK_OK(loom_free(dev));
}

static void test_overflow_drops_and_counts(void) {
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, 256, NULL, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64}, .strides = {1}};
  loom_stream_t *s = NULL;
  /* A new stream: its ring takes the size asked now. */
  CHECK_OK(loom_stream_create(0, 0, &s));
  drain_all();
  CHECK_OK(loom_trace_enable(10)); /* rounded up to 64 */
  loom_launch_desc d = nop_launch(&t, "trace_overflow");
  for (int i = 0; i < 100; ++i) CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_EQ_INT(drain_all(), 64);
  CHECK_EQ_INT(loom_trace_dropped(), 200 - 64);
  for (size_t i = 0; i < 64; ++i)
    CHECK(records[i].sequence > 0 && (records[i].kind == LOOM_TRACE_KERNEL ||
                                      records[i].kind == LOOM_TRACE_ENQUEUE) &&
          !strcmp(records[i].op, "trace_overflow"));
  /* Drained, the ring takes records again. */
  CHECK_OK(loom_launch(s, &d));
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_EQ_INT(drain_all(), 2);
  /* A fresh enable forgets the drops. */
  CHECK_OK(loom_trace_enable(0));
  CHECK_EQ_INT(loom_trace_dropped(), 0);
  loom_trace_disable();
  loom_stream_release(s);
  CHECK_OK(loom_free(dev));
}

static void test_destroyed_stream_keeps_its_records(void) {
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, 256, NULL, (void **)&dev));
  loom_tensor t = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64}, .strides = {1}};
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  drain_all();
  CHECK_OK(loom_trace_enable(0));
  loom_launch_desc d = nop_launch(&t, "trace_gone");
  CHECK_OK(loom_launch(s, &d));
  loom_stream_release(s); /* waits for the launch, then destroys the stream */
  loom_trace_disable();
  const size_t n = drain_all();
  CHECK_EQ_INT(n, 2);
  for (size_t i = 0; i < n; ++i) CHECK(!strcmp(records[i].op, "trace_gone"));
  CHECK_EQ_INT(drain_all(), 0);
  CHECK_OK(loom_free(dev));
}

enum { THREADS = 4, LAUNCHES = 200 };

typedef struct producer {
  loom_stream_t *stream;
  loom_tensor tensor;
  int index;
  uint64_t tid;
} producer;

static atomic_int draining;
static size_t drained_by_drainer;
static loom_trace_record drainer_records[MAX_RECORDS];

static void *produce(void *arg) {
  producer *p = arg;
  p->tid = (uint64_t)syscall(SYS_gettid);
  loom_trace_set_correlation(1000 + (uint64_t)p->index);
  loom_launch_desc d = nop_launch(&p->tensor, "trace_concurrent");
  d.flags = LOOM_LAUNCH_MAY_RUN_INLINE;
  for (int i = 0; i < LAUNCHES; ++i)
    if (loom_launch(p->stream, &d) != LOOM_OK) return (void *)1;
  return NULL;
}

static void *drain_while_running(void *arg) {
  (void)arg;
  size_t n = 0;
  while (atomic_load(&draining) && n < MAX_RECORDS) {
    const size_t got = loom_trace_drain(drainer_records + n, MAX_RECORDS - n);
    if (!got) sched_yield();
    n += got;
  }
  drained_by_drainer = n;
  return NULL;
}

/* Several threads launching on one stream while another drains: each
 * command's two records arrive once, with its thread's correlation. */
static void test_concurrent_producers_and_drain(void) {
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, 256, NULL, (void **)&dev));
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  drain_all();
  CHECK_OK(loom_trace_enable(0));
  atomic_store(&draining, 1);
  pthread_t drainer, threads[THREADS];
  producer p[THREADS];
  CHECK(pthread_create(&drainer, NULL, drain_while_running, NULL) == 0);
  for (int i = 0; i < THREADS; ++i) {
    p[i] = (producer){.stream = s, .index = i,
                      .tensor = {.data = dev, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {64},
                                 .strides = {1}}};
    CHECK(pthread_create(&threads[i], NULL, produce, &p[i]) == 0);
  }
  for (int i = 0; i < THREADS; ++i) {
    void *rc = NULL;
    pthread_join(threads[i], &rc);
    CHECK(rc == NULL);
  }
  CHECK_OK(loom_stream_synchronize(s));
  atomic_store(&draining, 0);
  pthread_join(drainer, NULL);
  loom_trace_disable();
  const size_t rest = drain_all();
  CHECK_EQ_INT(drained_by_drainer + rest, 2 * THREADS * LAUNCHES);
  CHECK_EQ_INT(loom_trace_dropped(), 0);
  /* Every ENQUEUE names its thread and that thread's correlation. */
  int per_thread[THREADS] = {0};
  for (size_t i = 0; i < drained_by_drainer + rest; ++i) {
    const loom_trace_record *r =
        i < drained_by_drainer ? &drainer_records[i] : &records[i - drained_by_drainer];
    const int index = (int)(r->correlation - 1000);
    CHECK(index >= 0 && index < THREADS);
    if (index < 0 || index >= THREADS) continue;
    if (r->kind == LOOM_TRACE_ENQUEUE) {
      CHECK_EQ_INT(r->thread, p[index].tid);
      ++per_thread[index];
    }
  }
  for (int i = 0; i < THREADS; ++i) CHECK_EQ_INT(per_thread[i], LAUNCHES);
  CHECK_OK(loom_free(dev));
}

static void test_bad_arguments(void) {
  CHECK(loom_trace_enable((size_t)1 << 40) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(!loom_trace_enabled());
  CHECK_EQ_INT(loom_trace_drain(NULL, 10), 0);
  loom_trace_set_correlation(7);
  CHECK_EQ_INT(loom_trace_correlation(), 7);
  loom_trace_set_correlation(0);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_records_on_two_streams);
    RUN_TEST(test_nothing_recorded_when_off);
    RUN_TEST(test_overflow_drops_and_counts);
    RUN_TEST(test_destroyed_stream_keeps_its_records);
    RUN_TEST(test_concurrent_producers_and_drain);
    RUN_TEST(test_bad_arguments);
  }
  TEST_MAIN_END();
}
