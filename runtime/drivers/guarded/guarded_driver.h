/* The guarded driver: the host driver's kernels and queues behind device
 * addresses the host cannot dereference.
 *
 * Every segment lives at two addresses: a "device address" in a PROT_NONE
 * reservation, which is all that the allocator, the HAL front end and
 * everything above it ever see, and an alias in a second reservation of
 * the same size, at the same offset, where the memory really is. Commands
 * are translated from the first to the second as they reach the host
 * driver, so kernels and copies work as on the host driver, while any host
 * code that dereferences a device address faults, and a SIGSEGV handler
 * says so. On the host driver such a bug works by accident; on a discrete
 * device it is fatal. Selected with LOOM_DRIVER=guarded. */
#ifndef LOOM_GUARDED_DRIVER_H
#define LOOM_GUARDED_DRIVER_H

#include "loom/driver.h"

#ifdef __cplusplus
extern "C" {
#endif

const loom_driver *loom_guarded_driver(void);

#ifdef __cplusplus
}
#endif
#endif
