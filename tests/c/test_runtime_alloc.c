/* The caching allocator: exact statistics, splitting, reuse, record_stream
 * deferral, empty_cache, the memory limit and out-of-memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/alloc/segment_table.h"
#include "test_drivers.h"

#define MiB ((size_t)1 << 20)

static loom_memory_stats stats(void) {
  loom_memory_stats s;
  loom_memory_stats_get(0, &s);
  return s;
}

static void test_stats_exact(void) {
  CHECK_OK(loom_memory_empty_cache(0));
  CHECK_OK(loom_memory_reset_accumulated(0));
  CHECK_OK(loom_memory_reset_peak(0));
  void *p = NULL, *q = NULL;
  CHECK_OK(loom_malloc(0, 1000, NULL, &p)); /* rounds to 1024, small pool */
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_SMALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_LARGE].current, 0);
  CHECK_EQ_INT(s.allocated_bytes[LOOM_POOL_ALL].current, 1024);
  CHECK_EQ_INT(s.requested_bytes[LOOM_POOL_ALL].current, 1000);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_SMALL].current, 2 * MiB);
  CHECK_EQ_INT(s.segment[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.active_bytes[LOOM_POOL_ALL].current, 1024);
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.inactive_split_bytes[LOOM_POOL_ALL].current, 2 * MiB - 1024);
  CHECK_EQ_INT(s.num_device_alloc, 1);
  /* The second block is carved from the same segment, right after. */
  CHECK_OK(loom_malloc(0, 512, NULL, &q));
  CHECK((char *)q == (char *)p + 1024);
  CHECK_EQ_INT(stats().segment[LOOM_POOL_ALL].current, 1);
  CHECK_OK(loom_free(p));
  s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].allocated, 2);
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].freed, 1);
  CHECK_EQ_INT(s.allocated_bytes[LOOM_POOL_ALL].peak, 1536);
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 2);
  CHECK_OK(loom_free(q));
  s = stats();
  /* Everything coalesced back into one whole, unsplit segment. */
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.active[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 2 * MiB);
  /* Reuse of the cached segment: no new device allocation. */
  CHECK_OK(loom_malloc(0, 4096, NULL, &p));
  CHECK_EQ_INT(stats().num_device_alloc, 1);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
  s = stats();
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.segment[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.num_device_free, 1);
  CHECK_OK(loom_memory_reset_peak(0));
  CHECK_EQ_INT(stats().allocated_bytes[LOOM_POOL_ALL].peak, 0);
}

static void test_large_pool(void) {
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 3 * MiB, NULL, &p));
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_LARGE].current, 1);
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_LARGE].current, 20 * MiB);
  /* the whole block is mapped: its last byte takes a copy */
  loom_stream_t *stream = NULL;
  CHECK_OK(loom_stream_default(0, &stream));
  const char one = 1;
  char back = 0;
  CHECK_OK(loom_memcpy(stream, (char *)p + 3 * MiB - 1, &one, 1));
  CHECK_OK(loom_memcpy(stream, &back, (char *)p + 3 * MiB - 1, 1));
  CHECK_EQ_INT(back, 1);
  CHECK_EQ_INT(loom_pointer_device((char *)p + 12345), 0);
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(loom_pointer_device(p), -1);
  CHECK_OK(loom_memory_empty_cache(0));
}

/* A large segment starts on a huge-page boundary, so that the driver can
 * back it with transparent huge pages. */
static void test_large_segment_aligned(void) {
  TEST_REQUIRE(TEST_DRIVER_ALIGNED_SEGMENTS,
               "segments come from aligned_alloc at 4 KiB; 2 MiB alignment (for huge "
               "pages) is the host and guarded drivers' own promise");
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 3 * MiB, NULL, &p));
  CHECK_EQ_INT((uintptr_t)p % (2 * MiB), 0);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
}

static void test_bad_free(void) {
  int x;
  CHECK_EQ_INT(loom_free(&x), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_free(NULL));
  void *p = NULL;
  CHECK_EQ_INT(loom_malloc(7, 16, NULL, &p), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_malloc(0, 0, NULL, &p));
  CHECK(p == NULL);
}

/* The segment table forgets what a thread found once the table changes:
 * a removed segment is not found, and one mapped again at the same address
 * is found with its new owner. */
static void test_segment_table_lookup_after_change(void) {
  loom_segment_table t = LOOM_SEGMENT_TABLE_INIT;
  char *base = (char *)(uintptr_t)0x100000;
  int data = 0;
  loom_segment_entry e;
  CHECK_EQ_INT(loom_segment_table_insert(&t, base, 4096, 1, &data), 0);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 16, &e), 1);
  CHECK_EQ_INT(e.owner, 1);
  CHECK(e.base == (uintptr_t)base && e.size == 4096 && e.data == &data);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 4095, &e), 1);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 4096, NULL), 0);
  loom_segment_table_remove(&t, base);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 16, NULL), 0);
  CHECK_EQ_INT(loom_segment_table_insert(&t, base, 2048, 2, NULL), 0);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 16, &e), 1);
  CHECK_EQ_INT(e.owner, 2);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 3000, NULL), 0);
  /* An insertion elsewhere leaves the segment found. */
  CHECK_EQ_INT(loom_segment_table_insert(&t, base + 8192, 4096, 3, NULL), 0);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 16, &e), 1);
  CHECK_EQ_INT(e.owner, 2);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 8200, &e), 1);
  CHECK_EQ_INT(e.owner, 3);
  loom_segment_table_clear(&t);
  CHECK_EQ_INT(loom_segment_table_find(&t, base + 8200, NULL), 0);
  pthread_rwlock_destroy(&t.lock);
}

static atomic_int gate;

/* Spins until the test opens the gate. */
static int gate_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  while (!atomic_load(&gate)) {
  }
  return 0;
}

static void *open_gate_later(void *arg) {
  const double until = test_now() + 0.02;
  while (test_now() < until) {
  }
  atomic_store(&gate, 1);
  return NULL;
}

static void test_stream_reuse(void) {
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  void *p = NULL, *q = NULL;
  CHECK_OK(loom_malloc(0, 8192, a, &p));
  CHECK_OK(loom_free(p));
  /* Freed on a: handed out again on a at once, never to b. */
  CHECK_OK(loom_malloc(0, 8192, a, &q));
  CHECK(q == p);
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_malloc(0, 8192, b, &q));
  CHECK(q != p);
  CHECK_OK(loom_free(q));
  loom_stream_release(a);
  loom_stream_release(b);
  /* Blocks of destroyed streams serve the default stream. */
  const int64_t segments = stats().segment[LOOM_POOL_ALL].current;
  CHECK_OK(loom_malloc(0, 8192, NULL, &q));
  CHECK_OK(loom_malloc(0, 8192, NULL, &p));
  CHECK_EQ_INT(stats().segment[LOOM_POOL_ALL].current, segments);
  CHECK_OK(loom_free(q));
  CHECK_OK(loom_free(p));
}

static void test_record_stream_defers_reuse(void) {
  TEST_REQUIRE(TEST_DRIVER_ASYNC,
               "a launch runs before loom_launch returns, so the gate kernel that keeps "
               "work pending on b would block this thread forever");
  loom_stream_t *a = NULL, *b = NULL;
  CHECK_OK(loom_stream_create(0, 0, &a));
  CHECK_OK(loom_stream_create(0, 0, &b));
  void *p = NULL, *q = NULL;
  CHECK_OK(loom_malloc(0, 64 * 1024, a, &p));
  loom_launch_desc slow = {.name = "gate", .fn = gate_kernel, .range = 1, .grain = 1};
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(b, &slow));
  CHECK_OK(loom_record_stream(p, b));
  CHECK_OK(loom_free(p));
  CHECK_EQ_INT(loom_stream_query(b), LOOM_ERROR_NOT_READY);
  /* b still runs: the block must not come back, though a would take it. */
  CHECK_OK(loom_malloc(0, 64 * 1024, a, &q));
  CHECK(q != p);
  loom_memory_stats s = stats();
  /* Freed (not allocated) but still active until b is done. */
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 1);
  CHECK_EQ_INT(s.active[LOOM_POOL_ALL].current, 2);
  CHECK_OK(loom_free(q));
  atomic_store(&gate, 1);
  CHECK_OK(loom_stream_synchronize(b));
  CHECK_OK(loom_malloc(0, 64 * 1024, a, &q));
  CHECK(q == p);
  CHECK_OK(loom_free(q));
  /* A block still held for b: empty_cache waits for b, then releases it. */
  void *r = NULL;
  CHECK_OK(loom_malloc(0, 3 * MiB, a, &r));
  atomic_store(&gate, 0);
  CHECK_OK(loom_launch(b, &slow));
  CHECK_OK(loom_record_stream(r, b));
  CHECK_OK(loom_free(r));
  pthread_t opener;
  pthread_create(&opener, NULL, open_gate_later, NULL);
  CHECK_OK(loom_memory_empty_cache(0));
  pthread_join(opener, NULL);
  CHECK_EQ_INT(stats().reserved_bytes[LOOM_POOL_LARGE].current, 0);
  CHECK_EQ_INT(stats().active[LOOM_POOL_ALL].current, 0);
  loom_stream_release(a);
  loom_stream_release(b);
  CHECK_OK(loom_memory_empty_cache(0));
}

static void test_pinned(void) {
  void *h = NULL;
  CHECK_OK(loom_host_malloc(10000, &h));
  CHECK(h != NULL);
  CHECK_EQ_INT(loom_host_is_pinned((char *)h + 9999), 1);
  CHECK(loom_host_block_base((char *)h + 100) == h);
  int x;
  CHECK_EQ_INT(loom_host_is_pinned(&x), 0);
  loom_host_stats hs;
  CHECK_OK(loom_host_stats_get(&hs));
  CHECK_EQ_INT(hs.allocation.current, 1);
  CHECK_EQ_INT(hs.allocated_bytes.current, 16384);
  CHECK_OK(loom_host_free(h));
  CHECK_EQ_INT(loom_host_is_pinned(h), 0);
  CHECK_EQ_INT(loom_host_free(&x), LOOM_ERROR_INVALID_ARGUMENT);
  void *h2 = NULL;
  CHECK_OK(loom_host_malloc(16000, &h2));
  CHECK(h2 == h); /* same size class: cached block */
  CHECK_OK(loom_host_free(h2));
  CHECK_OK(loom_host_empty_cache());
  CHECK_OK(loom_host_stats_get(&hs));
  CHECK_EQ_INT(hs.reserved_bytes.current, 0);
  CHECK_EQ_INT(hs.num_host_free, 1);
}

static void test_memory_info(void) {
  size_t free_bytes = 0, total = 0;
  CHECK_OK(loom_memory_info(0, &free_bytes, &total));
  CHECK(total > 0);
  CHECK(free_bytes <= total);
  void *p = NULL;
  CHECK_OK(loom_malloc(0, 4 * MiB, NULL, &p));
  size_t free_after = 0;
  CHECK_OK(loom_memory_info(0, &free_after, &total));
  CHECK_EQ_INT(free_bytes - free_after, 4 * MiB);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_info(0, &free_after, &total));
  CHECK_EQ_INT(free_after, free_bytes);
  CHECK_OK(loom_memory_empty_cache(0));
}

static size_t round512(size_t n) { return n < 512 ? 512 : (n + 511) / 512 * 512; }

enum { MARK = 64 };

/* Writes `slot` into the first and last MARK bytes of the block (through
 * copies: device memory may not be host memory). */
static void mark(loom_stream_t *s, unsigned char *p, size_t n, int slot) {
  unsigned char m[MARK];
  const size_t k = n < MARK ? n : MARK;
  memset(m, slot, sizeof m);
  CHECK_OK(loom_memcpy(s, p, m, k));
  CHECK_OK(loom_memcpy(s, p + n - k, m, k));
}

/* How many of the marked bytes no longer hold `slot`. */
static int marks_lost(loom_stream_t *s, const unsigned char *p, size_t n, int slot) {
  unsigned char head[MARK], tail[MARK];
  const size_t k = n < MARK ? n : MARK;
  if (loom_memcpy(s, head, p, k) != LOOM_OK || loom_memcpy(s, tail, p + n - k, k) != LOOM_OK)
    return 1;
  int lost = 0;
  for (size_t i = 0; i < k; ++i) lost += (head[i] != (unsigned char)slot) + (tail[i] != (unsigned char)slot);
  return lost;
}

/* Random allocations and frees, checked against a model: live blocks never
 * overlap, their contents stay put, and the statistics always equal what
 * the model says. */
static void test_random_against_model(void) {
  enum { SLOTS = 64, STEPS = 3000 };
  unsigned char *ptr[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  unsigned seed = 12345;
  int64_t live = 0, bytes = 0, small_bytes = 0, requested = 0;
  int bad_stats = 0, bad_contents = 0, overlaps = 0;
  loom_stream_t *stream = NULL;
  CHECK_OK(loom_stream_default(0, &stream));
  CHECK_OK(loom_memory_empty_cache(0));
  for (int step = 0; step < STEPS; ++step) {
    seed = seed * 1103515245u + 12345u;
    const int slot = (int)((seed >> 8) % SLOTS);
    if (ptr[slot]) {
      bad_contents += marks_lost(stream, ptr[slot], size[slot], slot);
      CHECK_OK(loom_free(ptr[slot]));
      live -= 1;
      bytes -= (int64_t)round512(size[slot]);
      if (round512(size[slot]) <= MiB) small_bytes -= (int64_t)round512(size[slot]);
      requested -= (int64_t)size[slot];
      ptr[slot] = NULL;
    } else {
      seed = seed * 1103515245u + 12345u;
      const unsigned kind = (seed >> 12) % 10;
      /* Mostly small, some mid-sized, a few large. */
      const size_t n = kind < 7 ? 1 + (seed >> 16) % 20000
                     : kind < 9 ? (1 << 20) + (seed >> 14) % (4 << 20)
                                : (12 << 20) + (seed >> 10) % (8 << 20);
      if (loom_malloc(0, n, NULL, (void **)&ptr[slot]) != LOOM_OK) {
        ++bad_stats;
        continue;
      }
      for (int other = 0; other < SLOTS; ++other)
        overlaps += ptr[other] && other != slot && ptr[other] < ptr[slot] + n &&
                    ptr[slot] < ptr[other] + size[other];
      mark(stream, ptr[slot], n, slot);
      size[slot] = n;
      live += 1;
      bytes += (int64_t)round512(n);
      if (round512(n) <= MiB) small_bytes += (int64_t)round512(n);
      requested += (int64_t)n;
    }
    loom_memory_stats s = stats();
    bad_stats += s.allocation[LOOM_POOL_ALL].current != live;
    bad_stats += s.requested_bytes[LOOM_POOL_ALL].current != requested;
    /* Small blocks are exactly their rounded size; a large block keeps a
     * tail of at most 1 MiB rather than split it off (as c10 does). */
    bad_stats += s.allocated_bytes[LOOM_POOL_SMALL].current != small_bytes;
    bad_stats += s.allocated_bytes[LOOM_POOL_ALL].current < bytes;
    bad_stats += s.allocated_bytes[LOOM_POOL_LARGE].current >
                 (bytes - small_bytes) + s.allocation[LOOM_POOL_LARGE].current * (int64_t)MiB;
    bad_stats += s.active_bytes[LOOM_POOL_ALL].current != s.allocated_bytes[LOOM_POOL_ALL].current;
    bad_stats += s.allocated_bytes[LOOM_POOL_SMALL].current +
                 s.allocated_bytes[LOOM_POOL_LARGE].current != s.allocated_bytes[LOOM_POOL_ALL].current;
    bad_stats += s.inactive_split_bytes[LOOM_POOL_ALL].current >
                 s.reserved_bytes[LOOM_POOL_ALL].current - s.active_bytes[LOOM_POOL_ALL].current;
  }
  for (int slot = 0; slot < SLOTS; ++slot) {
    if (!ptr[slot]) continue;
    bad_contents += marks_lost(stream, ptr[slot], size[slot], slot);
    CHECK_OK(loom_free(ptr[slot]));
  }
  CHECK_EQ_INT(bad_stats, 0);
  CHECK_EQ_INT(bad_contents, 0);
  CHECK_EQ_INT(overlaps, 0);
  loom_memory_stats s = stats();
  CHECK_EQ_INT(s.allocation[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.inactive_split[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.inactive_split_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.active[LOOM_POOL_ALL].current, 0);
  CHECK_OK(loom_memory_empty_cache(0));
  s = stats();
  CHECK_EQ_INT(s.reserved_bytes[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.segment[LOOM_POOL_ALL].current, 0);
  CHECK_EQ_INT(s.num_device_alloc - s.num_device_free, 0);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_stats_exact);
    RUN_TEST(test_large_pool);
    RUN_TEST(test_large_segment_aligned);
    RUN_TEST(test_bad_free);
    RUN_TEST(test_segment_table_lookup_after_change);
    RUN_TEST(test_stream_reuse);
    RUN_TEST(test_record_stream_defers_reuse);
    RUN_TEST(test_pinned);
    RUN_TEST(test_memory_info);
    RUN_TEST(test_random_against_model);
  }
  TEST_MAIN_END();
}
