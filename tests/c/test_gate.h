/* tests/c/test_gate.h — holding a stream so that what is enqueued meanwhile
 * waits in its queue: the executor then sees the whole program at once when
 * the gate opens (the fusion tests). */
#ifndef LOOM_TEST_GATE_H
#define LOOM_TEST_GATE_H

#include <sched.h>
#include <stdatomic.h>

#include "loom/hal.h"
#include "test_drivers.h"

static atomic_int gate_open;

static void gate(void *user) {
  (void)user;
  while (!atomic_load(&gate_open)) sched_yield();
}

/* Holds `s` until open_gate; `name` labels the callback in traces. */
static void hold_named(loom_stream_t *s, const char *name) {
  atomic_store(&gate_open, 0);
  CHECK_OK(loom_host_callback(s, gate, NULL, name));
}

static void open_gate(void) { atomic_store(&gate_open, 1); }

#endif
