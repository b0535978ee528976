/* Host queues: one executor thread per stream runs its commands in order.
 *
 * Enqueue copies the command and its descriptors into one node (one the
 * queue kept from an executed command, when it has one that size) and
 * appends it under a short lock; the executor is only signalled when it
 * sleeps. An idle executor spins briefly first, because a tiny op usually
 * follows another within microseconds. A tiny launch on an idle queue runs
 * on the submitting thread instead (host_queue_run_inline).
 *
 * A queue holds at most `depth` commands not yet completed (LOOM_QUEUE_DEPTH):
 * a thread that submits to a full queue sleeps on a condition variable,
 * between the binding's hooks (torch_loom releases the GIL there), until the
 * stream's work drains to `room_at`; the executor, or a synchronizing
 * thread holding the token, wakes it. A thread running commands (a host
 * callback that submits) never waits: the commands it would wait for may be
 * its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/cpu.h"
#include "base/stream_store.h"
#include "runtime/drivers/host/host_fuse.h"
#include "runtime/drivers/host/host_internal.h"

#define EXECUTOR_SPIN_NS 50000
#define SYNC_SPIN_NS 20000
#define INLINE_LAUNCH_MAX_ELEMENTS 4096

typedef struct host_node {
  struct host_node *next;
  int size_class; /* its capacity's (node_class); NODE_CLASSES: sized to one command */
  /* Ran already, in a fused group ahead of commands it followed: its turn
   * only counts it complete. Only the execution token's holder uses it. */
  int done;
  uint64_t seq; /* its place among all queues' submissions (host_fuse_clock_tick) */
  loom_command command; /* launch descriptors point into this node */
} host_node;

/* A node's capacity in bytes is NODE_MIN << its size class; larger
 * commands (more than ~25 tensors) get a node of their own size, freed
 * after they run. Spare nodes a queue keeps take at most SPARE_MAX_BYTES. */
#define NODE_CLASSES 4
#define NODE_MIN ((size_t)1024)
#define SPARE_MAX_BYTES ((size_t)4 << 20)

struct loom_driver_queue {
  host_context *ctx;
  int device;
  int priority; /* the stream's: orders its launches' chunks on the pool */
  loom_stream_t *owner;
  pthread_t thread;
  pthread_mutex_t lock;
  /* The execution token: whoever holds it pops and runs commands. Usually
   * the executor; a thread that synchronizes while the executor is not
   * running takes it and runs the pending commands itself, which saves a
   * wake-up (and on a loaded machine, a scheduling delay). */
  pthread_mutex_t exec;
  pthread_cond_t work, done;
  host_node *head, *tail; /* under lock */
  _Atomic uint64_t submitted, completed;
  /* The smallest count of completed commands a sleeping synchronizer waits
   * for: the executor wakes them then, not after every command (each
   * wake-up would preempt it for nothing). Lowered by waiters, reset by the
   * wake-up, both under lock. */
  _Atomic uint64_t wake_at;
  atomic_int executor_sleeping, sync_waiters, stop;
  host_group *group; /* adaptive eager's, for the token's holder; NULL: none */
  /* Executed nodes kept for the next submissions, by size class: a step
   * enqueues hundreds of launches of 1-2 KB each, allocated on the
   * submitting thread and freed on the executor, which glibc serves with
   * its arena's slow paths (the fast bins' consolidation, unlinking). */
  pthread_mutex_t spare_lock;
  host_node *spare[NODE_CLASSES]; /* under spare_lock */
  size_t spare_bytes;             /* under spare_lock */
  _Atomic uint64_t nodes_allocated; /* nodes taken from malloc since creation */
  host_scratch scratch; /* the token holder's: moved GEMM workspaces */
  /* The bound: at most `depth` commands pending (0: none); threads waiting
   * for room sleep on `room` until at most `room_at` are. */
  uint64_t depth, room_at;
  pthread_cond_t room;
  atomic_int room_waiters;
};

/* Above 0 while this thread runs commands of some queue (executor, a
 * synchronizer holding a token, an inline launch). */
static _Thread_local int running_commands;

static int node_class(size_t size) {
  int c = 0;
  while (c < NODE_CLASSES && (NODE_MIN << c) < size) ++c;
  return c;
}

/* A node of at least `size` bytes: a spare one, else a fresh allocation. */
static host_node *node_get(loom_driver_queue *q, size_t size) {
  const int c = node_class(size);
  host_node *n = NULL;
  if (c < NODE_CLASSES) {
    pthread_mutex_lock(&q->spare_lock);
    n = q->spare[c];
    if (n) {
      q->spare[c] = n->next;
      q->spare_bytes -= NODE_MIN << c;
    }
    pthread_mutex_unlock(&q->spare_lock);
    if (n) return n;
  }
  n = malloc(c < NODE_CLASSES ? NODE_MIN << c : size);
  if (!n) return NULL;
  n->size_class = c;
  atomic_fetch_add_explicit(&q->nodes_allocated, 1, memory_order_relaxed);
  return n;
}

/* Keeps an executed node for a later submission, within the budget. */
static void node_put(loom_driver_queue *q, host_node *n) {
  const int c = n->size_class;
  if (c < NODE_CLASSES) {
    pthread_mutex_lock(&q->spare_lock);
    const int keep = q->spare_bytes + (NODE_MIN << c) <= SPARE_MAX_BYTES;
    if (keep) {
      n->next = q->spare[c];
      q->spare[c] = n;
      q->spare_bytes += NODE_MIN << c;
    }
    pthread_mutex_unlock(&q->spare_lock);
    if (keep) return;
  }
  free(n);
}

static void free_spares(loom_driver_queue *q) {
  for (int c = 0; c < NODE_CLASSES; ++c)
    while (q->spare[c]) {
      host_node *n = q->spare[c];
      q->spare[c] = n->next;
      free(n);
    }
  q->spare_bytes = 0;
}

uint64_t host_queue_nodes_allocated(const loom_driver_queue *q) {
  return atomic_load_explicit(&q->nodes_allocated, memory_order_relaxed);
}

static uint64_t pending(const loom_driver_queue *q) {
  return atomic_load(&q->submitted) - atomic_load(&q->completed);
}

uint64_t host_queue_pending(const loom_driver_queue *q) { return pending(q); }

loom_status host_launch_failed(const loom_command *cmd, int rc, int64_t begin, int64_t end,
                               const char *reason, loom_stream_t *report) {
  const loom_status st = loom_kernel_status(rc);
  /* The kernel's own reason when it gave one, else what the runtime knows. */
  char message[HOST_REASON_CAPACITY + 160];
  if (reason[0])
    snprintf(message, sizeof message, "%s: %s", cmd->name, reason);
  else
    snprintf(message, sizeof message, "%s: %s (kernel returned %d on [%lld, %lld) of range %lld)",
             cmd->name, loom_status_name(st), rc, (long long)begin, (long long)end,
             (long long)cmd->u.launch.range);
  if (report) {
    loom_driver_report_error(report, st, "%s", message);
    return st;
  }
  return loom_error(st, "%s", message);
}

loom_status host_execute_launch(host_context *ctx, int device, int priority,
                                const loom_command *cmd, loom_stream_t *report) {
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                 .num_tensors = cmd->u.launch.num_tensors,
                                 .tensors = cmd->u.launch.tensors,
                                 .num_scalars = cmd->u.launch.num_scalars,
                                 .scalars = cmd->u.launch.scalars,
                                 .range = cmd->u.launch.range,
                                 .grain = cmd->u.launch.grain};
  host_failure failure;
  const int rc =
      host_pool_run(&ctx->devices[device].pool, priority, cmd->u.launch.fn, &args, &failure);
  if (rc == 0) return LOOM_OK;
  const int64_t begin = failure.begin;
  const int64_t end = args.range - begin > args.grain ? begin + args.grain : args.range;
  return host_launch_failed(cmd, rc, begin, end, failure.reason, report);
}

/* Copies one chunk: tensor 0 is the destination, tensor 1 the source,
 * both as bytes. A copy too large for the last-level cache writes past it
 * (64 MB on two threads: 26-31 GB/s through memcpy, 47-49 streamed). */
static int copy_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  char *dst = (char *)args->tensors[0].data + begin;
  const char *src = (const char *)args->tensors[1].data + begin;
  if (args->range >= LOOM_STREAM_STORE_BYTES && (loom_cpu_features() & LOOM_FEATURE_AVX512F)) {
    loom_stream_store_avx512(dst, src, end - begin);
    loom_stream_fence_avx512();
  } else {
    memcpy(dst, src, (size_t)(end - begin));
  }
  return 0;
}

#define COPY_PARALLEL_MIN ((size_t)4 << 20)
#define COPY_CHUNK ((int64_t)1 << 20)

static void execute_copy(loom_driver_queue *q, const loom_command *cmd) {
  void *dst = cmd->u.copy.dst;
  const void *src = cmd->u.copy.src;
  const size_t size = cmd->u.copy.size;
  if (dst == src) return;
  /* Large, non-overlapping copies are spread over the device's workers. */
  const int overlap = (char *)dst < (const char *)src + size && (const char *)src < (char *)dst + size;
  if (size < COPY_PARALLEL_MIN || overlap || q->ctx->devices[q->device].pool.num_workers == 0) {
    memmove(dst, src, size);
    return;
  }
  const loom_tensor views[2] = {{.data = dst, .dtype = LOOM_UINT8, .rank = 1, .sizes = {(int64_t)size}, .strides = {1}},
                                {.data = (void *)src, .dtype = LOOM_UINT8, .rank = 1, .sizes = {(int64_t)size}, .strides = {1}}};
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 2,
                                 .tensors = views, .range = (int64_t)size, .grain = COPY_CHUNK};
  host_failure unused;
  (void)host_pool_run(&q->ctx->devices[q->device].pool, q->priority, copy_kernel, &args, &unused);
}

static void run_command(loom_driver_queue *q, const loom_command *cmd) {
  switch (cmd->kind) {
    case LOOM_COMMAND_LAUNCH:
      host_execute_launch(q->ctx, q->device, q->priority, cmd, q->owner);
      break;
    case LOOM_COMMAND_COPY:
      execute_copy(q, cmd);
      break;
    case LOOM_COMMAND_EVENT_RECORD:
      loom_driver_event_complete(cmd->u.event.event, cmd->u.event.sequence);
      break;
    case LOOM_COMMAND_EVENT_WAIT:
      loom_driver_event_wait(cmd->u.event.event, cmd->u.event.sequence);
      break;
    case LOOM_COMMAND_CALLBACK:
      cmd->u.callback.fn(cmd->u.callback.user);
      break;
  }
}

/* A command the profiler records, timed around its execution. Out of line:
 * untraced commands pay one test of the field. */
static __attribute__((noinline)) void run_traced(loom_driver_queue *q, const loom_command *cmd) {
  const uint64_t t0 = loom_trace_now();
  run_command(q, cmd);
  loom_driver_trace_report(cmd, t0, loom_trace_now());
}

/* Runs one command where the stream's work runs (the executor, a
 * synchronizing thread holding the token, or a submitter running it
 * inline): a traced command's times are taken here. */
static void execute(loom_driver_queue *q, const loom_command *cmd) {
  if (__builtin_expect(cmd->trace != NULL, 0)) run_traced(q, cmd);
  else run_command(q, cmd);
  if (cmd->release) cmd->release(cmd->release_arg);
}

/* Pops the next command (NULL if none). The caller holds the execution
 * token, so popping and executing stay in queue order. */
static host_node *pop(loom_driver_queue *q) {
  pthread_mutex_lock(&q->lock);
  host_node *n = q->head;
  if (n) {
    q->head = n->next;
    if (!q->head) q->tail = NULL;
  }
  pthread_mutex_unlock(&q->lock);
  return n;
}

/* The queue whose executor this thread is (NULL on other threads). */
static _Thread_local loom_driver_queue *executor_of;

/* The node after `prev` (the first queued if NULL), read under the lock. */
static host_node *next_node(loom_driver_queue *q, host_node *prev) {
  pthread_mutex_lock(&q->lock);
  host_node *n = prev ? prev->next : q->head;
  pthread_mutex_unlock(&q->lock);
  return n;
}

/* Waits up to `budget_ns` for a command after `prev` (NULL if none came).
 * Only the executor waits, and not while a thread synchronizes on the
 * queue: then nothing more is on its way from that thread. */
static host_node *wait_next(loom_driver_queue *q, host_node *prev, uint64_t budget_ns) {
  if (executor_of != q) return NULL; /* a synchronizer drains */
  loom_spin spin = loom_spin_start(budget_ns);
  uint64_t seen = atomic_load_explicit(&q->submitted, memory_order_acquire);
  for (;;) {
    const uint64_t now = atomic_load_explicit(&q->submitted, memory_order_acquire);
    if (now != seen) {
      host_node *n = next_node(q, prev);
      if (n) return n;
      seen = now;
    }
    /* A thread waiting for room sends nothing until the queue drains. */
    if (atomic_load(&q->sync_waiters) || atomic_load(&q->room_waiters) || atomic_load(&q->stop) ||
        !loom_spin_more(&spin))
      return NULL;
  }
}

/* A walk over the commands queued after the popped one, for a group's
 * look. At the end of what is queued it looks again, and the executor may
 * wait up to `budget` nanoseconds in all for more: the host enqueues an op
 * tens of microseconds after the one before, and a large launch that
 * starts on an idle executor would otherwise run alone while the ops that
 * could join it are on their way. The caller holds the execution token, so
 * nodes are neither removed nor freed meanwhile, and the links up to the
 * tail read under the lock were written before it. */
typedef struct queue_look {
  loom_driver_queue *q;
  host_node *at, *last; /* the node returned last (NULL: none yet); the tail seen */
  uint64_t budget;
} queue_look;

static host_node *look_next(queue_look *l) {
  loom_driver_queue *q = l->q;
  if (l->at && l->at != l->last) return l->at = l->at->next;
  pthread_mutex_lock(&q->lock);
  host_node *n = l->at ? l->at->next : q->head;
  l->last = q->tail;
  pthread_mutex_unlock(&q->lock);
  if (!n && l->budget) {
    const uint64_t t0 = loom_now_ns();
    n = wait_next(q, l->at, l->budget);
    const uint64_t spent = loom_now_ns() - t0;
    l->budget = spent >= l->budget ? 0 : l->budget - spent;
    if (n) {
      pthread_mutex_lock(&q->lock);
      l->last = q->tail;
      pthread_mutex_unlock(&q->lock);
    }
  }
  if (n) l->at = n;
  return n;
}

/* Runs `lead` (popped) in a fused group with launches queued after it,
 * if any join (loom/fuse.h); 0 if none did. Those that joined stay queued,
 * marked done, so that the count of completed commands still means "the
 * first N in order". */
static int run_fused(loom_driver_queue *q, host_node *lead) {
  queue_look look = {.q = q, .budget = host_fuse_wait_ns(&lead->command)};
  host_node *m = look_next(&look);
  if (!m) return 0;
  host_group *g = q->group;
  host_node *joined[HOST_FUSE_MAX_MEMBERS];
  int n = 0;
  host_fuse_begin(g, &lead->command, lead->seq);
  uint64_t end = lead->seq + 1; /* the first command of this queue the look did not see */
  for (; m; m = look_next(&look)) {
    end = m->seq;
    if (m->done) continue;
    const int r = host_fuse_offer(g, &m->command, m->seq);
    if (r == HOST_FUSE_STOP) break;
    end = m->seq + 1;
    if (r == HOST_FUSE_JOINED) joined[n++] = m;
  }
  if (n == 0) return 0;
  host_fuse_run(q->ctx, q->device, q->priority, g, q->owner, end);
  for (int i = 0; i < n; ++i) joined[i]->done = 1;
  return 1;
}

/* Runs `lead`, a product's "gemm.compute" (popped), with the elementwise
 * launches queued right after it that read its C as its epilogue
 * (host_fuse_epilogue.c); 0 if none joined. As run_fused, those that
 * joined stay queued, marked done. When `lead` is the product's
 * "gemm.pack", the compute launch must follow: the group takes both (the
 * workspace may then move), and the compute launch is marked done too.
 * Only the product waits for steps still on their way: its pack runs
 * meanwhile, rather than wait with it. */
static int run_epilogue(loom_driver_queue *q, host_node *lead, int is_pack) {
  const loom_command *pack = is_pack ? &lead->command : NULL;
  queue_look look = {.q = q};
  host_node *m = NULL;
  look.budget = host_epilogue_wait_ns(&lead->command);
  if (is_pack) { /* the compute launch is enqueued right after it */
    do m = look_next(&look); while (m && m->done);
    if (!m || !host_epilogue_pairs(pack, &m->command)) return 0;
    lead = m;
    look.budget = 0;
  }
  host_epilogue e;
  host_node *joined[9];
  int n = 0;
  host_epilogue_begin(&e, &lead->command, pack,
                      !pack && host_epilogue_ws_unused(host_fuse_packs(q->group), &lead->command),
                      lead->seq);
  uint64_t end = lead->seq + 1; /* the first command of this queue the look did not see */
  for (m = look_next(&look); m && n < 8; m = look_next(&look)) {
    end = m->seq;
    if (m->done) continue;
    if (!host_epilogue_offer(&e, &m->command, m->seq)) break;
    end = m->seq + 1;
    joined[n++] = m;
  }
  if (n == 0 ||
      !host_epilogue_run(q->ctx, q->device, q->priority, &e, &q->scratch, q->owner, end))
    return 0;
  if (is_pack) joined[n++] = lead;
  for (int i = 0; i < n; ++i) joined[i]->done = 1;
  return 1;
}

/* Executes queued commands until the queue is empty or `target` commands
 * have completed. The caller holds the execution token. */
static void drain(loom_driver_queue *q, uint64_t target) {
  host_node *n;
  ++running_commands;
  while (atomic_load(&q->completed) < target && (n = pop(q)) != NULL) {
    if (!n->done && !(q->group && host_fuse_can_lead(&n->command) && run_fused(q, n)) &&
        !(q->group && host_epilogue_pack_can_lead(&n->command) && run_epilogue(q, n, 1)) &&
        !(q->group && host_epilogue_can_lead(&n->command) && run_epilogue(q, n, 0))) {
      if (q->group) host_epilogue_note(host_fuse_packs(q->group), &n->command);
      execute(q, &n->command);
    }
    node_put(q, n);
    const uint64_t completed = atomic_fetch_add(&q->completed, 1) + 1;
    if (atomic_load(&q->sync_waiters) && completed >= atomic_load(&q->wake_at)) {
      pthread_mutex_lock(&q->lock);
      atomic_store(&q->wake_at, UINT64_MAX);
      pthread_cond_broadcast(&q->done);
      pthread_mutex_unlock(&q->lock);
    }
    /* A waiter registers before it checks (wait_for_room): either it sees
     * this completion or this sees it. */
    if (atomic_load(&q->room_waiters) && atomic_load(&q->submitted) - completed <= q->room_at) {
      pthread_mutex_lock(&q->lock);
      pthread_cond_broadcast(&q->room);
      pthread_mutex_unlock(&q->lock);
    }
  }
  --running_commands;
}

/* Waits for queued work, spinning then sleeping; 0 when stopping. */
static int wait_for_work(loom_driver_queue *q) {
  loom_spin spin = loom_spin_start(EXECUTOR_SPIN_NS);
  while (atomic_load_explicit(&q->submitted, memory_order_acquire) ==
             atomic_load_explicit(&q->completed, memory_order_acquire) &&
         !atomic_load(&q->stop) && loom_spin_more(&spin)) {
  }
  pthread_mutex_lock(&q->lock);
  while (!q->head && !atomic_load(&q->stop)) {
    atomic_store(&q->executor_sleeping, 1);
    pthread_cond_wait(&q->work, &q->lock);
    atomic_store(&q->executor_sleeping, 0);
  }
  const int go = q->head != NULL || !atomic_load(&q->stop);
  pthread_mutex_unlock(&q->lock);
  return go;
}

static void *executor_main(void *arg) {
  loom_driver_queue *q = arg;
  executor_of = q;
  while (wait_for_work(q)) {
    pthread_mutex_lock(&q->exec);
    drain(q, UINT64_MAX);
    pthread_mutex_unlock(&q->exec);
  }
  return NULL;
}

loom_status host_queue_create(void *ctx, int device, int priority, loom_stream_t *owner,
                              loom_driver_queue **out_queue) {
  loom_driver_queue *q = calloc(1, sizeof *q);
  if (!q) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_stream_create: out of host memory");
  q->ctx = ctx;
  q->device = device;
  q->priority = priority;
  q->owner = owner;
  pthread_mutex_init(&q->lock, NULL);
  pthread_mutex_init(&q->exec, NULL);
  pthread_mutex_init(&q->spare_lock, NULL);
  pthread_cond_init(&q->work, NULL);
  pthread_cond_init(&q->done, NULL);
  pthread_cond_init(&q->room, NULL);
  atomic_store(&q->wake_at, UINT64_MAX);
  q->depth = ((host_context *)ctx)->queue_depth;
  q->room_at = q->depth - (q->depth / 8 > 1 ? q->depth / 8 : 1); /* 0 for depth 1 */
  /* Without one the queue runs every command alone: fusion only saves time. */
  q->group = host_fuse_group_create();
  if (host_thread_start(&q->thread, executor_main, q) != 0) {
    host_fuse_group_destroy(q->group);
    pthread_cond_destroy(&q->room);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->spare_lock);
    pthread_mutex_destroy(&q->exec);
    pthread_mutex_destroy(&q->lock);
    free(q);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_stream_create: cannot start an executor thread");
  }
  *out_queue = q;
  return LOOM_OK;
}

void host_queue_destroy(void *ctx, loom_driver_queue *q) {
  host_queue_synchronize(ctx, q);
  pthread_mutex_lock(&q->lock);
  atomic_store(&q->stop, 1);
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
  pthread_cond_destroy(&q->room);
  pthread_cond_destroy(&q->done);
  pthread_cond_destroy(&q->work);
  free_spares(q);
  pthread_mutex_destroy(&q->spare_lock);
  pthread_mutex_destroy(&q->exec);
  pthread_mutex_destroy(&q->lock);
  host_fuse_group_destroy(q->group);
  host_scratch_free(&q->scratch);
  free(q);
}

/* Sleeps until at most room_at commands are pending. Called without the
 * queue's lock: the hooks may block on an interpreter lock that a thread
 * submitting to this queue holds. */
static void wait_for_room(loom_driver_queue *q) {
  void *token = loom_driver_queue_wait_begin(q->owner);
  pthread_mutex_lock(&q->lock);
  atomic_fetch_add(&q->room_waiters, 1);
  while (pending(q) > q->room_at) pthread_cond_wait(&q->room, &q->lock);
  atomic_fetch_sub(&q->room_waiters, 1);
  pthread_mutex_unlock(&q->lock);
  loom_driver_queue_wait_end(q->owner, token);
}

loom_status host_queue_submit(void *ctx, loom_driver_queue *q, const loom_command *cmd) {
  size_t extra = 0;
  if (cmd->kind == LOOM_COMMAND_LAUNCH)
    extra = cmd->u.launch.num_tensors * sizeof(loom_tensor) +
            cmd->u.launch.num_scalars * sizeof(loom_scalar);
  host_node *n = node_get(q, sizeof *n + extra);
  if (!n) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory enqueuing", cmd->name);
  n->next = NULL;
  n->done = 0;
  n->command = *cmd;
  if (cmd->kind == LOOM_COMMAND_LAUNCH) {
    /* Tensors first: loom_tensor needs 8-byte alignment, as do scalars. */
    loom_tensor *tensors = (loom_tensor *)(n + 1);
    loom_scalar *scalars = (loom_scalar *)(tensors + cmd->u.launch.num_tensors);
    if (cmd->u.launch.num_tensors)
      memcpy(tensors, cmd->u.launch.tensors, cmd->u.launch.num_tensors * sizeof *tensors);
    if (cmd->u.launch.num_scalars)
      memcpy(scalars, cmd->u.launch.scalars, cmd->u.launch.num_scalars * sizeof *scalars);
    n->command.u.launch.tensors = tensors;
    n->command.u.launch.scalars = scalars;
  }
  pthread_mutex_lock(&q->lock);
  while (q->depth && pending(q) >= q->depth && !running_commands && loom_driver_queue_may_wait()) {
    pthread_mutex_unlock(&q->lock);
    wait_for_room(q);
    pthread_mutex_lock(&q->lock);
  }
  n->seq = host_fuse_clock_tick();
  if (q->tail) q->tail->next = n; else q->head = n;
  q->tail = n;
  const uint64_t ahead = atomic_fetch_add_explicit(&q->submitted, 1, memory_order_release) -
                        atomic_load_explicit(&q->completed, memory_order_acquire);
  const int executor_sleeps = atomic_load(&q->executor_sleeping);
  if (executor_sleeps) pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->lock);
  /* A launch the pool will split, on an idle device (the executor sleeps;
   * at most a command or two ahead, such as a product's pack): it opens
   * once the executor is up or a synchronizing thread takes it, and only
   * then would the workers' wake-up begin. Waking them now overlaps the
   * two, for one more wake-up here (about 4 us). A running executor opens
   * it at once, and deeper in the queue the launches ahead wake them. */
  if (executor_sleeps && ahead <= 2 && cmd->kind == LOOM_COMMAND_LAUNCH &&
      cmd->u.launch.range > cmd->u.launch.grain)
    host_pool_kick(&q->ctx->devices[q->device].pool);
  return LOOM_OK;
}

loom_status host_queue_query(void *ctx, loom_driver_queue *q) {
  return atomic_load(&q->completed) >= atomic_load(&q->submitted) ? LOOM_OK : LOOM_ERROR_NOT_READY;
}

loom_status host_queue_synchronize(void *ctx, loom_driver_queue *q) {
  const uint64_t target = atomic_load(&q->submitted);
  if (atomic_load(&q->completed) >= target) return LOOM_OK;
  if (pthread_mutex_trylock(&q->exec) == 0) {
    drain(q, target);
    pthread_mutex_unlock(&q->exec);
    if (atomic_load(&q->completed) >= target) return LOOM_OK;
  }
  loom_spin spin = loom_spin_start(SYNC_SPIN_NS);
  while (atomic_load(&q->completed) < target)
    if (!loom_spin_more(&spin)) break;
  if (atomic_load(&q->completed) >= target) return LOOM_OK;
  pthread_mutex_lock(&q->lock);
  atomic_fetch_add(&q->sync_waiters, 1);
  for (;;) {
    /* Registered before the check: a completion either is seen here or
     * sees this target (both sides are sequentially consistent). */
    if (target < atomic_load(&q->wake_at)) atomic_store(&q->wake_at, target);
    if (atomic_load(&q->completed) >= target) break;
    pthread_cond_wait(&q->done, &q->lock);
  }
  atomic_fetch_sub(&q->sync_waiters, 1);
  pthread_mutex_unlock(&q->lock);
  return LOOM_OK;
}

/* A launch cheap enough to run on the submitting thread: one chunk (the
 * pool would not split it anyway) over small tensors, so that the caller is
 * held for about as long as a hand-off to the executor would take. */
static int small_launch(const loom_command *cmd) {
  if (cmd->u.launch.range > cmd->u.launch.grain) return 0;
  for (uint32_t i = 0; i < cmd->u.launch.num_tensors; ++i)
    if (loom_tensor_numel(&cmd->u.launch.tensors[i]) > INLINE_LAUNCH_MAX_ELEMENTS) return 0;
  return 1;
}

loom_status host_queue_run_inline(void *ctx, loom_driver_queue *q, const loom_command *cmd) {
  if (cmd->kind == LOOM_COMMAND_LAUNCH ? !small_launch(cmd) : cmd->kind != LOOM_COMMAND_COPY)
    return LOOM_ERROR_NOT_READY;
  if (atomic_load(&q->completed) != atomic_load(&q->submitted)) return LOOM_ERROR_NOT_READY;
  /* Holding the lock keeps other threads' submissions behind this copy. */
  pthread_mutex_lock(&q->lock);
  const int idle = atomic_load(&q->completed) == atomic_load(&q->submitted);
  if (idle && q->group) host_epilogue_note(host_fuse_packs(q->group), cmd);
  if (idle) {
    ++running_commands;
    execute(q, cmd);
    --running_commands;
  }
  pthread_mutex_unlock(&q->lock);
  return idle ? LOOM_OK : LOOM_ERROR_NOT_READY;
}
