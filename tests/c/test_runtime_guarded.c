/* The guarded driver (LOOM_DRIVER=guarded): kernels and copies work on its
 * device memory as on the host driver's, while the host faults on it, with
 * a message naming the bug. What every driver must do alike (copies,
 * launches, address reuse, threads) runs on each; the faults only where
 * the driver guards its memory. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_drivers.h"

static const char previous_note[] = "previous handler\n";

/* Stands for whatever handled SIGSEGV before the runtime started (Python's
 * faulthandler, a sanitizer): the guarded driver must hand it every fault. */
static void previous_handler(int sig) {
  (void)!write(STDERR_FILENO, previous_note, sizeof previous_note - 1);
  signal(sig, SIG_DFL); /* returning re-runs the access, which now kills */
}

static int add_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  float *out = args->tensors[0].data;
  const float *a = args->tensors[1].data, *b = args->tensors[2].data;
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i] + (float)args->scalars[0].f;
  return 0;
}

static void launch_add(loom_stream_t *s, float *out, const float *a, const float *b, int64_t n,
                       uint32_t flags, int now) {
  loom_tensor t[3];
  const void *data[3] = {out, a, b};
  for (int i = 0; i < 3; ++i)
    t[i] = (loom_tensor){.data = (void *)data[i], .dtype = LOOM_FLOAT32, .rank = 1,
                         .sizes = {n}, .strides = {1}};
  const loom_scalar extra = {.f = 0.5};
  const loom_launch_desc d = {.name = "add", .fn = add_kernel, .tensors = t, .num_tensors = 3,
                              .scalars = &extra, .num_scalars = 1, .range = n, .grain = 4096,
                              .flags = flags};
  if (now) CHECK_OK(loom_run_now(0, &d));
  else CHECK_OK(loom_launch(s, &d));
}

static void test_selected_by_name(void) {
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  const char *driver = test_driver_current()->name;
  char name[64];
  snprintf(name, sizeof name, "loom %s", driver);
  CHECK(strcmp(props.driver, driver) == 0);
  CHECK(strncmp(props.name, name, strlen(name)) == 0);
  CHECK(props.num_threads >= 1);
  /* Only the host driver says its memory is host memory (a driver that
   * does not say, like the test driver "sync", is taken not to). */
  CHECK(((props.flags & LOOM_DEVICE_HOST_ADDRESSABLE) != 0) == (strcmp(driver, "host") == 0));
}

/* Small (inline-run) and large (parallel, huge-page) buffers, every kind of
 * copy, and launches through the queue, inline and run_now. */
static void check_round_trip(int64_t n) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_create(0, 0, &s));
  float *host = malloc((size_t)n * sizeof *host), *pinned = NULL;
  CHECK_OK(loom_host_malloc((size_t)n * sizeof *pinned, (void **)&pinned));
  float *a = NULL, *b = NULL, *out = NULL;
  const size_t bytes = (size_t)n * sizeof(float);
  CHECK_OK(loom_malloc(0, bytes, s, (void **)&a));
  CHECK_OK(loom_malloc(0, bytes, s, (void **)&b));
  CHECK_OK(loom_malloc(0, bytes, s, (void **)&out));
  CHECK_EQ_INT(loom_pointer_device(a), 0);
  CHECK_EQ_INT(loom_pointer_device(a + n - 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    host[i] = (float)(i % 1024); /* exact in float32 whatever n */
    pinned[i] = (float)(2 * (i % 1024));
  }
  CHECK_OK(loom_memcpy(s, a, host, bytes));   /* pageable to device */
  CHECK_OK(loom_memcpy(s, b, pinned, bytes)); /* pinned to device */
  launch_add(s, out, a, b, n, LOOM_LAUNCH_MAY_RUN_INLINE, 0);
  CHECK_OK(loom_memcpy(s, a, out, bytes));    /* device to device */
  memset(host, 0, bytes);
  CHECK_OK(loom_memcpy(s, host, a, bytes));   /* device to pageable */
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += host[i] != (float)(3 * (i % 1024)) + 0.5f;
  CHECK_EQ_INT(bad, 0);
  CHECK_OK(loom_stream_synchronize(s));
  launch_add(s, out, a, b, n, 0, 1);           /* run_now, bypassing the queue */
  CHECK_OK(loom_memcpy(s, pinned, out, bytes)); /* device to pinned, asynchronous */
  CHECK_OK(loom_stream_synchronize(s));
  bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += pinned[i] != (float)(5 * (i % 1024)) + 1.0f;
  CHECK_EQ_INT(bad, 0);
  CHECK_OK(loom_free(a));
  CHECK_OK(loom_free(b));
  CHECK_OK(loom_free(out));
  CHECK_OK(loom_host_free(pinned));
  free(host);
  loom_stream_release(s);
}

static void test_kernels_and_copies(void) {
  check_round_trip(1000);
  check_round_trip((int64_t)3 << 20); /* 12 MiB per buffer: parallel copies */
}

/* A kernel on a discrete device reaches device memory only: a host buffer in
 * a launch is refused where the host driver would run it. */
static void test_host_memory_in_launch_refused(void) {
  TEST_REQUIRE(TEST_DRIVER_GUARDED,
               "device memory is host memory on this driver, so a launch may name host "
               "buffers");
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  float host[16] = {0}, *dev = NULL;
  CHECK_OK(loom_malloc(0, sizeof host, s, (void **)&dev));
  loom_tensor t[3];
  for (int i = 0; i < 3; ++i)
    t[i] = (loom_tensor){.data = i == 2 ? (void *)host : dev, .dtype = LOOM_FLOAT32, .rank = 1,
                         .sizes = {16}, .strides = {1}};
  const loom_scalar extra = {.f = 0};
  const loom_launch_desc d = {.name = "add", .fn = add_kernel, .tensors = t, .num_tensors = 3,
                              .scalars = &extra, .num_scalars = 1, .range = 16, .grain = 16};
  CHECK_EQ_INT(loom_launch(s, &d), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "not device memory") != NULL);
  CHECK_EQ_INT(loom_run_now(0, &d), LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_stream_synchronize(s));
  CHECK_OK(loom_free(dev));
}

/* Runs `touch(arg)` in a forked child with stderr captured; returns the
 * child's wait status and its stderr in `text`. */
static int in_child(void (*touch)(void *), void *arg, char *text, size_t capacity) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    touch(arg);
    _exit(0); /* not reached when the access faults */
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t got;
  while (len + 1 < capacity && (got = read(fds[0], text + len, capacity - 1 - len)) > 0)
    len += (size_t)got;
  text[len] = '\0';
  close(fds[0]);
  int status = -1;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

static void read_float(void *p) {
  volatile float v = *(volatile float *)p;
  (void)v;
}

static void write_float(void *p) { *(volatile float *)p = 1.0f; }

/* A read and a write of device memory by the host fault, naming the bug. */
static void check_host_access_faults(void) {
  float *dev = NULL;
  CHECK_OK(loom_malloc(0, 4096, NULL, (void **)&dev));
  void (*touches[2])(void *) = {read_float, write_float};
  for (int k = 0; k < 2; ++k) {
    char text[1024], expected[128];
    const int status = in_child(touches[k], dev + 7, text, sizeof text);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    snprintf(expected, sizeof expected, "host code touched device memory at %p", (void *)(dev + 7));
    CHECK(strstr(text, expected) != NULL);
    CHECK(strstr(text, "read it through a HAL copy") != NULL);
    /* then the handler that was there before ours */
    CHECK(strstr(text, previous_note) != NULL);
    if (!strstr(text, expected)) fprintf(stderr, "child said: %s\n", text);
  }
  CHECK_OK(loom_free(dev));
}

static void test_host_access_faults(void) {
  TEST_REQUIRE(TEST_DRIVER_GUARDED,
               "device memory is host memory on this driver: the host reading it is no fault");
  check_host_access_faults();
}

/* A fault elsewhere is not the driver's to name: it goes to the previous
 * handler alone. */
static void test_other_faults_passed_on(void) {
  TEST_REQUIRE(TEST_DRIVER_GUARDED,
               "the driver installs no fault handler that could keep a fault from the "
               "previous one");
  const long page = sysconf(_SC_PAGESIZE);
  void *elsewhere = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(elsewhere != MAP_FAILED);
  char text[1024];
  const int status = in_child(read_float, elsewhere, text, sizeof text);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  CHECK(strstr(text, "loom guarded driver") == NULL);
  CHECK(strstr(text, previous_note) != NULL);
  munmap(elsewhere, (size_t)page);
}

/* Freed segments give their device addresses back: far more memory than
 * the reservation holds passes through it. */
static void test_address_space_reused(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  float value = 0;
  for (int round = 0; round < 64; ++round) {
    void *blocks[3] = {NULL, NULL, NULL};
    const size_t sizes[3] = {(size_t)96 << 20, (size_t)3 << 20, (size_t)40 << 20};
    for (int i = 0; i < 3; ++i) CHECK_OK(loom_malloc(0, sizes[(i + round) % 3], s, &blocks[i]));
    const float one = (float)round;
    CHECK_OK(loom_memcpy(s, blocks[round % 3], &one, sizeof one));
    CHECK_OK(loom_memcpy(s, &value, blocks[round % 3], sizeof value));
    CHECK(value == (float)round);
    for (int i = 0; i < 3; ++i) CHECK_OK(loom_free(blocks[(i + round) % 3]));
    CHECK_OK(loom_memory_empty_cache(0));
  }
}

/* Segments mapped and unmapped from several threads at once, each checking
 * its own data. */
static void *churn(void *arg) {
  const int seed = (int)(intptr_t)arg;
  loom_stream_t *s = NULL;
  intptr_t bad = loom_stream_create(0, 0, &s) != LOOM_OK;
  for (int i = 0; i < 40 && !bad; ++i) {
    const int64_t n = ((int64_t)1 + (seed * 7 + i) % 5) << 18; /* 1 to 5 MiB of floats */
    float *a = NULL, *out = NULL;
    bad |= loom_malloc(0, (size_t)n * sizeof(float), s, (void **)&a) != LOOM_OK;
    bad |= loom_malloc(0, (size_t)n * sizeof(float), s, (void **)&out) != LOOM_OK;
    if (bad) break;
    const float x = (float)(seed + i);
    for (int64_t k = 0; k < n; k += n / 4) bad |= loom_memcpy(s, a + k, &x, sizeof x) != LOOM_OK;
    loom_tensor t[3];
    const void *data[3] = {out, a, a};
    for (int j = 0; j < 3; ++j)
      t[j] = (loom_tensor){.data = (void *)data[j], .dtype = LOOM_FLOAT32, .rank = 1,
                           .sizes = {n}, .strides = {1}};
    const loom_scalar zero = {.f = 0};
    const loom_launch_desc d = {.name = "add", .fn = add_kernel, .tensors = t, .num_tensors = 3,
                                .scalars = &zero, .num_scalars = 1, .range = n, .grain = 65536};
    bad |= loom_launch(s, &d) != LOOM_OK;
    float y = 0;
    bad |= loom_memcpy(s, &y, out + n / 2, sizeof y) != LOOM_OK;
    bad |= y != 2 * x;
    loom_free(a);
    loom_free(out);
    if (i % 8 == 0) loom_memory_empty_cache(0);
  }
  loom_stream_release(s);
  return (void *)bad;
}

static void test_threads(void) {
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) pthread_create(&threads[i], NULL, churn, (void *)(intptr_t)i);
  for (int i = 0; i < 4; ++i) {
    void *bad = NULL;
    pthread_join(threads[i], &bad);
    CHECK(bad == NULL);
  }
  CHECK_OK(loom_memory_empty_cache(0));
}

/* A second start on the same driver: the guarded driver reserves its
 * address space afresh, and its fault handler still names the bug. */
static void test_second_start(void) {
  loom_shutdown();
  CHECK_OK(loom_init());
  test_selected_by_name();
  if (test_driver_has(TEST_DRIVER_GUARDED)) check_host_access_faults();
}

int main(void) {
  /* Before the runtime starts, so that the guarded driver finds it there. */
  signal(SIGSEGV, previous_handler);
  setenv("LOOM_MEMORY_LIMIT", "512M", 1); /* a 2 GiB device address space */
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_selected_by_name);
    RUN_TEST(test_kernels_and_copies);
    RUN_TEST(test_host_memory_in_launch_refused);
    RUN_TEST(test_host_access_faults);
    RUN_TEST(test_other_faults_passed_on);
    RUN_TEST(test_address_space_reused);
    RUN_TEST(test_threads);
    RUN_TEST(test_second_start);
  }
  TEST_MAIN_END();
}
