/* What tools see of the caching allocator: the snapshot of segments and
 * blocks, the query of one block, and the observer's events (segments
 * obtained and returned, frees completing at once or after other streams,
 * out-of-memory), also while other threads allocate. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "test_drivers.h"

#define MiB ((size_t)1 << 20)
#define MAX_SEGMENTS 16
#define MAX_BLOCKS 64

/* ---- a snapshot copied out of the callback --------------------------------- */

typedef struct snapshot {
  int num_segments, num_blocks;
  loom_memory_segment_info segments[MAX_SEGMENTS];
  loom_memory_block_info blocks[MAX_BLOCKS]; /* every segment's, in order */
  int first_block[MAX_SEGMENTS];
} snapshot;

static int copy_segment(void *user, const loom_memory_segment_info *segment,
                        const loom_memory_block_info *blocks) {
  snapshot *s = user;
  if (s->num_segments == MAX_SEGMENTS || s->num_blocks + (int)segment->num_blocks > MAX_BLOCKS)
    return 1;
  s->first_block[s->num_segments] = s->num_blocks;
  s->segments[s->num_segments++] = *segment;
  for (size_t i = 0; i < segment->num_blocks; ++i) s->blocks[s->num_blocks++] = blocks[i];
  return 0;
}

static snapshot take(void) {
  snapshot s = {0};
  CHECK_OK(loom_memory_snapshot(0, copy_segment, &s));
  return s;
}

/* The segment containing `ptr`, or -1. */
static int segment_of(const snapshot *s, const void *ptr) {
  const uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < s->num_segments; ++i)
    if (p >= s->segments[i].address && p - s->segments[i].address < s->segments[i].total_size)
      return i;
  return -1;
}

/* The block starting at `ptr`, or NULL. */
static const loom_memory_block_info *block_at(const snapshot *s, const void *ptr) {
  for (int i = 0; i < s->num_blocks; ++i)
    if (s->blocks[i].address == (uintptr_t)ptr) return &s->blocks[i];
  return NULL;
}

/* Blocks tile their segment, and the segment's sums are its blocks'. */
static void check_consistent(const snapshot *s) {
  for (int i = 0; i < s->num_segments; ++i) {
    const loom_memory_segment_info *seg = &s->segments[i];
    uintptr_t at = seg->address;
    size_t allocated = 0, active = 0, requested = 0;
    for (size_t k = 0; k < seg->num_blocks; ++k) {
      const loom_memory_block_info *b = &s->blocks[s->first_block[i] + (int)k];
      CHECK(b->address == at);
      at += b->size;
      if (b->state == LOOM_BLOCK_ALLOCATED) allocated += b->size;
      if (b->state != LOOM_BLOCK_INACTIVE) active += b->size, requested += b->requested_size;
      CHECK(b->requested_size <= b->size);
    }
    CHECK(at == seg->address + seg->total_size);
    CHECK_EQ_INT(seg->allocated_size, allocated);
    CHECK_EQ_INT(seg->active_size, active);
    CHECK_EQ_INT(seg->requested_size, requested);
    CHECK_EQ_INT(seg->device, 0);
    if (i > 0) CHECK(seg->address > s->segments[i - 1].address);
  }
}

/* ---- an observer that records events --------------------------------------- */

#define MAX_EVENTS 256

static struct {
  pthread_mutex_t lock;
  int count;
  loom_memory_event events[MAX_EVENTS];
  atomic_int completed; /* FREE_COMPLETED events, for the threaded test */
} heard = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void hear(void *user, const loom_memory_event *e) {
  (void)user;
  if (e->kind == LOOM_MEMORY_EVENT_FREE_COMPLETED) atomic_fetch_add(&heard.completed, 1);
  pthread_mutex_lock(&heard.lock);
  if (heard.count < MAX_EVENTS) heard.events[heard.count++] = *e;
  pthread_mutex_unlock(&heard.lock);
}

static const loom_memory_observer listener = {.fn = hear};

static void listen(void) {
  pthread_mutex_lock(&heard.lock);
  heard.count = 0;
  pthread_mutex_unlock(&heard.lock);
  atomic_store(&heard.completed, 0);
  CHECK_OK(loom_memory_set_observer(&listener));
}

/* The i-th event heard of `kind` (copied), or one with kind -1. */
static loom_memory_event heard_event(int kind, int nth) {
  loom_memory_event found = {.kind = -1};
  pthread_mutex_lock(&heard.lock);
  for (int i = 0; i < heard.count; ++i)
    if (heard.events[i].kind == kind && nth-- == 0) {
      found = heard.events[i];
      break;
    }
  pthread_mutex_unlock(&heard.lock);
  return found;
}

static int heard_total(void) {
  pthread_mutex_lock(&heard.lock);
  const int n = heard.count;
  pthread_mutex_unlock(&heard.lock);
  return n;
}

static int heard_count(int kind) {
  int n = 0;
  pthread_mutex_lock(&heard.lock);
  for (int i = 0; i < heard.count; ++i) n += heard.events[i].kind == kind;
  pthread_mutex_unlock(&heard.lock);
  return n;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_snapshot_lists_blocks_of_two_streams(void) {
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_EQ_INT(take().num_segments, 0);
  loom_stream_t *dflt = NULL, *s = NULL;
  CHECK_OK(loom_stream_default(0, &dflt));
  CHECK_OK(loom_stream_create(0, 0, &s));
  CHECK(loom_stream_id(s) != 0 && loom_stream_id(s) != loom_stream_id(dflt));
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(loom_malloc(0, 1000, NULL, &a));     /* 1024 B of a 2 MiB small segment */
  CHECK_OK(loom_malloc(0, 3 * MiB + 1, s, &b)); /* large, on s */
  CHECK_OK(loom_malloc(0, 600, NULL, &c));      /* 1024 B right after a */
  snapshot snap = take();
  check_consistent(&snap);
  CHECK_EQ_INT(snap.num_segments, 2);
  const int sa = segment_of(&snap, a), sb = segment_of(&snap, b);
  CHECK(sa >= 0 && sb >= 0 && sa != sb);
  if (sa < 0 || sb < 0) return;
  const loom_memory_segment_info *small = &snap.segments[sa], *large = &snap.segments[sb];
  CHECK_EQ_INT(small->pool, LOOM_POOL_SMALL);
  CHECK_EQ_INT(small->total_size, 2 * MiB);
  CHECK_EQ_INT(small->stream_id, loom_stream_id(dflt));
  CHECK_EQ_INT(small->allocated_size, 2048);
  CHECK_EQ_INT(small->requested_size, 1600);
  CHECK_EQ_INT(small->num_blocks, 3); /* a, c, and the free rest */
  CHECK_EQ_INT(large->pool, LOOM_POOL_LARGE);
  CHECK_EQ_INT(large->total_size, 20 * MiB);
  CHECK_EQ_INT(large->stream_id, loom_stream_id(s));
  const loom_memory_block_info *ba = block_at(&snap, a), *bb = block_at(&snap, b),
                               *bc = block_at(&snap, c);
  CHECK(ba && bb && bc);
  if (!ba || !bb || !bc) return;
  CHECK_EQ_INT(ba->size, 1024);
  CHECK_EQ_INT(ba->requested_size, 1000);
  CHECK_EQ_INT(ba->state, LOOM_BLOCK_ALLOCATED);
  CHECK_EQ_INT(bb->size, 3 * MiB + 512);
  CHECK_EQ_INT(bb->requested_size, 3 * MiB + 1);
  CHECK_EQ_INT(bc->requested_size, 600);
  CHECK_EQ_INT(snap.blocks[snap.first_block[sa] + 2].state, LOOM_BLOCK_INACTIVE);
  CHECK_EQ_INT(snap.blocks[snap.first_block[sa] + 2].requested_size, 0);
  /* A free shows at once: inactive, coalesced with the free rest. */
  CHECK_OK(loom_free(c));
  snap = take();
  check_consistent(&snap);
  CHECK(block_at(&snap, c) && block_at(&snap, c)->state == LOOM_BLOCK_INACTIVE);
  CHECK_EQ_INT(block_at(&snap, c) ? block_at(&snap, c)->size : 0, 2 * MiB - 1024);
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  loom_stream_release(s);
  CHECK_OK(loom_memory_empty_cache(0));
}

static void test_block_query(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 5000, s, &p));
  int device = -1;
  uint64_t stream_id = 0;
  loom_memory_block_info info;
  CHECK_OK(loom_memory_block_query(p, &device, &stream_id, &info));
  CHECK_EQ_INT(device, 0);
  CHECK_EQ_INT(stream_id, loom_stream_id(s));
  CHECK(info.address == (uintptr_t)p);
  CHECK_EQ_INT(info.size, 5120);
  CHECK_EQ_INT(info.requested_size, 5000);
  CHECK_EQ_INT(info.state, LOOM_BLOCK_ALLOCATED);
  /* Inside a block, or freed: not a live block's start. */
  CHECK_EQ_INT(loom_memory_block_query((char *)p + 512, &device, &stream_id, &info),
               LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(device, -1);
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(loom_memory_block_query(p, &device, &stream_id, &info),
               LOOM_ERROR_INVALID_ARGUMENT);
  int host = 0;
  CHECK_EQ_INT(loom_memory_block_query(&host, &device, &stream_id, &info),
               LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_memory_block_query(p, NULL, &stream_id, &info), LOOM_ERROR_INVALID_ARGUMENT);
  loom_stream_release(s);
  CHECK_EQ_INT(loom_stream_id(NULL), 0);
}

static void test_bad_arguments(void) {
  snapshot snap = {0};
  CHECK_EQ_INT(loom_memory_snapshot(7, copy_segment, &snap), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_memory_snapshot(-1, copy_segment, &snap), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_memory_snapshot(0, NULL, &snap), LOOM_ERROR_INVALID_ARGUMENT);
  const loom_memory_observer no_fn = {0};
  CHECK_EQ_INT(loom_memory_set_observer(&no_fn), LOOM_ERROR_INVALID_ARGUMENT);
}

static int stop_at_first(void *user, const loom_memory_segment_info *segment,
                         const loom_memory_block_info *blocks) {
  ++*(int *)user;
  return 1;
}

/* The callback runs with no allocator lock held: it may allocate. */
static int allocate_inside(void *user, const loom_memory_segment_info *segment,
                           const loom_memory_block_info *blocks) {
  void *p = NULL;
  loom_status st = loom_malloc(0, 4096, NULL, &p);
  if (st == LOOM_OK) st = loom_free(p);
  if (st != LOOM_OK) *(int *)user = -1000;
  else ++*(int *)user;
  return 0;
}

static void test_walk_stops_and_may_call_the_runtime(void) {
  void *a = NULL, *b = NULL;
  CHECK_OK(loom_malloc(0, 4096, NULL, &a));
  CHECK_OK(loom_malloc(0, 12 * MiB, NULL, &b));
  int calls = 0;
  CHECK_OK(loom_memory_snapshot(0, stop_at_first, &calls));
  CHECK_EQ_INT(calls, 1);
  calls = 0;
  CHECK_OK(loom_memory_snapshot(0, allocate_inside, &calls));
  CHECK(calls >= 2);
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  CHECK_OK(loom_memory_empty_cache(0));
}

static void test_observer_hears_segments_frees_and_oom(void) {
  CHECK_OK(loom_memory_empty_cache(0));
  loom_stream_t *dflt = NULL;
  CHECK_OK(loom_stream_default(0, &dflt));
  listen();
  void *p = NULL, *q = NULL;
  CHECK_OK(loom_malloc(0, 1000, NULL, &p));
  CHECK_OK(loom_malloc(0, 2000, NULL, &q)); /* same segment: no event */
  CHECK_EQ_INT(heard_count(LOOM_MEMORY_EVENT_SEGMENT_ALLOC), 1);
  loom_memory_event e = heard_event(LOOM_MEMORY_EVENT_SEGMENT_ALLOC, 0);
  CHECK_EQ_INT(e.device, 0);
  CHECK(e.address == (uintptr_t)p);
  CHECK_EQ_INT(e.size, 2 * MiB);
  CHECK_EQ_INT(e.stream_id, loom_stream_id(dflt));
  CHECK_OK(loom_free(q));
  e = heard_event(LOOM_MEMORY_EVENT_FREE_COMPLETED, 0);
  CHECK(e.address == (uintptr_t)q);
  CHECK_EQ_INT(e.size, 2048);
  CHECK_EQ_INT(e.requested_size, 2000);
  CHECK_EQ_INT(e.stream_id, loom_stream_id(dflt));
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(heard_count(LOOM_MEMORY_EVENT_FREE_COMPLETED), 2);
  CHECK_EQ_INT(heard_count(LOOM_MEMORY_EVENT_SEGMENT_FREE), 0); /* cached */
  CHECK_OK(loom_memory_empty_cache(0));
  e = heard_event(LOOM_MEMORY_EVENT_SEGMENT_FREE, 0);
  CHECK(e.address == (uintptr_t)p);
  CHECK_EQ_INT(e.size, 2 * MiB);
  /* Out of memory (the limit is 64 MiB): the request and what is free. */
  CHECK_OK(loom_malloc(0, 30 * MiB, NULL, &p));
  CHECK_EQ_INT(loom_malloc(0, 100 * MiB, NULL, &q), LOOM_ERROR_OUT_OF_MEMORY);
  e = heard_event(LOOM_MEMORY_EVENT_OOM, 0);
  CHECK_EQ_INT(e.size, 100 * MiB);
  CHECK_EQ_INT(e.device_free, 34 * MiB);
  CHECK(e.address == 0);
  CHECK_OK(loom_free(p));
  /* Removed: nothing more is heard. */
  CHECK_OK(loom_memory_set_observer(NULL));
  const int before = heard_total();
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_malloc(0, 1000, NULL, &p));
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(heard_total(), before);
  CHECK_OK(loom_memory_empty_cache(0));
}

static atomic_int gate;

static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  while (!atomic_load(&gate)) {
  }
  return 0;
}

static void test_pending_free_completes_later(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC,
               "a launch runs before loom_launch returns, so the gate kernel that keeps "
               "work pending on the other stream would block this thread forever");
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 64 * 1024, a, &p));
  listen();
  atomic_store(&gate, 0);
  loom_launch_desc slow = {.name = "gate", .fn = gate_kernel, .range = 1, .grain = 1};
  CHECK_OK(loom_launch(b, &slow));
  CHECK_OK(loom_record_stream(p, b));
  CHECK_OK(loom_free(p));
  /* b still runs: freed, still active, and no completion heard. */
  snapshot snap = take();
  check_consistent(&snap);
  const loom_memory_block_info *bp = block_at(&snap, p);
  CHECK(bp && bp->state == LOOM_BLOCK_PENDING_FREE);
  CHECK_EQ_INT(bp ? bp->requested_size : 0, 64 * 1024);
  const int sp = segment_of(&snap, p);
  CHECK(sp >= 0 && snap.segments[sp].allocated_size == 0 &&
        snap.segments[sp].active_size == 64 * 1024);
  CHECK_EQ_INT(heard_count(LOOM_MEMORY_EVENT_FREE_COMPLETED), 0);
  int device = -1;
  uint64_t stream_id = 0;
  loom_memory_block_info info;
  CHECK_EQ_INT(loom_memory_block_query(p, &device, &stream_id, &info),
               LOOM_ERROR_INVALID_ARGUMENT); /* freed: no longer live */
  atomic_store(&gate, 1);
  CHECK_OK(loom_stream_synchronize(b));
  /* The next look completes it. */
  snap = take();
  bp = block_at(&snap, p);
  CHECK(bp && bp->state == LOOM_BLOCK_INACTIVE);
  CHECK_EQ_INT(heard_count(LOOM_MEMORY_EVENT_FREE_COMPLETED), 1);
  loom_memory_event e = heard_event(LOOM_MEMORY_EVENT_FREE_COMPLETED, 0);
  CHECK(e.address == (uintptr_t)p);
  CHECK_EQ_INT(e.requested_size, 64 * 1024);
  CHECK_EQ_INT(e.stream_id, loom_stream_id(a));
  CHECK_OK(loom_memory_set_observer(NULL));
  loom_stream_release(a);
  loom_stream_release(b);
  CHECK_OK(loom_memory_empty_cache(0));
}

/* Threads allocate and free while the observer is installed, removed and
 * installed again; with it installed throughout, every free is heard. */
#define THREADS 4
#define ROUNDS 200

static atomic_int toggling;

static void *churn(void *arg) {
  const size_t base = 512 * (1 + (size_t)(uintptr_t)arg);
  for (int i = 0; i < ROUNDS; ++i) {
    void *p = NULL;
    if (loom_malloc(0, base + (size_t)(i % 7) * 4096, NULL, &p) == LOOM_OK) (void)loom_free(p);
  }
  return NULL;
}

static void *toggle(void *arg) {
  while (atomic_load(&toggling)) {
    (void)loom_memory_set_observer(NULL);
    (void)loom_memory_set_observer(&listener);
  }
  return NULL;
}

static void test_observer_with_threads(void) {
  listen();
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) pthread_create(&threads[t], NULL, churn, (void *)(uintptr_t)t);
  for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
  CHECK_EQ_INT(atomic_load(&heard.completed), THREADS * ROUNDS);
  pthread_t toggler;
  atomic_store(&toggling, 1);
  pthread_create(&toggler, NULL, toggle, NULL);
  for (int t = 0; t < THREADS; ++t) pthread_create(&threads[t], NULL, churn, (void *)(uintptr_t)t);
  for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
  atomic_store(&toggling, 0);
  pthread_join(toggler, NULL);
  CHECK(atomic_load(&heard.completed) <= 2 * THREADS * ROUNDS);
  CHECK_OK(loom_memory_set_observer(NULL));
  snapshot snap = take();
  check_consistent(&snap);
  for (int i = 0; i < snap.num_blocks; ++i) CHECK_EQ_INT(snap.blocks[i].state, LOOM_BLOCK_INACTIVE);
  CHECK_OK(loom_memory_empty_cache(0));
}

int main(void) {
  setenv("LOOM_MEMORY_LIMIT", "64M", 1);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_snapshot_lists_blocks_of_two_streams);
    RUN_TEST(test_block_query);
    RUN_TEST(test_bad_arguments);
    RUN_TEST(test_walk_stops_and_may_call_the_runtime);
    RUN_TEST(test_observer_hears_segments_frees_and_oom);
    RUN_TEST(test_pending_free_completes_later);
    RUN_TEST(test_observer_with_threads);
  }
  CHECK_OK(loom_memory_set_observer(NULL));
  TEST_MAIN_END();
}
