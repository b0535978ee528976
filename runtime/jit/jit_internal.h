/* State and helpers shared by the JIT's files. Not a public header. */
#ifndef LOOM_JIT_INTERNAL_H
#define LOOM_JIT_INTERNAL_H

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/sha256.h"
#include "loom/jit.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* ---- counters (jit.c) ------------------------------------------------------ */

typedef struct jit_counters {
  atomic_llong compiler_invocations, cache_hits, cache_misses, modules_loaded,
      entries_rejected, cache_refusals, compile_failures, compile_ns;
} jit_counters;

extern jit_counters loom_jit_counters;

/* ---- the cache directory and its entries (cache.c) ------------------------- */

typedef struct jit_dir {
  int fd;                 /* the directory, opened O_DIRECTORY|O_NOFOLLOW */
  char path[PATH_MAX];
  int persistent;         /* 0: a private temporary directory (refused cache) */
} jit_dir;

/* The cache directory's path from the environment ($LOOM_CACHE_DIR, else
 * $XDG_CACHE_HOME/torch_loom/jit, else $HOME/.cache/torch_loom/jit). */
loom_status loom_jit_cache_path(char *out, size_t size);

/* Checks an open directory: a directory owned by `uid` with no group or
 * other permission bits. `path` names it in the message. */
loom_status loom_jit_check_dir(int dirfd, uid_t uid, const char *path);

/* Opens (creating it, mode 0700) and checks the cache directory. A refused
 * one gives a private temporary directory instead (persistent = 0), with
 * the refusal counted; only when neither can be had does it fail. */
loom_status loom_jit_dir_open(jit_dir *out);
/* Closes `dir`; a private one is emptied and removed. */
void loom_jit_dir_close(jit_dir *dir);

/* Bytes of the trailer that follows an entry's payload. */
#define JIT_TRAILER_SIZE 96

/* Opens the entry `name` of `dir` and verifies it against `key` on the
 * open descriptor: a regular file owned by `uid`, no group or other bits,
 * a trailer naming `key` and the payload's length and SHA-256. Returns the
 * descriptor (O_RDONLY, close-on-exec) and the payload's size, or -1 when
 * there is no sound entry: a present but unsound one is deleted and
 * counted (entries_rejected). With `payload` non-NULL, the payload is also
 * read into a malloc'd, NUL-terminated buffer for the caller to free. */
int loom_jit_entry_open(const jit_dir *dir, const char *name, const uint8_t key[LOOM_SHA256_SIZE],
                        uid_t uid, uint64_t *out_size, char **payload);

/* Appends the trailer for `key` to the file `name` of `dir`, makes it mode
 * 0600 and renames it to `final_name`: the entry appears whole or not at
 * all. */
loom_status loom_jit_entry_seal(const jit_dir *dir, const char *name,
                                const uint8_t key[LOOM_SHA256_SIZE], const char *final_name);

/* Writes `size` bytes as the entry `final_name` (temporary file, trailer,
 * rename). */
loom_status loom_jit_entry_write(const jit_dir *dir, const char *final_name,
                                 const uint8_t key[LOOM_SHA256_SIZE], const void *data,
                                 size_t size);

/* A name for a temporary file in a directory, unique in the process and
 * among processes: "tmp-<pid>-<n>-<random><suffix>" (at most 44 characters
 * before the suffix). */
void loom_jit_temp_name(char *out, size_t size, const char *suffix);

/* Takes the lock file `name` of `dir` (flock, exclusive, waiting): returns
 * its descriptor, or -1 (then the caller goes on unlocked). */
int loom_jit_lock(const jit_dir *dir, const char *name);
void loom_jit_unlock(int fd);

/* ---- the compiler (compiler.c) --------------------------------------------- */

typedef struct jit_compiler {
  char path[PATH_MAX];    /* the resolved binary */
  uint8_t fingerprint[LOOM_SHA256_SIZE]; /* of its real path and stat */
} jit_compiler;

/* Finds $LOOM_CC (else `cc`) as a path or on PATH; LOOM_ERROR_UNAVAILABLE
 * with the name looked for when there is none. Runs nothing. */
loom_status loom_jit_compiler_find(jit_compiler *out);

/* The compiler's `--version` output, NUL-terminated and malloc'd: from this
 * process's memory, else the entry in `dir`, else by running it (then
 * stored in `dir`). */
loom_status loom_jit_compiler_identity(const jit_compiler *cc, const jit_dir *dir,
                                       char **out_identity);

/* Drops what loom_jit_compiler_identity remembers (loom_jit_shutdown). */
void loom_jit_compiler_forget(void);

/* The ISA flags for `features` (LOOM_FEATURE_* bits), as a NULL-terminated
 * static list. */
const char *const *loom_jit_isa_flags(uint32_t features);

/* Runs `argv` (argv[0] the binary's path) with stdin from /dev/null and
 * stdout and stderr into the file `log_name` of `dir`; counts the
 * invocation and its time. LOOM_OK when it exits with status 0; else
 * LOOM_ERROR_INVALID_ARGUMENT with `what` and the start of its output in
 * the message. The log is left for the caller (read it with
 * loom_jit_read_file) and removes it. */
loom_status loom_jit_run(const char *const *argv, const jit_dir *dir, const char *log_name,
                         const char *what);

/* Reads the file `name` of `dir` (at most `limit` bytes) into a malloc'd,
 * NUL-terminated buffer; NULL if it cannot. */
char *loom_jit_read_file(const jit_dir *dir, const char *name, size_t limit);

#endif
