/* What the HAL needs from the library it is built into: the drivers that
 * come with it. The HAL declares it and runtime/drivers/builtin.c defines
 * it, so the front end never names a driver and the drivers, which call
 * back into the front end (loom/driver.h), form no cycle with it. */
#ifndef LOOM_HAL_BUILTIN_DRIVERS_H
#define LOOM_HAL_BUILTIN_DRIVERS_H

#include <stddef.h>

#include "loom/driver.h"

/* Writes up to `capacity` built-in drivers to out[], the default first, and
 * returns how many there are (possibly more than `capacity`). */
size_t loom_builtin_drivers(const loom_driver **out, size_t capacity);

#endif
