/* The on-disk cache: its directory, and entries that are verified on the
 * open descriptor before anything uses them.
 *
 * An entry is its payload (a shared object, or a compiler's --version
 * text) followed by a fixed trailer: magic, format, the key it was stored
 * under, the payload's length and SHA-256. Trailing bytes do not disturb
 * the dynamic loader, which maps an ELF file by the offsets in its
 * headers, so the entry itself is what gets loaded. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "loom/kernel_abi.h"
#include "runtime/jit/jit_internal.h"

typedef struct jit_trailer {
  char magic[8]; /* "LOOMJIT" */
  uint32_t format;
  uint32_t abi_version;
  uint64_t payload_size;
  uint8_t key[LOOM_SHA256_SIZE];
  uint8_t digest[LOOM_SHA256_SIZE];
  char end[8]; /* "LOOMEND" */
} jit_trailer;

_Static_assert(sizeof(jit_trailer) == JIT_TRAILER_SIZE, "the trailer is part of the format");

static const char trailer_magic[8] = "LOOMJIT";
static const char trailer_end[8] = "LOOMEND";
enum { TRAILER_FORMAT = 1 };

/* ---- the directory --------------------------------------------------------- */

static loom_status join(char *out, size_t size, const char *base, const char *rest) {
  if ((size_t)snprintf(out, size, "%s%s", base, rest) >= size)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "jit: the cache path %s%s is too long", base,
                      rest);
  return LOOM_OK;
}

loom_status loom_jit_cache_path(char *out, size_t size) {
  const char *dir = getenv("LOOM_CACHE_DIR");
  if (dir && *dir) return join(out, size, dir, "");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return join(out, size, xdg, "/torch_loom/jit");
  const char *home = getenv("HOME");
  char buf[4096];
  struct passwd pw, *found = NULL;
  if ((!home || !*home) && getpwuid_r(geteuid(), &pw, buf, sizeof buf, &found) == 0 && found)
    home = found->pw_dir;
  if (!home || !*home)
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "jit: no home directory for the cache; set LOOM_CACHE_DIR");
  return join(out, size, home, "/.cache/torch_loom/jit");
}

/* mkdir -p with mode 0700 for what it creates; errors show at the open. */
static void make_dirs(const char *path) {
  char part[PATH_MAX];
  const size_t n = strlen(path);
  if (n >= sizeof part) return;
  memcpy(part, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (part[i] != '/' && part[i] != '\0') continue;
    const char c = part[i];
    part[i] = '\0';
    (void)mkdir(part, 0700);
    part[i] = c;
  }
}

loom_status loom_jit_check_dir(int dirfd, uid_t uid, const char *path) {
  struct stat st;
  if (fstat(dirfd, &st) != 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: cannot stat the cache directory %s (%s)",
                      path, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: the cache directory %s is not a directory",
                      path);
  if (st.st_uid != uid)
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "jit: the cache directory %s is owned by uid %u, not by this user "
                      "(uid %u): refused; set LOOM_CACHE_DIR to a directory of yours",
                      path, (unsigned)st.st_uid, (unsigned)uid);
  if (st.st_mode & 077)
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "jit: the cache directory %s has mode %04o, open to other users: "
                      "refused; make it 0700 (chmod 700) or set LOOM_CACHE_DIR",
                      path, (unsigned)(st.st_mode & 07777));
  return LOOM_OK;
}

/* Opens and checks the cache directory at `path`, creating it. */
static loom_status open_checked(const char *path, int *out_fd) {
  *out_fd = -1;
  make_dirs(path);
  const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: cannot open the cache directory %s (%s)%s",
                      path, strerror(e),
                      e == ELOOP || e == ENOTDIR ? ": it must be a directory, not a link" : "");
  }
  const loom_status st = loom_jit_check_dir(fd, geteuid(), path);
  if (st != LOOM_OK) {
    close(fd);
    return st;
  }
  *out_fd = fd;
  return LOOM_OK;
}

loom_status loom_jit_cache_dir(char *out, size_t size) {
  if (!out || !size) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_cache_dir: no buffer");
  out[0] = '\0';
  char path[PATH_MAX];
  loom_status st = loom_jit_cache_path(path, sizeof path);
  if (st != LOOM_OK) return st;
  snprintf(out, size, "%s", path);
  int fd;
  if ((st = open_checked(path, &fd)) == LOOM_OK) close(fd);
  return st;
}

loom_status loom_jit_dir_open(jit_dir *out) {
  *out = (jit_dir){.fd = -1};
  loom_status st = loom_jit_cache_path(out->path, sizeof out->path);
  if (st == LOOM_OK && (st = open_checked(out->path, &out->fd)) == LOOM_OK) {
    out->persistent = 1;
    return LOOM_OK;
  }
  atomic_fetch_add(&loom_jit_counters.cache_refusals, 1);
  const char *tmp = getenv("TMPDIR");
  if (!tmp || tmp[0] != '/') tmp = "/tmp";
  if (join(out->path, sizeof out->path, tmp, "/loom-jit-XXXXXX") != LOOM_OK ||
      !mkdtemp(out->path))
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "jit: the cache directory is refused and no private directory could be "
                      "made under %s (%s)", tmp, strerror(errno));
  if ((st = open_checked(out->path, &out->fd)) != LOOM_OK) {
    rmdir(out->path);
    return st;
  }
  return LOOM_OK;
}

void loom_jit_dir_close(jit_dir *dir) {
  if (dir->fd < 0) return;
  if (!dir->persistent) {
    const int fd = dup(dir->fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d) {
      for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dir->fd, e->d_name, 0);
      closedir(d);
    } else if (fd >= 0) {
      close(fd);
    }
    rmdir(dir->path);
  }
  close(dir->fd);
  dir->fd = -1;
}

/* ---- entries ----------------------------------------------------------------- */

void loom_jit_temp_name(char *out, size_t size, const char *suffix) {
  /* The pid and a counter are unique on this machine; random bits keep
   * processes of other pid namespaces sharing the directory apart. */
  static atomic_uint counter;
  uint64_t salt = 0;
  if (getrandom(&salt, sizeof salt, GRND_NONBLOCK) != (ssize_t)sizeof salt)
    salt = loom_now_ns() ^ ((uint64_t)(uintptr_t)&salt << 16);
  snprintf(out, size, "tmp-%ld-%u-%016llx%s", (long)getpid(), atomic_fetch_add(&counter, 1),
           (unsigned long long)salt, suffix);
}

static int read_full(int fd, void *buf, size_t size, uint64_t offset) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = pread(fd, (char *)buf + done, size - done, (off_t)(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    done += (size_t)n;
  }
  return 1;
}

static int write_full(int fd, const void *buf, size_t size, uint64_t offset) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, (const char *)buf + done, size - done, (off_t)(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    done += (size_t)n;
  }
  return 1;
}

/* SHA-256 of the first `size` bytes of `fd`; with `copy`, also those bytes. */
static int digest_of(int fd, uint64_t size, uint8_t out[LOOM_SHA256_SIZE], char *copy) {
  loom_sha256_ctx h;
  loom_sha256_init(&h);
  char chunk[16384];
  for (uint64_t at = 0; at < size;) {
    const size_t n = size - at < sizeof chunk ? (size_t)(size - at) : sizeof chunk;
    char *dst = copy ? copy + at : chunk;
    if (!read_full(fd, dst, n, at)) return 0;
    loom_sha256_update(&h, dst, n);
    at += n;
  }
  loom_sha256_final(&h, out);
  return 1;
}

/* Why the open entry `fd` is unsound, or NULL when it is sound. */
static const char *unsound(int fd, const uint8_t key[LOOM_SHA256_SIZE], uid_t uid,
                           uint64_t *out_size, char **payload) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "cannot stat";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != uid) return "owned by another user";
  if (st.st_mode & 077) return "open to other users";
  if ((uint64_t)st.st_size < JIT_TRAILER_SIZE) return "truncated";
  const uint64_t size = (uint64_t)st.st_size - JIT_TRAILER_SIZE;
  jit_trailer t;
  if (!read_full(fd, &t, sizeof t, size)) return "unreadable";
  if (memcmp(t.magic, trailer_magic, sizeof t.magic) || memcmp(t.end, trailer_end, sizeof t.end) ||
      t.format != TRAILER_FORMAT || t.abi_version != LOOM_KERNEL_ABI_VERSION)
    return "no trailer of this format";
  if (t.payload_size != size) return "truncated or extended";
  if (memcmp(t.key, key, LOOM_SHA256_SIZE)) return "stored under another key";
  char *copy = NULL;
  if (payload && !(copy = malloc(size + 1))) return "out of memory";
  uint8_t digest[LOOM_SHA256_SIZE];
  if (!digest_of(fd, size, digest, copy) || memcmp(digest, t.digest, sizeof digest)) {
    free(copy);
    return "corrupt (checksum mismatch)";
  }
  if (copy) copy[size] = '\0', *payload = copy;
  *out_size = size;
  return NULL;
}

int loom_jit_entry_open(const jit_dir *dir, const char *name, const uint8_t key[LOOM_SHA256_SIZE],
                        uid_t uid, uint64_t *out_size, char **payload) {
  if (payload) *payload = NULL;
  /* O_NONBLOCK: a FIFO planted under the name must not hang the open. */
  const int fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return -1;
  if (fd >= 0 && !unsound(fd, key, uid, out_size, payload)) return fd;
  if (fd >= 0) close(fd);
  /* Never loaded: deleted, so that the next compile replaces it. */
  unlinkat(dir->fd, name, 0);
  atomic_fetch_add(&loom_jit_counters.entries_rejected, 1);
  return -1;
}

loom_status loom_jit_entry_seal(const jit_dir *dir, const char *name,
                                const uint8_t key[LOOM_SHA256_SIZE], const char *final_name) {
  const int fd = openat(dir->fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    if (fd >= 0) close(fd);
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot open %s/%s to seal it (%s)", dir->path,
                      name, strerror(e));
  }
  jit_trailer t = {.format = TRAILER_FORMAT, .abi_version = LOOM_KERNEL_ABI_VERSION,
                   .payload_size = (uint64_t)st.st_size};
  memcpy(t.magic, trailer_magic, sizeof t.magic);
  memcpy(t.end, trailer_end, sizeof t.end);
  memcpy(t.key, key, LOOM_SHA256_SIZE);
  int ok = digest_of(fd, t.payload_size, t.digest, NULL) &&
           write_full(fd, &t, sizeof t, t.payload_size) && fchmod(fd, 0600) == 0;
  const int e = errno;
  ok = close(fd) == 0 && ok;
  if (!ok)
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot write the entry %s/%s (%s)", dir->path,
                      name, strerror(e));
  if (renameat(dir->fd, name, dir->fd, final_name) != 0)
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot rename %s to %s in %s (%s)", name,
                      final_name, dir->path, strerror(errno));
  return LOOM_OK;
}

loom_status loom_jit_entry_write(const jit_dir *dir, const char *final_name,
                                 const uint8_t key[LOOM_SHA256_SIZE], const void *data,
                                 size_t size) {
  char name[64];
  loom_jit_temp_name(name, sizeof name, ".entry");
  const int fd = openat(dir->fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot create %s/%s (%s)", dir->path, name,
                      strerror(errno));
  const int ok = write_full(fd, data, size, 0);
  const int e = errno;
  loom_status st = close(fd) == 0 && ok
                       ? loom_jit_entry_seal(dir, name, key, final_name)
                       : loom_error(LOOM_ERROR_INTERNAL, "jit: cannot write %s/%s (%s)",
                                    dir->path, name, strerror(e));
  if (st != LOOM_OK) unlinkat(dir->fd, name, 0);
  return st;
}

int loom_jit_lock(const jit_dir *dir, const char *name) {
  const int fd = openat(dir->fd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

void loom_jit_unlock(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

char *loom_jit_read_file(const jit_dir *dir, const char *name, size_t limit) {
  const int fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  char *buf = malloc(limit + 1);
  size_t used = 0;
  while (buf && used < limit) {
    const ssize_t n = read(fd, buf + used, limit - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
  }
  close(fd);
  if (buf) buf[used] = '\0';
  return buf;
}
