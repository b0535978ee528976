/* The host queue's nodes (runtime/drivers/host/host_queue.c), white-box:
 * a submitted command is copied into a node, and an executed node is kept
 * for a later submission of its size class, so a steady stream of launches
 * of a few shapes stops calling malloc once warm; the kept nodes carry each
 * launch's own descriptors and scalars (no stale ones), and a command too
 * large for any class still runs, in a node of its own. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/clock.h"

#include "runtime/drivers/host/host_internal.h"
#include "test_util.h"

enum { ELEMS = 64, ROUND = 90, ROUNDS = 30, MAX_TENSORS = 40 };

/* Adds scalar 0 times (1 + the number of tensors) to every element of
 * tensor 0 (int64): a launch that read another launch's descriptors or
 * scalars adds the wrong amount. */
static int add_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int64_t *x = args->tensors[0].data;
  const int64_t step = args->scalars[0].i * (1 + (int64_t)args->num_tensors);
  for (int64_t i = begin; i < end; ++i) x[i] += step;
  for (uint32_t t = 1; t < args->num_tensors; ++t)
    if (args->tensors[t].sizes[0] != (int64_t)t) return 1; /* a stale descriptor */
  return 0;
}

/* Holds the queue until the test opens it, so that a round's launches are
 * all queued at once: each round then needs as many nodes as the one
 * before, whatever the executor's pace. */
static atomic_int gate_open;
static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)args, (void)begin, (void)end;
  while (!atomic_load(&gate_open)) loom_cpu_relax();
  return 0;
}

static loom_tensor views[MAX_TENSORS];
static loom_scalar scalars[2];

static void submit(host_context *ctx, loom_driver_queue *q, int64_t *x, uint32_t num_tensors,
                   int64_t value) {
  views[0] = (loom_tensor){.data = x, .dtype = LOOM_INT64, .rank = 1, .sizes = {ELEMS}, .strides = {1}};
  for (uint32_t t = 1; t < num_tensors; ++t)
    views[t] = (loom_tensor){.data = x, .dtype = LOOM_INT64, .rank = 1, .sizes = {t}, .strides = {1}};
  scalars[0].i = value;
  scalars[1].i = -1;
  const loom_command cmd = {.kind = LOOM_COMMAND_LAUNCH, .name = "test.add",
                            .u.launch = {.fn = add_kernel, .tensors = views, .num_tensors = num_tensors,
                                         .scalars = scalars, .num_scalars = 2, .range = ELEMS,
                                         .grain = ELEMS}};
  CHECK_EQ_INT(host_queue_submit(ctx, q, &cmd), LOOM_OK);
  /* The queue copied them: scribbling over the caller's arrays changes nothing. */
  memset(views, 0x5a, sizeof views);
  scalars[0].i = 1000000;
}

/* One round: launches of 1, 4 and 12 tensors (three size classes); returns
 * what they add to each element. */
static int64_t round_of_launches(host_context *ctx, loom_driver_queue *q, int64_t *x, int round) {
  static const uint32_t counts[3] = {1, 4, 12};
  int64_t added = 0;
  atomic_store(&gate_open, 0);
  const loom_tensor gate_view = {.data = x, .dtype = LOOM_INT64, .rank = 1, .sizes = {ELEMS}, .strides = {1}};
  const loom_command gate = {.kind = LOOM_COMMAND_LAUNCH, .name = "test.gate",
                             .u.launch = {.fn = gate_kernel, .tensors = &gate_view, .num_tensors = 1,
                                          .range = 1, .grain = 1}};
  CHECK_EQ_INT(host_queue_submit(ctx, q, &gate), LOOM_OK);
  for (int i = 0; i < ROUND; ++i) {
    const uint32_t nt = counts[i % 3];
    const int64_t value = round * 7 + i;
    submit(ctx, q, x, nt, value);
    added += value * (1 + (int64_t)nt);
  }
  atomic_store(&gate_open, 1);
  CHECK_EQ_INT(host_queue_synchronize(ctx, q), LOOM_OK);
  return added;
}

static void test_steady_launches_reuse_nodes(void) {
  host_device device = {.threads = 1};
  CHECK_EQ_INT(host_pool_init(&device.pool, 0), 0);
  host_context ctx = {.num_devices = 1, .devices = &device};
  loom_driver_queue *q = NULL;
  CHECK_EQ_INT(host_queue_create(&ctx, 0, 0, NULL, &q), LOOM_OK);
  if (!q) return;
  int64_t x[ELEMS] = {0}, expect = round_of_launches(&ctx, q, x, 0);
  const uint64_t warm = host_queue_nodes_allocated(q);
  CHECK_MSG(warm == ROUND + 1, "%llu nodes allocated for %d commands queued at once",
            (unsigned long long)warm, ROUND + 1);
  for (int r = 1; r <= ROUNDS; ++r) expect += round_of_launches(&ctx, q, x, r);
  /* Each round finds the nodes of the one before it kept. */
  CHECK_MSG(host_queue_nodes_allocated(q) == warm,
            "%llu nodes allocated after warm-up over %d launches",
            (unsigned long long)(host_queue_nodes_allocated(q) - warm), ROUNDS * ROUND);
  for (int i = 0; i < ELEMS; ++i) CHECK(x[i] == expect);

  /* Beyond the largest class: a node of its own each time, still correct. */
  const uint64_t before = host_queue_nodes_allocated(q);
  for (int i = 0; i < 3; ++i) {
    submit(&ctx, q, x, MAX_TENSORS, 5);
    expect += 5 * (1 + MAX_TENSORS);
  }
  CHECK_EQ_INT(host_queue_synchronize(&ctx, q), LOOM_OK);
  CHECK(host_queue_nodes_allocated(q) == before + 3);
  for (int i = 0; i < ELEMS; ++i) CHECK(x[i] == expect);
  host_queue_destroy(&ctx, q);
  host_pool_destroy(&device.pool);
}

int main(void) {
  RUN_TEST(test_steady_launches_reuse_nodes);
  TEST_MAIN_END();
}
