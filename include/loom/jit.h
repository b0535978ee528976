/* loom/jit.h — C source to kernels in the registry, at run time.
 *
 * loom_jit_compile hands C source to the system C compiler ($LOOM_CC, else
 * `cc` on PATH) with `-O2 -fPIC -shared -ffp-contract=off -fno-fast-math`
 * and the ISA flags of the CPU features in use (base/cpu.h: none under
 * LOOM_CPU_FEATURES=generic), loads the shared object and registers the
 * listed functions, each a loom_kernel_fn of kernel_abi.h, in the kernel
 * registry (loom/hal.h): loom_kernel_lookup(name) then launches them like
 * library kernels. The object records the LOOM_KERNEL_ABI_VERSION of the
 * headers it was compiled against; a mismatch with the runtime's refuses
 * the load.
 *
 * The on-disk cache. Objects are kept under `<key>.so`, the key being the
 * SHA-256 of the source, the compiler's identity (its `--version` output
 * and the path and stat of its binary), the flags, the ISA flags, the ABI
 * version and the bytes of loom/kernel_abi.h in `include_dir`. The
 * directory is $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/torch_loom/jit, else
 * ~/.cache/torch_loom/jit; it is created with mode 0700 and must be a
 * directory (not a link) owned by the effective user with no group or
 * other permission bits. A directory that fails this is refused: the
 * compile goes on in a private temporary directory removed after the
 * load, nothing persists, and loom_jit_stats counts the refusal
 * (loom_jit_cache_dir says why). Entries are written to a temporary name
 * in the directory and renamed; each carries a trailer with its key,
 * length and SHA-256, verified on the open file before it is loaded (the
 * load goes through that same descriptor). A corrupt, truncated or
 * foreign entry (another owner, group/other bits, not a regular file) is
 * deleted and compiled again, never loaded. Processes compiling one key
 * at once serialize on a lock file (flock) beside the entry: one compiles,
 * the others load its result. The compiler's `--version` output is cached
 * the same way, so a process whose objects are all cached runs no
 * compiler at all.
 *
 * Without a C compiler compiles fail with LOOM_ERROR_UNAVAILABLE: callers
 * fall back to library kernels.
 *
 * Ownership. A compile hands the caller one module reference. Compiling
 * source already loaded in this process under the same kernel names hands
 * out another reference to the same module (nothing runs). When the last
 * reference goes, the module's kernels leave the registry (launches by
 * their names fail from then on, until a new registration), but its code
 * stays mapped until loom_jit_shutdown(): a launch already queued may
 * still run it. Everything here is thread-safe and never aborts. */
#ifndef LOOM_JIT_H
#define LOOM_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_jit_module loom_jit_module_t;
typedef struct loom_jit_job loom_jit_job_t;

/* One kernel of the source: the C function `symbol` (a loom_kernel_fn with
 * external linkage) registered under `name` (NULL: the symbol's name).
 * `row_map_symbol` (NULL: none) names a function of the source with the
 * signature of kernels/registry.h's loom_row_map_fn: the kernel's row map,
 * declared with loom_kernel_declare_row_map (loom/hal.h) once the module
 * is in place, until loom_jit_shutdown unmaps the code (adaptive eager
 * then lets its launches join groups by rows, as the library's row-wise
 * kernels). The map is part of the module's identity. */
typedef struct loom_jit_kernel {
  const char *symbol;
  const char *name;
  const char *row_map_symbol;
} loom_jit_kernel;


enum {
  /* Let the compiler contract a*b+c into fused multiply-adds
   * (-ffp-contract=fast): results then differ from the library's. */
  LOOM_JIT_FP_CONTRACT = 1u << 0,
};

typedef struct loom_jit_source {
  const char *code;                 /* C11 source, NUL-terminated */
  const loom_jit_kernel *kernels;   /* at least one */
  uint32_t num_kernels;
  uint32_t flags;                   /* LOOM_JIT_* */
  const char *const *extra_flags;   /* more compiler options, each starting with '-' */
  uint32_t num_extra_flags;
  /* The directory holding loom/kernel_abi.h (the installed include/):
   * passed as -I, and the object's ABI version comes from it. Required. */
  const char *include_dir;
} loom_jit_source;

/* Where a module's object came from. */
typedef enum loom_jit_origin {
  LOOM_JIT_COMPILED = 0,  /* the compiler ran for it */
  LOOM_JIT_CACHED = 1,    /* loaded from the on-disk cache */
  LOOM_JIT_RESIDENT = 2,  /* already loaded in this process */
} loom_jit_origin;

/* Compiles (or finds) `src` and registers its kernels, on the calling
 * thread. LOOM_ERROR_UNAVAILABLE without a C compiler; LOOM_ERROR_INVALID_ARGUMENT
 * for bad arguments, source the compiler rejects (the message holds the
 * start of its diagnostics), a missing symbol or a kernel name that is
 * taken; nothing stays registered on failure. */
loom_status loom_jit_compile(const loom_jit_source *src, loom_jit_module_t **out_module);

/* The same on a thread of its own: `src` is copied, so the caller may free
 * it at once. The job is the caller's, released with loom_jit_job_release. */
loom_status loom_jit_compile_async(const loom_jit_source *src, loom_jit_job_t **out_job);

/* LOOM_ERROR_NOT_READY while the compile runs; then its result (without
 * waiting and without handing out the module). */
loom_status loom_jit_job_query(loom_jit_job_t *job);

/* Waits for the compile; on success hands the caller a new reference to
 * the module (each call: one more), else returns the compile's status
 * and message. */
loom_status loom_jit_job_wait(loom_jit_job_t *job, loom_jit_module_t **out_module);

/* Waits for the compile if it still runs, then frees the job and the
 * reference it holds. NULL is a no-op. */
void loom_jit_job_release(loom_jit_job_t *job);

void loom_jit_module_retain(loom_jit_module_t *module);
/* Drops one reference; the last unregisters the module's kernels (see
 * Ownership above). NULL is a no-op. */
void loom_jit_module_release(loom_jit_module_t *module);

typedef struct loom_jit_module_info {
  char key[65];            /* the cache key, hex */
  loom_jit_origin origin;  /* how this module's compile found its object */
  int persisted;           /* 1 if the object is in the on-disk cache */
  uint32_t num_kernels;
} loom_jit_module_info;

loom_status loom_jit_module_info_get(const loom_jit_module_t *module,
                                     loom_jit_module_info *out);

/* Counters since the process started (or loom_jit_shutdown). */
typedef struct loom_jit_stats {
  int64_t compiler_invocations; /* compiles and --version queries */
  int64_t cache_hits;           /* objects loaded from the disk cache */
  int64_t cache_misses;         /* objects the cache lacked (then compiled) */
  int64_t modules_loaded;       /* objects mapped into the process */
  int64_t entries_rejected;     /* corrupt, truncated or foreign entries deleted */
  int64_t cache_refusals;       /* compiles that found the cache directory unfit */
  int64_t compile_failures;     /* compiler runs that failed */
  double compile_seconds;       /* wall time inside the compiler */
} loom_jit_stats;

void loom_jit_stats_get(loom_jit_stats *out);

/* The cache directory a compile would use now, into `out` (`size` bytes):
 * LOOM_OK, or LOOM_ERROR_UNAVAILABLE with the reason it is refused (the
 * path is still written). Creates the directory if it is missing. */
loom_status loom_jit_cache_dir(char *out, size_t size);

/* LOOM_OK if a C compiler is there ($LOOM_CC or `cc`), else
 * LOOM_ERROR_UNAVAILABLE with a message naming what was looked for. Runs
 * nothing. */
loom_status loom_jit_compiler_available(void);

/* Unregisters the kernels of modules still held, unmaps every object,
 * resets the counters and frees the JIT's state. Module handles still
 * held become invalid. For tests and clean exit: no job may be running,
 * no JIT kernel queued, and no other JIT call concurrent. */
void loom_jit_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_JIT_H */
