/* Events: a stream wait holds the state the event had when the wait was
 * enqueued, whatever is recorded on the event afterwards (CUDA semantics).
 *
 * Streams are held by host callbacks that block on a flag, so a capture is
 * pending for exactly as long as the test says. What cannot be proven
 * without a clock is that a held stream never runs: each test gives a
 * wrongly released stream a grace period to show itself, and fails if it
 * does. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "test_drivers.h"

enum { GRACE_MS = 100 };

/* Every test here holds streams with callbacks that block. */
#define HOLDS_STREAMS                                                                  \
  "commands run inside their submission: a callback that holds its stream until the " \
  "test opens a gate would hold the test's own thread forever"

typedef struct gate {
  atomic_int open;
  atomic_int passed; /* set once the holding callback returned */
} gate;

/* Holds its stream until the gate opens. Callbacks may block; kernels may
 * not. */
static void hold(void *arg) {
  gate *g = arg;
  while (!atomic_load(&g->open)) {
    struct timespec us = {0, 50000};
    nanosleep(&us, NULL);
  }
  atomic_store(&g->passed, 1);
}

typedef struct probe {
  atomic_int ran;
  int gate_passed; /* what the probe saw of the gate when it ran */
  gate *watched;
} probe;

static void run_probe(void *arg) {
  probe *p = arg;
  p->gate_passed = atomic_load(&p->watched->passed);
  atomic_store(&p->ran, 1);
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* 1 if the probe ran within the grace period. */
static int probe_runs_within_grace(probe *p) {
  for (int i = 0; i < GRACE_MS && !atomic_load(&p->ran); ++i) sleep_ms(1);
  return atomic_load(&p->ran);
}

/* 1 once the probe ran, 0 if it did not within `seconds` (a hang otherwise). */
static int probe_runs(probe *p, int seconds) {
  for (int i = 0; i < seconds * 1000 && !atomic_load(&p->ran); ++i) sleep_ms(1);
  return atomic_load(&p->ran);
}

/* B waits on E captured on held stream A; E is then re-recorded on other,
 * idle streams many times (more than any fixed table of out-of-order
 * completions holds). B stays held until A's capture completes. */
static void test_wait_survives_many_rerecords(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, HOLDS_STREAMS);
  enum { OTHERS = 4, RERECORDS = 200 };
  loom_stream_t *a = NULL, *b = NULL, *others[OTHERS] = {0};
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  for (int i = 0; i < OTHERS; ++i) CHECK_OK(loom_stream_create(0, 0, &others[i]));
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));

  gate ga = {0};
  probe pb = {.watched = &ga};
  CHECK_OK(loom_host_callback(a, hold, &ga, "hold a"));
  CHECK_OK(loom_event_record(e, a));
  CHECK_OK(loom_stream_wait_event(b, e));
  CHECK_OK(loom_host_callback(b, run_probe, &pb, "probe b"));
  for (int i = 0; i < RERECORDS; ++i) CHECK_OK(loom_event_record(e, others[i % OTHERS]));
  for (int i = 0; i < OTHERS; ++i) CHECK_OK(loom_stream_synchronize(others[i]));
  CHECK_OK(loom_event_query(e)); /* the latest capture is done */

  CHECK(!probe_runs_within_grace(&pb));
  CHECK_EQ_INT(loom_stream_query(b), LOOM_ERROR_NOT_READY);
  atomic_store(&ga.open, 1);
  CHECK_OK(loom_stream_synchronize(b));
  CHECK_EQ_INT(atomic_load(&pb.ran), 1);
  CHECK_EQ_INT(pb.gate_passed, 1); /* B ran after A's captured work */
  CHECK_OK(loom_stream_synchronize(a));
  CHECK_OK(loom_event_synchronize(e));

  loom_event_release(e);
  for (int i = 0; i < OTHERS; ++i) loom_stream_release(others[i]);
  loom_stream_release(b);
  loom_stream_release(a);
}

/* Two waits on one event, each enqueued after a different capture: each is
 * released by its own capture. The later capture completes first, so its
 * waiter runs while the earlier waiter stays held. */
static void test_each_wait_holds_its_own_capture(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, HOLDS_STREAMS);
  loom_stream_t *a1 = NULL, *a2 = NULL, *w1 = NULL, *w2 = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a1));
  CHECK_OK(loom_stream_create(0, 0, &a2));
  CHECK_OK(loom_stream_create(0, 0, &w1));
  CHECK_OK(loom_stream_create(0, -1, &w2));
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));

  gate g1 = {0}, g2 = {0};
  probe p1 = {.watched = &g1}, p2 = {.watched = &g2};
  CHECK_OK(loom_host_callback(a1, hold, &g1, "hold a1"));
  CHECK_OK(loom_host_callback(a2, hold, &g2, "hold a2"));
  CHECK_OK(loom_event_record(e, a1));
  CHECK_OK(loom_stream_wait_event(w1, e)); /* for a1's capture */
  CHECK_OK(loom_host_callback(w1, run_probe, &p1, "probe w1"));
  CHECK_OK(loom_event_record(e, a2));
  CHECK_OK(loom_stream_wait_event(w2, e)); /* for a2's capture */
  CHECK_OK(loom_host_callback(w2, run_probe, &p2, "probe w2"));
  CHECK_EQ_INT(loom_event_query(e), LOOM_ERROR_NOT_READY);

  atomic_store(&g2.open, 1);
  CHECK(probe_runs(&p2, 10)); /* a hang here: w2 waited for a1's capture */
  CHECK_EQ_INT(p2.gate_passed, 1);
  CHECK_OK(loom_event_query(e)); /* the latest capture (a2's) is done */
  CHECK(!probe_runs_within_grace(&p1));
  atomic_store(&g1.open, 1);
  CHECK_OK(loom_stream_synchronize(w1));
  CHECK_EQ_INT(p1.gate_passed, 1);

  CHECK_OK(loom_stream_synchronize(w2));
  CHECK_OK(loom_stream_synchronize(a1));
  CHECK_OK(loom_stream_synchronize(a2));
  loom_event_release(e);
  loom_stream_release(w2);
  loom_stream_release(w1);
  loom_stream_release(a2);
  loom_stream_release(a1);
}

/* Captures pile up on a held stream, interleaved with captures on an idle
 * one that complete at once: hundreds pending out of order. A wait enqueued
 * after each held capture stays held; all are released in order when the
 * held stream runs. */
static void test_many_pending_captures(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC, HOLDS_STREAMS);
  enum { ROUNDS = 300 };
  loom_stream_t *held = NULL, *idle = NULL, *w = NULL;
  CHECK_OK(loom_stream_create(0, 0, &held));
  CHECK_OK(loom_stream_create(0, 0, &idle));
  CHECK_OK(loom_stream_create(0, 0, &w));
  loom_event_t *e = NULL;
  CHECK_OK(loom_event_create(0, LOOM_EVENT_DEFAULT, &e));
  gate g = {0};
  probe p = {.watched = &g};
  CHECK_OK(loom_host_callback(held, hold, &g, "hold"));
  for (int i = 0; i < ROUNDS; ++i) {
    CHECK_OK(loom_event_record(e, held));
    if (i == 0) {
      CHECK_OK(loom_stream_wait_event(w, e));
      CHECK_OK(loom_host_callback(w, run_probe, &p, "probe"));
    }
    CHECK_OK(loom_event_record(e, idle));
  }
  CHECK_OK(loom_stream_synchronize(idle));
  CHECK_OK(loom_event_query(e));
  CHECK(!probe_runs_within_grace(&p));
  atomic_store(&g.open, 1);
  CHECK_OK(loom_stream_synchronize(w));
  CHECK_EQ_INT(p.gate_passed, 1);
  CHECK_OK(loom_stream_synchronize(held));
  CHECK_OK(loom_event_synchronize(e));
  loom_event_release(e);
  loom_stream_release(w);
  loom_stream_release(idle);
  loom_stream_release(held);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_wait_survives_many_rerecords);
    RUN_TEST(test_each_wait_holds_its_own_capture);
    RUN_TEST(test_many_pending_captures);
  }
  TEST_MAIN_END();
}
