/* Runtime start and shutdown, devices, and argument validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "runtime/alloc/caching_allocator.h"
#include "runtime/alloc/host_allocator.h"
#include "runtime/hal/builtin_drivers.h"
#include "runtime/hal/hal_internal.h"
#include "runtime/hal/trace.h"

static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_runtime *_Atomic current_runtime;
static const loom_driver *registered[8];
static int num_registered;
/* Set in a child of fork(): the runtime's threads did not survive it. */
static atomic_int forked_child;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void mark_forked_child(void) {
  if (atomic_load(&current_runtime)) atomic_store(&forked_child, 1);
}

static void install_atfork(void) { pthread_atfork(NULL, NULL, mark_forked_child); }
static loom_status start_status = LOOM_OK;
static char start_message[256];

static void runtime_free(loom_runtime *rt) {
  if (!rt) return;
  if (rt->devices) {
    for (int d = 0; d < rt->num_devices; ++d) {
      loom_device_state *dev = &rt->devices[d];
      /* The allocator goes first: it may still wait on streams and drop the
       * references it holds on them. */
      if (dev->allocator) loom_allocator_destroy(dev->allocator);
      dev->allocator = NULL;
      /* Streams the user still holds are destroyed too: shutdown frees all. */
      while (dev->streams) loom_stream_destroy_internal(rt, dev->streams);
      dev->default_stream = NULL;
      pthread_mutex_destroy(&dev->streams_lock);
    }
    free(rt->devices);
  }
  loom_trace_shutdown();
  loom_host_allocator_shutdown();
  if (rt->driver && rt->driver->shutdown) rt->driver->shutdown(rt->driver->context);
  free(rt);
}

loom_status loom_driver_register(const loom_driver *driver) {
  if (!driver || !driver->name || !driver->init || !driver->segment_alloc ||
      !driver->segment_free || !driver->queue_create || !driver->queue_destroy ||
      !driver->queue_submit || !driver->queue_query || !driver->queue_synchronize)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_driver_register: a required driver slot is NULL");
  pthread_mutex_lock(&runtime_lock);
  loom_status st = LOOM_OK;
  if (num_registered == (int)(sizeof registered / sizeof *registered))
    st = loom_error(LOOM_ERROR_NOT_SUPPORTED, "loom_driver_register: too many drivers");
  else
    registered[num_registered++] = driver;
  pthread_mutex_unlock(&runtime_lock);
  return st;
}

/* Called with runtime_lock held. */
static const loom_driver *choose_driver(void) {
  const loom_driver *builtin[8];
  size_t num_builtin = loom_builtin_drivers(builtin, sizeof builtin / sizeof *builtin);
  if (num_builtin > sizeof builtin / sizeof *builtin) num_builtin = sizeof builtin / sizeof *builtin;
  const char *wanted = getenv("LOOM_DRIVER");
  if (wanted && *wanted) {
    for (int i = num_registered; i-- > 0;)
      if (!strcmp(registered[i]->name, wanted)) return registered[i];
    for (size_t i = 0; i < num_builtin; ++i)
      if (!strcmp(builtin[i]->name, wanted)) return builtin[i];
    return NULL;
  }
  if (num_registered) return registered[num_registered - 1];
  return num_builtin ? builtin[0] : NULL;
}

static loom_status runtime_start(loom_runtime **out) {
  loom_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_init: out of host memory");
  rt->driver = choose_driver();
  if (!rt->driver) {
    free(rt);
    const char *wanted = getenv("LOOM_DRIVER");
    if (wanted && *wanted)
      return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_init: no driver named '%s' (LOOM_DRIVER)",
                        wanted);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_init: no driver built in or registered");
  }
  rt->config = (loom_driver_config){
      .num_devices = loom_env_num_devices(),
      .num_threads = loom_env_num_threads(),
      .memory_limit = loom_env_memory_limit(),
  };
  if (rt->driver->api_version < 1 || rt->driver->api_version > LOOM_DRIVER_API_VERSION) {
    const loom_driver *driver = rt->driver;
    free(rt);
    return loom_error(LOOM_ERROR_UNAVAILABLE, "loom_init: driver '%s' has API version %u, "
                      "this runtime speaks %d", driver->name, driver->api_version,
                      LOOM_DRIVER_API_VERSION);
  }
  int count = 0;
  loom_status st = rt->driver->init(rt->driver->context, &rt->config, &count);
  if (st != LOOM_OK) {
    free(rt);
    return st;
  }
  rt->num_devices = count;
  rt->devices = calloc((size_t)(count > 0 ? count : 1), sizeof *rt->devices);
  if (!rt->devices) {
    runtime_free(rt);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_init: out of host memory");
  }
  for (int d = 0; d < count; ++d) pthread_mutex_init(&rt->devices[d].streams_lock, NULL);
  for (int d = 0; d < count; ++d) {
    loom_device_state *dev = &rt->devices[d];
    st = loom_allocator_create(rt->driver, d, rt->config.memory_limit, &dev->allocator);
    if (st == LOOM_OK)
      st = loom_stream_create_internal(rt, d, 0, 1, &dev->default_stream);
    if (st != LOOM_OK) {
      runtime_free(rt);
      return st;
    }
  }
  *out = rt;
  return LOOM_OK;
}

loom_runtime *loom_runtime_get(void) {
  loom_runtime *rt = atomic_load_explicit(&current_runtime, memory_order_acquire);
  if (rt && !atomic_load_explicit(&forked_child, memory_order_relaxed)) return rt;
  if (atomic_load(&forked_child)) {
    /* Waiting on a queue whose executor no longer exists would hang. */
    loom_error(LOOM_ERROR_UNAVAILABLE,
               "the loom runtime cannot be used in a process forked after it started "
               "(use the 'spawn' start method)");
    return NULL;
  }
  pthread_once(&atfork_once, install_atfork);
  pthread_mutex_lock(&runtime_lock);
  rt = atomic_load_explicit(&current_runtime, memory_order_acquire);
  if (!rt) {
    start_status = runtime_start(&rt);
    if (start_status == LOOM_OK) {
      atomic_store_explicit(&current_runtime, rt, memory_order_release);
    } else {
      snprintf(start_message, sizeof start_message, "%s", loom_last_error());
      rt = NULL;
    }
  }
  if (!rt) loom_error(start_status, "%s", start_message);
  pthread_mutex_unlock(&runtime_lock);
  return rt;
}

loom_status loom_init(void) {
  if (loom_runtime_get()) return LOOM_OK;
  return atomic_load(&forked_child) ? LOOM_ERROR_UNAVAILABLE : start_status;
}

loom_status loom_runtime_unavailable(void) {
  const loom_status st = loom_init();
  return st != LOOM_OK ? st
                       : loom_error(LOOM_ERROR_UNAVAILABLE, "the loom runtime is not running");
}

void loom_shutdown(void) {
  /* A forked child cannot join threads it does not have; it leaves the
   * parent's state alone. */
  if (atomic_load(&forked_child)) return;
  pthread_mutex_lock(&runtime_lock);
  loom_runtime *rt = atomic_exchange(&current_runtime, NULL);
  runtime_free(rt);
  pthread_mutex_unlock(&runtime_lock);
}

int loom_device_count(void) {
  loom_runtime *rt = loom_runtime_get();
  return rt ? rt->num_devices : 0;
}

loom_status loom_check_device(loom_runtime *rt, int device) {
  if (device < 0 || device >= rt->num_devices)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "invalid device index %d (loom has %d device%s)", device,
                      rt->num_devices, rt->num_devices == 1 ? "" : "s");
  return LOOM_OK;
}

loom_status loom_check_stream(const loom_stream_t *stream, const char *what) {
  if (atomic_load_explicit(&forked_child, memory_order_relaxed))
    return loom_error(LOOM_ERROR_UNAVAILABLE,
                      "%s: the loom runtime cannot be used in a process forked after it "
                      "started (use the 'spawn' start method)", what);
  if (!stream) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", what);
  if (stream->magic != LOOM_STREAM_MAGIC)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: not a live loom stream", what);
  return LOOM_OK;
}

loom_status loom_device_properties(int device, loom_device_props *out) {
  if (!out) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_device_properties: out is NULL");
  memset(out, 0, sizeof *out);
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) return st;
  out->index = device;
  out->total_memory = rt->config.memory_limit;
  out->num_threads = 1;
  out->major = 1;
  snprintf(out->driver, sizeof out->driver, "%s", rt->driver->name);
  snprintf(out->name, sizeof out->name, "loom %s", rt->driver->name);
  if (rt->driver->device_properties) {
    st = rt->driver->device_properties(rt->driver->context, device, out);
    if (st != LOOM_OK) return st;
  }
  /* The front end owns what the driver must not contradict. */
  out->index = device;
  out->total_memory = rt->config.memory_limit;
  return LOOM_OK;
}

/* Waits for every live stream of `device`; with `take_errors`, returns
 * (and clears) the first asynchronous error recorded on them, else leaves
 * those errors for the streams' own synchronization points. */
static loom_status device_wait(int device, int take_errors, const char *what) {
  loom_runtime *rt = loom_runtime_get();
  if (!rt) return loom_runtime_unavailable();
  loom_status st = loom_check_device(rt, device);
  if (st != LOOM_OK) return st;
  loom_device_state *dev = &rt->devices[device];
  /* Snapshot the live streams with a reference each, so that none is
   * destroyed while we wait on it and no lock is held while waiting. */
  pthread_mutex_lock(&dev->streams_lock);
  size_t n = 0;
  for (loom_stream_t *s = dev->streams; s; s = s->next) ++n;
  loom_stream_t **list = malloc((n ? n : 1) * sizeof *list);
  if (!list) {
    pthread_mutex_unlock(&dev->streams_lock);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  n = 0;
  for (loom_stream_t *s = dev->streams; s; s = s->next) {
    /* A stream whose last reference is being dropped right now is on its
     * way out (its destroy drains it): leave it alone. */
    int refs = atomic_load(&s->refs);
    while (refs > 0 && !atomic_compare_exchange_weak(&s->refs, &refs, refs + 1)) {
    }
    if (refs > 0) list[n++] = s;
  }
  pthread_mutex_unlock(&dev->streams_lock);
  loom_status first = LOOM_OK;
  char message[512] = "";
  for (size_t i = 0; i < n; ++i) {
    loom_status s = LOOM_OK;
    if (take_errors) s = loom_stream_synchronize(list[i]);
    else if (!loom_stream_capture(list[i]))
      s = rt->driver->queue_synchronize(rt->driver->context, list[i]->queue);
    if (s != LOOM_OK && first == LOOM_OK) {
      first = s;
      snprintf(message, sizeof message, "%s", loom_last_error());
    }
    if (list[i]->is_default) atomic_fetch_sub(&list[i]->refs, 1);
    else loom_stream_release(list[i]);
  }
  free(list);
  if (first != LOOM_OK) return loom_error(first, "%s", message);
  return LOOM_OK;
}

loom_status loom_device_synchronize(int device) {
  return device_wait(device, 1, "loom_device_synchronize");
}

loom_status loom_device_wait_idle(int device) {
  return device_wait(device, 0, "loom_device_wait_idle");
}
