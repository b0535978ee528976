/* The kernel registry: names to handles, and handles to the running
 * driver's implementations.
 *
 * Handles live in a static table for the life of the process, so callers
 * cache them across loom_shutdown and restarts. Each remembers which
 * driver its implementation came from; a launch on another driver (after a
 * restart with a different LOOM_DRIVER) resolves the name again. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "runtime/hal/hal_internal.h"

#define LOOM_KERNEL_CAPACITY 1024

struct loom_kernel {
  char name[LOOM_KERNEL_NAME_MAX];
  loom_kernel_fn registered; /* a run-time registration, else NULL */
  /* The implementation and the driver it was resolved for; `driver` is
   * published after `impl`, which only resolve_locked writes. */
  loom_kernel_impl impl;
  _Atomic(const loom_driver *) driver;
};

static struct loom_kernel table[LOOM_KERNEL_CAPACITY];
static size_t table_len;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static struct loom_kernel *find_locked(const char *name) {
  for (size_t i = 0; i < table_len; ++i)
    if (!strcmp(table[i].name, name)) return &table[i];
  return NULL;
}

static loom_status check_name(const char *name, const char *what) {
  if (!name || !*name) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: empty kernel name", what);
  if (strlen(name) >= LOOM_KERNEL_NAME_MAX)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: kernel name '%.40s...' is longer than %d",
                      what, name, LOOM_KERNEL_NAME_MAX - 1);
  return LOOM_OK;
}

static struct loom_kernel *add_locked(const char *name, const char *what) {
  if (table_len == LOOM_KERNEL_CAPACITY) {
    loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: the registry holds %d kernels already", what,
               LOOM_KERNEL_CAPACITY);
    return NULL;
  }
  struct loom_kernel *k = &table[table_len++];
  strcpy(k->name, name); /* length checked by check_name */
  return k;
}

/* Resolves `k` for `driver` under the lock. */
static loom_status resolve_locked(struct loom_kernel *k, const loom_driver *driver) {
  loom_kernel_impl impl = {.fn = k->registered};
  if (!impl.fn) {
    loom_status st = LOOM_ERROR_NOT_SUPPORTED;
    if (driver->api_version >= 2 && driver->kernel_resolve)
      st = driver->kernel_resolve(driver->context, k->name, &impl);
    if (st != LOOM_OK || (!impl.fn && !impl.plan))
      return loom_error(LOOM_ERROR_NOT_SUPPORTED, "no kernel named '%s' on the %s driver", k->name,
                        driver->name);
  }
  /* A handle another thread reads is only ever re-resolved for the driver
   * it already has (a restart changes drivers with no launch running). */
  if (atomic_load_explicit(&k->driver, memory_order_relaxed) != driver) {
    k->impl = impl;
    atomic_store_explicit(&k->driver, driver, memory_order_release);
  }
  return LOOM_OK;
}

/* The implementation of `kernel` on `driver`, resolving it when it was
 * resolved for another driver (or never). */
static loom_status impl_for(const loom_kernel_t *kernel, const loom_driver *driver,
                            loom_kernel_impl *out) {
  struct loom_kernel *k = (struct loom_kernel *)kernel;
  loom_status st = LOOM_OK;
  if (atomic_load_explicit(&k->driver, memory_order_acquire) != driver) {
    pthread_mutex_lock(&table_lock);
    st = resolve_locked(k, driver);
    pthread_mutex_unlock(&table_lock);
  }
  if (st == LOOM_OK) *out = k->impl;
  return st;
}

loom_status loom_kernel_fn_for(const loom_kernel_t *kernel, const loom_driver *driver,
                               loom_kernel_fn *out_fn) {
  loom_kernel_impl impl;
  loom_status st = impl_for(kernel, driver, &impl);
  if (st != LOOM_OK) return st;
  if (!impl.fn)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "'%s' only plans; it cannot be launched",
                      loom_kernel_name(kernel));
  *out_fn = impl.fn;
  return LOOM_OK;
}

loom_status loom_kernel_function(const loom_kernel_t *kernel, loom_kernel_fn *out_fn) {
  if (!kernel || !out_fn)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_kernel_function: NULL argument");
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  return loom_kernel_fn_for(kernel, rt->driver, out_fn);
}

loom_status loom_kernel_plan(const loom_kernel_t *kernel, const loom_kernel_args *args,
                             void *out_plan, size_t size) {
  if (!kernel || !args || !out_plan)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_kernel_plan: NULL argument");
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_kernel_impl impl;
  loom_status st = impl_for(kernel, rt->driver, &impl);
  if (st != LOOM_OK) return st;
  if (!impl.plan)
    return loom_error(LOOM_ERROR_NOT_SUPPORTED, "'%s' has no planner on the %s driver",
                      loom_kernel_name(kernel), rt->driver->name);
  loom_clear_error();
  const int rc = impl.plan(args, out_plan, size);
  if (rc == 0) return LOOM_OK;
  const loom_status code = loom_kernel_status(rc);
  if (loom_last_error()[0]) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", loom_last_error());
    return loom_error(code, "%s: %s", loom_kernel_name(kernel), reason);
  }
  return loom_error(code, "%s: planning failed (%s)", loom_kernel_name(kernel),
                    loom_status_name(code));
}

loom_status loom_kernel_lookup(const char *name, const loom_kernel_t **out_kernel) {
  if (!out_kernel) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_kernel_lookup: out_kernel is NULL");
  *out_kernel = NULL;
  loom_status st = check_name(name, "loom_kernel_lookup");
  if (st != LOOM_OK) return st;
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  pthread_mutex_lock(&table_lock);
  struct loom_kernel *k = find_locked(name);
  const int added = !k;
  if (added && !(k = add_locked(name, "loom_kernel_lookup"))) {
    pthread_mutex_unlock(&table_lock);
    return LOOM_ERROR_OUT_OF_MEMORY;
  }
  st = resolve_locked(k, rt->driver);
  if (st != LOOM_OK && added) --table_len; /* names nobody provides stay out */
  pthread_mutex_unlock(&table_lock);
  if (st == LOOM_OK) *out_kernel = k;
  return st;
}

const char *loom_kernel_name(const loom_kernel_t *kernel) {
  return kernel ? ((const struct loom_kernel *)kernel)->name : "";
}

loom_status loom_kernel_register(const char *name, loom_kernel_fn fn) {
  loom_status st = check_name(name, "loom_kernel_register");
  if (st != LOOM_OK) return st;
  if (!fn) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_kernel_register: '%s': fn is NULL", name);
  pthread_mutex_lock(&table_lock);
  struct loom_kernel *k = find_locked(name);
  if (k && (k->registered || atomic_load(&k->driver))) {
    pthread_mutex_unlock(&table_lock);
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_kernel_register: '%s' is taken", name);
  }
  if (!k && !(k = add_locked(name, "loom_kernel_register"))) {
    pthread_mutex_unlock(&table_lock);
    return LOOM_ERROR_OUT_OF_MEMORY;
  }
  k->registered = fn;
  atomic_store(&k->driver, NULL); /* resolve again: the registration wins */
  pthread_mutex_unlock(&table_lock);
  return LOOM_OK;
}

loom_status loom_kernel_unregister(const char *name, loom_kernel_fn fn) {
  loom_status st = check_name(name, "loom_kernel_unregister");
  if (st != LOOM_OK) return st;
  pthread_mutex_lock(&table_lock);
  struct loom_kernel *k = find_locked(name);
  if (!k || !fn || k->registered != fn) {
    pthread_mutex_unlock(&table_lock);
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_kernel_unregister: '%s' is not registered to this function", name);
  }
  k->registered = NULL;
  atomic_store(&k->driver, NULL); /* the next launch resolves the name again */
  pthread_mutex_unlock(&table_lock);
  return LOOM_OK;
}
