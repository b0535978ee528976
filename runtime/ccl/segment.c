/* The communicator's shared segment and how the ranks get it.
 *
 * Rank 0 makes the segment with memfd_create: an anonymous file that no
 * path reaches (mode 0600 besides, and sealed against resizing, so that no
 * holder can shrink it under the others' mappings), and that disappears
 * with its last descriptor and mapping, whichever way its holders exit.
 * It then listens on a unix socket in the abstract namespace,
 * "loomccl/<uid>/<job id>": a name no file backs, gone when the socket
 * closes (kill -9 included). Each other rank connects, and both ends check
 * the other's credentials from the kernel (SO_PEERCRED: the same user, or
 * the connection is dropped), the joining rank says which job and rank it
 * is, and rank 0 passes the segment's descriptor over the socket
 * (SCM_RIGHTS). Once every rank joined, rank 0 closes the listening
 * socket; the connections stay, for liveness (comm.c).
 *
 * Abstract names are open to every process of the network namespace,
 * which is why both sides check credentials rather than trust the name.
 * The other way to share a memfd, opening /proc/<pid>/fd/<n> of the
 * creator, depends on ptrace access rules (refused under hidepid or in
 * some containers) and on the pid still naming the same process; the
 * socket hands the descriptor only to a peer the kernel vouches for. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/ccl/ccl_internal.h"

#define LINE 64
#define HELLO_MAGIC 0x6c6f6f6d68656c6full /* "loomhelo" */

typedef struct hello {
  uint64_t magic;
  uint32_t version, rank, world;
  char job_id[LOOM_CCL_JOB_ID_LEN + 1];
} hello;

typedef struct reply {
  uint64_t magic;
  uint32_t status; /* loom_status: OK, or why the rank was refused */
} reply;

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Lays out the segment for `world` ranks. */
static void layout(ccl_header *h, uint32_t world, size_t slot_bytes, size_t chan_bytes) {
  size_t off = align_up(sizeof *h, LINE);
  h->off_gone = off;
  off += world * sizeof(ccl_word);
  h->off_step = off;
  off += world * sizeof(ccl_word);
  h->off_sig = off;
  off = align_up(off + (size_t)world * 2 * sizeof(ccl_signature), LINE);
  h->off_sent = off;
  off += (size_t)world * world * sizeof(ccl_word);
  h->off_acked = off;
  off += (size_t)world * world * sizeof(ccl_word);
  const size_t page = 4096;
  h->off_slots = off = align_up(off, page);
  off += (size_t)world * 2 * slot_bytes;
  h->off_chans = off = align_up(off, page);
  off += (size_t)world * world * 2 * chan_bytes;
  h->size = align_up(off, page);
  h->world = world;
  h->slot_bytes = slot_bytes;
  h->chan_bytes = chan_bytes;
}

static void attach(loom_ccl_comm_t *comm) {
  ccl_header *h = comm->hdr = (ccl_header *)comm->base;
  comm->gone = (ccl_word *)(comm->base + h->off_gone);
  comm->step = (ccl_word *)(comm->base + h->off_step);
  comm->sig = (ccl_signature *)(comm->base + h->off_sig);
  comm->sent = (ccl_word *)(comm->base + h->off_sent);
  comm->acked = (ccl_word *)(comm->base + h->off_acked);
  comm->slots = comm->base + h->off_slots;
  comm->chans = comm->base + h->off_chans;
  comm->slot_bytes = h->slot_bytes;
  comm->chan_bytes = h->chan_bytes;
}

static socklen_t socket_name(struct sockaddr_un *addr, const char *job_id) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  /* sun_path[0] = 0: the abstract namespace. */
  int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "loomccl/%u/%s",
                   (unsigned)getuid(), job_id);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The peer's credentials are this process's user's. */
static int same_user(int fd) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

static int remaining_ms(uint64_t deadline) {
  const uint64_t now = loom_now_ns();
  if (now >= deadline) return 0;
  const uint64_t ms = (deadline - now + 999999) / 1000000;
  return ms > 1000000 ? 1000000 : (int)ms;
}

/* Waits until `fd` is readable; 0 on timeout. */
static int wait_readable(int fd, uint64_t deadline) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  for (;;) {
    const int ms = remaining_ms(deadline);
    const int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r == 0 || (r < 0 && errno != EINTR)) return 0;
  }
}

/* ---- rank 0 ---------------------------------------------------------------- */

static loom_status create_segment(loom_ccl_comm_t *comm, const loom_ccl_config *config,
                                  size_t buffer_bytes, int *out_fd) {
  ccl_header h = {.magic = CCL_MAGIC, .version = LOOM_CCL_VERSION};
  const uint32_t world = (uint32_t)config->world_size;
  /* Point-to-point channels: up to 1 MiB per half, less for large worlds
   * (there are world^2 of them). */
  size_t chan = ((size_t)64 << 20) / ((size_t)world * world);
  if (chan > ((size_t)1 << 20)) chan = (size_t)1 << 20;
  chan = chan < 4096 ? 4096 : chan / 4096 * 4096;
  layout(&h, world, align_up(buffer_bytes, 4096), chan);
  memcpy(h.job_id, config->job_id, sizeof h.job_id);

  char name[64];
  snprintf(name, sizeof name, "loomccl-%.8s", config->job_id);
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: memfd_create failed: %s", strerror(errno));
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)h.size) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loomccl: cannot size a %llu-byte segment: %s",
                      (unsigned long long)h.size, strerror(e));
  }
  void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loomccl: cannot map the segment: %s", strerror(e));
  }
  memcpy(p, &h, sizeof h); /* the rest is zero: every rank alive at step 0 */
  comm->base = p;
  comm->size = h.size;
  attach(comm);
  *out_fd = fd;
  return LOOM_OK;
}

static int send_reply(int conn, uint32_t status, int fd) {
  reply r = {.magic = HELLO_MAGIC, .status = status};
  struct iovec iov = {.iov_base = &r, .iov_len = sizeof r};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(conn, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof r ? 0 : -1;
}

/* Accepts the other ranks until all joined or the deadline passes. */
static loom_status serve(loom_ccl_comm_t *comm, const loom_ccl_config *config, int listener,
                         int seg_fd, uint64_t deadline) {
  int joined = 1;
  while (joined < comm->world) {
    if (!wait_readable(listener, deadline))
      return loom_error(LOOM_ERROR_UNAVAILABLE,
                        "loomccl: rank 0 timed out waiting for ranks to join job %s "
                        "(%d of %d joined)", config->job_id, joined, comm->world);
    const int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) continue;
    hello h;
    int rank = -1;
    if (same_user(conn) && wait_readable(conn, deadline) &&
        recv(conn, &h, sizeof h, 0) == (ssize_t)sizeof h && h.magic == HELLO_MAGIC &&
        h.version == LOOM_CCL_VERSION && h.world == (uint32_t)comm->world &&
        !memcmp(h.job_id, config->job_id, sizeof h.job_id) && h.rank > 0 &&
        h.rank < (uint32_t)comm->world && comm->socks[h.rank] < 0)
      rank = (int)h.rank;
    if (rank < 0 || send_reply(conn, LOOM_OK, seg_fd) != 0) {
      /* Not one of ours (another user, another job, a rank twice): drop it. */
      close(conn);
      continue;
    }
    comm->socks[rank] = conn;
    ++joined;
  }
  return LOOM_OK;
}

static loom_status join_as_root(loom_ccl_comm_t *comm, const loom_ccl_config *config,
                                size_t buffer_bytes, uint64_t deadline) {
  int seg_fd = -1;
  loom_status st = create_segment(comm, config, buffer_bytes, &seg_fd);
  if (st != LOOM_OK) return st;
  if (comm->world == 1) {
    close(seg_fd);
    return LOOM_OK;
  }
  /* Non-blocking: a peer that connects and leaves between poll() and
   * accept() must not block rank 0. */
  const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un addr;
  const socklen_t len = socket_name(&addr, config->job_id);
  if (listener < 0 || bind(listener, (struct sockaddr *)&addr, len) != 0 ||
      listen(listener, comm->world) != 0) {
    const int e = errno;
    if (listener >= 0) close(listener);
    close(seg_fd);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: rank 0 cannot listen for job %s: %s%s",
                      config->job_id, strerror(e),
                      e == EADDRINUSE ? " (a job with this id runs: job ids must be unique)" : "");
  }
  st = serve(comm, config, listener, seg_fd, deadline);
  close(listener); /* the name is gone from now on */
  close(seg_fd);   /* the mappings keep the segment */
  return st;
}

/* ---- the other ranks ----------------------------------------------------------- */

static int connect_root(const char *job_id, uint64_t deadline) {
  struct sockaddr_un addr;
  const socklen_t len = socket_name(&addr, job_id);
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&addr, len) == 0) return fd;
    const int e = errno;
    close(fd);
    if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN) || loom_now_ns() >= deadline) return -1;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 2000000};
    nanosleep(&pause, NULL);
  }
}

/* Receives the reply and the segment's descriptor. */
static loom_status receive_segment(int conn, uint64_t deadline, int *out_fd) {
  *out_fd = -1;
  reply r;
  struct iovec iov = {.iov_base = &r, .iov_len = sizeof r};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  if (!wait_readable(conn, deadline) || recvmsg(conn, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof r)
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "loomccl: rank 0 closed the connection or did not answer in time");
  int fd = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(&fd, CMSG_DATA(c), sizeof fd);
  if (r.magic != HELLO_MAGIC || r.status != LOOM_OK || fd < 0) {
    if (fd >= 0) close(fd);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: rank 0 refused this rank");
  }
  *out_fd = fd;
  return LOOM_OK;
}

/* Maps the segment behind `fd` after checking it is what rank 0 makes. */
static loom_status map_segment(loom_ccl_comm_t *comm, const loom_ccl_config *config, int fd) {
  struct stat st;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077) || seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
                                              (F_SEAL_SHRINK | F_SEAL_GROW) ||
      (size_t)st.st_size < sizeof(ccl_header))
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: the segment from rank 0 is not a sealed, "
                                              "private memfd");
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loomccl: cannot map the segment: %s",
                      strerror(errno));
  comm->base = p;
  comm->size = (size_t)st.st_size;
  const ccl_header *h = p;
  ccl_header probe = *h;
  layout(&probe, h->world, h->slot_bytes, h->chan_bytes);
  if (h->magic != CCL_MAGIC || h->version != LOOM_CCL_VERSION ||
      h->world != (uint32_t)config->world_size || h->size != comm->size ||
      memcmp(h->job_id, config->job_id, sizeof h->job_id) || probe.size != h->size ||
      probe.off_chans != h->off_chans)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: the segment from rank 0 does not match "
                                              "this job");
  attach(comm);
  return LOOM_OK;
}

static loom_status join_as_peer(loom_ccl_comm_t *comm, const loom_ccl_config *config,
                                uint64_t deadline) {
  const int conn = connect_root(config->job_id, deadline);
  if (conn < 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "loomccl: rank %d could not reach rank 0 of job %s before the timeout",
                      comm->rank, config->job_id);
  comm->socks[0] = conn; /* closed by the communicator on failure */
  if (!same_user(conn))
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "loomccl: the socket of job %s belongs to another user", config->job_id);
  hello h = {.magic = HELLO_MAGIC, .version = LOOM_CCL_VERSION, .rank = (uint32_t)comm->rank,
             .world = (uint32_t)comm->world};
  memcpy(h.job_id, config->job_id, sizeof h.job_id);
  if (send(conn, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loomccl: rank 0 closed the connection");
  int fd = -1;
  loom_status st = receive_segment(conn, deadline, &fd);
  if (st != LOOM_OK) return st;
  st = map_segment(comm, config, fd);
  close(fd);
  return st;
}

loom_status ccl_segment_join(loom_ccl_comm_t *comm, const loom_ccl_config *config,
                             size_t buffer_bytes) {
  const uint64_t deadline = loom_now_ns() + comm->timeout_ns;
  loom_status st = comm->rank == 0 ? join_as_root(comm, config, buffer_bytes, deadline)
                                   : join_as_peer(comm, config, deadline);
  if (st != LOOM_OK) return st;
  /* Copies between device memory and the segment are then asynchronous. */
  if ((st = loom_host_register(comm->base, comm->size)) != LOOM_OK) return st;
  comm->registered = 1;
  return LOOM_OK;
}

void ccl_segment_unmap(loom_ccl_comm_t *comm) {
  if (!comm->base) return;
  if (comm->registered) loom_host_unregister(comm->base);
  comm->registered = 0;
  munmap(comm->base, comm->size);
  comm->base = NULL;
}
