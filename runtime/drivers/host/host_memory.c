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
 * README.md). */
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

loom_status host_segment_alloc(void *ctx, int device, size_t size, void **out_ptr) {
  (void)ctx;
  *out_ptr = NULL;
  /* Out of descriptors (a segment keeps its memfd open) or of memfds, the
   * segment is anonymous: its storage moves once if ever shared. */
  if (shareable()) {
    if (shared_segment_alloc(device, size, out_ptr) == LOOM_OK) return LOOM_OK;
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
