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
#include "loom/fuse.h"
#include <stdatomic.h>

#include "runtime/drivers/host/host_internal.h"

typedef struct host_group host_group;

/* The workspaces pack launches filled whose compute launch has not run
 * (per queue, the token holder's). */
#define HOST_PACKS_MAX 16
typedef struct host_packs {
  const void *ws[HOST_PACKS_MAX];
  int n, overflow;
} host_packs;

/* What host_fuse_offer did with a command. */
enum { HOST_FUSE_STOP = 0, HOST_FUSE_JOINED = 1, HOST_FUSE_PASSED = 2 };

/* The most launches one group holds. */
#define HOST_FUSE_MAX_MEMBERS 256
/* Bytes of deferred outputs' scratch a group keeps for the next one. */
#define HOST_FUSE_DEFERRED_KEEP ((size_t)1 << 20)

/* Level 2 (host_fuse_region.c): a group whose parts run compiled loops.
 * A part is a list of segments, in its order: a run of consecutive
 * members compiled into one loop, or one member its own kernel runs
 * (seg_fn NULL: a row-wise member, or one no loop spells). */
#define HOST_REGION_MAX_ARGS (4 * LOOM_FUSE_REGION_MAX_MEMBERS)
typedef struct host_region {
  loom_kernel_args pool_args; /* first: what the pool sees (the group's chunks) */
  host_group *group;
  int ready; /* a segment is compiled, and every compiled one has its loop */
  int64_t range;
  int nargs; /* arguments of all segments; segment s's from seg_arg0[s] */
  loom_tensor args[HOST_REGION_MAX_ARGS];
  int access[HOST_REGION_MAX_ARGS], written[HOST_REGION_MAX_ARGS], writer[HOST_REGION_MAX_ARGS];
  /* per member, at its place in the group's order */
  loom_scalar scalars[LOOM_FUSE_REGION_MAX_MEMBERS * LOOM_FUSE_REGION_MEMBER_SCALARS];
  int nsegs;
  int part_seg[HOST_FUSE_MAX_MEMBERS + 1]; /* part p's segments: [part_seg[p], part_seg[p + 1]) */
  int seg_first[HOST_FUSE_MAX_MEMBERS], seg_len[HOST_FUSE_MAX_MEMBERS]; /* places in order */
  int seg_arg0[HOST_FUSE_MAX_MEMBERS];
  loom_kernel_fn seg_fn[HOST_FUSE_MAX_MEMBERS]; /* NULL: one member, its own kernel */
  loom_kernel_args seg_args[HOST_FUSE_MAX_MEMBERS];
  uint64_t not_written; /* bytes of values not stored */
  int32_t words[LOOM_FUSE_REGION_MAX_WORDS]; /* one segment's signature */
} host_region;

/* The release log (host_fuse_release.c). The number of the next command
 * submitted to any host queue. */
uint64_t host_fuse_clock_tick(void);
/* Installs (1) or removes (0) the allocator's release hook. */
void host_fuse_region_hook(int on);
/* Whether `s` of `stream` lies in a block freed after the command numbered
 * `from` was submitted and before the command numbered `end`; *at: the
 * clock of that release (the last such). 0 for stream 0. */
int host_fuse_released_within(uint64_t stream, span s, uint64_t from, uint64_t end,
                              uint64_t *at);
/* After prepare: sets g->region.ready when the signature of every part of
 * the group has a compiled loop (and counts each part's sighting);
 * `stream` is the queue's stream id, `end` the number of the first command
 * the group's look did not see. */
void host_fuse_region_plan(host_group *g, uint64_t stream, uint64_t end);
/* Runs the group's compiled kernel; 0 if it refused its arguments (nothing
 * was written: run the group at level 1). */
int host_fuse_region_run(host_context *ctx, int device, int priority, host_group *g);
void host_fuse_count_region(uint64_t not_written);

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
/* Counts bytes of values a GEMM epilogue did not store. */
void host_fuse_count_not_written(uint64_t bytes);
void host_fuse_count_verified(int compared);

/* Whether `cmd` may start a group (fusion on, an elementwise launch large
 * enough to split). */
int host_fuse_can_lead(const loom_command *cmd);

/* How long the executor may wait, in all, for launches still on their
 * way from the host when nothing is queued behind `lead`: a small share of
 * the lead's own time at memory speed; 0 for a small launch. */
uint64_t host_fuse_wait_ns(const loom_command *lead);

/* Starts a group led by `lead`, whose number (host_fuse_clock_tick) is
 * `seq`. */
void host_fuse_begin(host_group *group, const loom_command *lead, uint64_t seq);
/* Offers the next queued command (HOST_FUSE_*): joined, passed over (it
 * stays queued and runs after the group), or the look ends here. */
int host_fuse_offer(host_group *group, const loom_command *cmd, uint64_t seq);
/* Members beyond the lead so far. */
int host_fuse_joined(const host_group *group);

/* Runs the group on the calling thread and the device's pool, reports
 * failures and verification differences to `report`, the members' trace
 * records (as one kernel) and their release callbacks. `end`: the number
 * of the first command of the queue the look did not see. */
void host_fuse_run(host_context *ctx, int device, int priority, host_group *group,
                   loom_stream_t *report, uint64_t end);
/* The packs the group's launches run ahead of it filled (host_epilogue_note). */
host_packs *host_fuse_packs(host_group *group);

/* GEMM epilogues (host_fuse_epilogue.c): the elementwise launches queued
 * right after a product's last "gemm.compute" that read its C run as one
 * "gemm.compute_epilogue" launch. The queue asks host_epilogue_can_lead,
 * then offers the commands after it, in order, until one is refused, and
 * runs the group if any joined. */
typedef struct host_epilogue {
  const loom_command *lead;
  /* The product's "gemm.pack", when the group took it too (not run yet):
   * then steps may use the workspace's memory (freed at once by the
   * caller, the allocator hands it to the next tensor), and the pack and
   * the product use scratch instead. */
  const loom_command *pack;
  int may_move_ws, moves_ws;
  void *ws; /* the workspace the product reads */
  int n, noperands;
  int64_t numel;
  loom_tensor c, chain; /* C's view; the value the next step reads */
  const loom_command *members[8];
  uint64_t seq[9]; /* the lead's number (host_fuse_clock_tick), the members' */
  int64_t words[8];
  /* C, then each member's output: stored, or freed before the group ran
   * and read by no step from memory (host_epilogue_plan_stores) */
  int stored[9];
  uint64_t not_written;
  loom_tensor outs[8], operands[8]; /* as rank-4 views with C's sizes */
  loom_tensor tensors[6 + 8 + 8];
  loom_scalar scalars[4 + 8];
} host_epilogue;

/* Host memory a queue keeps for moved workspaces (grown, freed with it). */
typedef struct host_scratch {
  void *p;
  size_t bytes;
} host_scratch;
void host_scratch_free(host_scratch *scratch);

/* Whether `cmd` may lead a group: a product's "gemm.compute"; its
 * "gemm.pack", whose compute launch (host_epilogue_pairs) follows. */
int host_epilogue_can_lead(const loom_command *cmd);
int host_epilogue_pack_can_lead(const loom_command *cmd);
int host_epilogue_pairs(const loom_command *pack, const loom_command *compute);
/* How long the executor may wait for a first or next step when nothing is
 * queued behind `lead`: a small share of the product's own time, 0 for a
 * small product. */
uint64_t host_epilogue_wait_ns(const loom_command *lead);
/* Called with every launch a queue runs (a pack adds its workspace, a
 * compute launch removes it); whether no pack filled `compute`'s. */
void host_epilogue_note(host_packs *p, const loom_command *cmd);
int host_epilogue_ws_unused(const host_packs *p, const loom_command *compute);

/* Starts a group led by `lead` (and `pack` before it, or NULL); the
 * workspace may move if `pack` is given or `ws_unused`. */
void host_epilogue_begin(host_epilogue *e, const loom_command *lead, const loom_command *pack,
                         int ws_unused, uint64_t seq);
/* 1: `cmd`, numbered `seq`, joined as the next step; 0: the group ends
 * before it. */
int host_epilogue_offer(host_epilogue *e, const loom_command *cmd, uint64_t seq);
/* Runs the pack, if taken, and the product with the steps; reports a
 * failure (as the product's), the trace (one kernel), the release
 * callbacks and the counters. 0 if nothing ran (no scratch for a moved
 * workspace). `end`: the number of the first command of the queue the
 * group's look did not see. */
int host_epilogue_run(host_context *ctx, int device, int priority, host_epilogue *e,
                      host_scratch *scratch, loom_stream_t *report, uint64_t end);

/* ---- between host_fuse.c and host_fuse_verify.c ---- */

#define FUSE_MAX_TENSORS 8          /* tensors of a member */
#define FUSE_MAX_PASSED_SPANS 2048  /* disjoint memory spans of launches passed over */
#define FUSE_MAX_HOISTED 16         /* small launches run before a group's chunks */

/* What a member does with one of its tensors. */
enum {
  SPAN_WRITTEN = 1,  /* the member writes it */
  SPAN_MAP = 2,      /* chunk [b, e) touches its elements of linear index [b, e) */
  SPAN_DEFERRED = 4, /* written to scratch by the chunks, copied in after them */
  SPAN_COVERS = 8,   /* written whole, over deferred memory of an earlier member */
};

struct host_group {
  loom_kernel_args pool_args; /* first: what the pool sees (chunks of every part, grain 1) */
  loom_kernel_args args;      /* the members' range; the lead's grain */
  int n;
  int looked, last_join; /* commands looked at; the count when one last joined */
  int passed;    /* launches passed over so far */
  int reordered; /* members that joined after a launch was passed over */
  const loom_command *members[HOST_FUSE_MAX_MEMBERS];
  int64_t row_n[HOST_FUSE_MAX_MEMBERS]; /* a row-wise member's row length; 0: elementwise */
  /* A row-wise member whose per-row outputs are deferred: its tensors, those
   * pointing into scratch, then the scratch (one allocation; else NULL). */
  loom_tensor *deferred[HOST_FUSE_MAX_MEMBERS];
  /* Those allocations, kept from group to group while they take at most
   * HOST_FUSE_DEFERRED_KEEP bytes in all (`deferred_kept`). */
  loom_tensor *deferred_buf[HOST_FUSE_MAX_MEMBERS];
  size_t deferred_cap[HOST_FUSE_MAX_MEMBERS], deferred_kept;
  /* Small launches that run whole before the chunks, in program order. */
  int nhoisted;
  const loom_command *hoisted[FUSE_MAX_HOISTED];
  /* Outputs of small launches run ahead that overwrite (whole) memory of
   * deferred per-row outputs of the members before them: the copy after
   * the chunks leaves those bytes. `cover_after` counts the members
   * before the launch, `cover_launch` is its index in `hoisted`. */
  int ncovers;
  span covers[FUSE_MAX_HOISTED];
  uint16_t cover_after[FUSE_MAX_HOISTED];
  uint8_t cover_launch[FUSE_MAX_HOISTED];
  loom_kernel_args margs[HOST_FUSE_MAX_MEMBERS];
  /* The members' tensors' spans, and whose they are. */
  int nspans;
  span spans[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS];
  uint16_t span_member[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS];
  uint8_t span_tensor[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS];
  uint8_t span_flags[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS]; /* SPAN_* */
  /* Parts: members that share no memory with other parts' (prepare). */
  int parts;
  uint16_t order[HOST_FUSE_MAX_MEMBERS]; /* members by part, in program order */
  int part_first[HOST_FUSE_MAX_MEMBERS + 1]; /* a part's members in `order` */
  int64_t part_grain[HOST_FUSE_MAX_MEMBERS], part_bytes[HOST_FUSE_MAX_MEMBERS];
  int64_t part_chunk[HOST_FUSE_MAX_MEMBERS + 1]; /* a part's first chunk in pool_args */
  uint16_t parent[HOST_FUSE_MAX_MEMBERS];
  int16_t by_lo[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS];
  int npassed; /* the memory of launches passed over: disjoint, by address */
  span passed_spans[FUSE_MAX_PASSED_SPANS];
  /* Per member, the first failing chunk (as host_pool_run records one). */
  atomic_int failed[HOST_FUSE_MAX_MEMBERS];
  int64_t failed_begin[HOST_FUSE_MAX_MEMBERS], failed_end[HOST_FUSE_MAX_MEMBERS];
  char failed_reason[HOST_FUSE_MAX_MEMBERS][HOST_REASON_CAPACITY];
  host_packs packs; /* the queue's (host_epilogue_note) */
  uint64_t seq[HOST_FUSE_MAX_MEMBERS]; /* the members' numbers (host_fuse_clock_tick) */
  host_region region;
};

/* Whether `t` is `count` elements, contiguous, in row-major order; whether
 * `s` touches memory of a launch the group passed over. */
int host_fuse_contiguous(const loom_tensor *t, int64_t count);
int host_fuse_touches_passed(const host_group *g, span s);

/* Resets the members' failures; runs the group's chunks on the calling
 * thread and the device's pool, then copies deferred row outputs in. */
void host_fuse_clear_failures(host_group *g);
/* Runs member m of the group over [begin, end) of the group's range (a
 * row-wise member over the rows in it), recording a failure as the pool
 * would. */
void host_fuse_run_member(host_group *g, int m, int64_t begin, int64_t end);
void host_fuse_run_fused(host_context *ctx, int device, int priority, host_group *g);
/* LOOM_FUSE=verify (host_fuse_verify.c): runs the group fused, restores
 * its inputs, runs the members one by one and reports a difference. */
void host_fuse_run_verified(host_context *ctx, int device, int priority, host_group *g,
                            loom_stream_t *report);

#endif
