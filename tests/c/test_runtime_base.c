/* Base services: status names and messages, size parsing, CPU features. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom/driver.h"
#include "loom/hal.h"
#include "base/cpu.h"
#include "base/env.h"
#include "test_drivers.h"

static void test_status(void) {
  CHECK(strcmp(loom_status_name(LOOM_OK), "LOOM_OK") == 0);
  CHECK(strcmp(loom_status_name(LOOM_ERROR_OUT_OF_MEMORY), "LOOM_ERROR_OUT_OF_MEMORY") == 0);
  CHECK(strcmp(loom_status_name((loom_status)99), "LOOM_ERROR_UNKNOWN") == 0);
  CHECK_EQ_INT(loom_error(LOOM_ERROR_DEVICE, "op %s failed %d", "x", 3), LOOM_ERROR_DEVICE);
  CHECK(strcmp(loom_last_error(), "op x failed 3") == 0);
  loom_clear_error();
  CHECK(strcmp(loom_last_error(), "") == 0);
}

/* Every code below LOOM_STATUS_COUNT has a name and is reported as itself
 * when a kernel returns it; anything else becomes LOOM_ERROR_DEVICE. A code
 * added without a name, or a bound left behind, fails here. */
static void test_kernel_status(void) {
  CHECK(LOOM_STATUS_COUNT > LOOM_ERROR_INDEX_OUT_OF_RANGE);
  for (int rc = 1; rc < LOOM_STATUS_COUNT; ++rc) {
    CHECK(strcmp(loom_status_name((loom_status)rc), "LOOM_ERROR_UNKNOWN") != 0);
    CHECK_EQ_INT(loom_kernel_status(rc), rc == LOOM_ERROR_NOT_READY ? LOOM_ERROR_DEVICE : rc);
  }
  CHECK_EQ_INT(loom_kernel_status(LOOM_ERROR_INDEX_OUT_OF_RANGE), LOOM_ERROR_INDEX_OUT_OF_RANGE);
  CHECK_EQ_INT(loom_kernel_status(LOOM_STATUS_COUNT), LOOM_ERROR_DEVICE);
  CHECK_EQ_INT(loom_kernel_status(LOOM_STATUS_COUNT + 7), LOOM_ERROR_DEVICE);
  CHECK_EQ_INT(loom_kernel_status(-1), LOOM_ERROR_DEVICE);
  CHECK(strcmp(loom_status_name(LOOM_STATUS_COUNT), "LOOM_ERROR_UNKNOWN") == 0);
}

static void test_parse_size(void) {
  CHECK_EQ_INT(loom_parse_size("123"), 123);
  CHECK_EQ_INT(loom_parse_size("4K"), 4096);
  CHECK_EQ_INT(loom_parse_size("512M"), 512ll << 20);
  CHECK_EQ_INT(loom_parse_size("2G"), 2ll << 30);
  CHECK_EQ_INT(loom_parse_size("1.5g"), 3ll << 29);
  CHECK_EQ_INT(loom_parse_size("8MiB"), 8ll << 20);
  CHECK_EQ_INT(loom_parse_size("abc"), 0);
  CHECK_EQ_INT(loom_parse_size("12Q"), 0);
  CHECK_EQ_INT(loom_parse_size("-5"), 0);
  CHECK_EQ_INT(loom_parse_size(NULL), 0);
}

/* LOOM_CPU_FEATURES=avx2, set by main before anything queried the CPU. */
static void test_cpu_features_capped(void) {
  const uint32_t f = loom_cpu_features();
  CHECK_EQ_INT(f & (LOOM_FEATURE_AVX512F | LOOM_FEATURE_AVX512BF16 | LOOM_FEATURE_AMX_BF16), 0);
  loom_device_props props;
  CHECK_OK(loom_device_properties(0, &props));
  /* The host driver's kernels run on this CPU, within the cap; a driver
   * without a kernel library (sync) reports no features. */
  CHECK_EQ_INT(props.features, test_driver_has(TEST_DRIVER_KERNELS) ? f : 0);
  /* "loom host (<cpu>)", "loom guarded (<cpu>)", "loom sync" */
  char name[64];
  snprintf(name, sizeof name, "loom %s", test_driver_current()->name);
  CHECK(strncmp(props.name, name, strlen(name)) == 0);
  CHECK(props.name[strlen(name)] == '\0' || props.name[strlen(name)] == ' ');
  CHECK(strcmp(props.driver, test_driver_current()->name) == 0);
}

static void test_env_defaults(void) {
  unsetenv("LOOM_NUM_DEVICES");
  unsetenv("LOOM_NUM_THREADS");
  CHECK_EQ_INT(loom_env_num_devices(), 1);
  CHECK_EQ_INT(loom_env_num_threads(), loom_cpu_count());
  setenv("LOOM_NUM_DEVICES", "0", 1); /* clamped */
  CHECK_EQ_INT(loom_env_num_devices(), 1);
  unsetenv("LOOM_NUM_DEVICES");
  unsetenv("LOOM_MEMORY_LIMIT");
  CHECK(loom_env_memory_limit() > ((uint64_t)64 << 20));
}

/* A child forked after start must get an error, never a hang. */
static void test_forked_child_refused(void) {
  loom_stream_t *s = NULL;
  CHECK_OK(loom_stream_default(0, &s));
  pid_t pid = fork();
  if (pid == 0) {
    void *p = NULL;
    int ok = loom_malloc(0, 64, NULL, &p) == LOOM_ERROR_UNAVAILABLE &&
             loom_stream_synchronize(s) == LOOM_ERROR_UNAVAILABLE &&
             strstr(loom_last_error(), "forked") != NULL && loom_device_count() == 0;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(loom_stream_synchronize(s)); /* the parent is unaffected */
}

int main(void) {
  /* Before the first query: the cap applies for the process. */
  setenv("LOOM_CPU_FEATURES", "avx2", 1);
  /* Driver-independent: once. */
  RUN_TEST(test_status);
  RUN_TEST(test_kernel_status);
  RUN_TEST(test_parse_size);
  RUN_TEST(test_env_defaults);
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_cpu_features_capped);
    RUN_TEST(test_forked_child_refused);
  }
  TEST_MAIN_END();
}
