/* Adaptive eager, level 2: groups of float pointwise launches run as one
 * compiled loop (loom/fuse.h).
 *
 * The executor computes a group's signature (what the loop must do, not
 * the data: op parameters and constants are the loop's scalars), counts
 * how often it sees it, and asks for a compile once it has seen it
 * LOOM_FUSE_REGION_SIGHTINGS times. It never compiles: a thread outside it
 * (torch_loom's compiler thread) takes the request with
 * loom_fuse_region_next and installs the kernel with
 * loom_fuse_region_install; until then, and for ever if none comes, the
 * group runs at level 1.
 *
 * Why the loop gives the bits of the launches one by one: it walks the
 * range once and, for each element, computes the members in program order
 * from the same inputs, each rounded to its output's dtype as the library
 * stores it; a member reading memory an earlier member wrote takes that
 * member's value (what the store would have left there: level 1 admits a
 * shared tensor only through the same element map), and reads of memory
 * no earlier member wrote load it before any member stores there (the
 * stores of element i follow its loads). The C is the compiler's
 * (python/torch_loom/compiler: one IR and one emitter with loom's compile
 * backend), spelling each op as the library does.
 *
 * Why a value need not be stored: see loom/fuse.h. The executor decides
 * from the allocator's release log (host_fuse_release.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "loom/kernels/pointwise.h"
#include "runtime/drivers/host/host_fuse.h"

/* ---- signatures, requests, installed kernels ---------------------------------- */

enum { R_SEEN, R_REQUESTED, R_TAKEN, R_READY, R_FAILED };

typedef struct region_entry {
  uint64_t hash, id; /* id: the slot's index + 1 */
  int len; /* 0: a free slot */
  int32_t *words;
  int sightings, state;
  loom_kernel_fn fn;
} region_entry;

#define REGIONS 512
#define REQUESTS 64
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t request_cond = PTHREAD_COND_INITIALIZER;
static region_entry table[REGIONS];
static int requests[REQUESTS], req_head, req_count, stopped;
static _Atomic uint64_t op_bits[4];
static atomic_int regions_enabled;

static atomic_int sightings_needed = LOOM_FUSE_REGION_SIGHTINGS;

void loom_fuse_region_set_sightings(int n) {
  atomic_store(&sightings_needed, n < 1 ? LOOM_FUSE_REGION_SIGHTINGS : n);
}

void loom_fuse_region_set_ops(const uint64_t *bits, size_t words) {
  for (size_t i = 0; i < 4; ++i) atomic_store(&op_bits[i], bits && i < words ? bits[i] : 0);
  atomic_store(&regions_enabled, bits != NULL);
}

static int op_spelled(int op) {
  return op >= 0 && op < 256 &&
         (atomic_load_explicit(&op_bits[op / 64], memory_order_relaxed) >> (op % 64) & 1);
}

int loom_fuse_region_next(uint64_t *out_id, int32_t *words, size_t capacity, int timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&table_lock);
  int rc = 0;
  while (!stopped && req_count == 0)
    if (pthread_cond_timedwait(&request_cond, &table_lock, &deadline) != 0) break;
  if (stopped) {
    rc = -1;
  } else if (req_count > 0) {
    region_entry *e = &table[requests[req_head]];
    req_head = (req_head + 1) % REQUESTS;
    --req_count;
    if ((size_t)e->len <= capacity) {
      memcpy(words, e->words, (size_t)e->len * sizeof *words);
      *out_id = e->id;
      e->state = R_TAKEN;
      rc = e->len;
    } else {
      e->state = R_FAILED;
    }
  }
  pthread_mutex_unlock(&table_lock);
  return rc;
}

void loom_fuse_region_install(uint64_t id, loom_kernel_fn fn) {
  pthread_mutex_lock(&table_lock);
  if (id >= 1 && id <= REGIONS && table[id - 1].state == R_TAKEN) {
    table[id - 1].fn = fn;
    table[id - 1].state = fn ? R_READY : R_FAILED;
  }
  pthread_mutex_unlock(&table_lock);
}

int loom_fuse_region_pending(void) {
  int n = 0;
  pthread_mutex_lock(&table_lock);
  for (int i = 0; i < REGIONS; ++i)
    n += table[i].len && (table[i].state == R_REQUESTED || table[i].state == R_TAKEN);
  pthread_mutex_unlock(&table_lock);
  return n;
}

void loom_fuse_region_stop(void) {
  pthread_mutex_lock(&table_lock);
  stopped = 1;
  pthread_cond_broadcast(&request_cond);
  pthread_mutex_unlock(&table_lock);
}

void loom_fuse_region_reset(void) {
  pthread_mutex_lock(&table_lock);
  for (int i = 0; i < REGIONS; ++i) {
    free(table[i].words);
    table[i] = (region_entry){0};
  }
  req_head = req_count = 0;
  pthread_mutex_unlock(&table_lock);
}

static uint64_t hash_words(const int32_t *w, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    h ^= (uint32_t)w[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* The installed kernel for a signature, or NULL; counts the sighting and
 * queues a request at the count. */
static loom_kernel_fn lookup(const int32_t *words, int len) {
  const uint64_t h = hash_words(words, len);
  loom_kernel_fn fn = NULL;
  pthread_mutex_lock(&table_lock);
  for (int probe = 0; probe < REGIONS; ++probe) {
    region_entry *e = &table[(h + (uint64_t)probe) % REGIONS];
    if (!e->len) { /* not seen: a new entry */
      e->words = malloc((size_t)len * sizeof *words);
      if (!e->words) break;
      memcpy(e->words, words, (size_t)len * sizeof *words);
      e->hash = h;
      e->len = len;
      e->id = (uint64_t)(e - table) + 1;
      e->sightings = 0;
      e->state = R_SEEN;
    }
    if (e->hash != h || e->len != len || memcmp(e->words, words, (size_t)len * sizeof *words))
      continue;
    if (e->state == R_READY) fn = e->fn;
    else if (e->state == R_SEEN && ++e->sightings >= atomic_load(&sightings_needed) &&
             req_count < REQUESTS && !stopped) {
      e->state = R_REQUESTED;
      requests[(req_head + req_count++) % REQUESTS] = (int)(e - table);
      pthread_cond_signal(&request_cond);
    }
    break;
  }
  pthread_mutex_unlock(&table_lock);
  return fn;
}

/* ---- a group's signature -------------------------------------------------------- */

static int float_dtype(int32_t d) {
  return d == LOOM_FLOAT32 || d == LOOM_FLOAT64 || d == LOOM_FLOAT16 || d == LOOM_BFLOAT16;
}

/* Whether every element of `t` is the one at its data (a value read
 * broadcast). */
static int one_element(const loom_tensor *t) {
  if (t->rank < 0 || t->rank > LOOM_MAX_DIMS) return 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (t->sizes[d] != 1 && t->strides[d] != 0) return 0;
  return 1;
}

/* The width w of `t` read as a row vector over `range` elements: element
 * i at data[i % w] (a (w,) or (1, w) tensor broadcast over leading dims:
 * contiguous last dims, stride 0 before them); 0 if it is not one. */
static int64_t row_width(const loom_tensor *t, int64_t range) {
  if (t->rank < 0 || t->rank > LOOM_MAX_DIMS) return 0;
  host_canon c;
  host_canonicalize(t, &c);
  if (c.rank != 2 || c.strides[0] != 0 || c.strides[1] != 1 || c.sizes[1] < 2 ||
      c.sizes[0] * c.sizes[1] != range)
    return 0;
  return c.sizes[1];
}

/* How input `x` of a member is read: 0 contiguous over the range, 1 one
 * element, 2 a row vector (*width), -1 none of these. */
static int access_of(const loom_tensor *x, int64_t range, int64_t *width) {
  if (host_fuse_contiguous(x, range)) return 0;
  if (one_element(x)) return 1;
  return (*width = row_width(x, range)) > 0 ? 2 : -1;
}

static int pw_arity(int op) { return op >= LOOM_PW_WHERE ? 3 : op >= LOOM_PW_ADD ? 2 : 1; }

/* The argument for (data, dtype, access) among those from `first` on (the
 * segment's), added if new; -1 if full. */
static int arg_index(host_region *r, int first, const loom_tensor *t, int access) {
  for (int a = first; a < r->nargs; ++a)
    if (r->args[a].data == t->data && r->args[a].dtype == t->dtype && r->access[a] == access)
      return a;
  if (r->nargs == HOST_REGION_MAX_ARGS) return -1;
  const int a = r->nargs++;
  r->args[a] = (loom_tensor){.data = t->data, .dtype = t->dtype, .rank = access == 1 ? 0 : 1};
  r->args[a].sizes[0] = r->range;
  r->args[a].strides[0] = 1;
  r->access[a] = access;
  r->written[a] = 0;
  r->writer[a] = -1;
  return a;
}

static loom_kernel_fn pointwise_fn(void) {
  static _Atomic(loom_kernel_fn) fn;
  loom_kernel_fn f = atomic_load_explicit(&fn, memory_order_relaxed);
  if (!f) {
    const loom_kernel_entry *e = loom_kernel_library_find("pointwise.apply");
    if (e) atomic_store_explicit(&fn, f = e->fn, memory_order_relaxed);
  }
  return f;
}

/* Whether a loop can compute member `m`: a pointwise.apply launch in
 * float compute of an op the compiler spells, over float tensors, its
 * output contiguous over the range and each input contiguous, one element
 * or a row vector (or a constant). */
static int member_compiles(const host_group *g, int m) {
  const loom_command *c = g->members[m];
  const loom_tensor *t = c->u.launch.tensors;
  const loom_scalar *s = c->u.launch.scalars;
  const int64_t range = g->args.range;
  if (c->u.launch.fn != pointwise_fn() || g->row_n[m] || c->u.launch.num_scalars < LOOM_PW_CONST)
    return 0;
  const int op = (int)s[0].i, kind = (int)s[1].i;
  if (!op_spelled(op) || (kind != LOOM_PW_F32 && kind != LOOM_PW_F64)) return 0;
  const int arity = pw_arity(op);
  if ((int)c->u.launch.num_tensors < 1 + arity ||
      (int)c->u.launch.num_scalars < LOOM_PW_CONST + arity)
    return 0;
  if (!t[0].data || !float_dtype(t[0].dtype) || !host_fuse_contiguous(&t[0], range)) return 0;
  for (int k = 1; k <= arity; ++k) {
    int64_t w = 0;
    if (t[k].data && (!float_dtype(t[k].dtype) || access_of(&t[k], range, &w) < 0)) return 0;
  }
  return 1;
}

/* Whether member m's output, at `sp`, freed at clock `at`, must still be
 * stored: a member after `last` (outside the segment: it reads memory, not
 * the loop's value) submitted before the release touches it, or it covers
 * deferred per-row outputs of an earlier member (the copy after the chunks
 * leaves those bytes to it). Members submitted after the release use the
 * block's new owner. */
static int needed_outside(const host_group *g, int m, int last, span sp, uint64_t at) {
  for (int s = 0; s < g->nspans; ++s) {
    const int o = g->span_member[s];
    if (o > last && g->seq[o] <= at && sp.lo < g->spans[s].hi && g->spans[s].lo < sp.hi) return 1;
    if (o == m && g->span_tensor[s] == 0 && (g->span_flags[s] & SPAN_COVERS)) return 1;
  }
  return 0;
}

/* Describes the segment of `n` members at places [first, first + n) of
 * g->order (consecutive members of one part, each member_compiles) into
 * g->region: its arguments from r->nargs on, its members' scalars at their
 * places in g->order, its signature in r->words. Returns the signature's
 * length, or 0 if the segment cannot be a compiled loop. `stream`: the
 * queue's stream id (0: unknown, every output is stored); `end`: the
 * number of the first command of the queue the look did not see. */
static int describe_segment(host_group *g, int first, int n, uint64_t stream, uint64_t end,
                            int store_all) {
  host_region *r = &g->region;
  const int a0 = r->nargs;
  int32_t member_words[HOST_FUSE_MAX_MEMBERS][LOOM_FUSE_REGION_MEMBER_WORDS];
  int out_arg[HOST_FUSE_MAX_MEMBERS];
  int64_t width = 0; /* the row vectors' (one per segment) */
  int last = 0;
  for (int j = 0; j < n; ++j)
    if (g->order[first + j] > last) last = g->order[first + j];
  for (int j = 0; j < n; ++j) {
    const loom_command *c = g->members[g->order[first + j]];
    const loom_tensor *t = c->u.launch.tensors;
    const loom_scalar *s = c->u.launch.scalars;
    const int op = (int)s[0].i, kind = (int)s[1].i, arity = pw_arity(op);
    int32_t *mw = member_words[j];
    mw[0] = op;
    mw[1] = kind;
    for (int k = 0; k < 3; ++k) mw[4 + k] = -1;
    for (int k = 1; k <= arity; ++k) {
      const loom_tensor *x = &t[k];
      if (!x->data) {
        mw[3 + k] = LOOM_FUSE_REGION_CONST << 16 | (k - 1);
        continue;
      }
      int64_t w = 0;
      const int access = access_of(x, r->range, &w);
      if (access < 0 || (access == 2 && width && w != width)) return 0;
      if (access == 2) width = w;
      const int a = arg_index(r, a0, x, access);
      if (a < 0) return 0;
      mw[3 + k] = r->writer[a] >= 0 ? LOOM_FUSE_REGION_VALUE << 16 | r->writer[a]
                                    : LOOM_FUSE_REGION_ARG << 16 | (a - a0);
    }
    const int o = arg_index(r, a0, &t[0], 0);
    if (o < 0) return 0;
    r->writer[o] = j;
    out_arg[j] = o;
    mw[2] = o - a0;
    double p0 = 0;
    if (op == LOOM_PW_POW_SCALAR || op == LOOM_PW_RPOW_SCALAR) p0 = s[LOOM_PW_PARAM].f;
    uint64_t bits;
    memcpy(&bits, &p0, sizeof bits);
    mw[7] = (int32_t)(uint32_t)bits;
    mw[8] = (int32_t)(uint32_t)(bits >> 32);
    loom_scalar *rs = &r->scalars[(first + j) * LOOM_FUSE_REGION_MEMBER_SCALARS];
    for (int i = 0; i < 4; ++i) rs[i] = s[LOOM_PW_PARAM + i];
    for (int k = 0; k < 3; ++k)
      rs[4 + k] = LOOM_PW_CONST + k < (int)c->u.launch.num_scalars ? s[LOOM_PW_CONST + k]
                                                                    : (loom_scalar){.i = 0};
  }
  /* With row vectors the loop runs over (range / width, width): the
   * contiguous arguments as rows of that width, the row vectors as one. */
  for (int a = a0; width && a < r->nargs; ++a) {
    if (r->access[a] == 0) {
      r->args[a].rank = 2;
      r->args[a].sizes[0] = r->range / width;
      r->args[a].sizes[1] = width;
      r->args[a].strides[0] = width;
      r->args[a].strides[1] = 1;
    } else if (r->access[a] == 2) {
      r->args[a].sizes[0] = width;
    }
  }
  /* A broadcast argument (one element, a row vector) may not share memory
   * with a written one. */
  for (int a = a0; a < r->nargs; ++a) {
    if (r->writer[a] < 0) continue;
    span sa, sb;
    if (!host_fuse_tensor_span(&r->args[a], &sa)) return 0;
    for (int b = a0; b < r->nargs; ++b)
      if (r->access[b] && host_fuse_tensor_span(&r->args[b], &sb) && sa.lo < sb.hi && sb.lo < sa.hi)
        return 0;
  }
  /* Stores: an intermediate (a value a later member reads) is not stored
   * when another member overwrites it later, nor when its memory was freed
   * within the group's look. A value no member reads is always stored:
   * work the program enqueued is done, even if nothing reads its result;
   * so is a freed one that a member outside the segment may read (members
   * between the overwritten value and its overwriter are all in it). */
  int read_later[HOST_FUSE_MAX_MEMBERS] = {0};
  for (int j = 0; j < n; ++j)
    for (int k = 4; k < 7; ++k)
      if (member_words[j][k] >= 0 && member_words[j][k] >> 16 == LOOM_FUSE_REGION_VALUE)
        read_later[member_words[j][k] & 0xFFFF] = 1;
  for (int j = 0; j < n; ++j) {
    const int m = g->order[first + j];
    const loom_tensor *out = &g->members[m]->u.launch.tensors[0];
    span sp;
    uint64_t at;
    int stored = r->writer[out_arg[j]] == j || !read_later[j];
    if (stored && read_later[j] && !store_all && stream && host_fuse_tensor_span(out, &sp) &&
        !host_fuse_touches_passed(g, sp) && host_fuse_released_within(stream, sp, g->seq[m], end, &at) &&
        !needed_outside(g, m, last, sp, at))
      stored = 0;
    if (store_all) stored = 1;
    member_words[j][3] = stored;
    if (stored) r->written[out_arg[j]] = 1;
    else r->not_written += (uint64_t)(r->range * loom_dtype_size(out->dtype));
  }
  int32_t *w = r->words;
  int len = 0;
  w[len++] = n;
  w[len++] = r->nargs - a0;
  for (int a = a0; a < r->nargs; ++a) {
    w[len++] = r->args[a].dtype;
    w[len++] = r->access[a];
    w[len++] = r->written[a];
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < LOOM_FUSE_REGION_MEMBER_WORDS; ++i) w[len++] = member_words[j][i];
  return len;
}

/* Adds segment [first, first + n) of g->order: a compiled loop over the
 * arguments from a0 on (its kernel set by the caller), or one member run
 * by its own kernel. */
static void add_segment(host_region *r, int first, int n, int compiled, int a0) {
  const int s = r->nsegs++;
  r->seg_first[s] = first;
  r->seg_len[s] = n;
  r->seg_arg0[s] = a0;
  r->seg_fn[s] = NULL;
  if (!compiled) return;
  r->seg_args[s] = (loom_kernel_args){
      .abi_version = LOOM_KERNEL_ABI_VERSION,
      .num_tensors = (uint32_t)(r->nargs - a0),
      .tensors = &r->args[a0],
      .num_scalars = (uint32_t)(n * LOOM_FUSE_REGION_MEMBER_SCALARS),
      .scalars = &r->scalars[first * LOOM_FUSE_REGION_MEMBER_SCALARS],
      .range = r->range,
      .grain = r->group->args.grain};
}

void host_fuse_region_plan(host_group *g, uint64_t stream, uint64_t end) {
  host_region *r = &g->region;
  r->ready = 0;
  if (!atomic_load_explicit(&regions_enabled, memory_order_relaxed) || g->n < 2 || !pointwise_fn())
    return;
  const int verify = loom_fuse_get_mode() == LOOM_FUSE_VERIFY;
  r->group = g;
  r->range = g->args.range;
  r->nargs = 0;
  r->nsegs = 0;
  r->not_written = 0;
  int compiled = 0, ready = 1;
  /* Each part: runs of two or more consecutive members a loop computes
   * (or the whole part) are compiled segments, every other member runs by
   * its own kernel (row-wise members between them: layer norms in a
   * residual block). */
  for (int p = 0; p < g->parts; ++p) {
    r->part_seg[p] = r->nsegs;
    for (int i = g->part_first[p]; i < g->part_first[p + 1];) {
      int n = 0;
      while (i + n < g->part_first[p + 1] && member_compiles(g, g->order[i + n])) ++n;
      const int a0 = r->nargs;
      const uint64_t kept = r->not_written;
      const int whole = n == g->part_first[p + 1] - g->part_first[p];
      const int len = n >= 2 || (n && whole) ? describe_segment(g, i, n, stream, end, verify) : 0;
      if (len) {
        add_segment(r, i, n, 1, a0);
        const loom_kernel_fn fn = lookup(r->words, len); /* every segment's sighting counts */
        r->seg_fn[r->nsegs - 1] = fn;
        ready &= fn != NULL;
        ++compiled;
        i += n;
        continue;
      }
      r->nargs = a0;
      r->not_written = kept;
      for (int j = 0; j < (n ? n : 1); ++j) add_segment(r, i + j, 1, 0, a0);
      i += n ? n : 1;
    }
  }
  r->part_seg[g->parts] = r->nsegs;
  r->ready = compiled > 0 && ready;
}

/* The pool's kernel for a compiled group: as level 1's, its range counts
 * the chunks of every part; chunk k of part p runs p's segments in order,
 * each a compiled loop or one member's kernel. */
static int region_chunk(const loom_kernel_args *args, int64_t first, int64_t last) {
  host_region *r = (host_region *)args;
  host_group *g = r->group;
  for (int64_t k = first; k < last; ++k) {
    int p = 0;
    while (g->part_chunk[p + 1] <= k) ++p;
    const int64_t grain = g->part_grain[p];
    const int64_t begin = (k - g->part_chunk[p]) * grain;
    const int64_t end = r->range - begin > grain ? begin + grain : r->range;
    for (int s = r->part_seg[p]; s < r->part_seg[p + 1]; ++s) {
      if (!r->seg_fn[s]) {
        host_fuse_run_member(g, g->order[r->seg_first[s]], begin, end);
        continue;
      }
      const int rc = r->seg_fn[s](&r->seg_args[s], begin, end);
      if (rc) return rc;
    }
  }
  return 0;
}

int host_fuse_region_run(host_context *ctx, int device, int priority, host_group *g) {
  host_region *r = &g->region;
  /* A compiled loop checks its arguments before it stores anything: asked
   * for no elements, it says whether it takes them. */
  for (int s = 0; s < r->nsegs; ++s)
    if (r->seg_fn[s] && r->seg_fn[s](&r->seg_args[s], 0, 0) != 0) return 0;
  r->pool_args = g->pool_args;
  host_failure f;
  (void)host_pool_run(&ctx->devices[device].pool, priority, region_chunk, &r->pool_args, &f);
  host_fuse_count_region(r->not_written);
  return 1;
}
