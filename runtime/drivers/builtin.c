/* The drivers built into libloom, the default first. LOOM_DRIVER picks
 * among them by name; an out-of-tree driver registers itself instead
 * (loom_driver_register). Adding a driver to the tree means one line here
 * and its own CMake target, and no change to the HAL. */
#include "runtime/hal/builtin_drivers.h"

#include "loom/driver.h"
#include "runtime/drivers/guarded/guarded_driver.h"

size_t loom_builtin_drivers(const loom_driver **out, size_t capacity) {
  const loom_driver *const builtin[] = {
      loom_host_driver(),    /* the default */
      loom_guarded_driver(), /* LOOM_DRIVER=guarded */
  };
  const size_t count = sizeof builtin / sizeof *builtin;
  for (size_t i = 0; i < count && i < capacity; ++i) out[i] = builtin[i];
  return count;
}
