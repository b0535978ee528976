/* Compiles off the caller's thread: a job owns a copy of its source and a
 * thread that runs loom_jit_compile on it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jit/jit_internal.h"

struct loom_jit_job {
  pthread_t thread;
  pthread_mutex_t join_lock;
  int joined;        /* under join_lock */
  atomic_int done;   /* the thread has stored its result */
  loom_status status;
  char message[1024];
  loom_jit_module_t *module; /* the job's reference, on success */
  /* The copy of the source. */
  loom_jit_source src;
  loom_jit_kernel *kernels;
  char **extra;
  char *code, *include_dir;
  char **names; /* 3 per kernel: symbol, name, row map symbol (or NULL) */
};

static char *dup_or_null(const char *s, int *failed) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *failed = 1;
  return d;
}

static void free_copy(loom_jit_job_t *job) {
  if (job->names)
    for (uint32_t i = 0; i < 3 * job->src.num_kernels; ++i) free(job->names[i]);
  if (job->extra)
    for (uint32_t i = 0; i < job->src.num_extra_flags; ++i) free(job->extra[i]);
  free(job->names), free(job->extra), free(job->kernels), free(job->code), free(job->include_dir);
}

/* A deep copy of `src`, checked by loom_jit_compile later. */
static int copy_source(loom_jit_job_t *job, const loom_jit_source *src) {
  int failed = 0;
  const uint32_t nk = src->kernels ? src->num_kernels : 0;
  const uint32_t nf = src->extra_flags ? src->num_extra_flags : 0;
  job->src = (loom_jit_source){.num_kernels = nk, .flags = src->flags, .num_extra_flags = nf};
  job->code = dup_or_null(src->code, &failed);
  job->include_dir = dup_or_null(src->include_dir, &failed);
  job->kernels = nk ? calloc(nk, sizeof *job->kernels) : NULL;
  job->names = nk ? calloc(3 * (size_t)nk, sizeof *job->names) : NULL;
  job->extra = nf ? calloc(nf, sizeof *job->extra) : NULL;
  if ((nk && (!job->kernels || !job->names)) || (nf && !job->extra)) return 0;
  for (uint32_t i = 0; i < nk; ++i) {
    job->names[3 * i] = dup_or_null(src->kernels[i].symbol, &failed);
    job->names[3 * i + 1] = dup_or_null(src->kernels[i].name, &failed);
    job->names[3 * i + 2] = dup_or_null(src->kernels[i].row_map_symbol, &failed);
    job->kernels[i] = (loom_jit_kernel){.symbol = job->names[3 * i],
                                        .name = job->names[3 * i + 1],
                                        .row_map_symbol = job->names[3 * i + 2]};
  }
  for (uint32_t i = 0; i < nf; ++i) job->extra[i] = dup_or_null(src->extra_flags[i], &failed);
  job->src.code = job->code;
  job->src.include_dir = job->include_dir;
  job->src.kernels = job->kernels;
  job->src.extra_flags = (const char *const *)job->extra;
  /* Counts without their lists stay so, for loom_jit_compile to refuse. */
  if (src->num_kernels && !src->kernels) job->src.num_kernels = src->num_kernels;
  if (src->num_extra_flags && !src->extra_flags) job->src.num_extra_flags = src->num_extra_flags;
  return !failed;
}

static void *run_job(void *arg) {
  loom_jit_job_t *job = arg;
  job->status = loom_jit_compile(&job->src, &job->module);
  if (job->status != LOOM_OK) snprintf(job->message, sizeof job->message, "%s", loom_last_error());
  atomic_store_explicit(&job->done, 1, memory_order_release);
  return NULL;
}

loom_status loom_jit_compile_async(const loom_jit_source *src, loom_jit_job_t **out_job) {
  if (!out_job) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_compile_async: out_job is NULL");
  *out_job = NULL;
  if (!src) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_compile_async: no source");
  loom_jit_job_t *job = calloc(1, sizeof *job);
  if (!job) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!copy_source(job, src)) {
    free_copy(job);
    free(job);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "jit: out of host memory");
  }
  pthread_mutex_init(&job->join_lock, NULL);
  const int err = pthread_create(&job->thread, NULL, run_job, job);
  if (err) {
    pthread_mutex_destroy(&job->join_lock);
    free_copy(job);
    free(job);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "jit: cannot start a compile thread (%s)",
                      strerror(err));
  }
  *out_job = job;
  return LOOM_OK;
}

loom_status loom_jit_job_query(loom_jit_job_t *job) {
  if (!job) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_job_query: job is NULL");
  if (!atomic_load_explicit(&job->done, memory_order_acquire)) return LOOM_ERROR_NOT_READY;
  if (job->status != LOOM_OK) return loom_error(job->status, "%s", job->message);
  return LOOM_OK;
}

static void join(loom_jit_job_t *job) {
  pthread_mutex_lock(&job->join_lock);
  if (!job->joined) {
    pthread_join(job->thread, NULL);
    job->joined = 1;
  }
  pthread_mutex_unlock(&job->join_lock);
}

loom_status loom_jit_job_wait(loom_jit_job_t *job, loom_jit_module_t **out_module) {
  if (out_module) *out_module = NULL;
  if (!job || !out_module)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_job_wait: NULL argument");
  join(job);
  if (job->status != LOOM_OK) return loom_error(job->status, "%s", job->message);
  loom_jit_module_retain(job->module);
  *out_module = job->module;
  return LOOM_OK;
}

void loom_jit_job_release(loom_jit_job_t *job) {
  if (!job) return;
  join(job);
  loom_jit_module_release(job->module);
  pthread_mutex_destroy(&job->join_lock);
  free_copy(job);
  free(job);
}
