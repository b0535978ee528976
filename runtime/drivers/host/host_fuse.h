/* Adaptive eager on the host driver's queues (loom/fuse.h): a group of
 * queued elementwise launches runs chunk by chunk, one fork-join for all.
 *
 * The queue that executes a launch asks host_fuse_can_lead, then offers
 * the commands queued after it, in order, to host_fuse_offer until it says
 * stop, and runs the group with host_fuse_run if any joined. The group
 * lives in the queue (host_fuse_group_create): only the holder of the
 * queue's execution token uses it. */
#ifndef LOOM_HOST_FUSE_H
#define LOOM_HOST_FUSE_H

#include "kernels/registry.h"
#include "loom/driver.h"
#include "runtime/drivers/host/host_internal.h"

typedef struct host_group host_group;

/* What host_fuse_offer did with a command. */
enum { HOST_FUSE_STOP = 0, HOST_FUSE_JOINED = 1, HOST_FUSE_PASSED = 2 };

/* The most launches one group holds. */
#define HOST_FUSE_MAX_MEMBERS 256

host_group *host_fuse_group_create(void);
void host_fuse_group_destroy(host_group *group);

/* Records that `fn` is the library kernel of a name that declares `flags`
 * (LOOM_KERNEL_* of loom/kernel_abi.h); called as library names resolve.
 * Only launches of library kernels may be passed over by a group's look. */
void host_fuse_declare(loom_kernel_fn fn, uint32_t flags);

/* Whether the library kernel `fn` declared LOOM_KERNEL_ELEMENTWISE; whether
 * `fn` is a library kernel at all (only those may be passed over); its row
 * map, if it declared one (kernels/registry.h). */
int host_fuse_is_elementwise(loom_kernel_fn fn);
int host_fuse_is_library(loom_kernel_fn fn);
loom_row_map_fn host_fuse_row_map(loom_kernel_fn fn);

/* Counts a group run (launches, of them run ahead of one they followed,
 * bytes kept in the cache); a group LOOM_FUSE=verify compared (1) or could
 * not (0). */
void host_fuse_count_group(int ops, int reordered, uint64_t cached);
void host_fuse_count_verified(int compared);

/* Whether `cmd` may start a group (fusion on, an elementwise launch large
 * enough to split). */
int host_fuse_can_lead(const loom_command *cmd);

/* Starts a group led by `lead`. */
void host_fuse_begin(host_group *group, const loom_command *lead);
/* Offers the next queued command (HOST_FUSE_*): joined, passed over (it
 * stays queued and runs after the group), or the look ends here. */
int host_fuse_offer(host_group *group, const loom_command *cmd);
/* Members beyond the lead so far. */
int host_fuse_joined(const host_group *group);

/* Runs the group on the calling thread and the device's pool, reports
 * failures and verification differences to `report`, the members' trace
 * records (as one kernel) and their release callbacks. */
void host_fuse_run(host_context *ctx, int device, int priority, host_group *group,
                   loom_stream_t *report);

#endif
