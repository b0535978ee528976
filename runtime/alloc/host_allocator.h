/* The pinned host allocator: the public loom_host_* calls (loom/hal.h) plus
 * what only the runtime's shutdown uses. */
#ifndef LOOM_ALLOC_HOST_ALLOCATOR_H
#define LOOM_ALLOC_HOST_ALLOCATOR_H

#include "loom/hal.h"

/* Frees every pinned block, live ones included, and zeroes the
 * statistics; no loom_host_* call may run concurrently. */
void loom_host_allocator_shutdown(void);

#endif
