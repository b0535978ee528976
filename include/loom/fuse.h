/* loom/fuse.h — adaptive eager: a stream fuses the launches queued on it.
 *
 * When a stream's executor takes a launch of an elementwise kernel
 * (LOOM_KERNEL_ELEMENTWISE, loom/kernel_abi.h), it looks ahead in its own
 * queue, at what is already there (nothing waits for more), for later
 * elementwise launches over the same range: each joins the group unless a
 * tensor of it overlaps a tensor of a member through another element map
 * (same data, dtype and, once dims of size 1 are dropped and contiguous
 * dims merged, sizes and strides). Launches it passes over stay queued, in
 * order, and a later launch joins only if it overlaps none of them. A
 * row-wise kernel with a row map (layer norm, softmax over the last dim;
 * kernels/registry.h) joins over its rows' elements: the group's chunks
 * then hold whole rows, and its per-row outputs (statistics) go to scratch
 * and are copied in after the chunks, where no later member overwrote
 * them. A small library launch that cannot join but shares no written
 * memory with the group runs whole before its chunks, so that members
 * after it may read what it writes. A copy,
 * an event, a host callback, the end of the queue, or a budget (members,
 * commands looked at, launches passed over) ends the look. The worker pool
 * then runs chunk k of every member, in program order, before chunk k + 1:
 * one fork-join for the group, and what a member writes for the next stays
 * in the cache. Results are bitwise those of running the members one by
 * one; a failing member's error names it; the profiler sees one kernel
 * named for its members. The host driver (and the guarded driver, which
 * runs on its queues) fuse; drivers without it ignore the mode.
 *
 * Level 2: a group of float pointwise launches seen repeatedly runs as one
 * compiled loop (below), which need not store values no tensor holds.
 *
 * The mode is the process's: LOOM_FUSE=0 (off), 1 (the default) or verify
 * (every group also runs unfused from the same inputs and the bytes are
 * compared; a difference is an error of the stream, naming the members). */
#ifndef LOOM_FUSE_H
#define LOOM_FUSE_H

#include <stddef.h>
#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_fuse_mode {
  LOOM_FUSE_OFF = 0,
  LOOM_FUSE_ON = 1,
  LOOM_FUSE_VERIFY = 2,
} loom_fuse_mode;

/* The mode in effect: the last set, else LOOM_FUSE's (read once). */
loom_fuse_mode loom_fuse_get_mode(void);
/* Takes effect at the next group an executor forms. */
void loom_fuse_set_mode(loom_fuse_mode mode);

typedef struct loom_fuse_stats {
  uint64_t groups;            /* groups of two or more launches run */
  uint64_t ops_fused;         /* launches that ran in those groups */
  uint64_t reordered;         /* of those, launches that ran before one they followed */
  uint64_t bytes_cached;      /* bytes members wrote for a later member of the
                                 same chunk (kept in the cache, not streamed) */
  uint64_t bytes_not_written; /* intermediates never written (compiled regions,
                                 GEMM epilogues: the product included) */
  uint64_t compiled_regions;  /* groups run as one compiled loop */
  uint64_t verified;          /* groups LOOM_FUSE=verify compared */
  uint64_t verify_skipped;    /* groups it could not (memory with gaps, no scratch) */
} loom_fuse_stats;

/* Counts since the process started or the last reset. */
void loom_fuse_stats_get(loom_fuse_stats *out);
void loom_fuse_stats_reset(void);

/* ---- Level 2: compiled regions ----------------------------------------------
 *
 * A run of two or more consecutive members of a part (the parts level 1
 * splits a group into), or a whole part, that are "pointwise.apply"
 * launches in float arithmetic (loom/kernels/pointwise.h: LOOM_PW_F32 or
 * LOOM_PW_F64, ops a compiler has said it spells,
 * float32/float64/float16/bfloat16 tensors, each walked contiguously over
 * the group's range, or one element read broadcast, or a row vector: a
 * tensor whose element i is at data[i % w], a (w,) or (1, w) tensor
 * broadcast over the rows, or a constant) runs as one compiled loop; the
 * part's other members (row-wise ones, such as layer norms) run by their
 * own kernels between the loops, chunk by chunk. Each such run (a segment)
 * has a signature: per member its op, compute
 * kind, output and, per input, either an earlier member's value, a tensor
 * argument (dtype, contiguous or one element) or its constant; and which
 * outputs are stored. Op parameters are not part of it (they are scalars
 * of the compiled kernel: an optimizer's step-dependent factors compile
 * once), but for pow's exponents, which choose the op's form. A signature
 * seen LOOM_FUSE_REGION_SIGHTINGS times becomes a request; a compiler
 * thread outside the executor (torch_loom's) takes it, compiles one loop
 * over the range that computes every member for each element in program
 * order, rounding each member's value to its output's dtype, and installs
 * it; a group whose compiled segments all have their loops then runs them
 * over level 1's chunks in one fork-join (compiled_regions), others and
 * until then at level 1.
 *
 * Only intermediates (values a later member reads) may go unstored; a
 * value no member reads is always stored, so the work a program enqueued
 * is done even when nothing reads its result. An intermediate is not
 * stored when a later member overwrites it, or when the allocator was told that its
 * whole block was freed (loom_fuse_note_release) at a point of the stream
 * that every command between the member and that point, in the queue's
 * order, was looked at by the group and was a member or a launch passed
 * over that shares no memory with it: every reader of the value is then a
 * later member, which takes it from the loop, and no tensor holds the
 * memory after that point (bytes_not_written); a member outside the loop's
 * segment (a layer norm) that touches it before that point reads memory,
 * so the value is then stored. LOOM_FUSE=verify stores
 * every output, so that the bytes compared are all there.
 *
 * The signature is an array of int32 words:
 *   [0] members, [1] tensor arguments,
 *   per argument: dtype (loom_dtype), access (0: contiguous over the
 *     range, rank 1; 1: one element, rank 0; 2: a row vector, rank 1 of
 *     its width w, and then the contiguous arguments are rank 2, (range /
 *     w, w); every row vector of a signature has one width, which is not in
 *     it), written (0/1);
 *   per member (LOOM_FUSE_REGION_MEMBER_WORDS): op, kind, output argument,
 *     stored (0/1), three inputs (LOOM_FUSE_REGION_* source << 16 | index;
 *     -1: none), and p0 as the two halves of its double when the op's form
 *     depends on it (else 0, 0).
 * The compiled kernel takes the arguments as rank-2, rank-1 or rank-0
 * descriptors as above and, as scalars, LOOM_FUSE_REGION_MEMBER_SCALARS per member: its four
 * parameters (scalars[2..5] of its launch), then its three constants. */
#define LOOM_FUSE_REGION_SIGHTINGS 3
#define LOOM_FUSE_REGION_MAX_MEMBERS 256
#define LOOM_FUSE_REGION_MAX_WORDS 8192
#define LOOM_FUSE_REGION_MEMBER_WORDS 9
#define LOOM_FUSE_REGION_MEMBER_SCALARS 7
enum {
  LOOM_FUSE_REGION_VALUE = 1, /* the value of member `index` */
  LOOM_FUSE_REGION_ARG = 2,   /* a load of tensor argument `index` */
  LOOM_FUSE_REGION_CONST = 3, /* the member's constant for its input `index` (0..2) */
};

/* Which loom_pw_op codes a compiler spells (a bit per code, up to 256):
 * until this is called, or after a call with NULL, no signature is
 * counted. */
void loom_fuse_region_set_ops(const uint64_t *bits, size_t words);

/* Waits up to `timeout_ms` for a compile request: its id and signature
 * (copied into `words`, `capacity` words). Returns the signature's
 * length, 0 on timeout, -1 once loom_fuse_region_stop was called. */
int loom_fuse_region_next(uint64_t *out_id, int32_t *words, size_t capacity, int timeout_ms);

/* The compiled kernel for request `id` (NULL: none could be made; the
 * signature stays at level 1). The function must stay callable for the
 * life of the process. */
void loom_fuse_region_install(uint64_t id, loom_kernel_fn fn);

/* How many sightings make a request (default LOOM_FUSE_REGION_SIGHTINGS;
 * at least 1). */
void loom_fuse_region_set_sightings(int n);

/* Requests waiting or taken and not yet installed. */
int loom_fuse_region_pending(void);

/* Wakes every loom_fuse_region_next for good (at exit). */
void loom_fuse_region_stop(void);

/* Forgets every signature and installed kernel (compiled code about to be
 * unmapped; tests). */
void loom_fuse_region_reset(void);

/* The allocator's news: the block [ptr, ptr + size) of `stream_id`, which
 * no other stream used, was freed (set by the host driver;
 * loom_fuse_set_release_hook, runtime/alloc). */
typedef void (*loom_fuse_release_fn)(uint64_t stream_id, uintptr_t ptr, size_t size);
void loom_fuse_set_release_hook(loom_fuse_release_fn fn);

/* The names of the running driver's kernels that declare
 * LOOM_KERNEL_ELEMENTWISE (up to `capacity` into `out`, static strings);
 * returns how many there are. */
size_t loom_fuse_elementwise_kernels(const char **out, size_t capacity);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_FUSE_H */
