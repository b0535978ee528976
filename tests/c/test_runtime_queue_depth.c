/* The bounded host queue (LOOM_QUEUE_DEPTH): a producer faster than its
 * stream never has more than the depth pending, waits asleep through the
 * binding's hooks, and wakes as the stream drains; at depth 1, events,
 * cross-stream waits, a host callback that submits to its own stream and
 * the allocator's event records on a full queue neither deadlock nor
 * reorder anything.
 *
 * The first tests drive a host queue directly (white-box, as
 * test_runtime_queue_nodes.c does); the others run the public API on every
 * driver with LOOM_QUEUE_DEPTH=1. A deadlock ends the process by SIGALRM. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/drivers/host/host_internal.h"
#include "test_drivers.h"

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* ---- white-box: one host queue ------------------------------------------ */

enum { DEPTH = 8, LAUNCHES = 300 };

static loom_driver_queue *queue;
static atomic_int gate_open, ran;
static _Atomic uint64_t most_pending; /* the most pending any launch or waiter saw */
static atomic_int waits_begun, waits_ended;
/* What went wrong on threads other than the test's (the CHECK macros are
 * the main thread's): checked there. */
static atomic_int off_thread_failures;

static void note_pending(void) {
  const uint64_t now = host_queue_pending(queue);
  uint64_t seen = atomic_load(&most_pending);
  while (now > seen && !atomic_compare_exchange_weak(&most_pending, &seen, now)) {
  }
}

static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)args, (void)begin, (void)end;
  while (!atomic_load(&gate_open)) loom_cpu_relax();
  return 0;
}

/* Slower than a submission: about 20 us. */
static int slow_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)args, (void)begin, (void)end;
  note_pending();
  const uint64_t t0 = loom_now_ns();
  while (loom_now_ns() - t0 < 20000) loom_cpu_relax();
  atomic_fetch_add(&ran, 1);
  return 0;
}

static void *hook_begin(void) {
  note_pending();
  atomic_fetch_add(&waits_begun, 1);
  return &waits_begun;
}

static void hook_end(void *token) {
  if (token != &waits_begun) atomic_fetch_add(&off_thread_failures, 1);
  atomic_fetch_add(&waits_ended, 1);
}

static loom_command launch_of(loom_kernel_fn fn) {
  return (loom_command){.kind = LOOM_COMMAND_LAUNCH, .name = "test.queue_depth",
                        .u.launch = {.fn = fn, .range = 1, .grain = 1}};
}

typedef struct producer {
  host_context *ctx;
  atomic_int submitted;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  const loom_command cmd = launch_of(slow_kernel);
  for (int i = 0; i < LAUNCHES; ++i) {
    if (host_queue_submit(p->ctx, queue, &cmd) != LOOM_OK) atomic_fetch_add(&off_thread_failures, 1);
    note_pending();
    atomic_fetch_add(&p->submitted, 1);
  }
  return NULL;
}

static void start_queue(host_device *device, host_context *ctx, uint64_t depth) {
  *device = (host_device){.threads = 1};
  CHECK_EQ_INT(host_pool_init(&device->pool, 0), 0);
  *ctx = (host_context){.num_devices = 1, .devices = device, .queue_depth = depth};
  queue = NULL;
  CHECK_EQ_INT(host_queue_create(ctx, 0, 0, NULL, &queue), LOOM_OK);
  atomic_store(&most_pending, 0);
  atomic_store(&ran, 0);
  atomic_store(&waits_begun, 0);
  atomic_store(&waits_ended, 0);
  atomic_store(&off_thread_failures, 0);
}

/* A producer behind a held queue fills it to the depth exactly, then
 * sleeps (the hooks say so) until the queue drains; every launch runs. */
static void test_producer_never_exceeds_depth(void) {
  host_device device;
  host_context ctx;
  start_queue(&device, &ctx, DEPTH);
  if (!queue) return;
  loom_set_queue_wait_hooks(hook_begin, hook_end);
  atomic_store(&gate_open, 0);
  const loom_command gate = launch_of(gate_kernel);
  CHECK_EQ_INT(host_queue_submit(&ctx, queue, &gate), LOOM_OK);
  producer p = {.ctx = &ctx};
  pthread_t thread;
  CHECK_EQ_INT(pthread_create(&thread, NULL, produce, &p), 0);
  for (int i = 0; i < 5000 && !atomic_load(&waits_begun); ++i) sleep_ms(1);
  CHECK_MSG(atomic_load(&waits_begun) == 1, "the producer never waited behind a full queue");
  sleep_ms(20); /* a producer that did not wait would run on meanwhile */
  CHECK_MSG(atomic_load(&p.submitted) == DEPTH - 1, "%d submitted behind the gate at depth %d",
            atomic_load(&p.submitted), DEPTH);
  CHECK_MSG(host_queue_pending(queue) == DEPTH, "%llu pending at depth %d",
            (unsigned long long)host_queue_pending(queue), DEPTH);
  atomic_store(&gate_open, 1);
  pthread_join(thread, NULL);
  CHECK_EQ_INT(host_queue_synchronize(&ctx, queue), LOOM_OK);
  CHECK_EQ_INT(atomic_load(&ran), LAUNCHES);
  CHECK_MSG(atomic_load(&most_pending) <= DEPTH, "%llu pending at depth %d",
            (unsigned long long)atomic_load(&most_pending), DEPTH);
  /* Launches slower than submissions: the producer waited again and again,
   * each wait ended. */
  CHECK_MSG(atomic_load(&waits_begun) > 1, "%d waits", atomic_load(&waits_begun));
  CHECK_EQ_INT(atomic_load(&waits_ended), atomic_load(&waits_begun));
  CHECK_EQ_INT(atomic_load(&off_thread_failures), 0);
  loom_set_queue_wait_hooks(NULL, NULL);
  host_queue_destroy(&ctx, queue);
  host_pool_destroy(&device.pool);
}

/* Depth 0 bounds nothing: the whole loop queues behind the gate. */
static void test_depth_zero_is_unbounded(void) {
  host_device device;
  host_context ctx;
  start_queue(&device, &ctx, 0);
  if (!queue) return;
  atomic_store(&gate_open, 0);
  const loom_command gate = launch_of(gate_kernel), cmd = launch_of(slow_kernel);
  CHECK_EQ_INT(host_queue_submit(&ctx, queue, &gate), LOOM_OK);
  for (int i = 0; i < 4 * DEPTH; ++i) CHECK_EQ_INT(host_queue_submit(&ctx, queue, &cmd), LOOM_OK);
  CHECK_EQ_INT((int)host_queue_pending(queue), 4 * DEPTH + 1);
  atomic_store(&gate_open, 1);
  CHECK_EQ_INT(host_queue_synchronize(&ctx, queue), LOOM_OK);
  CHECK_EQ_INT(atomic_load(&ran), 4 * DEPTH);
  host_queue_destroy(&ctx, queue);
  host_pool_destroy(&device.pool);
}

/* ---- every driver, LOOM_QUEUE_DEPTH=1 ------------------------------------ */

enum { STEPS = 200 };

static atomic_int order_next;
static int order[STEPS];

/* Appends its scalar to `order`: the order launches ran in. */
static int step_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  const int at = atomic_fetch_add(&order_next, 1);
  if (at < STEPS) order[at] = (int)args->scalars[0].i;
  return 0;
}

static loom_status try_step(loom_stream_t *s, int value) {
  const loom_scalar v = {.i = value};
  const loom_launch_desc d = {.name = "test.step", .fn = step_kernel, .scalars = &v,
                              .num_scalars = 1, .range = 1, .grain = 1};
  return loom_launch(s, &d);
}

static void launch_step(loom_stream_t *s, int value) { CHECK_OK(try_step(s, value)); }

/* Two streams that take turns through events, each queue one command deep:
 * every wait is on a record already submitted, so nothing deadlocks, and
 * the launches run in the order the events impose. */
static void test_depth_one_events_across_streams(void) {
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  loom_event_t *on_a = NULL, *on_b = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &on_a));
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &on_b));
  atomic_store(&order_next, 0);
  for (int i = 0; i < STEPS; i += 2) {
    launch_step(a, i);
    CHECK_OK(loom_event_record(on_a, a));
    CHECK_OK(loom_stream_wait_event(b, on_a));
    launch_step(b, i + 1);
    CHECK_OK(loom_event_record(on_b, b));
    CHECK_OK(loom_stream_wait_event(a, on_b));
  }
  CHECK_OK(loom_stream_synchronize(a));
  CHECK_OK(loom_stream_synchronize(b));
  CHECK_EQ_INT(atomic_load(&order_next), STEPS);
  int in_order = 1;
  for (int i = 0; i < STEPS; ++i) in_order &= order[i] == i;
  CHECK_MSG(in_order, "launches ran out of the events' order");
  if (test_driver_has(TEST_DRIVER_ASYNC))
    CHECK_MSG(loom_stream_queue_waits(a) > 0 || loom_stream_queue_waits(b) > 0,
              "no submission waited at depth 1");
  loom_event_release(on_a);
  loom_event_release(on_b);
  loom_stream_release(a);
  loom_stream_release(b);
}

/* A callback that submits to its own full stream: the thread running it
 * must not wait for room (the command it would wait for is its own). */
static void submit_from_callback(void *arg) {
  loom_stream_t *s = arg;
  for (int i = 0; i < 3; ++i)
    if (try_step(s, 100 + i) != LOOM_OK) atomic_fetch_add(&off_thread_failures, 1);
}

static void test_depth_one_callback_submits_to_its_stream(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  atomic_store(&order_next, 0);
  atomic_store(&off_thread_failures, 0);
  launch_step(s, 1);
  CHECK_OK(loom_host_callback(s, submit_from_callback, s, "submit from callback"));
  launch_step(s, 2);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_stream_synchronize(s)); /* and what the callback submitted */
  CHECK_EQ_INT(atomic_load(&order_next), 5);
  CHECK_EQ_INT(atomic_load(&off_thread_failures), 0);
  loom_stream_release(s);
}

static atomic_int hold_open;

static void hold(void *arg) {
  (void)arg;
  while (!atomic_load(&hold_open)) sleep_ms(1);
}

typedef struct free_job {
  void *ptr;
  loom_status status;
  atomic_int done;
} free_job;

static void *free_block(void *arg) {
  free_job *j = arg;
  j->status = loom_free(j->ptr);
  atomic_store(&j->done, 1);
  return NULL;
}

/* Freeing a block another stream used records an event on that stream
 * under the allocator's lock: on a full queue it must not wait (the
 * stream's work may need that lock, or the thread's interpreter). */
static void test_depth_one_free_records_on_full_queue(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, "commands run inside their submission: no queue fills");
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  void *ptr = NULL;
  CHECK_OK(loom_malloc(0, 4096, a, &ptr));
  CHECK_OK(loom_record_stream(ptr, b));
  atomic_store(&hold_open, 0);
  CHECK_OK(loom_host_callback(b, hold, NULL, "hold b")); /* b's queue is full */
  free_job job = {.ptr = ptr};
  pthread_t thread;
  CHECK_EQ_INT(pthread_create(&thread, NULL, free_block, &job), 0);
  for (int i = 0; i < 2000 && !atomic_load(&job.done); ++i) sleep_ms(1);
  CHECK_MSG(atomic_load(&job.done), "loom_free waited for room in a full queue");
  atomic_store(&hold_open, 1);
  pthread_join(thread, NULL);
  CHECK_OK(job.status);
  CHECK_OK(loom_stream_synchronize(b));
  loom_stream_release(a);
  loom_stream_release(b);
}

int main(void) {
  alarm(120); /* a deadlock ends the test (SIGALRM) rather than hang it */
  RUN_TEST(test_producer_never_exceeds_depth);
  RUN_TEST(test_depth_zero_is_unbounded);
  setenv("LOOM_QUEUE_DEPTH", "1", 1);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_depth_one_events_across_streams);
    RUN_TEST(test_depth_one_callback_submits_to_its_stream);
    RUN_TEST(test_depth_one_free_records_on_full_queue);
  }
  TEST_MAIN_END();
}
