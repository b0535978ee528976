/* The JIT and its cache: compiled kernels launch through the registry like
 * library kernels; a second start finds them on disk and runs no compiler;
 * corrupt, truncated, foreign or misplaced entries are recompiled, never
 * loaded; an unfit cache directory is refused; no compiler is a clear
 * status. Everything runs in a private temporary directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sha256.h"
#include "loom/features.h"
#include "loom/hal.h"
#include "loom/jit.h"
#include "runtime/jit/jit_internal.h"
#include "test_drivers.h"

static char root[PATH_MAX], cache[PATH_MAX + 16], include_dir[PATH_MAX];
static int have_cc;

static const char axpy_source[] =
    "#include \"loom/kernel_abi.h\"\n"
    "int jit_axpy(const loom_kernel_args *a, int64_t begin, int64_t end) {\n"
    "  const float *x = a->tensors[0].data;\n"
    "  float *y = a->tensors[1].data;\n"
    "  const float alpha = (float)a->scalars[0].f;\n"
    "  for (int64_t i = begin; i < end; ++i) y[i] = alpha * x[i] + y[i];\n"
    "  return 0;\n"
    "}\n";

static const char scale_source[] =
    "#include \"loom/kernel_abi.h\"\n"
    "int jit_scale(const loom_kernel_args *a, int64_t begin, int64_t end) {\n"
    "  float *y = a->tensors[0].data;\n"
    "  for (int64_t i = begin; i < end; ++i) y[i] *= 3.0f;\n"
    "  return 0;\n"
    "}\n"
    "static int hidden(const loom_kernel_args *a, int64_t b, int64_t e) { return 0; }\n"
    "int (*keep_hidden)(const loom_kernel_args *, int64_t, int64_t) = hidden;\n";

static loom_jit_source source_of(const char *code, const loom_jit_kernel *k) {
  return (loom_jit_source){.code = code, .kernels = k, .num_kernels = 1,
                           .include_dir = include_dir};
}

static const loom_jit_kernel axpy_kernel = {.symbol = "jit_axpy", .name = "test.jit.axpy"};
static const loom_jit_kernel scale_kernel = {.symbol = "jit_scale", .name = "test.jit.scale"};

static loom_jit_stats stats(void) {
  loom_jit_stats s;
  loom_jit_stats_get(&s);
  return s;
}

enum { N = 3000 };

/* Launches test.jit.axpy over N floats on the default stream; 1 if y came
 * back bitwise as alpha * x + y computed here without contraction. */
static int axpy_runs(void) {
  float x[N], y[N], out[N];
  for (int i = 0; i < N; ++i) x[i] = 0.37f * (float)i - 11.0f, y[i] = 1.0f / (float)(i + 1);
  const loom_kernel_t *k = NULL;
  float *dx = NULL, *dy = NULL;
  loom_stream_t *stream = NULL;
  int ok = loom_kernel_lookup("test.jit.axpy", &k) == LOOM_OK &&
           loom_stream_default(0, &stream) == LOOM_OK &&
           loom_malloc(0, sizeof x, stream, (void **)&dx) == LOOM_OK &&
           loom_malloc(0, sizeof y, stream, (void **)&dy) == LOOM_OK &&
           loom_memcpy(stream, dx, x, sizeof x) == LOOM_OK &&
           loom_memcpy(stream, dy, y, sizeof y) == LOOM_OK;
  if (ok) {
    loom_tensor t[2] = {{.data = dx, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {N}, .strides = {1}},
                        {.data = dy, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {N}, .strides = {1}}};
    loom_scalar alpha = {.f = 1.5};
    loom_launch_desc d = {.kernel = k, .tensors = t, .num_tensors = 2, .scalars = &alpha,
                          .num_scalars = 1, .range = N, .grain = 256};
    ok = loom_launch(stream, &d) == LOOM_OK && loom_memcpy(stream, out, dy, sizeof out) == LOOM_OK &&
         loom_stream_synchronize(stream) == LOOM_OK;
  }
  for (int i = 0; ok && i < N; ++i) {
    volatile float product = 1.5f * x[i]; /* no fused multiply-add here either */
    ok = test_same_f32(out[i], product + y[i]);
  }
  loom_free(dx);
  loom_free(dy);
  return ok;
}

static loom_jit_module_t *compile_axpy(void) {
  const loom_jit_source src = source_of(axpy_source, &axpy_kernel);
  loom_jit_module_t *m = NULL;
  CHECK_OK(loom_jit_compile(&src, &m));
  return m;
}

static loom_jit_origin origin_of(const loom_jit_module_t *m) {
  loom_jit_module_info info;
  return m && loom_jit_module_info_get(m, &info) == LOOM_OK ? info.origin : (loom_jit_origin)-1;
}

/* The entry file of `m` in the cache. */
static void entry_path(const loom_jit_module_t *m, char *out, size_t size) {
  loom_jit_module_info info;
  loom_jit_module_info_get(m, &info);
  snprintf(out, size, "%s/%s.so", cache, info.key);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_sha256_vectors(void) {
  const struct { const char *text, *hex; } v[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; ++i) {
    uint8_t d[LOOM_SHA256_SIZE];
    char hex[2 * LOOM_SHA256_SIZE + 1];
    loom_sha256(v[i].text, strlen(v[i].text), d);
    loom_hex(d, sizeof d, hex);
    CHECK_MSG(!strcmp(hex, v[i].hex), "sha256(\"%s\") = %s", v[i].text, hex);
  }
  /* A million 'a' fed in uneven pieces. */
  static char a[1000000];
  memset(a, 'a', sizeof a);
  loom_sha256_ctx h;
  loom_sha256_init(&h);
  for (size_t at = 0, step = 1; at < sizeof a; at += step, step = step * 3 % 997 + 1)
    loom_sha256_update(&h, a + at, at + step <= sizeof a ? step : sizeof a - at);
  uint8_t d[LOOM_SHA256_SIZE];
  char hex[2 * LOOM_SHA256_SIZE + 1];
  loom_sha256_final(&h, d);
  loom_hex(d, sizeof d, hex);
  CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static void test_isa_flags(void) {
  CHECK(loom_jit_isa_flags(0)[0] == NULL); /* LOOM_CPU_FEATURES=generic */
#if defined(__x86_64__)
  const char *const *avx2 = loom_jit_isa_flags(LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA);
  CHECK(avx2[0] && !strcmp(avx2[0], "-mavx2"));
  int has512 = 0;
  for (const char *const *f = loom_jit_isa_flags(LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA |
                                                 LOOM_FEATURE_AVX512F);
       *f; ++f)
    has512 |= !strcmp(*f, "-mavx512f");
  CHECK(has512);
#endif
}

/* First compile: the compiler runs (for --version and the source), the
 * kernel launches, and a second compile in the process shares the module. */
static void test_compile_and_launch(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  loom_jit_module_t *m = compile_axpy();
  CHECK(m != NULL);
  loom_jit_stats s = stats();
  CHECK_EQ_INT(s.compiler_invocations, 2);
  CHECK_EQ_INT(s.cache_misses, 1);
  CHECK_EQ_INT(s.cache_hits, 0);
  CHECK_EQ_INT(s.modules_loaded, 1);
  CHECK(s.compile_seconds > 0);
  CHECK(origin_of(m) == LOOM_JIT_COMPILED);
  loom_jit_module_info info;
  CHECK_OK(loom_jit_module_info_get(m, &info));
  CHECK(info.persisted == 1 && info.num_kernels == 1 && strlen(info.key) == 64);
  char path[PATH_MAX + 128];
  entry_path(m, path, sizeof path);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  TEST_FOR_EACH_DRIVER { CHECK_MSG(axpy_runs(), "axpy on %s", test_label); }
  CHECK_OK(loom_init());
  loom_jit_module_t *again = compile_axpy();
  CHECK(again == m);
  CHECK_EQ_INT(stats().compiler_invocations, 2);
  loom_jit_module_release(again);
  CHECK(axpy_runs());
  loom_jit_module_release(m);
  const loom_kernel_t *k = NULL;
  CHECK(loom_kernel_lookup("test.jit.axpy", &k) == LOOM_ERROR_NOT_SUPPORTED);
}

/* A fresh start (loom_jit_shutdown forgets everything a process knows)
 * loads the entry and runs no compiler at all. */
static void test_second_start_runs_no_compiler(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  loom_jit_module_t *m = compile_axpy();
  loom_jit_shutdown();
  m = compile_axpy();
  const loom_jit_stats s = stats();
  CHECK_EQ_INT(s.compiler_invocations, 0);
  CHECK_EQ_INT(s.cache_hits, 1);
  CHECK_EQ_INT(s.cache_misses, 0);
  CHECK(origin_of(m) == LOOM_JIT_CACHED);
  CHECK(axpy_runs());
  loom_jit_module_release(m);
}

/* A process that learnt the compiler's identity under one cache directory
 * still leaves it in the next one it uses, for the processes after it. */
static void test_identity_follows_the_cache_dir(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  char other[PATH_MAX + 16];
  snprintf(other, sizeof other, "%s/other", root);
  loom_jit_module_t *m = compile_axpy(); /* the identity is known now */
  loom_jit_module_release(m);
  setenv("LOOM_CACHE_DIR", other, 1);
  const loom_jit_source src = source_of(scale_source, &scale_kernel);
  CHECK_OK(loom_jit_compile(&src, &m));
  loom_jit_module_release(m);
  loom_jit_shutdown();
  CHECK_OK(loom_jit_compile(&src, &m));
  CHECK(origin_of(m) == LOOM_JIT_CACHED);
  CHECK_EQ_INT(stats().compiler_invocations, 0);
  loom_jit_module_release(m);
  setenv("LOOM_CACHE_DIR", cache, 1);
}

/* Damages the cached entry of axpy with `damage`, restarts, and checks that
 * the next compile rejects it, compiles afresh and works. */
static void check_recompiled(void (*damage)(const char *path), const char *what) {
  loom_jit_module_t *m = compile_axpy();
  char path[PATH_MAX + 128];
  entry_path(m, path, sizeof path);
  loom_jit_module_release(m);
  loom_jit_shutdown();
  damage(path);
  m = compile_axpy();
  const loom_jit_stats s = stats();
  CHECK_MSG(s.entries_rejected == 1, "%s: %lld rejected", what, (long long)s.entries_rejected);
  CHECK_MSG(origin_of(m) == LOOM_JIT_COMPILED, "%s: loaded, not recompiled", what);
  CHECK_MSG(s.cache_hits == 0 && s.cache_misses == 1, "%s", what);
  CHECK_MSG(axpy_runs(), "%s", what);
  loom_jit_module_release(m);
  /* The entry written in its place is sound. */
  loom_jit_shutdown();
  m = compile_axpy();
  CHECK_MSG(origin_of(m) == LOOM_JIT_CACHED, "%s: the new entry", what);
  loom_jit_module_release(m);
}

static void flip_middle_byte(const char *path) {
  const int fd = open(path, O_RDWR);
  struct stat st;
  unsigned char b = 0;
  CHECK(fd >= 0 && fstat(fd, &st) == 0 && pread(fd, &b, 1, st.st_size / 2) == 1);
  b ^= 0x40;
  CHECK(pwrite(fd, &b, 1, st.st_size / 2) == 1);
  close(fd);
}

static void truncate_half(const char *path) {
  struct stat st;
  CHECK(stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0);
}

static void drop_trailer(const char *path) {
  struct stat st;
  CHECK(stat(path, &st) == 0 && truncate(path, st.st_size - JIT_TRAILER_SIZE) == 0);
}

static void open_to_group(const char *path) { CHECK(chmod(path, 0640) == 0); }

static void give_away(const char *path) { CHECK(chown(path, 12345, 12345) == 0); }

static void test_corrupt_entry_recompiled(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  check_recompiled(flip_middle_byte, "a flipped byte");
}

static void test_truncated_entry_recompiled(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  check_recompiled(truncate_half, "half the file");
  check_recompiled(drop_trailer, "no trailer");
}

static void test_foreign_entry_recompiled(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  check_recompiled(open_to_group, "mode 0640");
  TEST_SKIP_IF(geteuid() != 0, "chown needs root: the owner check of entries is not exercised");
  check_recompiled(give_away, "owned by uid 12345");
}

/* A sound entry of one key copied under another key's name is refused. */
static void test_entry_of_another_key_recompiled(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  loom_jit_source src = source_of(scale_source, &scale_kernel);
  loom_jit_module_t *a = compile_axpy(), *b = NULL;
  CHECK_OK(loom_jit_compile(&src, &b));
  char pa[PATH_MAX + 128], pb[PATH_MAX + 128];
  entry_path(a, pa, sizeof pa);
  entry_path(b, pb, sizeof pb);
  loom_jit_module_release(a);
  loom_jit_module_release(b);
  loom_jit_shutdown();
  CHECK(rename(pa, pb) == 0);
  CHECK_OK(loom_jit_compile(&src, &b));
  CHECK_EQ_INT(stats().entries_rejected, 1);
  CHECK(origin_of(b) == LOOM_JIT_COMPILED);
  loom_jit_module_release(b);
}

/* A cache directory open to others is refused: the compile works in a
 * private directory, and nothing is written where it was refused. */
static void test_open_cache_dir_refused(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  char open_dir[PATH_MAX + 16];
  snprintf(open_dir, sizeof open_dir, "%s/open", root);
  CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0);
  setenv("LOOM_CACHE_DIR", open_dir, 1);
  char path[PATH_MAX];
  CHECK(loom_jit_cache_dir(path, sizeof path) == LOOM_ERROR_UNAVAILABLE);
  CHECK_MSG(strstr(loom_last_error(), "0777") && strstr(loom_last_error(), open_dir),
            "message: %s", loom_last_error());
  CHECK(!strcmp(path, open_dir));
  loom_jit_module_t *m = compile_axpy();
  loom_jit_module_info info;
  CHECK(m && loom_jit_module_info_get(m, &info) == LOOM_OK && info.persisted == 0);
  CHECK(origin_of(m) == LOOM_JIT_COMPILED);
  CHECK(stats().cache_refusals >= 1);
  CHECK(axpy_runs());
  loom_jit_module_release(m);
  CHECK(rmdir(open_dir) == 0); /* empty: nothing was written there */
  setenv("LOOM_CACHE_DIR", cache, 1);
}

static void test_foreign_cache_dir_refused(void) {
  /* The owner check itself, for any user. */
  const int fd = open(cache, O_RDONLY | O_DIRECTORY);
  CHECK(fd >= 0);
  CHECK_OK(loom_jit_check_dir(fd, geteuid(), cache));
  CHECK(loom_jit_check_dir(fd, geteuid() + 1, cache) == LOOM_ERROR_UNAVAILABLE);
  CHECK(strstr(loom_last_error(), "owned by uid") != NULL);
  close(fd);
  /* A directory truly owned by another user. */
  TEST_SKIP_IF(geteuid() != 0, "chown needs root: a foreign directory cannot be made");
  char foreign[PATH_MAX + 16];
  snprintf(foreign, sizeof foreign, "%s/foreign", root);
  CHECK(mkdir(foreign, 0700) == 0 && chown(foreign, 12345, 12345) == 0);
  setenv("LOOM_CACHE_DIR", foreign, 1);
  char path[PATH_MAX];
  CHECK(loom_jit_cache_dir(path, sizeof path) == LOOM_ERROR_UNAVAILABLE);
  CHECK_MSG(strstr(loom_last_error(), "owned by uid 12345"), "message: %s", loom_last_error());
  if (have_cc) {
    loom_jit_module_t *m = compile_axpy();
    loom_jit_module_info info;
    CHECK(m && loom_jit_module_info_get(m, &info) == LOOM_OK && info.persisted == 0);
    loom_jit_module_release(m);
  }
  CHECK(rmdir(foreign) == 0);
  setenv("LOOM_CACHE_DIR", cache, 1);
}

static void test_linked_cache_dir_refused(void) {
  char link[PATH_MAX + 16];
  snprintf(link, sizeof link, "%s/link", root);
  CHECK(symlink(cache, link) == 0);
  setenv("LOOM_CACHE_DIR", link, 1);
  char path[PATH_MAX];
  CHECK(loom_jit_cache_dir(path, sizeof path) == LOOM_ERROR_UNAVAILABLE);
  CHECK(strstr(loom_last_error(), "link") != NULL);
  setenv("LOOM_CACHE_DIR", cache, 1);
  CHECK_OK(loom_jit_cache_dir(path, sizeof path));
  unlink(link);
}

static void test_no_compiler(void) {
  const char *saved = getenv("LOOM_CC");
  char *restore = saved ? strdup(saved) : NULL;
  setenv("LOOM_CC", "/nonexistent/cc", 1);
  CHECK(loom_jit_compiler_available() == LOOM_ERROR_UNAVAILABLE);
  CHECK(strstr(loom_last_error(), "LOOM_CC=/nonexistent/cc") != NULL);
  const loom_jit_source src = source_of(axpy_source, &axpy_kernel);
  loom_jit_module_t *m = (loom_jit_module_t *)1;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_UNAVAILABLE && m == NULL);
  CHECK(strstr(loom_last_error(), "no C compiler") != NULL);
  setenv("LOOM_CC", "no-such-compiler-anywhere", 1);
  CHECK(loom_jit_compiler_available() == LOOM_ERROR_UNAVAILABLE);
  CHECK(strstr(loom_last_error(), "not on PATH") != NULL);
  CHECK_EQ_INT(stats().compiler_invocations, 0);
  if (restore) setenv("LOOM_CC", restore, 1);
  else unsetenv("LOOM_CC");
  free(restore);
}

static void test_compile_errors_are_clear(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  const loom_jit_kernel k = {.symbol = "broken", .name = "test.jit.broken"};
  loom_jit_source src = source_of("int broken(void) { return undeclared_thing; }\n", &k);
  loom_jit_module_t *m = NULL;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT && !m);
  CHECK_MSG(strstr(loom_last_error(), "C compiler failed") &&
                strstr(loom_last_error(), "undeclared_thing"),
            "message: %s", loom_last_error());
  CHECK_EQ_INT(stats().compile_failures, 1);
  const loom_kernel_t *h = NULL;
  CHECK(loom_kernel_lookup("test.jit.broken", &h) == LOOM_ERROR_NOT_SUPPORTED);
  /* A static function is no kernel. */
  const loom_jit_kernel hidden = {.symbol = "hidden", .name = "test.jit.hidden"};
  src = source_of(scale_source, &hidden);
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT && !m);
  CHECK(strstr(loom_last_error(), "'hidden'") != NULL);
  CHECK(loom_kernel_lookup("test.jit.hidden", &h) == LOOM_ERROR_NOT_SUPPORTED);
}

static int host_scale(const loom_kernel_args *a, int64_t b, int64_t e) { return 0; }

static void test_taken_name_refused(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  CHECK_OK(loom_kernel_register("test.jit.taken", host_scale));
  const loom_jit_kernel ks[2] = {{.symbol = "jit_scale", .name = "test.jit.free"},
                                 {.symbol = "jit_scale", .name = "test.jit.taken"}};
  loom_jit_source src = source_of(scale_source, ks);
  src.num_kernels = 2;
  loom_jit_module_t *m = NULL;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT && !m);
  CHECK(strstr(loom_last_error(), "taken") != NULL);
  /* The kernel registered before the failure was withdrawn. */
  const loom_kernel_t *h = NULL;
  CHECK(loom_kernel_lookup("test.jit.free", &h) == LOOM_ERROR_NOT_SUPPORTED);
  CHECK_OK(loom_kernel_unregister("test.jit.taken", host_scale));
}

static void test_bad_arguments(void) {
  loom_jit_module_t *m = NULL;
  CHECK(loom_jit_compile(NULL, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_jit_source src = source_of(axpy_source, &axpy_kernel);
  CHECK(loom_jit_compile(&src, NULL) == LOOM_ERROR_INVALID_ARGUMENT);
  src.num_kernels = 0;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  const loom_jit_kernel bad = {.symbol = "not an identifier"};
  src = source_of(axpy_source, &bad);
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  src = source_of(axpy_source, &axpy_kernel);
  src.include_dir = NULL;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  src.include_dir = root; /* no loom/kernel_abi.h there */
  if (have_cc) {
    CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), "kernel_abi.h") != NULL);
  }
  src = source_of(axpy_source, &axpy_kernel);
  const char *const outputs[] = {"-o/tmp/elsewhere.so"};
  const char *const inputs[] = {"extra.c"};
  src.extra_flags = outputs;
  src.num_extra_flags = 1;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  src.extra_flags = inputs;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  src.extra_flags = NULL;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  src = source_of(axpy_source, &axpy_kernel);
  src.flags = 1u << 7;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(m == NULL);
}

/* Opting into contraction or adding a flag is another key. */
static void test_flags_change_the_key(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  loom_jit_source src = source_of(scale_source, &scale_kernel);
  loom_jit_module_info info[3];
  const char *const extra[] = {"-DUNUSED_MACRO=1"};
  for (int i = 0; i < 3; ++i) {
    src.flags = i == 1 ? LOOM_JIT_FP_CONTRACT : 0;
    src.extra_flags = i == 2 ? extra : NULL;
    src.num_extra_flags = i == 2;
    loom_jit_module_t *m = NULL;
    CHECK_OK(loom_jit_compile(&src, &m));
    CHECK_OK(loom_jit_module_info_get(m, &info[i]));
    loom_jit_module_release(m); /* frees the name for the next */
  }
  CHECK(strcmp(info[0].key, info[1].key) && strcmp(info[0].key, info[2].key) &&
        strcmp(info[1].key, info[2].key));
}

static int row_map_a(const loom_kernel_args *a, struct loom_row_map *out) {
  (void)a, (void)out;
  return 0;
}

static int row_map_b(const loom_kernel_args *a, struct loom_row_map *out) {
  (void)a, (void)out;
  return 1;
}

/* A kernel's row map: the symbol must be in the source; a module with one
 * is not the module without (the same object, another identity); the
 * runtime's table keeps the first map of a function, and shutdown forgets
 * them all. */
static void test_row_map_symbol(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  static const char source[] =
      "#include \"loom/kernel_abi.h\"\n"
      "struct loom_row_map;\n"
      "int jit_rows_kernel(const loom_kernel_args *a, int64_t b, int64_t e) { return 0; }\n"
      "int jit_rows_map(const loom_kernel_args *a, struct loom_row_map *o) { return 0; }\n";
  loom_jit_kernel k = {.symbol = "jit_rows_kernel", .name = "test.jit.rows",
                       .row_map_symbol = "jit_rows_missing"};
  loom_jit_source src = source_of(source, &k);
  loom_jit_module_t *m = NULL;
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT && !m);
  CHECK(strstr(loom_last_error(), "jit_rows_missing") != NULL);
  k.row_map_symbol = "not an identifier";
  CHECK(loom_jit_compile(&src, &m) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_jit_module_info with, without;
  k.row_map_symbol = "jit_rows_map";
  CHECK_OK(loom_jit_compile(&src, &m));
  CHECK_OK(loom_jit_module_info_get(m, &with));
  loom_jit_module_release(m);
  k.row_map_symbol = NULL;
  CHECK_OK(loom_jit_compile(&src, &m));
  CHECK_OK(loom_jit_module_info_get(m, &without));
  CHECK(without.origin == LOOM_JIT_RESIDENT); /* the same object */
  loom_jit_module_release(m);
  CHECK(!strcmp(with.key, without.key));

  CHECK(loom_kernel_row_map(host_scale) == NULL);
  loom_kernel_declare_row_map(host_scale, row_map_a);
  loom_kernel_declare_row_map(host_scale, row_map_b);
  CHECK(loom_kernel_row_map(host_scale) == row_map_a);
  loom_jit_shutdown();
  CHECK(loom_kernel_row_map(host_scale) == NULL);
}

/* Off the caller's thread: two jobs of one key give one module and one
 * compile; the source may be freed as soon as the job starts. */
static void test_async_jobs(void) {
  TEST_SKIP_IF(!have_cc, "no C compiler here");
  loom_jit_shutdown();
  char *code = strdup(axpy_source);
  loom_jit_kernel k = axpy_kernel;
  loom_jit_source src = source_of(code, &k);
  loom_jit_job_t *j1 = NULL, *j2 = NULL;
  CHECK_OK(loom_jit_compile_async(&src, &j1));
  CHECK_OK(loom_jit_compile_async(&src, &j2));
  memset(code, 'x', strlen(code));
  free(code);
  loom_jit_module_t *m1 = NULL, *m2 = NULL;
  CHECK_OK(loom_jit_job_wait(j1, &m1));
  CHECK_OK(loom_jit_job_wait(j2, &m2));
  CHECK(m1 && m1 == m2);
  CHECK_OK(loom_jit_job_query(j1));
  CHECK(stats().cache_hits + stats().cache_misses == 1);
  CHECK(axpy_runs());
  loom_jit_job_release(j1);
  loom_jit_job_release(j2);
  loom_jit_module_release(m1);
  CHECK(axpy_runs()); /* m2 still holds it */
  loom_jit_module_release(m2);
  /* A failing job reports its error to whoever waits. */
  const loom_jit_kernel none = {.symbol = "absent"};
  src = source_of(axpy_source, &none);
  CHECK_OK(loom_jit_compile_async(&src, &j1));
  CHECK(loom_jit_job_wait(j1, &m1) == LOOM_ERROR_INVALID_ARGUMENT && !m1);
  CHECK(strstr(loom_last_error(), "'absent'") != NULL);
  CHECK(loom_jit_job_query(j1) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_jit_job_release(j1);
  loom_jit_job_release(NULL);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/loom-test-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    fprintf(stderr, "cannot make a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  snprintf(cache, sizeof cache, "%s/cache", root);
  setenv("LOOM_CACHE_DIR", cache, 1);
  /* This file is tests/c/test_jit.c: the headers are in ../../include. */
  snprintf(include_dir, sizeof include_dir, "%s", __FILE__);
  for (int up = 0; up < 3; ++up) {
    char *slash = strrchr(include_dir, '/');
    if (slash) *slash = '\0';
  }
  strncat(include_dir, "/include", sizeof include_dir - strlen(include_dir) - 1);
  have_cc = loom_jit_compiler_available() == LOOM_OK;

  RUN_TEST(test_sha256_vectors);
  RUN_TEST(test_isa_flags);
  RUN_TEST(test_compile_and_launch);
  RUN_TEST(test_second_start_runs_no_compiler);
  RUN_TEST(test_identity_follows_the_cache_dir);
  loom_jit_shutdown();
  RUN_TEST(test_corrupt_entry_recompiled);
  loom_jit_shutdown();
  RUN_TEST(test_truncated_entry_recompiled);
  loom_jit_shutdown();
  RUN_TEST(test_foreign_entry_recompiled);
  loom_jit_shutdown();
  RUN_TEST(test_entry_of_another_key_recompiled);
  loom_jit_shutdown();
  RUN_TEST(test_open_cache_dir_refused);
  RUN_TEST(test_foreign_cache_dir_refused);
  RUN_TEST(test_linked_cache_dir_refused);
  loom_jit_shutdown();
  RUN_TEST(test_no_compiler);
  RUN_TEST(test_compile_errors_are_clear);
  RUN_TEST(test_row_map_symbol);
  RUN_TEST(test_taken_name_refused);
  RUN_TEST(test_bad_arguments);
  RUN_TEST(test_flags_change_the_key);
  RUN_TEST(test_async_jobs);

  loom_jit_shutdown();
  loom_shutdown();
  nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  TEST_MAIN_END();
}
