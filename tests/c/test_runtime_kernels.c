/* The kernel registry: named kernels resolve through the driver, run-time
 * registrations join the same names and leave them again, handles outlive
 * a restart, and the library's names are unique and all resolvable. */
#include <stdint.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_drivers.h"

static int fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  int64_t *out = args->tensors[0].data;
  for (int64_t i = begin; i < end; ++i) out[i] = i * args->scalars[0].i;
  return 0;
}

enum { N = 1000 };

static int launch_and_check(const loom_kernel_t *k, int via_stream) {
  int64_t *dev = NULL, host[N];
  if (loom_malloc(0, sizeof host, NULL, (void **)&dev) != LOOM_OK) return 0;
  loom_tensor t = {.data = dev, .dtype = LOOM_INT64, .rank = 1, .sizes = {N}, .strides = {1}};
  loom_scalar s = {.i = 7};
  loom_launch_desc d = {.kernel = k, .tensors = &t, .num_tensors = 1, .scalars = &s,
                        .num_scalars = 1, .range = N, .grain = 64};
  loom_stream_t *stream = NULL;
  int ok = loom_stream_default(0, &stream) == LOOM_OK &&
           (via_stream ? loom_launch(stream, &d) : loom_run_now(0, &d)) == LOOM_OK &&
           loom_memcpy(stream, host, dev, sizeof host) == LOOM_OK;
  for (int i = 0; ok && i < N; ++i) ok = host[i] == (int64_t)i * 7;
  loom_free(dev);
  return ok;
}

/* Registrations last for the process: each driver's pass registers a
 * name of its own. */
static const char *fill_name(void) {
  static char name[LOOM_KERNEL_NAME_MAX];
  snprintf(name, sizeof name, "test.fill.%s", test_driver_current()->name);
  return name;
}

static void test_registered_kernel_launches(void) {
  const char *name = fill_name();
  const loom_kernel_t *k = NULL;
  CHECK(loom_kernel_lookup(name, &k) == LOOM_ERROR_NOT_SUPPORTED && !k);
  CHECK(strstr(loom_last_error(), name) != NULL);
  CHECK_OK(loom_kernel_register(name, fill_kernel));
  CHECK(loom_kernel_register(name, fill_kernel) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_kernel_lookup(name, &k));
  CHECK(k != NULL && !strcmp(loom_kernel_name(k), name));
  const loom_kernel_t *again = NULL;
  CHECK_OK(loom_kernel_lookup(name, &again));
  CHECK(again == k);
  CHECK(launch_and_check(k, 1));
  CHECK(launch_and_check(k, 0));
}

#define NO_LIBRARY \
  "the driver has no kernel library (kernel_resolve is NULL): only run-time registrations launch"

/* A library name resolves on a driver with a kernel library, and is not
 * found on one without. */
static void test_library_kernel_resolves(void) {
  const loom_kernel_t *k = NULL;
  if (!test_driver_has(TEST_DRIVER_KERNELS)) {
    CHECK(loom_kernel_lookup("nll_loss.forward", &k) == LOOM_ERROR_NOT_SUPPORTED && !k);
    CHECK(strstr(loom_last_error(), "nll_loss.forward") != NULL);
    return;
  }
  CHECK_OK(loom_kernel_lookup("nll_loss.forward", &k));
  CHECK(k != NULL);
  /* It launches but does not plan. */
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION};
  char plan[16];
  CHECK(loom_kernel_plan(k, &args, plan, sizeof plan) == LOOM_ERROR_NOT_SUPPORTED);
  CHECK(strstr(loom_last_error(), "nll_loss.forward") != NULL);
  /* A library name cannot be taken over by a registration. */
  CHECK(loom_kernel_register("nll_loss.forward", fill_kernel) == LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_bad_names(void) {
  const loom_kernel_t *k = (const loom_kernel_t *)1;
  CHECK(loom_kernel_lookup("", &k) == LOOM_ERROR_INVALID_ARGUMENT && !k);
  CHECK(loom_kernel_lookup(NULL, &k) == LOOM_ERROR_INVALID_ARGUMENT);
  char long_name[LOOM_KERNEL_NAME_MAX + 8];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  CHECK(loom_kernel_register(long_name, fill_kernel) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_kernel_register("test.null", NULL) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_launch_desc d = {.name = "nothing", .range = 1, .grain = 1};
  CHECK(loom_run_now(0, &d) == LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_handles_survive_restart(void) {
  const loom_kernel_t *k = NULL;
  CHECK_OK(loom_kernel_lookup(fill_name(), &k));
  loom_shutdown();
  CHECK_OK(loom_init());
  CHECK(launch_and_check(k, 1));
}

static int other_fill_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return fill_kernel(args, begin, end);
}

/* Unregistering frees the name: the cached handle fails to launch, then
 * launches the next registration under that name. Only the registered
 * function may withdraw it. */
static void test_unregistered_kernel_fails_then_reregisters(void) {
  char name[LOOM_KERNEL_NAME_MAX];
  snprintf(name, sizeof name, "test.unregister.%s", test_driver_current()->name);
  const loom_kernel_t *k = NULL;
  CHECK_OK(loom_kernel_register(name, fill_kernel));
  CHECK_OK(loom_kernel_lookup(name, &k));
  CHECK(loom_kernel_unregister(name, other_fill_kernel) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(launch_and_check(k, 1));
  CHECK_OK(loom_kernel_unregister(name, fill_kernel));
  CHECK(loom_kernel_unregister(name, fill_kernel) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(!launch_and_check(k, 0));
  const loom_kernel_t *none = NULL;
  CHECK(loom_kernel_lookup(name, &none) == LOOM_ERROR_NOT_SUPPORTED && !none);
  CHECK_OK(loom_kernel_register(name, other_fill_kernel));
  CHECK(launch_and_check(k, 1));
  CHECK_OK(loom_kernel_unregister(name, other_fill_kernel));
  CHECK(loom_kernel_unregister("test.never.registered", fill_kernel) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

struct names {
  const char *seen[1024];
  int count, duplicates, unresolved;
};

static void visit(const loom_kernel_entry *e, void *user) {
  struct names *n = user;
  for (int i = 0; i < n->count; ++i)
    if (!strcmp(n->seen[i], e->name)) ++n->duplicates;
  if (n->count < 1024) n->seen[n->count++] = e->name;
  const loom_kernel_t *k = NULL;
  if ((!e->fn && !e->plan) || strlen(e->name) >= LOOM_KERNEL_NAME_MAX ||
      loom_kernel_lookup(e->name, &k) != LOOM_OK)
    ++n->unresolved;
}

static void test_library_names_unique_and_resolvable(void) {
  TEST_REQUIRE(TEST_DRIVER_KERNELS, NO_LIBRARY);
  struct names n = {0};
  loom_kernel_library_each(visit, &n);
  CHECK(n.count > 0);
  CHECK_EQ_INT(n.duplicates, 0);
  CHECK_EQ_INT(n.unresolved, 0);
}

int main(void) {
  TEST_FOR_EACH_DRIVER {
    RUN_TEST(test_registered_kernel_launches);
    RUN_TEST(test_library_kernel_resolves);
    RUN_TEST(test_bad_names);
    RUN_TEST(test_handles_survive_restart);
    RUN_TEST(test_unregistered_kernel_fails_then_reregisters);
    RUN_TEST(test_library_names_unique_and_resolvable);
  }
  TEST_MAIN_END();
}
