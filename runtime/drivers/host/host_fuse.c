/* Adaptive eager, level 1: the chunks of queued elementwise launches,
 * chained (loom/fuse.h).
 *
 * Why it is exact: a LOOM_KERNEL_ELEMENTWISE kernel's call for [b, e)
 * touches, of each tensor, the elements of row-major linear index [b, e)
 * and nothing else. Two launches over the same range that share memory
 * only through the same element map (data, dtype, and sizes and strides
 * once dims of size 1 are dropped and contiguous dims merged) therefore
 * meet only within the same chunk, where the group keeps their program
 * order; memory shared any other way keeps a launch out. Since the
 * results do not depend on the grain, the group picks its own: small
 * enough that a chunk's operands, across members, stay in the cache.
 *
 * A launch the look passes over stays queued and runs after the group; a
 * later launch joins only if it touches none of the memory of those passed
 * over, so moving it ahead of them changes nothing either. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "runtime/drivers/host/host_fuse.h"

/* Budgets. A launch the look passes over costs its spans; joining costs a
 * check against them. */
#define FUSE_LOOKAHEAD 1024         /* queued commands looked at per group */
#define FUSE_LOOK_PAST_JOIN 192     /* ... and past the last one that joined */
#define FUSE_MIN_RANGE 8192         /* smaller launches run as they are */
#define FUSE_CHUNK_BYTES (512 << 10) /* a chunk's operands, all members */
#define FUSE_MIN_GRAIN 4096
#define FUSE_HOIST_BYTES (64 << 10) /* a launch this small may run before the chunks */
#define FUSE_STREAM_BYTES (32u << 20) /* base/stream_store.h's LOOM_STREAM_STORE_BYTES */

/* A launch as a group sees it: the elements it walks (a row-wise kernel's
 * rows times their length), and its tensors' spans and roles. */
typedef struct launch_view {
  int64_t elems;
  int64_t row_n; /* a row-wise launch's row length; 0: elementwise */
  int ns;
  span sp[FUSE_MAX_TENSORS];
  int which[FUSE_MAX_TENSORS];
  uint8_t flags[FUSE_MAX_TENSORS];
} launch_view;

host_group *host_fuse_group_create(void) { return calloc(1, sizeof(host_group)); }

static void release_deferred_bufs(host_group *g) {
  for (int m = 0; m < HOST_FUSE_MAX_MEMBERS; ++m) {
    free(g->deferred_buf[m]);
    g->deferred_buf[m] = NULL;
    g->deferred_cap[m] = 0;
  }
  g->deferred_kept = 0;
}

/* Ends the group's use of its deferred outputs' scratch, which the next
 * group reuses unless it grew past HOST_FUSE_DEFERRED_KEEP. */
static void free_deferred(host_group *g) {
  for (int m = 0; m < g->n; ++m) g->deferred[m] = NULL;
  if (g->deferred_kept > HOST_FUSE_DEFERRED_KEEP) release_deferred_bufs(g);
}

void host_fuse_group_destroy(host_group *group) {
  if (group) release_deferred_bufs(group);
  free(group);
}

static int view_launch(const loom_command *cmd, launch_view *v);

int host_fuse_can_lead(const loom_command *cmd) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH || cmd->u.launch.num_tensors > FUSE_MAX_TENSORS ||
      loom_fuse_get_mode() == LOOM_FUSE_OFF)
    return 0;
  if (host_fuse_is_elementwise(cmd->u.launch.fn)) return cmd->u.launch.range >= FUSE_MIN_RANGE;
  launch_view v;
  return host_fuse_row_map(cmd->u.launch.fn) && view_launch(cmd, &v) && v.elems >= FUSE_MIN_RANGE;
}

/* ---- memory a launch touches -------------------------------------------------- */

/* The bytes `t` can reach; 0 for none (no data, or no elements). A
 * descriptor the runtime cannot read reaches everything. */
int host_fuse_tensor_span(const loom_tensor *t, span *out) {
  if (!t->data) return 0;
  const int64_t es = loom_dtype_size(t->dtype);
  if (es == 0 || t->rank < 0 || t->rank > LOOM_MAX_DIMS) {
    *out = (span){0, UINTPTR_MAX};
    return 1;
  }
  intptr_t lo = 0, hi = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->sizes[d] <= 0) return 0;
    const intptr_t ext = (intptr_t)((t->sizes[d] - 1) * t->strides[d] * es);
    if (ext < 0) lo += ext; else hi += ext;
  }
  *out = (span){(uintptr_t)t->data + (uintptr_t)lo, (uintptr_t)t->data + (uintptr_t)hi + (uintptr_t)es};
  return 1;
}

static int overlap(span a, span b) { return a.lo < b.hi && b.lo < a.hi; }

/* Whether two descriptors map every linear index to the same element. */
static int same_map(const loom_tensor *a, const loom_tensor *b) {
  if (a->data != b->data || a->dtype != b->dtype) return 0;
  if (a->rank < 0 || a->rank > LOOM_MAX_DIMS || b->rank < 0 || b->rank > LOOM_MAX_DIMS) return 0;
  host_canon ca, cb;
  host_canonicalize(a, &ca);
  host_canonicalize(b, &cb);
  if (ca.rank != cb.rank) return 0;
  for (int32_t d = 0; d < ca.rank; ++d)
    if (ca.sizes[d] != cb.sizes[d] || ca.strides[d] != cb.strides[d]) return 0;
  return 1;
}

/* Whether `t` is `count` elements, contiguous, in row-major order. */
int host_fuse_contiguous(const loom_tensor *t, int64_t count) {
  if (t->rank < 0 || t->rank > LOOM_MAX_DIMS) return 0;
  host_canon c;
  host_canonicalize(t, &c);
  if (c.rank == 0) return count == 1 && loom_tensor_numel(t) == 1;
  return c.rank == 1 && c.sizes[0] == count && c.strides[0] == 1;
}

/* Lists the memory of launch `cmd` into `v` (its spans); returns whether
 * it may be a member: an elementwise launch (its range counts elements,
 * it writes its tensor 0) or a row-wise one whose rows are contiguous
 * (its range counts rows; kernels/registry.h). */
static int view_launch(const loom_command *cmd, launch_view *v) {
  const uint32_t nt = cmd->u.launch.num_tensors;
  v->ns = 0;
  v->row_n = 0;
  for (uint32_t i = 0; i < nt && i < FUSE_MAX_TENSORS; ++i)
    if (host_fuse_tensor_span(&cmd->u.launch.tensors[i], &v->sp[v->ns])) {
      v->flags[v->ns] = SPAN_WRITTEN; /* what a kernel writes is not known: any */
      v->which[v->ns++] = (int)i;
    }
  if (nt > FUSE_MAX_TENSORS) return 0;
  if (host_fuse_is_elementwise(cmd->u.launch.fn)) {
    v->elems = cmd->u.launch.range;
    v->row_n = 0;
    for (int i = 0; i < v->ns; ++i)
      v->flags[i] = (uint8_t)(SPAN_MAP | (v->which[i] == 0 ? SPAN_WRITTEN : 0));
    return 1;
  }
  const loom_row_map_fn map = host_fuse_row_map(cmd->u.launch.fn);
  if (!map) return 0;
  const loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                 .num_tensors = nt,
                                 .tensors = cmd->u.launch.tensors,
                                 .num_scalars = cmd->u.launch.num_scalars,
                                 .scalars = cmd->u.launch.scalars,
                                 .range = cmd->u.launch.range,
                                 .grain = cmd->u.launch.grain};
  loom_row_map rm;
  if (!map(&args, &rm) || rm.n <= 0 || args.range <= 0 || args.range > INT64_MAX / rm.n ||
      (rm.whole_tensors & rm.written))
    return 0;
  for (int i = 0; i < v->ns; ++i) {
    const uint32_t bit = 1u << v->which[i];
    if ((rm.row_tensors & bit) && !host_fuse_contiguous(&cmd->u.launch.tensors[v->which[i]],
                                                        args.range * rm.n))
      return 0;
  }
  v->elems = args.range * rm.n;
  v->row_n = rm.n;
  for (int i = 0; i < v->ns; ++i) {
    const uint32_t bit = 1u << v->which[i];
    v->flags[i] = (uint8_t)(((rm.row_tensors & bit) ? SPAN_MAP : 0) |
                            ((rm.written & bit) ? SPAN_WRITTEN : 0));
  }
  return 1;
}

/* ---- forming a group ------------------------------------------------------------ */

/* A row-wise member's per-row outputs (written, not walked by element)
 * go to scratch during the chunks and are copied in after them: the
 * member is the last in program order to write them so far, whatever
 * earlier members did with that memory (the allocator may have given it
 * the block of a tensor they use), and any later launch that touches them
 * stays out of the group. 0 if there is no memory for it. */
static int defer_outputs(host_group *g, int m, const loom_command *cmd, launch_view *v) {
  size_t bytes = 0;
  for (int i = 0; i < v->ns; ++i)
    if ((v->flags[i] & (SPAN_WRITTEN | SPAN_MAP)) == SPAN_WRITTEN) bytes += v->sp[i].hi - v->sp[i].lo;
  if (bytes == 0) return 1;
  const uint32_t nt = cmd->u.launch.num_tensors;
  const size_t need = nt * sizeof(loom_tensor) + bytes;
  if (g->deferred_cap[m] < need) {
    free(g->deferred_buf[m]);
    g->deferred_kept -= g->deferred_cap[m];
    g->deferred_cap[m] = 0;
    g->deferred_buf[m] = malloc(need);
    if (!g->deferred_buf[m]) return 0;
    g->deferred_cap[m] = need;
    g->deferred_kept += need;
  }
  loom_tensor *t = g->deferred_buf[m];
  memcpy(t, cmd->u.launch.tensors, nt * sizeof *t);
  char *scratch = (char *)(t + nt);
  for (int i = 0; i < v->ns; ++i) {
    if ((v->flags[i] & (SPAN_WRITTEN | SPAN_MAP)) != SPAN_WRITTEN) continue;
    t[v->which[i]].data = scratch + ((uintptr_t)t[v->which[i]].data - v->sp[i].lo);
    scratch += v->sp[i].hi - v->sp[i].lo;
    v->flags[i] |= SPAN_DEFERRED;
  }
  g->deferred[m] = t;
  return 1;
}

/* The first byte from `p` on, below `hi`, that no SPAN_COVERS span of a
 * member after `owner` holds (`hi` if none): later members overwrote the
 * rest of an output `owner` deferred. */
static uintptr_t uncovered_from(const host_group *g, int owner, uintptr_t p, uintptr_t hi) {
  for (int moved = 1; moved && p < hi;) {
    moved = 0;
    for (int s = 0; s < g->nspans; ++s)
      if ((g->span_flags[s] & SPAN_COVERS) && g->span_member[s] > owner && g->spans[s].lo <= p &&
          p < g->spans[s].hi) {
        p = g->spans[s].hi;
        moved = 1;
      }
    for (int c = 0; c < g->ncovers; ++c)
      if (g->cover_after[c] > owner && g->covers[c].lo <= p && p < g->covers[c].hi) {
        p = g->covers[c].hi;
        moved = 1;
      }
  }
  return p < hi ? p : hi;
}

/* The first byte after `p`, below `hi`, where a span that covers deferred
 * output of member `m` begins (`hi` if none). */
static uintptr_t next_cover(const host_group *g, int m, uintptr_t p, uintptr_t hi) {
  uintptr_t q = hi;
  for (int c = 0; c < g->nspans; ++c)
    if ((g->span_flags[c] & SPAN_COVERS) && g->span_member[c] > m && g->spans[c].lo > p &&
        g->spans[c].lo < q)
      q = g->spans[c].lo;
  for (int c = 0; c < g->ncovers; ++c)
    if (g->cover_after[c] > m && g->covers[c].lo > p && g->covers[c].lo < q) q = g->covers[c].lo;
  return q;
}

/* Copies the deferred outputs in, member by member in program order, but
 * for the bytes later members overwrote. */
static void copy_deferred(host_group *g) {
  for (int s = 0; s < g->nspans; ++s) {
    if (!(g->span_flags[s] & SPAN_DEFERRED)) continue;
    const int m = g->span_member[s], i = g->span_tensor[s];
    const loom_tensor *t = &g->deferred[m][i], *dst = &g->members[m]->u.launch.tensors[i];
    const uintptr_t lo = g->spans[s].lo, hi = g->spans[s].hi;
    const char *src = (const char *)t->data - ((uintptr_t)dst->data - lo);
    for (uintptr_t p = uncovered_from(g, m, lo, hi); p < hi; p = uncovered_from(g, m, p, hi)) {
      const uintptr_t q = next_cover(g, m, p, hi); /* the stretch up to the next cover */
      memcpy((void *)p, src + (p - lo), q - p);
      p = q;
    }
  }
}

static int add_member(host_group *g, const loom_command *cmd, launch_view *v, uint64_t seq) {
  const int m = g->n;
  g->deferred[m] = NULL;
  if (v->row_n && !defer_outputs(g, m, cmd, v)) return 0;
  g->n++;
  g->members[m] = cmd;
  g->seq[m] = seq;
  g->row_n[m] = v->row_n;
  for (int i = 0; i < v->ns; ++i) {
    g->spans[g->nspans] = v->sp[i];
    g->span_member[g->nspans] = (uint16_t)m;
    g->span_tensor[g->nspans] = (uint8_t)v->which[i];
    g->span_flags[g->nspans] = v->flags[i];
    ++g->nspans;
  }
  if (g->passed) ++g->reordered;
  return 1;
}

void host_fuse_begin(host_group *g, const loom_command *lead, uint64_t seq) {
  free_deferred(g); /* a group that no launch joined (never run) */
  g->nhoisted = g->ncovers = 0;
  g->n = g->looked = g->last_join = g->passed = g->reordered = g->nspans = g->npassed = 0;
  launch_view v;
  (void)view_launch(lead, &v); /* host_fuse_can_lead said it may lead */
  g->args = (loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION,
                               .range = v.elems,
                               .grain = v.row_n ? lead->u.launch.grain * v.row_n
                                                : lead->u.launch.grain};
  if (!add_member(g, lead, &v, seq)) { /* no memory to defer: nothing joins, it runs alone */
    g->n = 1;
    g->members[0] = lead;
    g->seq[0] = seq;
    g->looked = FUSE_LOOKAHEAD;
  }
}

/* The wait for joiners still on their way: 1/16 of the time the lead's
 * bytes take at 20 GB/s, at most 300 us. */
#define FUSE_WAIT_MAX_NS 300000
uint64_t host_fuse_wait_ns(const loom_command *lead) {
  launch_view v;
  if (!view_launch(lead, &v)) return 0;
  uint64_t bytes = 0;
  for (int i = 0; i < v.ns; ++i)
    if (v.sp[i].hi != UINTPTR_MAX) bytes += v.sp[i].hi - v.sp[i].lo;
  const uint64_t ns = bytes / 20 / 16;
  return ns > FUSE_WAIT_MAX_NS ? FUSE_WAIT_MAX_NS : ns;
}

host_packs *host_fuse_packs(host_group *g) { return &g->packs; }

int host_fuse_joined(const host_group *g) { return g->n - 1 + g->nhoisted; }

/* The first passed span that ends after `addr` (npassed if none). */
static int passed_after(const host_group *g, uintptr_t addr) {
  int lo = 0, hi = g->npassed;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (g->passed_spans[mid].hi <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int touches_passed(const host_group *g, span s) {
  const int i = passed_after(g, s.lo);
  return i < g->npassed && g->passed_spans[i].lo < s.hi;
}

int host_fuse_touches_passed(const host_group *g, span s) { return touches_passed(g, s); }

/* Adds `s` to the passed memory, merging what it overlaps or abuts; 0 if
 * the list is full. */
static int add_passed(host_group *g, span s) {
  int i = passed_after(g, s.lo - (s.lo > 0)); /* a span ending at s.lo abuts it */
  int j = i;
  while (j < g->npassed && g->passed_spans[j].lo <= s.hi) {
    if (g->passed_spans[j].lo < s.lo) s.lo = g->passed_spans[j].lo;
    if (g->passed_spans[j].hi > s.hi) s.hi = g->passed_spans[j].hi;
    ++j;
  }
  if (j == i && g->npassed == FUSE_MAX_PASSED_SPANS) return 0;
  /* spans [i, j) become one at i */
  memmove(&g->passed_spans[i + 1], &g->passed_spans[j],
          (size_t)(g->npassed - j) * sizeof *g->passed_spans);
  g->npassed -= j - i - 1;
  g->passed_spans[i] = s;
  return 1;
}

/* Whether `cmd`, viewed as `v`, may run in the group: it touches no
 * memory of a launch passed over, and shares memory with members only
 * through the same element map of tensors both walk by element (SPAN_MAP),
 * unless neither side writes it; a row-wise launch's per-row outputs,
 * deferred, may take memory earlier members use; deferred outputs are
 * no later member's. */
static int may_join(const host_group *g, const loom_command *cmd, launch_view *v) {
  for (int i = 0; i < v->ns; ++i)
    if (touches_passed(g, v->sp[i])) return 0;
  for (int i = 0; i < v->ns; ++i) {
    const loom_tensor *t = &cmd->u.launch.tensors[v->which[i]];
    const int deferred = v->row_n && (v->flags[i] & (SPAN_WRITTEN | SPAN_MAP)) == SPAN_WRITTEN;
    for (int s = 0; s < g->nspans; ++s) {
      if (!overlap(v->sp[i], g->spans[s])) continue;
      if (g->span_flags[s] & SPAN_DEFERRED) {
        /* Memory the allocator handed on after an earlier member's
         * deferred output was freed: a later member may overwrite it
         * whole (the copy then leaves those bytes), and read what a
         * later member wrote there, never the deferred values; a later
         * deferred output is copied in after it. */
        if (deferred) continue;
        if ((v->flags[i] & SPAN_WRITTEN) && host_dense(t)) {
          v->flags[i] |= SPAN_COVERS;
          continue;
        }
        const uintptr_t lo = v->sp[i].lo > g->spans[s].lo ? v->sp[i].lo : g->spans[s].lo;
        const uintptr_t hi = v->sp[i].hi < g->spans[s].hi ? v->sp[i].hi : g->spans[s].hi;
        if (uncovered_from(g, g->span_member[s], lo, hi) != hi) return 0;
        continue;
      }
      if (deferred) continue;
      if (!((v->flags[i] | g->span_flags[s]) & SPAN_WRITTEN)) continue; /* both read */
      if (!(v->flags[i] & g->span_flags[s] & SPAN_MAP)) return 0;
      const loom_command *m = g->members[g->span_member[s]];
      if (!same_map(t, &m->u.launch.tensors[g->span_tensor[s]])) return 0;
    }
  }
  return 1;
}

/* Whether a small library launch that cannot be a member, viewed as `v`,
 * may run whole before the group's chunks, so that later members may read
 * what it writes (a scale vector computed between two big ops): it moves
 * ahead of the members and the launches passed over, so it must share no
 * memory with them but memory both only read, or memory where a member's
 * per-row outputs are deferred (the allocator handed a freed mean or rstd
 * on), which an elementwise launch's output may overwrite whole: it then
 * covers those bytes (the copy after the chunks leaves them). Sets
 * *cover to the covering span's index in v, or -1. */
static int may_hoist(const host_group *g, const loom_command *cmd, const launch_view *v,
                     int *cover) {
  *cover = -1;
  if (g->nhoisted == FUSE_MAX_HOISTED || g->n + g->nhoisted >= HOST_FUSE_MAX_MEMBERS) return 0;
  size_t bytes = 0;
  for (int i = 0; i < v->ns; ++i) {
    if (v->sp[i].hi == UINTPTR_MAX) return 0;
    bytes += v->sp[i].hi - v->sp[i].lo;
  }
  if (bytes > FUSE_HOIST_BYTES) return 0;
  const int elementwise = host_fuse_is_elementwise(cmd->u.launch.fn);
  for (int i = 0; i < v->ns; ++i) {
    if (touches_passed(g, v->sp[i])) return 0;
    const int whole = elementwise && v->which[i] == 0 && host_dense(&cmd->u.launch.tensors[0]);
    for (int s = 0; s < g->nspans; ++s) {
      if (!overlap(v->sp[i], g->spans[s])) continue;
      if ((g->span_flags[s] & SPAN_DEFERRED) && whole) {
        *cover = i;
        continue;
      }
      if ((v->flags[i] | g->span_flags[s]) & SPAN_WRITTEN) return 0;
    }
  }
  return 1;
}

int host_fuse_offer(host_group *g, const loom_command *cmd, uint64_t seq) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH || ++g->looked > FUSE_LOOKAHEAD ||
      g->looked - g->last_join > FUSE_LOOK_PAST_JOIN ||
      g->n + g->nhoisted == HOST_FUSE_MAX_MEMBERS)
    return HOST_FUSE_STOP;
  /* A launch with more tensors than a member may have ends the look: its
   * first FUSE_MAX_TENSORS tensors' spans would not cover it. */
  if (cmd->u.launch.num_tensors > FUSE_MAX_TENSORS) return HOST_FUSE_STOP;
  launch_view v;
  if (view_launch(cmd, &v) && v.elems == g->args.range && may_join(g, cmd, &v) &&
      add_member(g, cmd, &v, seq)) {
    g->last_join = g->looked;
    return HOST_FUSE_JOINED;
  }
  /* A launch whose memory cannot all be listed ends the look: a later one
   * must not move past memory it might touch. */
  if (!host_fuse_is_library(cmd->u.launch.fn)) return HOST_FUSE_STOP;
  int cover;
  if (may_hoist(g, cmd, &v, &cover)) {
    if (cover >= 0) {
      g->covers[g->ncovers] = v.sp[cover];
      g->cover_after[g->ncovers] = (uint16_t)g->n;
      g->cover_launch[g->ncovers++] = (uint8_t)g->nhoisted;
    }
    g->hoisted[g->nhoisted++] = cmd;
    g->last_join = g->looked;
    return HOST_FUSE_JOINED;
  }
  for (int i = 0; i < v.ns; ++i)
    if (!add_passed(g, v.sp[i])) return HOST_FUSE_STOP;
  ++g->passed;
  return HOST_FUSE_PASSED;
}

/* ---- running a group ---------------------------------------------------------------- */

static int find_root(uint16_t *parent, int m) {
  while (parent[m] != m) m = parent[m] = parent[parent[m]];
  return m;
}

static int by_span_lo(const void *a, const void *b, void *g_) {
  const host_group *g = g_;
  const span *x = &g->spans[*(const int16_t *)a], *y = &g->spans[*(const int16_t *)b];
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Outputs no later member of the group reads or writes (deferred per-row
 * outputs go to scratch and do not count), when they add up to more than
 * the last-level cache holds, have left it before anything reads them:
 * their members get LOOM_KERNEL_HINT_STREAM (independent row ops on new
 * inputs, each output kept). A member that writes memory a later member
 * touches, or reads where it writes, keeps the cache (one output
 * overwritten call after call; an in-place op). */
static void mark_streamed(host_group *g) {
  uint8_t last[HOST_FUSE_MAX_MEMBERS];
  uint64_t bytes = 0;
  for (int m = 0; m < g->n; ++m) last[m] = !(g->margs[m].hints & LOOM_KERNEL_HINT_CACHED);
  for (int s = 0; s < g->nspans; ++s) {
    const int m = g->span_member[s];
    if ((g->span_flags[s] & (SPAN_WRITTEN | SPAN_DEFERRED)) != SPAN_WRITTEN || !last[m]) continue;
    if (g->spans[s].hi == UINTPTR_MAX) last[m] = 0;
    for (int t = 0; t < g->nspans && last[m]; ++t) /* later members, and its own other tensors */
      if (t != s && g->span_member[t] >= m && overlap(g->spans[s], g->spans[t])) last[m] = 0;
  }
  for (int s = 0; s < g->nspans; ++s)
    if ((g->span_flags[s] & (SPAN_WRITTEN | SPAN_DEFERRED)) == SPAN_WRITTEN && last[g->span_member[s]])
      bytes += g->spans[s].hi - g->spans[s].lo;
  if (bytes < FUSE_STREAM_BYTES) return;
  for (int m = 0; m < g->n; ++m)
    if (last[m]) g->margs[m].hints |= LOOM_KERNEL_HINT_STREAM;
}

/* Splits the members into parts that share no memory (each part's chunks
 * need no order against another's), each with its own grain: small enough
 * that a chunk's distinct operands stay within FUSE_CHUNK_BYTES. The pool
 * then runs one range of chunks, part after part: one fork-join for all.
 * Sets the hint on each member whose output a later member reads and
 * returns the bytes those members write for later ones. */
static uint64_t prepare(host_group *g) {
  const int ns = g->nspans;
  /* Spans by address: overlapping ones form runs (a sweep), which join
   * their members' parts; each run's bytes per element count once. */
  for (int i = 0; i < ns; ++i) g->by_lo[i] = (int16_t)i;
  qsort_r(g->by_lo, (size_t)ns, sizeof *g->by_lo, by_span_lo, g);
  for (int m = 0; m < g->n; ++m) g->parent[m] = (uint16_t)m;
  int64_t run_bytes[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS];
  int run_owner[HOST_FUSE_MAX_MEMBERS * FUSE_MAX_TENSORS], runs = 0;
  uintptr_t run_hi = 0;
  for (int i = 0; i < ns; ++i) {
    const int s = g->by_lo[i], m = g->span_member[s];
    const int64_t es = loom_dtype_size(g->members[m]->u.launch.tensors[g->span_tensor[s]].dtype);
    if (runs > 0 && g->spans[s].lo < run_hi) {
      const int a = find_root(g->parent, m), b = find_root(g->parent, run_owner[runs - 1]);
      if (a != b) g->parent[a > b ? a : b] = (uint16_t)(a > b ? b : a);
      if (g->spans[s].hi > run_hi) run_hi = g->spans[s].hi;
      if (es > run_bytes[runs - 1]) run_bytes[runs - 1] = es;
    } else {
      run_owner[runs] = m;
      run_bytes[runs++] = es;
      run_hi = g->spans[s].hi;
    }
  }
  /* Parts in order of their first member, members in program order. A
   * part's chunks hold whole rows of each row-wise member: their
   * boundaries are multiples of every row length (`step`, at most the
   * range: then the part is one chunk). */
  int part_of[HOST_FUSE_MAX_MEMBERS], part_id[HOST_FUSE_MAX_MEMBERS];
  int64_t step[HOST_FUSE_MAX_MEMBERS];
  g->parts = 0;
  for (int m = 0; m < g->n; ++m) {
    const int r = find_root(g->parent, m);
    if (r == m) {
      part_id[m] = g->parts;
      step[g->parts] = 1;
      g->part_grain[g->parts] = g->args.grain;
      g->part_bytes[g->parts++] = 0;
    }
    const int p = part_of[m] = part_id[r];
    const int64_t rows = g->row_n[m];
    const int64_t grain = rows ? g->members[m]->u.launch.grain * rows : g->members[m]->u.launch.grain;
    if (grain < g->part_grain[p]) g->part_grain[p] = grain;
    if (rows && step[p] < g->args.range) {
      int64_t a = step[p], b = rows;
      while (b) { const int64_t t = a % b; a = b; b = t; }
      const int64_t l = step[p] / a;
      step[p] = l > g->args.range / rows ? g->args.range : l * rows;
    }
  }
  for (int r = 0; r < runs; ++r) g->part_bytes[part_of[run_owner[r]]] += run_bytes[r];
  int k = 0;
  for (int p = 0; p < g->parts; ++p) {
    g->part_first[p] = k;
    for (int m = 0; m < g->n; ++m)
      if (part_of[m] == p) g->order[k++] = (uint16_t)m;
  }
  g->part_first[g->parts] = k;
  /* Each part's grain, and its chunks' place in the group's range. */
  const int64_t range = g->args.range;
  int64_t chunks = 0;
  for (int p = 0; p < g->parts; ++p) {
    int64_t grain = g->part_grain[p];
    if (g->part_bytes[p] > 0) {
      int64_t budget = FUSE_CHUNK_BYTES / g->part_bytes[p];
      if (budget < FUSE_MIN_GRAIN) budget = FUSE_MIN_GRAIN;
      budget -= budget % 64;
      if (budget < grain) grain = budget;
    }
    if (step[p] > 1) grain = grain < step[p] ? step[p] : grain - grain % step[p];
    if (grain > range) grain = range;
    g->part_grain[p] = grain;
    g->part_chunk[p] = chunks;
    chunks += range / grain + (range % grain != 0);
  }
  g->part_chunk[g->parts] = chunks;
  g->pool_args = (loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION, .range = chunks,
                                    .grain = 1};
  uint64_t cached = 0;
  for (int m = 0; m < g->n; ++m) {
    const loom_command *c = g->members[m];
    const int64_t rows = g->row_n[m] ? g->row_n[m] : 1;
    g->margs[m] = (loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION,
                                     .num_tensors = c->u.launch.num_tensors,
                                     .tensors = g->deferred[m] ? g->deferred[m] : c->u.launch.tensors,
                                     .num_scalars = c->u.launch.num_scalars,
                                     .scalars = c->u.launch.scalars,
                                     .range = c->u.launch.range,
                                     .grain = g->part_grain[part_of[m]] / rows};
  }
  /* What a member writes and a later member reads (not only overwrites)
   * stays in the cache. Spans are listed by member, so those of later
   * members follow. */
  for (int s = 0; s < ns; ++s) {
    const int m = g->span_member[s];
    if (!(g->span_flags[s] & SPAN_WRITTEN)) continue;
    for (int t = s + 1; t < ns; ++t) {
      if (g->span_member[t] == m || (g->span_flags[t] & SPAN_WRITTEN) ||
          !overlap(g->spans[s], g->spans[t]))
        continue;
      g->margs[m].hints |= LOOM_KERNEL_HINT_CACHED;
      const loom_tensor *x = &g->members[m]->u.launch.tensors[g->span_tensor[s]];
      cached += (uint64_t)(loom_tensor_numel(x) * loom_dtype_size(x->dtype));
      break;
    }
  }
  mark_streamed(g);
  return cached;
}

void host_fuse_clear_failures(host_group *g) {
  for (int m = 0; m < g->n; ++m) atomic_store_explicit(&g->failed[m], 0, memory_order_relaxed);
}

static void record_failure(host_group *g, int m, int rc, int64_t begin, int64_t end) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&g->failed[m], &expected, rc)) return;
  g->failed_begin[m] = begin;
  g->failed_end[m] = end;
  strncpy(g->failed_reason[m], loom_last_error(), HOST_REASON_CAPACITY - 1);
  g->failed_reason[m][HOST_REASON_CAPACITY - 1] = '\0';
}

void host_fuse_run_member(host_group *g, int m, int64_t begin, int64_t end) {
  const int64_t rows = g->row_n[m] ? g->row_n[m] : 1;
  loom_clear_error();
  const int rc = g->members[m]->u.launch.fn(&g->margs[m], begin / rows, end / rows);
  if (rc != 0) record_failure(g, m, rc, begin / rows, end / rows);
}

/* The pool's kernel for a group: its range counts the chunks of every
 * part; chunk k of a part is [k*grain, ...) of every member of the part, in
 * program order. `args` is the group's pool_args (the group's first field).
 * A failing member is recorded, and the others go on, as they would
 * unfused. */
static int group_chunk(const loom_kernel_args *args, int64_t first, int64_t last) {
  host_group *g = (host_group *)args;
  for (int64_t k = first; k < last; ++k) {
    int p = 0;
    while (g->part_chunk[p + 1] <= k) ++p;
    const int64_t grain = g->part_grain[p], range = g->args.range;
    const int64_t begin = (k - g->part_chunk[p]) * grain;
    const int64_t end = range - begin > grain ? begin + grain : range;
    for (int i = g->part_first[p]; i < g->part_first[p + 1]; ++i)
      host_fuse_run_member(g, g->order[i], begin, end);
  }
  return 0;
}

void host_fuse_run_fused(host_context *ctx, int device, int priority, host_group *g) {
  host_fuse_clear_failures(g);
  if (!g->region.ready || !host_fuse_region_run(ctx, device, priority, g)) {
    host_failure unused;
    (void)host_pool_run(&ctx->devices[device].pool, priority, group_chunk, &g->pool_args, &unused);
  }
  copy_deferred(g);
}

void host_fuse_run(host_context *ctx, int device, int priority, host_group *g,
                   loom_stream_t *report, uint64_t end) {
  for (int h = 0; h < g->nhoisted; ++h) { /* as the queue runs a launch */
    const loom_command *c = g->hoisted[h];
    const uint64_t h0 = c->trace ? loom_trace_now() : 0;
    host_epilogue_note(&g->packs, c);
    (void)host_execute_launch(ctx, device, priority, c, report);
    if (c->trace) loom_driver_trace_report(c, h0, loom_trace_now());
    if (c->release) c->release(c->release_arg);
  }
  const uint64_t cached = prepare(g);
  host_fuse_region_plan(g, report ? loom_stream_id(report) : 0, end);
  int traced = 0;
  for (int m = 0; m < g->n; ++m) traced |= g->members[m]->trace != NULL;
  const uint64_t t0 = traced ? loom_trace_now() : 0;
  if (loom_fuse_get_mode() == LOOM_FUSE_VERIFY) host_fuse_run_verified(ctx, device, priority, g, report);
  else host_fuse_run_fused(ctx, device, priority, g);
  if (traced) loom_driver_trace_report_group(g->members, (size_t)g->n, t0, loom_trace_now());
  for (int m = 0; m < g->n; ++m) {
    const int rc = atomic_load(&g->failed[m]);
    if (rc != 0)
      host_launch_failed(g->members[m], rc, g->failed_begin[m], g->failed_end[m],
                         g->failed_reason[m], report);
  }
  for (int m = 0; m < g->n; ++m)
    if (g->members[m]->release) g->members[m]->release(g->members[m]->release_arg);
  free_deferred(g);
  host_fuse_count_group(g->n + g->nhoisted, g->reordered + g->nhoisted, cached);
}
