/* The system C compiler: finding it, knowing which one it is, the ISA flags
 * for this CPU, and running it (posix_spawn, never a shell). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "loom/features.h"
#include "runtime/jit/jit_internal.h"

extern char **environ;

/* ---- finding it ------------------------------------------------------------ */

static int executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static loom_status fingerprint(jit_compiler *cc) {
  char real[PATH_MAX];
  struct stat st;
  if (!realpath(cc->path, real) || stat(real, &st) != 0)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: cannot resolve the C compiler %s (%s)",
                      cc->path, strerror(errno));
  /* The binary as invoked and as resolved, and its stat: a compiler
   * replaced in place (even with the same --version) changes the key. */
  char text[3 * PATH_MAX];
  const int n = snprintf(text, sizeof text, "loom-jit-cc-v1\n%s\n%s\n%llu %llu %lld %lld.%09ld",
                         cc->path, real, (unsigned long long)st.st_dev,
                         (unsigned long long)st.st_ino, (long long)st.st_size,
                         (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  loom_sha256(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1, cc->fingerprint);
  return LOOM_OK;
}

loom_status loom_jit_compiler_find(jit_compiler *out) {
  memset(out, 0, sizeof *out);
  const char *wanted = getenv("LOOM_CC");
  const int from_env = wanted && *wanted;
  if (!from_env) wanted = "cc";
  if (strchr(wanted, '/')) {
    if (strlen(wanted) < sizeof out->path && executable_file(wanted)) {
      strcpy(out->path, wanted);
      return fingerprint(out);
    }
  } else {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
      const char *colon = strchr(p, ':');
      const size_t len = colon ? (size_t)(colon - p) : strlen(p);
      if (len && (size_t)snprintf(out->path, sizeof out->path, "%.*s/%s", (int)len, p, wanted) <
                     sizeof out->path &&
          executable_file(out->path))
        return fingerprint(out);
      p += len + (colon != NULL);
    }
  }
  out->path[0] = '\0';
  return loom_error(LOOM_ERROR_UNAVAILABLE,
                    "jit: no C compiler: %s%s %s; set LOOM_CC to a C compiler", from_env ? "LOOM_CC=" : "",
                    wanted, strchr(wanted, '/') ? "is not an executable file" : "is not on PATH");
}

/* ---- ISA flags ------------------------------------------------------------- */

const char *const *loom_jit_isa_flags(uint32_t features) {
  /* The sets CMakeLists.txt builds the library's *_avx2.c, *_avx512.c and
   * *_avx512bf16.c files with. */
  static const char *const none[] = {NULL};
  static const char *const avx2[] = {"-mavx2", "-mfma", "-mf16c", NULL};
  static const char *const avx512[] = {"-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw",
                                       "-mavx512vl", "-mavx512dq", NULL};
  static const char *const avx512bf16[] = {"-mavx2", "-mfma", "-mf16c", "-mavx512f",
                                           "-mavx512bw", "-mavx512vl", "-mavx512dq",
                                           "-mavx512bf16", NULL};
#if defined(__x86_64__) || defined(__i386__)
  const uint32_t avx2_set = LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA;
  if ((features & avx2_set) != avx2_set) return none;
  if (!(features & LOOM_FEATURE_AVX512F)) return avx2;
  return (features & LOOM_FEATURE_AVX512BF16) ? avx512bf16 : avx512;
#else
  (void)features, (void)avx2, (void)avx512, (void)avx512bf16;
  return none;
#endif
}

/* ---- running it ------------------------------------------------------------- */

/* The environment with LC_ALL=C first: diagnostics and --version in one
 * language whatever the caller's locale. */
static char **plain_environment(void) {
  size_t n = 0;
  while (environ && environ[n]) ++n;
  char **env = malloc((n + 2) * sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  env[k++] = "LC_ALL=C";
  for (size_t i = 0; i < n; ++i)
    if (strncmp(environ[i], "LC_ALL=", 7)) env[k++] = environ[i];
  env[k] = NULL;
  return env;
}

/* Exit status of `pid`, or -1 (with errno) when it cannot be had. */
static int wait_for(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

loom_status loom_jit_run(const char *const *argv, const jit_dir *dir, const char *log_name,
                         const char *what) {
  int log = openat(dir->fd, log_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log >= 0 && log <= 2) { /* dup2 onto itself would keep close-on-exec */
    const int moved = fcntl(log, F_DUPFD_CLOEXEC, 3);
    close(log);
    log = moved;
  }
  if (log < 0)
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot create %s/%s (%s)", dir->path, log_name,
                      strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log, 1);
  posix_spawn_file_actions_adddup2(&actions, log, 2);
  char **env = plain_environment();
  pid_t pid = -1;
  const uint64_t start = loom_now_ns();
  int err = env ? posix_spawn(&pid, argv[0], &actions, NULL, (char *const *)argv, env) : ENOMEM;
  int status = err ? 0 : wait_for(pid);
  if (!err && status < 0) err = errno;
  const uint64_t elapsed = loom_now_ns() - start;
  posix_spawn_file_actions_destroy(&actions);
  free(env);
  close(log);
  if (err == 0 || err == ECHILD) {
    atomic_fetch_add(&loom_jit_counters.compiler_invocations, 1);
    atomic_fetch_add(&loom_jit_counters.compile_ns, (long long)elapsed);
  }
  if (err == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return LOOM_OK;
  atomic_fetch_add(&loom_jit_counters.compile_failures, 1);
  if (err == ECHILD)
    return loom_error(LOOM_ERROR_INTERNAL,
                      "jit: %s: its exit status was lost (is SIGCHLD ignored?)", what);
  if (err)
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: cannot run %s (%s)", argv[0], strerror(err));
  char *output = loom_jit_read_file(dir, log_name, 4096);
  char how[64];
  if (WIFEXITED(status))
    snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
  else
    snprintf(how, sizeof how, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  const loom_status st = loom_error(LOOM_ERROR_INVALID_ARGUMENT, "jit: %s failed (%s):\n%s", what,
                                    how, output ? output : "");
  free(output);
  return st;
}

/* ---- its identity ------------------------------------------------------------ */

/* The last identity this process learnt, by fingerprint, and the cache
 * directory known to hold its entry. */
static pthread_mutex_t identity_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t known_fingerprint[LOOM_SHA256_SIZE];
static char *known_identity;
static char known_dir[PATH_MAX];

/* The remembered identity (a copy), and whether `dir` holds its entry. */
static char *remembered(const uint8_t fp[LOOM_SHA256_SIZE], const jit_dir *dir, int *in_dir) {
  pthread_mutex_lock(&identity_lock);
  char *copy = known_identity && !memcmp(fp, known_fingerprint, LOOM_SHA256_SIZE)
                   ? strdup(known_identity)
                   : NULL;
  *in_dir = !strcmp(known_dir, dir->path);
  pthread_mutex_unlock(&identity_lock);
  return copy;
}

static void remember(const uint8_t fp[LOOM_SHA256_SIZE], const char *identity, const jit_dir *dir) {
  char *copy = strdup(identity);
  if (!copy) return;
  pthread_mutex_lock(&identity_lock);
  free(known_identity);
  known_identity = copy;
  memcpy(known_fingerprint, fp, LOOM_SHA256_SIZE);
  snprintf(known_dir, sizeof known_dir, "%s", dir->persistent ? dir->path : "");
  pthread_mutex_unlock(&identity_lock);
}

void loom_jit_compiler_forget(void) {
  pthread_mutex_lock(&identity_lock);
  free(known_identity);
  known_identity = NULL;
  known_dir[0] = '\0';
  pthread_mutex_unlock(&identity_lock);
}

loom_status loom_jit_compiler_identity(const jit_compiler *cc, const jit_dir *dir,
                                       char **out_identity) {
  char hex[2 * LOOM_SHA256_SIZE + 1], name[96];
  loom_hex(cc->fingerprint, LOOM_SHA256_SIZE, hex);
  snprintf(name, sizeof name, "cc-%s.id", hex);
  int in_dir;
  char *identity = remembered(cc->fingerprint, dir, &in_dir);
  uint64_t size;
  int fd = -1;
  if (!identity) fd = loom_jit_entry_open(dir, name, cc->fingerprint, geteuid(), &size, &identity);
  if (fd >= 0) {
    close(fd);
  } else if (identity) {
    /* Known here, but another cache directory's processes must find it
     * too, without running the compiler. */
    if (!in_dir && dir->persistent) {
      fd = loom_jit_entry_open(dir, name, cc->fingerprint, geteuid(), &size, NULL);
      if (fd >= 0) close(fd);
      else if (loom_jit_entry_write(dir, name, cc->fingerprint, identity, strlen(identity)) != LOOM_OK)
        loom_clear_error();
    }
  } else {
    char log[64];
    loom_jit_temp_name(log, sizeof log, ".version");
    const char *argv[] = {cc->path, "--version", NULL};
    loom_status st = loom_jit_run(argv, dir, log, "the C compiler's --version");
    identity = st == LOOM_OK ? loom_jit_read_file(dir, log, 16384) : NULL;
    unlinkat(dir->fd, log, 0);
    if (st != LOOM_OK) return st;
    if (!identity || !*identity) {
      free(identity);
      return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: %s --version printed nothing", cc->path);
    }
    /* A cache that cannot be written only costs the next process a run. */
    if (loom_jit_entry_write(dir, name, cc->fingerprint, identity, strlen(identity)) != LOOM_OK)
      loom_clear_error();
  }
  remember(cc->fingerprint, identity, dir);
  *out_identity = identity;
  return LOOM_OK;
}
