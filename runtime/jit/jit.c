/* The JIT: source -> cache key -> a verified entry of the on-disk cache (or
 * a compile that writes one) -> a loaded object -> kernels in the registry.
 *
 * Process state, under one lock: the live modules (by identity: the key
 * and the kernels' names), the loaded objects (by key; mapped until
 * loom_jit_shutdown, since a queued launch may still run their code), and
 * the keys some thread is working on, so that one thread per key reads the
 * cache or compiles while the others wait for its result. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "loom/hal.h"
#include "loom/kernel_abi.h"
#include "runtime/jit/jit_internal.h"

jit_counters loom_jit_counters;

typedef struct jit_object {
  uint8_t key[LOOM_SHA256_SIZE];
  void *handle;
  /* The entry it was loaded from, kept open while it is mapped: the loader
   * knows the object by the name /proc/self/fd/<fd>, which no other file
   * may take meanwhile. */
  int fd;
  int persisted;
  struct jit_object *next;
} jit_object;

typedef struct jit_registration {
  char name[LOOM_KERNEL_NAME_MAX];
  loom_kernel_fn fn;
  loom_kernel_row_map_fn row_map; /* NULL: none */
} jit_registration;

struct loom_jit_module {
  int refs; /* under jit_lock */
  uint8_t id[LOOM_SHA256_SIZE];
  char key_hex[2 * LOOM_SHA256_SIZE + 1];
  jit_object *object;
  loom_jit_origin origin;
  uint32_t num_kernels;
  jit_registration *kernels;
  struct loom_jit_module *next;
};

typedef struct jit_pending {
  uint8_t key[LOOM_SHA256_SIZE];
  struct jit_pending *next;
} jit_pending;

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jit_changed = PTHREAD_COND_INITIALIZER;
static struct loom_jit_module *modules;
static jit_object *objects;
static jit_pending *pending;

enum { MAX_KERNELS = 1024, MAX_EXTRA_FLAGS = 64, MAX_FLAG_LENGTH = 1024 };
static const char *const base_flags[] = {"-O2", "-fPIC", "-shared", "-fno-fast-math"};

/* Everything one compile works with. */
typedef struct request {
  const loom_jit_source *src;
  jit_compiler cc;
  jit_dir dir;
  char *identity;
  char *abi_header; /* include_dir/loom/kernel_abi.h */
  const char *const *isa;
  uint8_t key[LOOM_SHA256_SIZE], id[LOOM_SHA256_SIZE];
  char key_hex[2 * LOOM_SHA256_SIZE + 1];
} request;

/* ---- checking the source ----------------------------------------------------- */

static int is_identifier(const char *s) {
  if (!s || !*s || (*s >= '0' && *s <= '9') || strlen(s) > 255) return 0;
  for (; *s; ++s)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return 0;
  return 1;
}

static const char *kernel_name(const loom_jit_kernel *k) { return k->name ? k->name : k->symbol; }

static loom_status validate(const loom_jit_source *src) {
  const loom_status bad = LOOM_ERROR_INVALID_ARGUMENT;
  if (!src || !src->code) return loom_error(bad, "loom_jit_compile: no source");
  if (!src->kernels || !src->num_kernels || src->num_kernels > MAX_KERNELS)
    return loom_error(bad, "loom_jit_compile: 1 to %d kernels, got %u", MAX_KERNELS,
                      src->kernels ? src->num_kernels : 0);
  if (!src->include_dir || !*src->include_dir)
    return loom_error(bad, "loom_jit_compile: include_dir (loom's include/) is required");
  if (src->flags & ~(uint32_t)LOOM_JIT_FP_CONTRACT)
    return loom_error(bad, "loom_jit_compile: unknown flags 0x%x", src->flags);
  for (uint32_t i = 0; i < src->num_kernels; ++i) {
    const loom_jit_kernel *k = &src->kernels[i];
    if (!is_identifier(k->symbol))
      return loom_error(bad, "loom_jit_compile: kernel %u: '%s' is not a C identifier", i,
                        k->symbol ? k->symbol : "(null)");
    if (k->row_map_symbol && !is_identifier(k->row_map_symbol))
      return loom_error(bad, "loom_jit_compile: kernel %u: row map '%s' is not a C identifier", i,
                        k->row_map_symbol);
    const char *name = kernel_name(k);
    if (!*name || strlen(name) >= LOOM_KERNEL_NAME_MAX)
      return loom_error(bad, "loom_jit_compile: kernel name '%.40s' must have 1 to %d characters",
                        name, LOOM_KERNEL_NAME_MAX - 1);
    for (uint32_t j = 0; j < i; ++j)
      if (!strcmp(kernel_name(&src->kernels[j]), name))
        return loom_error(bad, "loom_jit_compile: the name '%s' is listed twice", name);
  }
  if (src->num_extra_flags > MAX_EXTRA_FLAGS || (src->num_extra_flags && !src->extra_flags))
    return loom_error(bad, "loom_jit_compile: at most %d extra flags, with a list",
                      MAX_EXTRA_FLAGS);
  for (uint32_t i = 0; i < src->num_extra_flags; ++i) {
    const char *f = src->extra_flags[i];
    /* Options only: an input file or another output would change what is
     * built behind the key's back. */
    if (!f || f[0] != '-' || !strncmp(f, "-o", 2) || strlen(f) > MAX_FLAG_LENGTH)
      return loom_error(bad, "loom_jit_compile: extra flag '%.40s' is not an option (it must "
                        "start with '-' and must not be -o)", f ? f : "(null)");
  }
  return LOOM_OK;
}

/* ---- the key ---------------------------------------------------------------- */

static void put(loom_sha256_ctx *h, const void *data, size_t size) {
  const uint64_t n = size; /* length-prefixed: no two lists hash alike */
  loom_sha256_update(h, &n, sizeof n);
  loom_sha256_update(h, data, size);
}

static void put_str(loom_sha256_ctx *h, const char *s) { put(h, s, strlen(s)); }

static const char *contract_flag(const loom_jit_source *src) {
  return (src->flags & LOOM_JIT_FP_CONTRACT) ? "-ffp-contract=fast" : "-ffp-contract=off";
}

static void compute_key(request *r) {
  const loom_jit_source *src = r->src;
  loom_sha256_ctx h;
  loom_sha256_init(&h);
  put_str(&h, "loom-jit-key-v1");
  char abi[16];
  snprintf(abi, sizeof abi, "%d", LOOM_KERNEL_ABI_VERSION);
  put_str(&h, abi);
  put_str(&h, r->identity);
  put(&h, r->cc.fingerprint, sizeof r->cc.fingerprint);
  for (size_t i = 0; i < sizeof base_flags / sizeof *base_flags; ++i) put_str(&h, base_flags[i]);
  put_str(&h, contract_flag(src));
  put_str(&h, "isa");
  for (const char *const *f = r->isa; *f; ++f) put_str(&h, *f);
  put_str(&h, "extra");
  for (uint32_t i = 0; i < src->num_extra_flags; ++i) put_str(&h, src->extra_flags[i]);
  put_str(&h, src->code);
  put_str(&h, r->abi_header);
  loom_sha256_final(&h, r->key);
  loom_hex(r->key, sizeof r->key, r->key_hex);
  /* A module is the object and the names its kernels take. */
  loom_sha256_init(&h);
  put(&h, r->key, sizeof r->key);
  for (uint32_t i = 0; i < src->num_kernels; ++i) {
    put_str(&h, src->kernels[i].symbol);
    put_str(&h, kernel_name(&src->kernels[i]));
    put_str(&h, src->kernels[i].row_map_symbol ? src->kernels[i].row_map_symbol : "");
  }
  loom_sha256_final(&h, r->id);
}

static char *read_path(const char *path, size_t limit) {
  FILE *f = fopen(path, "rbe");
  if (!f) return NULL;
  char *buf = malloc(limit + 1);
  const size_t n = buf ? fread(buf, 1, limit, f) : 0;
  fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

static loom_status prepare(request *r) {
  loom_status st = loom_jit_compiler_find(&r->cc);
  if (st != LOOM_OK) return st;
  char header[PATH_MAX];
  if ((size_t)snprintf(header, sizeof header, "%s/loom/kernel_abi.h", r->src->include_dir) >=
          sizeof header ||
      !(r->abi_header = read_path(header, 1 << 20)))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_jit_compile: cannot read %s: include_dir must be loom's include "
                      "directory", header);
  if ((st = loom_jit_dir_open(&r->dir)) != LOOM_OK) return st;
  if ((st = loom_jit_compiler_identity(&r->cc, &r->dir, &r->identity)) != LOOM_OK) return st;
  r->isa = loom_jit_isa_flags(loom_cpu_features());
  compute_key(r);
  return LOOM_OK;
}

/* ---- compiling into the cache ---------------------------------------------- */

static const char source_suffix[] =
    "\n/* Added by the loom JIT: the ABI these kernels were compiled against,\n"
    " * and the cache key they were compiled for. */\n"
    "#include \"loom/kernel_abi.h\"\n"
    "__attribute__((visibility(\"default\"))) const unsigned loom_jit_abi_version =\n"
    "    LOOM_KERNEL_ABI_VERSION;\n"
    "__attribute__((visibility(\"default\"))) const char loom_jit_key[] = \"%s\";\n";

static loom_status write_source(const request *r, const char *name) {
  const int fd =
      openat(r->dir.fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    const int e = errno;
    if (fd >= 0) close(fd);
    return loom_error(LOOM_ERROR_INTERNAL, "jit: cannot create %s/%s (%s)", r->dir.path, name,
                      strerror(e));
  }
  int ok = fputs(r->src->code, f) >= 0 && fprintf(f, source_suffix, r->key_hex) > 0;
  ok = fclose(f) == 0 && ok;
  return ok ? LOOM_OK
            : loom_error(LOOM_ERROR_INTERNAL, "jit: cannot write %s/%s", r->dir.path, name);
}

/* Compiles the source into the cache entry `entry`. */
static loom_status compile_entry(const request *r, const char *entry) {
  char base[64], src_name[80], out_name[80], log_name[80];
  loom_jit_temp_name(base, sizeof base, "");
  snprintf(src_name, sizeof src_name, "%s.c", base);
  snprintf(out_name, sizeof out_name, "%s.so", base);
  snprintf(log_name, sizeof log_name, "%s.log", base);
  loom_status st = write_source(r, src_name);
  const size_t room = PATH_MAX + 96;
  char *include = malloc(room), *src_path = malloc(room), *out_path = malloc(room);
  const char **argv = malloc((32 + MAX_EXTRA_FLAGS) * sizeof *argv);
  if (st == LOOM_OK && (!include || !src_path || !out_path || !argv))
    st = loom_error(LOOM_ERROR_OUT_OF_MEMORY, "jit: out of host memory");
  if (st == LOOM_OK) {
    snprintf(include, room, "-I%s", r->src->include_dir);
    snprintf(src_path, room, "%s/%s", r->dir.path, src_name);
    snprintf(out_path, room, "%s/%s", r->dir.path, out_name);
    size_t n = 0;
    argv[n++] = r->cc.path;
    for (size_t i = 0; i < sizeof base_flags / sizeof *base_flags; ++i) argv[n++] = base_flags[i];
    argv[n++] = contract_flag(r->src);
    for (const char *const *f = r->isa; *f; ++f) argv[n++] = *f;
    for (uint32_t i = 0; i < r->src->num_extra_flags; ++i) argv[n++] = r->src->extra_flags[i];
    argv[n++] = include;
    argv[n++] = "-o";
    argv[n++] = out_path;
    argv[n++] = src_path;
    argv[n] = NULL;
    st = loom_jit_run(argv, &r->dir, log_name, "the C compiler");
  }
  if (st == LOOM_OK) st = loom_jit_entry_seal(&r->dir, out_name, r->key, entry);
  free(include), free(src_path), free(out_path), free(argv);
  unlinkat(r->dir.fd, src_name, 0);
  unlinkat(r->dir.fd, log_name, 0);
  unlinkat(r->dir.fd, out_name, 0);
  return st;
}

static loom_status load_object(const request *r, int fd, jit_object **out) {
  char path[48];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  dlerror();
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  loom_status st = LOOM_OK;
  if (!handle) {
    const char *why = dlerror();
    st = loom_error(LOOM_ERROR_INVALID_ARGUMENT, "jit: cannot load the compiled object %s.so: %s",
                    r->key_hex, why ? why : "unknown error");
  } else {
    const unsigned *abi = dlsym(handle, "loom_jit_abi_version");
    const char *key = dlsym(handle, "loom_jit_key");
    if (!abi || !key || strcmp(key, r->key_hex))
      st = loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "jit: %s.so is not the object compiled for its key", r->key_hex);
    else if (*abi != LOOM_KERNEL_ABI_VERSION)
      st = loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "jit: the kernels were compiled against kernel ABI %u, but this runtime "
                      "speaks %d (is %s another version's include directory?)",
                      *abi, LOOM_KERNEL_ABI_VERSION, r->src->include_dir);
  }
  jit_object *o = st == LOOM_OK ? calloc(1, sizeof *o) : NULL;
  if (st == LOOM_OK && !o) st = loom_error(LOOM_ERROR_OUT_OF_MEMORY, "jit: out of host memory");
  if (st != LOOM_OK) {
    if (handle) dlclose(handle);
    close(fd);
    return st;
  }
  memcpy(o->key, r->key, sizeof o->key);
  o->handle = handle;
  o->fd = fd;
  o->persisted = r->dir.persistent;
  atomic_fetch_add(&loom_jit_counters.modules_loaded, 1);
  *out = o;
  return LOOM_OK;
}

/* The object for the key from the cache, else compiled into it. Other
 * processes working on the key wait on its lock file meanwhile. */
static loom_status obtain_object(const request *r, jit_object **out, loom_jit_origin *origin) {
  char entry[96], lock_name[96];
  snprintf(entry, sizeof entry, "%s.so", r->key_hex);
  snprintf(lock_name, sizeof lock_name, "%s.lock", r->key_hex);
  const uid_t uid = geteuid();
  uint64_t size;
  *origin = LOOM_JIT_CACHED;
  int fd = loom_jit_entry_open(&r->dir, entry, r->key, uid, &size, NULL);
  loom_status st = LOOM_OK;
  if (fd < 0) {
    const int lock = loom_jit_lock(&r->dir, lock_name);
    fd = loom_jit_entry_open(&r->dir, entry, r->key, uid, &size, NULL);
    if (fd < 0) {
      *origin = LOOM_JIT_COMPILED;
      atomic_fetch_add(&loom_jit_counters.cache_misses, 1);
      st = compile_entry(r, entry);
      if (st == LOOM_OK &&
          (fd = loom_jit_entry_open(&r->dir, entry, r->key, uid, &size, NULL)) < 0)
        st = loom_error(LOOM_ERROR_INTERNAL, "jit: the entry %s/%s did not verify once written",
                        r->dir.path, entry);
    }
    loom_jit_unlock(lock);
  }
  if (st != LOOM_OK) return st;
  if (*origin == LOOM_JIT_CACHED) atomic_fetch_add(&loom_jit_counters.cache_hits, 1);
  st = load_object(r, fd, out);
  /* An entry that does not load is not left for the next compile. */
  if (st != LOOM_OK) unlinkat(r->dir.fd, entry, 0);
  return st;
}

/* ---- modules ------------------------------------------------------------------- */

static void unregister_first(loom_jit_module_t *m, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) loom_kernel_unregister(m->kernels[i].name, m->kernels[i].fn);
}

static void free_module(loom_jit_module_t *m) {
  if (!m) return;
  free(m->kernels);
  free(m);
}

static loom_status make_module(const request *r, jit_object *o, loom_jit_origin origin,
                               loom_jit_module_t **out) {
  const loom_jit_source *src = r->src;
  loom_jit_module_t *m = calloc(1, sizeof *m);
  if (m) m->kernels = calloc(src->num_kernels, sizeof *m->kernels);
  if (!m || !m->kernels) {
    free_module(m);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "jit: out of host memory");
  }
  for (uint32_t i = 0; i < src->num_kernels; ++i) {
    void *sym = dlsym(o->handle, src->kernels[i].symbol);
    loom_status st = LOOM_OK;
    if (!sym)
      st = loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "jit: the source defines no function '%s' (a kernel needs external "
                      "linkage: not static)", src->kernels[i].symbol);
    void *map = NULL;
    if (st == LOOM_OK && src->kernels[i].row_map_symbol &&
        !(map = dlsym(o->handle, src->kernels[i].row_map_symbol)))
      st = loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "jit: the source defines no function '%s' (the row map of '%s')",
                      src->kernels[i].row_map_symbol, src->kernels[i].symbol);
    jit_registration *k = &m->kernels[i];
    snprintf(k->name, sizeof k->name, "%s", kernel_name(&src->kernels[i]));
    k->fn = (loom_kernel_fn)sym;
    if (st == LOOM_OK) st = loom_kernel_register(k->name, k->fn);
    k->row_map = (loom_kernel_row_map_fn)map;
    if (st != LOOM_OK) {
      unregister_first(m, i);
      free_module(m);
      return st;
    }
  }
  /* Only now: an object whose module failed is unmapped, and its
   * addresses may serve another's code. */
  for (uint32_t i = 0; i < src->num_kernels; ++i)
    if (m->kernels[i].row_map) loom_kernel_declare_row_map(m->kernels[i].fn, m->kernels[i].row_map);
  m->refs = 1;
  memcpy(m->id, r->id, sizeof m->id);
  memcpy(m->key_hex, r->key_hex, sizeof m->key_hex);
  m->object = o;
  m->origin = origin;
  m->num_kernels = src->num_kernels;
  *out = m;
  return LOOM_OK;
}

/* Called with jit_lock held. */
static loom_jit_module_t *find_module(const uint8_t id[LOOM_SHA256_SIZE]) {
  for (loom_jit_module_t *m = modules; m; m = m->next)
    if (!memcmp(m->id, id, LOOM_SHA256_SIZE)) return m;
  return NULL;
}

static jit_object *find_object(const uint8_t key[LOOM_SHA256_SIZE]) {
  for (jit_object *o = objects; o; o = o->next)
    if (!memcmp(o->key, key, LOOM_SHA256_SIZE)) return o;
  return NULL;
}

static int is_pending(const uint8_t key[LOOM_SHA256_SIZE]) {
  for (jit_pending *p = pending; p; p = p->next)
    if (!memcmp(p->key, key, LOOM_SHA256_SIZE)) return 1;
  return 0;
}

/* The module for a prepared request: one already live, else made from the
 * resident object or one obtained from the cache, one thread per key. */
static loom_status module_for(const request *r, loom_jit_module_t **out) {
  pthread_mutex_lock(&jit_lock);
  for (;;) {
    loom_jit_module_t *m = find_module(r->id);
    if (m) {
      ++m->refs;
      pthread_mutex_unlock(&jit_lock);
      *out = m;
      return LOOM_OK;
    }
    if (!is_pending(r->key)) break;
    pthread_cond_wait(&jit_changed, &jit_lock);
  }
  jit_pending me = {.next = pending};
  memcpy(me.key, r->key, sizeof me.key);
  pending = &me;
  jit_object *o = find_object(r->key);
  pthread_mutex_unlock(&jit_lock);

  loom_jit_origin origin = LOOM_JIT_RESIDENT;
  const int resident = o != NULL;
  loom_status st = resident ? LOOM_OK : obtain_object(r, &o, &origin);
  loom_jit_module_t *m = NULL;
  if (st == LOOM_OK) st = make_module(r, o, origin, &m);
  if (st != LOOM_OK && o && !resident) {
    /* Nothing was registered from it: unmapping is safe. */
    dlclose(o->handle);
    close(o->fd);
    free(o);
    o = NULL;
  }

  pthread_mutex_lock(&jit_lock);
  if (o && !resident) o->next = objects, objects = o;
  if (m) m->next = modules, modules = m;
  for (jit_pending **p = &pending; *p; p = &(*p)->next)
    if (*p == &me) {
      *p = me.next;
      break;
    }
  pthread_cond_broadcast(&jit_changed);
  pthread_mutex_unlock(&jit_lock);
  *out = m;
  return st;
}

loom_status loom_jit_compile(const loom_jit_source *src, loom_jit_module_t **out_module) {
  if (!out_module)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_compile: out_module is NULL");
  *out_module = NULL;
  loom_status st = validate(src);
  if (st != LOOM_OK) return st;
  request r = {.src = src, .dir = {.fd = -1}};
  st = prepare(&r);
  if (st == LOOM_OK) st = module_for(&r, out_module);
  loom_jit_dir_close(&r.dir);
  free(r.identity);
  free(r.abi_header);
  return st;
}

void loom_jit_module_retain(loom_jit_module_t *module) {
  if (!module) return;
  pthread_mutex_lock(&jit_lock);
  ++module->refs;
  pthread_mutex_unlock(&jit_lock);
}

void loom_jit_module_release(loom_jit_module_t *module) {
  if (!module) return;
  pthread_mutex_lock(&jit_lock);
  const int last = --module->refs == 0;
  if (last) {
    for (loom_jit_module_t **p = &modules; *p; p = &(*p)->next)
      if (*p == module) {
        *p = module->next;
        break;
      }
    /* Under the lock: a compile of the same names must find them free. */
    unregister_first(module, module->num_kernels);
  }
  pthread_mutex_unlock(&jit_lock);
  if (last) free_module(module);
}

loom_status loom_jit_module_info_get(const loom_jit_module_t *module, loom_jit_module_info *out) {
  if (!module || !out)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_jit_module_info_get: NULL argument");
  memset(out, 0, sizeof *out);
  memcpy(out->key, module->key_hex, sizeof out->key);
  out->origin = module->origin;
  out->persisted = module->object->persisted;
  out->num_kernels = module->num_kernels;
  return LOOM_OK;
}

/* ---- the process ----------------------------------------------------------------- */

void loom_jit_stats_get(loom_jit_stats *out) {
  if (!out) return;
  jit_counters *c = &loom_jit_counters;
  *out = (loom_jit_stats){
      .compiler_invocations = atomic_load(&c->compiler_invocations),
      .cache_hits = atomic_load(&c->cache_hits),
      .cache_misses = atomic_load(&c->cache_misses),
      .modules_loaded = atomic_load(&c->modules_loaded),
      .entries_rejected = atomic_load(&c->entries_rejected),
      .cache_refusals = atomic_load(&c->cache_refusals),
      .compile_failures = atomic_load(&c->compile_failures),
      .compile_seconds = (double)atomic_load(&c->compile_ns) * 1e-9,
  };
}

loom_status loom_jit_compiler_available(void) {
  jit_compiler cc;
  return loom_jit_compiler_find(&cc);
}

void loom_jit_shutdown(void) {
  pthread_mutex_lock(&jit_lock);
  while (modules) {
    loom_jit_module_t *m = modules;
    modules = m->next;
    unregister_first(m, m->num_kernels);
    free_module(m);
  }
  loom_kernel_forget_row_maps();
  while (objects) {
    jit_object *o = objects;
    objects = o->next;
    dlclose(o->handle);
    close(o->fd);
    free(o);
  }
  pthread_mutex_unlock(&jit_lock);
  loom_jit_compiler_forget();
  jit_counters *c = &loom_jit_counters;
  atomic_store(&c->compiler_invocations, 0);
  atomic_store(&c->cache_hits, 0);
  atomic_store(&c->cache_misses, 0);
  atomic_store(&c->modules_loaded, 0);
  atomic_store(&c->entries_rejected, 0);
  atomic_store(&c->cache_refusals, 0);
  atomic_store(&c->compile_failures, 0);
  atomic_store(&c->compile_ns, 0);
}
