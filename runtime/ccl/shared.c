/* Device memory shared between processes: a memfd per region, mapped by
 * every process that holds it, registered with the runtime as pinned so
 * that copies to and from it stay asynchronous. A region is made fresh
 * (create, then the caller copies into it) or adopted: an allocation that
 * fills a segment the driver backs with a memfd (loom_memory_detach)
 * becomes the region where it lies, without a copy. The same kind of segment
 * as the communicator's (segment.c), minus the rendezvous: the descriptor
 * travels however the caller sends it (torch.multiprocessing passes it
 * over a unix socket). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/ccl.h"

struct loom_ccl_shared {
  void *ptr;
  size_t size;
  int fd;
  int device;
  int registered; /* ptr is registered as pinned host memory */
};

static atomic_uint shared_serial;

static loom_status check_device(int device, const char *what) {
  loom_device_props props;
  memset(&props, 0, sizeof props);
  loom_status st = loom_device_properties(device, &props);
  if (st != LOOM_OK) return st;
  if (!(props.flags & LOOM_DEVICE_HOST_ADDRESSABLE))
    return loom_error(LOOM_ERROR_NOT_SUPPORTED,
                      "%s: sharing device memory between processes needs a device whose memory "
                      "the host can address (loom:%d on driver '%s' is not)",
                      what, device, props.driver);
  return LOOM_OK;
}

/* Maps and registers `fd`; takes the descriptor. */
static loom_status attach(int device, int fd, size_t size, const char *what,
                          loom_ccl_shared_t **out) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: cannot map %zu bytes: %s", what, size,
                      strerror(e));
  }
  loom_ccl_shared_t *s = malloc(sizeof *s);
  loom_status st = s ? loom_host_register(p, size)
                     : loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
  if (st != LOOM_OK) {
    free(s);
    munmap(p, size);
    close(fd);
    return st;
  }
  *s = (loom_ccl_shared_t){.ptr = p, .size = size, .fd = fd, .device = device, .registered = 1};
  *out = s;
  return LOOM_OK;
}

loom_status loom_ccl_shared_create(int device, size_t size, loom_ccl_shared_t **out_shared) {
  if (!out_shared || size == 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_shared_create: %s",
                      out_shared ? "size is 0" : "out_shared is NULL");
  *out_shared = NULL;
  loom_status st = check_device(device, "loom_ccl_shared_create");
  if (st != LOOM_OK) return st;
  /* The name only shows in /proc/<pid>/maps: it says whose it is. */
  char name[64];
  snprintf(name, sizeof name, "loom-shared-%d-%u", (int)getpid(),
           atomic_fetch_add(&shared_serial, 1));
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_ccl_shared_create: memfd_create failed: %s",
                      strerror(errno));
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_ccl_shared_create: cannot size %zu bytes: %s",
                      size, strerror(e));
  }
  return attach(device, fd, size, "loom_ccl_shared_create", out_shared);
}

loom_status loom_ccl_shared_open(int device, int fd, size_t size, loom_ccl_shared_t **out_shared) {
  if (!out_shared || fd < 0 || size == 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_shared_open: bad %s",
                      !out_shared ? "out_shared" : fd < 0 ? "descriptor" : "size");
  *out_shared = NULL;
  loom_status st = check_device(device, "loom_ccl_shared_open");
  if (st != LOOM_OK) return st;
  struct stat sb;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != getuid() ||
      (sb.st_mode & 077) || seals < 0 ||
      (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
      (size_t)sb.st_size != size)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_ccl_shared_open: the descriptor is not a sealed, private memfd of "
                      "this user of %zu bytes", size);
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_ccl_shared_open: dup failed: %s",
                      strerror(errno));
  return attach(device, own, size, "loom_ccl_shared_open", out_shared);
}

loom_status loom_ccl_shared_adopt(void *ptr, loom_ccl_shared_t **out_shared) {
  if (!out_shared || !ptr)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_ccl_shared_adopt: NULL argument");
  *out_shared = NULL;
  const int device = loom_pointer_device(ptr);
  if (device < 0) return LOOM_ERROR_NOT_SUPPORTED;
  loom_ccl_shared_t *s = malloc(sizeof *s);
  if (!s) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_ccl_shared_adopt: out of host memory");
  int fd = -1;
  size_t size = 0;
  loom_status st = loom_memory_detach(ptr, &fd, &size);
  if (st != LOOM_OK) {
    free(s);
    return st;
  }
  /* The memory stays where it is, now outside the allocator: registered
   * pinned, copies to and from it stay asynchronous. Should registration
   * fail, they are merely synchronous: the data must not move. */
  const int registered = loom_host_register(ptr, size) == LOOM_OK;
  if (!registered) loom_clear_error();
  *s = (loom_ccl_shared_t){.ptr = ptr, .size = size, .fd = fd, .device = device,
                           .registered = registered};
  *out_shared = s;
  return LOOM_OK;
}

void *loom_ccl_shared_ptr(const loom_ccl_shared_t *shared) { return shared ? shared->ptr : NULL; }
size_t loom_ccl_shared_size(const loom_ccl_shared_t *shared) { return shared ? shared->size : 0; }
int loom_ccl_shared_device(const loom_ccl_shared_t *shared) { return shared ? shared->device : -1; }
int loom_ccl_shared_fd(const loom_ccl_shared_t *shared) { return shared ? shared->fd : -1; }

void loom_ccl_shared_release(loom_ccl_shared_t *shared) {
  if (!shared) return;
  /* Kernels and copies queued on the region may still run: they finish
   * before the pages go. The wait leaves a stream's asynchronous error to
   * that stream's next synchronization point (a synchronize here would take
   * it, and the failure would go unseen). (After loom_shutdown the runtime
   * has nothing queued and ended the registration already.) */
  if (loom_device_wait_idle(shared->device) != LOOM_OK) loom_clear_error();
  if (shared->registered && loom_host_unregister(shared->ptr) != LOOM_OK) loom_clear_error();
  munmap(shared->ptr, shared->size);
  close(shared->fd);
  free(shared);
}
