/* Tracing: a ring of records per stream, completed where commands execute.
 *
 * A ring is a bounded queue of slots, each with a turn counter (Vyukov's
 * scheme): a producer claims position p by compare-and-swap on `write` when
 * slot p's turn is p, fills the record, then publishes turn p + 1; the
 * consumer reads slot `read` once its turn is read + 1 and hands it back
 * with turn read + capacity. A slot stores its turn less its index, so that
 * a ring starts as zeroed memory: pages the ring never reaches are never
 * touched.
 *
 * A traced command's record is claimed when it is enqueued, filled with
 * what the enqueue knows (names, bytes, correlation), and handed to the
 * driver in the command (loom_command.trace); the driver stamps the start
 * and end of the execution and publishes it (loom_driver_trace_report). So
 * an untraced command carries one NULL pointer, and records come in the
 * order commands were enqueued; the drain waits at a record whose command
 * has not run yet. The enqueue's own record is pushed after the enqueuing
 * call returns. Producers never wait: a ring without a free slot drops the
 * record and counts it. The consumer (drain, and the discard at enable)
 * runs under trace_lock, which also guards the list of rings and their
 * allocation.
 *
 * A stream's ring is allocated at its first traced command and lives as
 * long as the stream; a destroyed stream's records wait in its ring until
 * drained. Tracing state is the process's, across runtime restarts;
 * loom_shutdown frees the rings. */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/hal/trace.h"

#define TRACE_DEFAULT_RECORDS 65536
#define TRACE_MIN_RECORDS 64
#define TRACE_MAX_RECORDS ((size_t)1 << 26)
/* The kind of a claimed record whose command was never enqueued. */
#define TRACE_CANCELLED UINT32_MAX

struct loom_trace_slot {
  _Atomic uint64_t turn; /* the slot's turn less its index in the ring */
  uint64_t publish;      /* while claimed: the value of `turn` that publishes it */
  loom_trace_record record;
};
typedef struct loom_trace_slot trace_slot;

struct loom_trace_ring {
  struct loom_trace_ring *next; /* the list of rings (trace_lock) */
  int orphaned;                 /* its stream is gone (trace_lock) */
  int32_t device;
  uint64_t stream;
  uint64_t mask;                /* capacity - 1 */
  _Atomic uint64_t write;       /* the next position a producer claims */
  uint64_t read;                /* the next position to drain (trace_lock) */
  trace_slot slots[];
};

atomic_int loom_trace_active;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct loom_trace_ring *rings; /* trace_lock */
static size_t ring_records = TRACE_DEFAULT_RECORDS; /* for rings made from now on (trace_lock) */
static _Atomic uint64_t next_sequence;
static _Atomic uint64_t dropped;
static _Thread_local uint64_t tls_correlation;
static _Thread_local uint64_t tls_thread;

uint64_t loom_trace_now(void) { return loom_now_ns(); }

void loom_trace_set_correlation(uint64_t id) { tls_correlation = id; }

uint64_t loom_trace_correlation(void) { return tls_correlation; }

static uint64_t thread_id(void) {
  if (!tls_thread) tls_thread = (uint64_t)syscall(SYS_gettid);
  return tls_thread;
}

/* ---- the ring ---------------------------------------------------------------- */

/* A free slot of `r`, claimed for the caller to fill and publish; NULL (a
 * drop, counted) when the ring is full. */
static trace_slot *ring_claim(struct loom_trace_ring *r) {
  uint64_t pos = atomic_load_explicit(&r->write, memory_order_relaxed);
  for (;;) {
    trace_slot *slot = &r->slots[pos & r->mask];
    const uint64_t turn = atomic_load_explicit(&slot->turn, memory_order_acquire) + (pos & r->mask);
    const int64_t lag = (int64_t)(turn - pos);
    if (lag == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->write, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        slot->publish = pos + 1 - (pos & r->mask);
        return slot;
      }
    } else if (lag < 0) {
      /* The slot from one lap ago is not drained: full. */
      atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
      return NULL;
    } else {
      pos = atomic_load_explicit(&r->write, memory_order_relaxed);
    }
  }
}

static void slot_publish(trace_slot *slot) {
  atomic_store_explicit(&slot->turn, slot->publish, memory_order_release);
}

static void ring_push(struct loom_trace_ring *r, const loom_trace_record *rec) {
  trace_slot *slot = ring_claim(r);
  if (!slot) return;
  slot->record = *rec;
  slot_publish(slot);
}

/* Under trace_lock. Takes the next published record into *out (NULL:
 * discards it); 0 when there is none. */
static int ring_pop(struct loom_trace_ring *r, loom_trace_record *out) {
  const uint64_t index = r->read & r->mask;
  trace_slot *slot = &r->slots[index];
  if (atomic_load_explicit(&slot->turn, memory_order_acquire) + index != r->read + 1) return 0;
  if (out) *out = slot->record;
  atomic_store_explicit(&slot->turn, r->read + r->mask + 1 - index, memory_order_release);
  ++r->read;
  return 1;
}

/* Under trace_lock: a ring of ring_records slots for `stream`, listed. */
static struct loom_trace_ring *ring_create(const loom_stream_t *stream) {
  const size_t n = ring_records;
  /* Zeroed: every slot's turn is its index (see trace_slot). */
  struct loom_trace_ring *r = calloc(1, sizeof *r + n * sizeof(trace_slot));
  if (!r) return NULL;
  r->device = stream->device;
  r->stream = stream->id;
  r->mask = n - 1;
  r->next = rings;
  rings = r;
  return r;
}

/* Under trace_lock. */
static void ring_unlist(struct loom_trace_ring *r) {
  for (struct loom_trace_ring **p = &rings; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      return;
    }
}

static struct loom_trace_ring *stream_ring(loom_stream_t *stream) {
  struct loom_trace_ring *r = atomic_load_explicit(&stream->trace_ring, memory_order_acquire);
  if (r) return r;
  pthread_mutex_lock(&trace_lock);
  r = atomic_load_explicit(&stream->trace_ring, memory_order_relaxed);
  if (!r && (r = ring_create(stream)) != NULL)
    atomic_store_explicit(&stream->trace_ring, r, memory_order_release);
  pthread_mutex_unlock(&trace_lock);
  return r;
}

/* ---- the API ----------------------------------------------------------------- */

loom_status loom_trace_enable(size_t records_per_stream) {
  if (records_per_stream > TRACE_MAX_RECORDS)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_trace_enable: %zu records per stream is more than %zu",
                      records_per_stream, TRACE_MAX_RECORDS);
  size_t n = records_per_stream ? records_per_stream : TRACE_DEFAULT_RECORDS;
  size_t capacity = TRACE_MIN_RECORDS;
  while (capacity < n) capacity *= 2;
  pthread_mutex_lock(&trace_lock);
  ring_records = capacity;
  for (struct loom_trace_ring *r = rings; r; r = r->next)
    while (ring_pop(r, NULL)) {
    }
  atomic_store(&dropped, 0);
  atomic_store(&loom_trace_active, 1);
  pthread_mutex_unlock(&trace_lock);
  return LOOM_OK;
}

void loom_trace_disable(void) { atomic_store(&loom_trace_active, 0); }

int loom_trace_enabled(void) { return atomic_load(&loom_trace_active); }

uint64_t loom_trace_dropped(void) { return atomic_load(&dropped); }

size_t loom_trace_drain(loom_trace_record *out, size_t capacity) {
  if (!out) return 0;
  size_t n = 0;
  pthread_mutex_lock(&trace_lock);
  for (struct loom_trace_ring *r = rings, *next; r && n < capacity; r = next) {
    next = r->next;
    while (n < capacity && ring_pop(r, &out[n]))
      if (out[n].kind != TRACE_CANCELLED) ++n;
    /* A destroyed stream's ring has no producer left. */
    if (r->orphaned && atomic_load_explicit(&r->write, memory_order_relaxed) == r->read) {
      ring_unlist(r);
      free(r);
    }
  }
  pthread_mutex_unlock(&trace_lock);
  return n;
}

void loom_trace_stream_destroyed(loom_stream_t *stream) {
  struct loom_trace_ring *r = atomic_exchange(&stream->trace_ring, NULL);
  if (!r) return;
  pthread_mutex_lock(&trace_lock);
  if (atomic_load_explicit(&r->write, memory_order_relaxed) == r->read) {
    ring_unlist(r);
    free(r);
  } else {
    r->orphaned = 1;
  }
  pthread_mutex_unlock(&trace_lock);
}

/* Names of fused groups: records point to them, so they live until
 * shutdown, when the rings go too. At most GROUP_NAMES distinct ones; later
 * groups share one generic name. */
#define GROUP_NAMES 4096
#define GROUP_NAME_MAX 256

typedef struct group_name {
  struct group_name *next;
  char text[];
} group_name;

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static group_name *names; /* names_lock */
static size_t names_count;  /* names_lock */

static const char *intern_name(const char *text) {
  pthread_mutex_lock(&names_lock);
  const char *found = "fused";
  group_name *n = names;
  while (n && strcmp(n->text, text)) n = n->next;
  if (n) {
    found = n->text;
  } else if (names_count < GROUP_NAMES && (n = malloc(sizeof *n + strlen(text) + 1))) {
    strcpy(n->text, text);
    n->next = names;
    names = n;
    ++names_count;
    found = n->text;
  }
  pthread_mutex_unlock(&names_lock);
  return found;
}

void loom_trace_shutdown(void) {
  pthread_mutex_lock(&trace_lock);
  while (rings) {
    struct loom_trace_ring *r = rings;
    rings = r->next;
    free(r);
  }
  pthread_mutex_unlock(&trace_lock);
  pthread_mutex_lock(&names_lock);
  while (names) {
    group_name *n = names;
    names = n->next;
    free(n);
  }
  names_count = 0;
  pthread_mutex_unlock(&names_lock);
}

/* ---- enqueue and execution ----------------------------------------------------- */

/* The record of `cmd` as its enqueue knows it (times and thread aside). */
static void describe(const loom_command *cmd, const struct loom_trace_ring *r,
                     loom_trace_kind kind, uint64_t flops, loom_trace_record *rec) {
  *rec = (loom_trace_record){
      .kind = (uint32_t)kind,
      .device = r->device,
      .stream = r->stream,
      .sequence = atomic_fetch_add_explicit(&next_sequence, 1, memory_order_relaxed) + 1,
      .correlation = tls_correlation,
      .flops = flops,
      .name = cmd->name,
      .op = cmd->name,
  };
  switch (cmd->kind) {
    case LOOM_COMMAND_LAUNCH:
      if (cmd->u.launch.kernel) rec->name = loom_kernel_name(cmd->u.launch.kernel);
      for (uint32_t i = 0; i < cmd->u.launch.num_tensors; ++i) {
        const loom_tensor *t = &cmd->u.launch.tensors[i];
        rec->bytes += (uint64_t)(loom_tensor_numel(t) * loom_dtype_size(t->dtype));
      }
      break;
    case LOOM_COMMAND_COPY:
      rec->bytes = cmd->u.copy.size;
      break;
    default:
      break;
  }
}

int loom_trace_command(loom_runtime *rt, loom_stream_t *stream, loom_command *cmd,
                       loom_trace_kind kind, uint64_t flops, loom_trace_record *enqueue) {
  if (rt->driver->api_version < 3) return 0;
  struct loom_trace_ring *r = stream_ring(stream);
  trace_slot *slot = r ? ring_claim(r) : NULL;
  if (!slot) {
    atomic_fetch_add_explicit(&dropped, r ? 1 : 2, memory_order_relaxed);
    return 0;
  }
  describe(cmd, r, kind, flops, &slot->record);
  cmd->trace = slot;
  *enqueue = slot->record;
  enqueue->kind = LOOM_TRACE_ENQUEUE;
  enqueue->start_ns = loom_now_ns();
  return 1;
}

void loom_trace_enqueued(loom_stream_t *stream, loom_command *cmd, loom_status status,
                         loom_trace_record *enqueue, const char *call) {
  if (status != LOOM_OK) {
    /* Never enqueued, so never executed: the drain skips its record. */
    cmd->trace->record.kind = TRACE_CANCELLED;
    slot_publish(cmd->trace);
    return;
  }
  enqueue->end_ns = loom_now_ns();
  enqueue->thread = thread_id();
  enqueue->name = call;
  ring_push(atomic_load_explicit(&stream->trace_ring, memory_order_relaxed), enqueue);
}

void loom_driver_trace_report(const loom_command *cmd, uint64_t start_ns, uint64_t end_ns) {
  if (!cmd || !cmd->trace) return;
  trace_slot *slot = cmd->trace;
  slot->record.start_ns = start_ns;
  slot->record.end_ns = end_ns >= start_ns ? end_ns : start_ns;
  slot_publish(slot);
}

void loom_driver_trace_report_group(const loom_command *const *cmds, size_t n, uint64_t start_ns,
                                    uint64_t end_ns) {
  trace_slot *lead = NULL;
  char text[GROUP_NAME_MAX];
  size_t len = (size_t)snprintf(text, sizeof text, "fused(");
  uint64_t bytes = 0, flops = 0;
  for (size_t i = 0; i < n; ++i) {
    if (len < sizeof text)
      len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", i ? ", " : "", cmds[i]->name);
    trace_slot *slot = cmds[i]->trace;
    if (!slot) continue;
    bytes += slot->record.bytes;
    flops += slot->record.flops;
    if (!lead) {
      lead = slot;
    } else {
      slot->record.kind = TRACE_CANCELLED;
      slot_publish(slot);
    }
  }
  if (!lead) return;
  if (len + 1 >= sizeof text) memcpy(text + sizeof text - 5, "...)", 5);
  else snprintf(text + len, sizeof text - len, ")");
  lead->record.name = lead->record.op = intern_name(text);
  lead->record.bytes = bytes;
  lead->record.flops = flops;
  lead->record.start_ns = start_ns;
  lead->record.end_ns = end_ns >= start_ns ? end_ns : start_ns;
  slot_publish(lead);
}
