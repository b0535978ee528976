/* The host driver's device memory: segments mapped from the kernel.
 *
 * By default a segment is private anonymous memory, and segments of a
 * huge page or more start on a huge-page boundary and ask for huge pages:
 * a stream over 4 KiB pages stalls at every page, where the hardware
 * prefetcher stops and the TLB misses.
 *
 * Shareable segments (LOOM_SHAREABLE_MEMORY=1, and by default in a
 * process of a multi-process job): each segment is a memfd (close-on-exec,
 * mode 0600, sealed against shrinking and growing) mapped shared, so that
 * a storage filling a segment can be handed to other processes as it is
 * (segment_detach gives the segment and its descriptor to loomccl's shared
 * regions: sharing a tensor then copies nothing). Not for a process alone:
 * shared memory gets transparent huge pages only where the system enables
 * them for shmem (/sys/kernel/mm/transparent_hugepage/shmem_enabled), and
 * memory-bound kernels ran 15-30% slower over 4 KiB pages (runtime/
 * README.md).
 *
 * With LOOM_POPULATE=1, fresh segments are populated as they are mapped:
 * the first write to a fresh page costs a fault and the kernel zeroing the
 * page (a whole huge page at once), and left to the first kernel that
 * writes the segment, it lands on whichever of its threads touches a page
 * first while the others wait on that page. The allocating thread
 * populates instead, 2 MiB at a time, helped by the device's idle workers
 * (host_pool_run at normal priority: a kernel already running keeps the
 * workers), with MADV_POPULATE_WRITE (Linux 5.14) after the huge-page
 * advice; where the kernel lacks it, by writing a zero byte per page (the
 * memory is zero already). A failing populate is no error: the segment is
 * left to fault in as before, and counted. Segments over
 * HOST_POPULATE_LIMIT are left alone: a large reservation may never be
 * touched whole. Off by default: measured with bench.first_step and steps
 * over fresh segments (2 cores, a VM), zeroing fresh memory cost about 1-2%
 * of a training step, and populating whole segments (a 20 MiB segment for
 * a 3 MiB block) moved that work to the allocating thread without making
 * the steps faster; what made first steps slow there was the hypervisor
 * backing memory the guest never touched (0.1 GB/s), which populating
 * moves but cannot remove. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/drivers/host/host_internal.h"

#define HOST_HUGE_PAGE ((size_t)2 << 20)
/* Segments up to this size are populated as they are mapped. */
#define HOST_POPULATE_LIMIT ((size_t)256 << 20)

/* The descriptors of the shareable segments, by address. */
typedef struct shared_segment {
  void *ptr;
  int fd;
} shared_segment;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_segment *shared_list;
static size_t shared_count, shared_cap;

/* Set once the process joined a job of several processes. */
static atomic_int in_job;

void loom_host_memory_join_job(void) { atomic_store(&in_job, 1); }

/* LOOM_SHAREABLE_MEMORY=1 or 0 decides; unset, segments are shareable in
 * a process that is one of several of a job: under torchrun with
 * LOCAL_WORLD_SIZE > 1, or once it joined a loomccl group of several
 * ranks (loom_host_memory_join_job). Read at every segment. */
static int shareable(void) {
  const char *v = getenv("LOOM_SHAREABLE_MEMORY");
  if (v && *v) return v[0] == '1' && v[1] == 0;
  if (atomic_load(&in_job)) return 1;
  const char *local = getenv("LOCAL_WORLD_SIZE");
  char *end = NULL;
  const long n = local && *local ? strtol(local, &end, 10) : 0;
  return end && *end == 0 && n > 1;
}

static size_t page_round(size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (size + page - 1) / page * page;
}

/* Takes the descriptor recorded for `ptr` out of the list; -1 if none. */
static int take_fd(void *ptr) {
  int fd = -1;
  pthread_mutex_lock(&shared_lock);
  for (size_t i = 0; i < shared_count; ++i)
    if (shared_list[i].ptr == ptr) {
      fd = shared_list[i].fd;
      shared_list[i] = shared_list[--shared_count];
      break;
    }
  if (shared_count == 0) {
    free(shared_list);
    shared_list = NULL;
    shared_cap = 0;
  }
  pthread_mutex_unlock(&shared_lock);
  return fd;
}

static int remember_fd(void *ptr, int fd) {
  pthread_mutex_lock(&shared_lock);
  if (shared_count == shared_cap) {
    const size_t cap = shared_cap ? 2 * shared_cap : 16;
    shared_segment *grown = realloc(shared_list, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&shared_lock);
      return -1;
    }
    shared_list = grown;
    shared_cap = cap;
  }
  shared_list[shared_count++] = (shared_segment){.ptr = ptr, .fd = fd};
  pthread_mutex_unlock(&shared_lock);
  return 0;
}

static loom_status shared_segment_alloc(int device, size_t size, void **out_ptr) {
  char name[64];
  snprintf(name, sizeof name, "loom-segment-%d-%d", (int)getpid(), device);
  const size_t kept = page_round(size);
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "host driver: memfd_create failed: %s",
                      strerror(errno));
  void *p = MAP_FAILED;
  if (fchmod(fd, 0600) == 0 && ftruncate(fd, (off_t)kept) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    p = mmap(NULL, kept, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED || remember_fd(p, fd) != 0) {
    if (p != MAP_FAILED) munmap(p, kept);
    close(fd);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "host driver: cannot map %zu shareable bytes",
                      size);
  }
#ifdef MADV_HUGEPAGE
  if (kept >= HOST_HUGE_PAGE) (void)madvise(p, kept, MADV_HUGEPAGE);
#endif
  *out_ptr = p;
  return LOOM_OK;
}

/* ---- populating fresh segments ---------------------------------------------- */

static _Atomic uint64_t populated_bytes, touched_bytes, populate_failures, populate_skipped;
/* Whether the kernel takes MADV_POPULATE_WRITE: 1 yes, 0 no, -1 not known. */
static atomic_int populate_advice = -1;

/* LOOM_POPULATE: "1" populates fresh segments; "touch" populates as a
 * kernel without MADV_POPULATE_WRITE does (for tests); anything else, or
 * unset, leaves them to fault in where kernels first touch them. Read at
 * every segment. */
typedef enum { POPULATE_OFF, POPULATE_ON, POPULATE_TOUCH } populate_mode;

static populate_mode populate_setting(void) {
  const char *v = getenv("LOOM_POPULATE");
  if (v && strcmp(v, "1") == 0) return POPULATE_ON;
  if (v && strcmp(v, "touch") == 0) return POPULATE_TOUCH;
  return POPULATE_OFF;
}

/* Writes a zero byte to each page of fresh (zero) memory. */
static void touch_pages(char *p, size_t len) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < len; off += page) ((volatile char *)p)[off] = 0;
}

/* One piece of a segment. Never fails: whatever is not populated faults in
 * later, as without it. */
static void populate_range(char *p, size_t len, int touch_only) {
  int advice = touch_only ? 0 : atomic_load_explicit(&populate_advice, memory_order_relaxed);
#ifdef MADV_POPULATE_WRITE
  if (advice != 0) {
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0) {
      if (advice < 0) atomic_store_explicit(&populate_advice, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&populated_bytes, len, memory_order_relaxed);
      return;
    }
    /* EINVAL: an older kernel. Anything else (no memory, a signal): leave
     * the rest to fault in; writing would fault the same way, or worse. */
    if (errno != EINVAL || advice > 0) {
      atomic_fetch_add_explicit(&populate_failures, 1, memory_order_relaxed);
      return;
    }
    atomic_store_explicit(&populate_advice, 0, memory_order_relaxed);
  }
#else
  (void)advice;
#endif
  touch_pages(p, len);
  atomic_fetch_add_explicit(&touched_bytes, len, memory_order_relaxed);
}

/* A launch over the segment's 2 MiB pieces: tensors[0].data is the
 * segment, scalars[0] its size, scalars[1] whether to write only. */
static int populate_chunks(const loom_kernel_args *args, int64_t begin, int64_t end) {
  char *p = args->tensors[0].data;
  const size_t size = (size_t)args->scalars[0].u;
  const size_t lo = (size_t)begin * HOST_HUGE_PAGE;
  const size_t hi = (size_t)end * HOST_HUGE_PAGE < size ? (size_t)end * HOST_HUGE_PAGE : size;
  populate_range(p + lo, hi - lo, (int)args->scalars[1].u);
  return 0;
}

/* Populates a fresh segment of `device` on the calling thread and the
 * device's idle workers. Without a context (memory the driver maps for
 * itself) nothing is populated. */
static void populate_segment(void *ctx, int device, void *p, size_t size) {
  const populate_mode mode = populate_setting();
  host_context *c = ctx;
  if (mode == POPULATE_OFF || !c || device < 0 || device >= c->num_devices) return;
  if (size > HOST_POPULATE_LIMIT) {
    atomic_fetch_add_explicit(&populate_skipped, 1, memory_order_relaxed);
    return;
  }
  const loom_tensor segment = {.data = p, .dtype = LOOM_UINT8, .rank = 1,
                               .sizes = {(int64_t)size}, .strides = {1}};
  const loom_scalar scalars[2] = {{.u = size}, {.u = mode == POPULATE_TOUCH}};
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 1,
                                 .tensors = &segment, .num_scalars = 2, .scalars = scalars,
                                 .range = (int64_t)((size + HOST_HUGE_PAGE - 1) / HOST_HUGE_PAGE),
                                 .grain = 1};
  host_failure failure;
  (void)host_pool_run(&c->devices[device].pool, 0, populate_chunks, &args, &failure);
}

void host_memory_populate_stats(host_populate_stats *out) {
  out->populated_bytes = atomic_load(&populated_bytes);
  out->touched_bytes = atomic_load(&touched_bytes);
  out->failures = atomic_load(&populate_failures);
  out->skipped = atomic_load(&populate_skipped);
}

loom_status host_segment_alloc(void *ctx, int device, size_t size, void **out_ptr) {
  *out_ptr = NULL;
  /* Out of descriptors (a segment keeps its memfd open) or of memfds, the
   * segment is anonymous: its storage moves once if ever shared. */
  if (shareable()) {
    if (shared_segment_alloc(device, size, out_ptr) == LOOM_OK) {
      populate_segment(ctx, device, *out_ptr, page_round(size));
      return LOOM_OK;
    }
    loom_clear_error();
  }
  const size_t slack = size >= HOST_HUGE_PAGE ? HOST_HUGE_PAGE : 0;
  char *p = size <= SIZE_MAX - slack
                ? mmap(NULL, size + slack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
  if (p == MAP_FAILED)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "host driver: cannot map %zu bytes", size);
  if (slack) {
    /* keep [aligned, aligned + size rounded to pages): what free unmaps */
    const size_t kept = page_round(size);
    char *aligned = (char *)(((uintptr_t)p + slack - 1) & ~(uintptr_t)(slack - 1));
    if (aligned > p) munmap(p, (size_t)(aligned - p));
    char *end = p + kept + slack; /* the mapping's end */
    if (end > aligned + kept) munmap(aligned + kept, (size_t)(end - (aligned + kept)));
    p = aligned;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  }
  populate_segment(ctx, device, p, size);
  *out_ptr = p;
  return LOOM_OK;
}

void host_segment_free(void *ctx, int device, void *ptr, size_t size) {
  (void)ctx;
  (void)device;
  const int fd = take_fd(ptr);
  munmap(ptr, fd >= 0 ? page_round(size) : size);
  if (fd >= 0) close(fd);
}

loom_status host_segment_detach(void *ctx, int device, void *ptr, size_t size, int *out_fd) {
  (void)ctx;
  (void)device;
  *out_fd = -1;
  /* The memfd's size is the page-rounded segment size: only a segment of
   * whole pages is handed over (the allocator's always are). */
  if (page_round(size) != size) return LOOM_ERROR_NOT_SUPPORTED;
  const int fd = take_fd(ptr);
  if (fd < 0) return LOOM_ERROR_NOT_SUPPORTED;
  *out_fd = fd;
  return LOOM_OK;
}
