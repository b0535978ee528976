/* Adaptive eager, GEMM epilogues: the elementwise launches queued right
 * after the last "gemm.compute" of a product, when they read its C, run on
 * each output tile as the GEMM finishes it ("gemm.compute_epilogue",
 * loom/kernels/gemm_epilogue.h), instead of as passes over memory.
 *
 * Why it is exact: the epilogue applies the pointwise library's element
 * functions in float, rounds each step to C's dtype and stores what each
 * step's launch stored, which is what the launches one by one compute. A
 * launch joins only when, element for element, its chain input is the
 * value the previous step produced (the same view of the same memory) and
 * whatever it writes or reads beside it is either disjoint from the memory
 * the GEMM and the steps write or the very same view of it: a tile's rows
 * then meet nothing another tile writes, and within a row run every
 * element is read before it is written, as in program order.
 *
 * The last member's output is always written (as D). C and the other
 * members' outputs are written (C by the product, the others by storing
 * steps) unless the allocator's release log (host_fuse_release.c) says
 * their whole block was freed between their launch's submission and the
 * first command the group's look did not see, and no step reads them
 * from memory (as an operand): every command of the queue up to the free
 * was then looked at and is a member, which takes the value from the
 * tile, or a launch a level-1 group ran ahead, which touches none of the
 * members' memory; commands after the free use the block's next owner,
 * which they write themselves, after the group. C not written, the
 * product goes to D's memory (when D shares no memory with C or what the
 * product and the steps read) and the steps read it from there. Under
 * LOOM_FUSE=verify every value is written. */
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "loom/kernels/gemm_epilogue.h"
#include "loom/kernels/pointwise.h"
#include "runtime/drivers/host/host_fuse.h"

/* ---- the kernels involved ------------------------------------------------ */

static _Atomic(loom_kernel_fn) fn_pack, fn_compute, fn_epilogue, fn_pointwise;
static atomic_int fns_resolved;

static void resolve_fns(void) {
  if (atomic_load_explicit(&fns_resolved, memory_order_acquire)) return;
  /* The library's table is fixed: racing threads store the same values. */
  const loom_kernel_entry *c = loom_kernel_library_find("gemm.compute");
  const loom_kernel_entry *e = loom_kernel_library_find("gemm.compute_epilogue");
  const loom_kernel_entry *p = loom_kernel_library_find("pointwise.apply");
  const loom_kernel_entry *k = loom_kernel_library_find("gemm.pack");
  atomic_store_explicit(&fn_pack, c && e && p && k ? k->fn : NULL, memory_order_relaxed);
  atomic_store_explicit(&fn_compute, c && e && p ? c->fn : NULL, memory_order_relaxed);
  atomic_store_explicit(&fn_epilogue, e ? e->fn : NULL, memory_order_relaxed);
  atomic_store_explicit(&fn_pointwise, p ? p->fn : NULL, memory_order_relaxed);
  atomic_store_explicit(&fns_resolved, 1, memory_order_release);
}

/* ---- element maps ---------------------------------------------------------- */

static int float_dtype(int32_t dtype) {
  return dtype == LOOM_FLOAT32 || dtype == LOOM_BFLOAT16 || dtype == LOOM_FLOAT16;
}

/* Whether C's view numbers its elements densely from its data pointer: its
 * dims of size > 1, by stride, step 1, then each the whole of the last. Each
 * element's offset from the data pointer is then its index in the steps'
 * launches (checked member by member: the chain input must read C there). */
static int dense_numbering(const loom_tensor *c) {
  int64_t sz[4], st[4];
  int r = 0;
  for (int d = 0; d < 4; ++d) {
    if (c->sizes[d] <= 0) return 0;
    if (c->sizes[d] == 1) continue;
    if (c->strides[d] <= 0) return 0;
    int k = r++;
    while (k > 0 && st[k - 1] > c->strides[d]) {
      sz[k] = sz[k - 1];
      st[k] = st[k - 1];
      --k;
    }
    sz[k] = c->sizes[d];
    st[k] = c->strides[d];
  }
  int64_t next = 1;
  for (int k = 0; k < r; ++k) {
    if (st[k] != next) return 0;
    next *= sz[k];
  }
  return 1;
}

/* Tensor `t` of a pointwise launch whose output has sizes `o` (rank `r`),
 * as a rank-4 view with C's sizes: element p of the view is what the launch
 * touches at the index sum_d p_d * C->strides[d]. 0 if that is no strided
 * view: a dim of C must fall within one dim of the launch's, or span whole
 * dims whose strides in `t` merge. */
static int to_c_view(const loom_tensor *t, const int64_t *o, int32_t r, const loom_tensor *c,
                     loom_tensor *out) {
  *out = *t;
  out->rank = 4;
  for (int d = 0; d < 4; ++d) out->sizes[d] = c->sizes[d];
  if (t->rank == 0) {
    for (int d = 0; d < 4; ++d) out->strides[d] = 0;
    return 1;
  }
  if (t->rank != r) return 0;
  int64_t place[LOOM_MAX_DIMS];
  int64_t p = 1;
  for (int32_t e = r - 1; e >= 0; --e) {
    if (t->sizes[e] != o[e]) return 0;
    place[e] = p;
    p *= o[e];
  }
  for (int d = 0; d < 4; ++d) {
    out->strides[d] = 0;
    if (c->sizes[d] == 1) continue;
    const int64_t lo = c->strides[d], hi = c->strides[d] * c->sizes[d];
    int found = 0;
    for (int32_t e = r - 1; e >= 0 && !found; --e) {
      if (o[e] == 1) continue;
      if (place[e] <= lo && lo % place[e] == 0 && hi <= place[e] * o[e]) { /* within dim e */
        out->strides[d] = t->strides[e] * (lo / place[e]);
        found = 1;
      } else if (place[e] == lo) { /* dims e, e-1, ... whole */
        int32_t f = e;
        int64_t reach = place[e] * o[e];
        for (int32_t g = e - 1; g >= 0 && reach < hi; --g) {
          if (o[g] == 1) continue;
          if (t->strides[g] != t->strides[f] * o[f]) return 0;
          reach = place[g] * o[g];
          f = g;
        }
        if (reach != hi) return 0;
        out->strides[d] = t->strides[e];
        found = 1;
      }
    }
    if (!found) return 0;
  }
  return 1;
}

/* Whether two rank-4 views with C's sizes are the same map. */
static int same_view(const loom_tensor *a, const loom_tensor *b) {
  if (a->data != b->data || a->dtype != b->dtype) return 0;
  for (int d = 0; d < 4; ++d)
    if (a->sizes[d] > 1 && a->strides[d] != b->strides[d]) return 0;
  return 1;
}

static int overlaps(const loom_tensor *a, const loom_tensor *b) {
  span x, y;
  if (!host_fuse_tensor_span(a, &x) || !host_fuse_tensor_span(b, &y)) return 0;
  return x.lo < y.hi && y.lo < x.hi;
}

/* ---- which workspaces hold packed panels --------------------------------------- */

/* A compute launch reads the panels its pack launch wrote to the workspace;
 * a product whose plan packs everything in the compute launch has no pack
 * launch, and then whatever the workspace holds is never read, so the
 * group may move it. The queue tells of every pack and compute launch it
 * runs; a workspace a pack filled stays listed until its compute ran. */
void host_epilogue_note(host_packs *p, const loom_command *cmd) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH) return;
  resolve_fns();
  const loom_kernel_fn fn = cmd->u.launch.fn;
  if (cmd->u.launch.num_tensors < 4) return;
  const void *ws = cmd->u.launch.tensors[3].data;
  if (fn == atomic_load_explicit(&fn_pack, memory_order_relaxed)) {
    for (int i = 0; i < p->n; ++i)
      if (p->ws[i] == ws) return;
    if (p->n == HOST_PACKS_MAX) p->overflow = 1; /* then none moves */
    else p->ws[p->n++] = ws;
  } else if (fn == atomic_load_explicit(&fn_compute, memory_order_relaxed)) {
    for (int i = 0; i < p->n; ++i)
      if (p->ws[i] == ws) p->ws[i] = p->ws[--p->n];
  }
}

int host_epilogue_ws_unused(const host_packs *p, const loom_command *compute) {
  if (p->overflow) return 0;
  for (int i = 0; i < p->n; ++i)
    if (p->ws[i] == compute->u.launch.tensors[3].data) return 0;
  return 1;
}

/* ---- forming the group ------------------------------------------------------- */

/* The ops the epilogue runs (loom/kernels/gemm_epilogue.h): unary ones
 * without parameters, binary ones with one operand. */
static int op_ok(int64_t op, int inputs) {
  switch (op) {
    case LOOM_PW_IDENTITY: case LOOM_PW_RELU: case LOOM_PW_GELU: case LOOM_PW_GELU_TANH:
    case LOOM_PW_SILU: case LOOM_PW_SIGMOID: case LOOM_PW_TANH: case LOOM_PW_NEG:
    case LOOM_PW_EXP:
      return inputs == 1;
    case LOOM_PW_ADD: case LOOM_PW_SUB: case LOOM_PW_MUL: case LOOM_PW_DIV:
    case LOOM_PW_MAXIMUM: case LOOM_PW_MINIMUM: case LOOM_PW_GELU_BACKWARD:
    case LOOM_PW_GELU_TANH_BACKWARD: case LOOM_PW_SILU_BACKWARD: case LOOM_PW_SIGMOID_BACKWARD:
    case LOOM_PW_TANH_BACKWARD: case LOOM_PW_THRESHOLD_BACKWARD:
      return inputs == 2;
    default:
      return 0;
  }
}

/* Off unless LOOM_FUSE_EPILOGUE=1: measured side by side, a product that
 * runs its steps on its tiles made the bench's GELU and SwiGLU MLP blocks
 * 3-8% slower than the product and its steps as their own launches (and
 * the wait for steps on their way cost another 2-4%), so by default the
 * executor does not form these groups. Read at each product, so a test
 * may set it at run time. */
static int epilogues_enabled(void) {
  const char *v = getenv("LOOM_FUSE_EPILOGUE");
  return v && v[0] == '1' && v[1] == 0;
}

int host_epilogue_can_lead(const loom_command *cmd) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH || loom_fuse_get_mode() == LOOM_FUSE_OFF) return 0;
  resolve_fns();
  const loom_kernel_fn fn = atomic_load_explicit(&fn_compute, memory_order_relaxed);
  if (!fn || cmd->u.launch.fn != fn) return 0;
  if (!epilogues_enabled()) return 0;
  const uint32_t nt = cmd->u.launch.num_tensors;
  if ((nt != 4 && nt != 5) || cmd->u.launch.num_scalars != 3) return 0;
  const loom_tensor *c = &cmd->u.launch.tensors[0];
  return c->rank == 4 && c->data && float_dtype(c->dtype) && dense_numbering(c);
}

/* The wait for steps still on their way: at most 1/32 of the product's
 * time at 100 GFLOP/s, and 200 us. */
#define EPILOGUE_WAIT_MAX_NS 200000
uint64_t host_epilogue_wait_ns(const loom_command *lead) {
  const loom_tensor *c = &lead->u.launch.tensors[0], *a = &lead->u.launch.tensors[1];
  if (a->rank != 4) return 0;
  const double flops = 2.0 * (double)c->sizes[0] * (double)c->sizes[1] * (double)c->sizes[2] *
                       (double)c->sizes[3] * (double)a->sizes[3];
  const double ns = flops / 100.0 / 32.0;
  return ns > EPILOGUE_WAIT_MAX_NS ? EPILOGUE_WAIT_MAX_NS : (uint64_t)ns;
}

int host_epilogue_pack_can_lead(const loom_command *cmd) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH || loom_fuse_get_mode() == LOOM_FUSE_OFF) return 0;
  resolve_fns();
  const loom_kernel_fn fn = atomic_load_explicit(&fn_pack, memory_order_relaxed);
  if (!fn || cmd->u.launch.fn != fn || !epilogues_enabled()) return 0;
  const uint32_t nt = cmd->u.launch.num_tensors;
  return fn && cmd->u.launch.fn == fn && (nt == 4 || nt == 5) && cmd->u.launch.num_scalars == 3;
}

int host_epilogue_pairs(const loom_command *pack, const loom_command *compute) {
  if (!host_epilogue_can_lead(compute) ||
      compute->u.launch.num_tensors != pack->u.launch.num_tensors)
    return 0;
  for (uint32_t i = 0; i < pack->u.launch.num_tensors; ++i)
    if (memcmp(&pack->u.launch.tensors[i], &compute->u.launch.tensors[i], sizeof(loom_tensor)))
      return 0;
  for (uint32_t i = 0; i < 3; ++i)
    if (memcmp(&pack->u.launch.scalars[i], &compute->u.launch.scalars[i], sizeof(loom_scalar)))
      return 0;
  return 1;
}

void host_epilogue_begin(host_epilogue *e, const loom_command *lead, const loom_command *pack,
                         int ws_unused, uint64_t seq) {
  e->lead = lead;
  e->seq[0] = seq;
  e->not_written = 0;
  e->pack = pack;
  e->may_move_ws = pack != NULL || ws_unused;
  e->moves_ws = 0;
  e->n = e->noperands = 0;
  const loom_tensor *t = lead->u.launch.tensors;
  e->c = t[0];
  e->numel = t[0].sizes[0] * t[0].sizes[1] * t[0].sizes[2] * t[0].sizes[3];
  e->chain = t[0];
}

/* Whether `v`, which a step writes, may: disjoint from what the GEMM reads,
 * and from what the steps read or write unless it is the same view. */
static int write_ok(const host_epilogue *e, const loom_tensor *v, int *moves_ws) {
  const loom_tensor *g = e->lead->u.launch.tensors;
  const uint32_t nt = e->lead->u.launch.num_tensors;
  for (uint32_t i = 1; i < nt; ++i) { /* A, B, the workspace, Cin */
    if (!overlaps(v, &g[i]) || (i == 4 && g[4].data == e->c.data && same_view(v, &e->c)))
      continue;
    if (i == 3 && e->may_move_ws) { /* no pack has filled it: the workspace can move */
      *moves_ws = 1;
      continue;
    }
    return 0;
  }
  if (overlaps(v, &e->c) && !same_view(v, &e->c)) return 0;
  for (int m = 0; m < e->n; ++m)
    if (overlaps(v, &e->outs[m]) && !same_view(v, &e->outs[m])) return 0;
  for (int k = 0; k < e->noperands; ++k)
    if (overlaps(v, &e->operands[k]) && !same_view(v, &e->operands[k])) return 0;
  return 1;
}

/* Whether operand `v` may be read by a step: not the workspace, and what
 * the steps write only through the same view. */
static int read_ok(const host_epilogue *e, const loom_tensor *v, int *moves_ws) {
  if (overlaps(v, &e->lead->u.launch.tensors[3])) {
    if (!e->may_move_ws) return 0;
    *moves_ws = 1;
  }
  if (overlaps(v, &e->c) && !same_view(v, &e->c)) return 0;
  for (int m = 0; m < e->n; ++m)
    if (overlaps(v, &e->outs[m]) && !same_view(v, &e->outs[m])) return 0;
  return 1;
}

int host_epilogue_offer(host_epilogue *e, const loom_command *cmd, uint64_t seq) {
  if (cmd->kind != LOOM_COMMAND_LAUNCH || e->n == LOOM_GEMM_EPILOGUE_MAX_STEPS ||
      cmd->u.launch.fn != atomic_load_explicit(&fn_pointwise, memory_order_relaxed))
    return 0;
  const uint32_t nt = cmd->u.launch.num_tensors;
  const loom_tensor *t = cmd->u.launch.tensors;
  if ((nt != 2 && nt != 3) || cmd->u.launch.num_scalars < LOOM_PW_PARAM + 1 ||
      cmd->u.launch.range != e->numel)
    return 0;
  const loom_scalar *s = cmd->u.launch.scalars;
  const int64_t op = s[0].i;
  if (s[1].i != LOOM_PW_F32 || !op_ok(op, (int)nt - 1)) return 0;
  if ((op == LOOM_PW_ADD || op == LOOM_PW_SUB) && s[LOOM_PW_PARAM].f != 1.0) return 0;
  if (op == LOOM_PW_THRESHOLD_BACKWARD && s[LOOM_PW_PARAM].f != 0.0) return 0;
  if (t[0].dtype != e->c.dtype || t[0].rank < 1 || t[0].rank > LOOM_MAX_DIMS) return 0;
  loom_tensor v[3];
  for (uint32_t i = 0; i < nt; ++i)
    if (!t[i].data || !to_c_view(&t[i], t[0].sizes, t[0].rank, &e->c, &v[i])) return 0;
  /* The chain value is one input; the other, if any, is an operand. */
  const int in1 = same_view(&v[1], &e->chain);
  const int in2 = nt == 3 && same_view(&v[2], &e->chain);
  if (in1 == in2) return 0; /* neither, or both (x * x) */
  const int operand = nt == 3 ? (in1 ? 2 : 1) : 0;
  int moves_ws = 0;
  if (operand && (!float_dtype(v[operand].dtype) || !read_ok(e, &v[operand], &moves_ws)))
    return 0;
  if (!write_ok(e, &v[0], &moves_ws)) return 0;
  /* its output against its own operand: the same view or disjoint */
  if (operand && overlaps(&v[0], &v[operand]) && !same_view(&v[0], &v[operand])) return 0;
  int64_t word = op;
  if (operand) {
    e->operands[e->noperands++] = v[operand];
    word |= (int64_t)e->noperands << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT;
    if (in2) word |= LOOM_GEMM_EPILOGUE_SWAP;
  }
  e->words[e->n] = word;
  e->seq[1 + e->n] = seq;
  e->outs[e->n] = v[0];
  e->members[e->n++] = cmd;
  e->chain = v[0];
  e->moves_ws |= moves_ws;
  return 1;
}

/* ---- which values are stored ----------------------------------------------------- */

static int read_by_step(const host_epilogue *e, const loom_tensor *v) {
  for (int k = 0; k < e->noperands; ++k)
    if (overlaps(v, &e->operands[k])) return 1;
  return 0;
}

/* Whether `v`, as launched by the command numbered `seq`, lies in a block
 * freed within the group's look. */
static int released(const loom_tensor *v, uint64_t seq, uint64_t stream, uint64_t end) {
  span s;
  uint64_t at;
  return host_fuse_tensor_span(v, &s) && host_fuse_released_within(stream, s, seq, end, &at);
}

/* Whether the product may be computed into D's memory instead of C's: the
 * same plan (D has C's dtype, and a last stride of 1 exactly when C has:
 * loom/kernels/gemm_epilogue.h), and D shares no memory with C or with
 * what the product (its workspace at e->ws) or a step reads. */
static int product_fits_d(const host_epilogue *e) {
  const loom_tensor *d = &e->outs[e->n - 1];
  if (d->dtype != e->c.dtype || (d->strides[3] == 1) != (e->c.strides[3] == 1)) return 0;
  if (overlaps(d, &e->c) || read_by_step(e, d)) return 0;
  const loom_tensor *g = e->lead->u.launch.tensors;
  loom_tensor ws = g[3];
  ws.data = e->ws;
  for (uint32_t i = 1; i < e->lead->u.launch.num_tensors; ++i)
    if (overlaps(d, i == 3 ? &ws : &g[i])) return 0;
  return 1;
}

/* Sets e->stored and e->not_written (module comment). `stream`: the
 * queue's stream id (0: unknown, every value is stored). */
static void plan_stores(host_epilogue *e, uint64_t stream, uint64_t end) {
  const int all = loom_fuse_get_mode() == LOOM_FUSE_VERIFY || stream == 0;
  const uint64_t bytes = (uint64_t)e->numel * (uint64_t)loom_dtype_size(e->c.dtype);
  e->not_written = 0;
  for (int m = 0; m <= e->n; ++m) e->stored[m] = 1;
  if (all) return;
  for (int m = 0; m + 1 < e->n; ++m)
    if (!read_by_step(e, &e->outs[m]) &&
        released(&e->members[m]->u.launch.tensors[0], e->seq[1 + m], stream, end)) {
      e->stored[1 + m] = 0;
      e->not_written += bytes;
    }
  if (!read_by_step(e, &e->c) && product_fits_d(e) &&
      released(&e->lead->u.launch.tensors[0], e->seq[0], stream, end)) {
    e->stored[0] = 0;
    e->not_written += bytes;
  }
}

/* ---- running it ---------------------------------------------------------------- */

/* The fused launch's arguments: tensors C, A, B, workspace, Cin, D, the
 * operands, the intermediates stored; scalars as the lead's, the step
 * count (with LOOM_GEMM_EPILOGUE_PRODUCT_IN_D when C is not stored) and
 * words. */
static void build_args(host_epilogue *e, loom_kernel_args *a) {
  const loom_command *lead = e->lead;
  const loom_tensor *g = lead->u.launch.tensors;
  int nt = 0;
  for (int i = 0; i < 4; ++i) e->tensors[nt++] = g[i];
  e->tensors[3].data = e->ws; /* where the pack put the panels */
  e->tensors[nt++] = lead->u.launch.num_tensors == 5 ? g[4] : g[0];
  e->tensors[nt++] = e->outs[e->n - 1];
  for (int k = 0; k < e->noperands; ++k) e->tensors[nt++] = e->operands[k];
  for (int m = 0; m + 1 < e->n; ++m)
    if (e->stored[1 + m]) e->tensors[nt++] = e->outs[m];
  for (int i = 0; i < 3; ++i) e->scalars[i] = lead->u.launch.scalars[i];
  if (lead->u.launch.num_tensors == 4) e->scalars[2].f = 0.0; /* no Cin: beta unused */
  e->scalars[3].i = e->n | (e->stored[0] ? 0 : LOOM_GEMM_EPILOGUE_PRODUCT_IN_D);
  for (int m = 0; m < e->n; ++m)
    e->scalars[4 + m].i =
        e->words[m] | (m + 1 < e->n && e->stored[1 + m] ? LOOM_GEMM_EPILOGUE_STORE : 0);
  *a = (loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION,
                          .num_tensors = (uint32_t)nt,
                          .tensors = e->tensors,
                          .num_scalars = (uint32_t)(4 + e->n),
                          .scalars = e->scalars,
                          .range = lead->u.launch.range,
                          .grain = lead->u.launch.grain};
}

static int run_fused(host_context *ctx, int device, int priority, host_epilogue *e,
                     const loom_kernel_args *a, host_failure *f) {
  return host_pool_run(&ctx->devices[device].pool, priority,
                       atomic_load_explicit(&fn_epilogue, memory_order_relaxed), a, f);
}

/* One launch as the queue runs it, its failure as its own. */
static int run_one(host_context *ctx, int device, int priority, const loom_command *c,
                   loom_stream_t *report) {
  return host_execute_launch(ctx, device, priority, c, report) != LOOM_OK;
}

static int add_span(span *sp, int n, const loom_tensor *t) {
  span s;
  if (!host_dense(t) || !host_fuse_tensor_span(t, &s)) return -1;
  sp[n] = s;
  return n + 1;
}

static int by_lo(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Sorted, merged; returns the count. */
static int merge_spans(span *sp, int n) {
  qsort(sp, (size_t)n, sizeof *sp, by_lo);
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (k > 0 && sp[i].lo <= sp[k - 1].hi) {
      if (sp[i].hi > sp[k - 1].hi) sp[k - 1].hi = sp[i].hi;
    } else {
      sp[k++] = sp[i];
    }
  }
  return k;
}

static size_t spans_bytes(const span *sp, int n) {
  size_t b = 0;
  for (int i = 0; i < n; ++i) b += sp[i].hi - sp[i].lo;
  return b;
}

static void copy_out(const span *sp, int n, char *buf, int to_buf) {
  for (int i = 0; i < n; ++i) {
    const size_t size = sp[i].hi - sp[i].lo;
    if (to_buf) memcpy(buf, (const void *)sp[i].lo, size);
    else memcpy((void *)sp[i].lo, buf, size);
    buf += size;
  }
}

/* LOOM_FUSE=verify: the fused launch, then from the same inputs the lead
 * and the members one by one; the bytes they wrote (C and the members'
 * outputs) must agree. The workspace is restored, not compared (the
 * kernels may use it as they like). The unfused results and failures stay. */
static int run_verified(host_context *ctx, int device, int priority, host_epilogue *e,
                        const loom_kernel_args *a, loom_stream_t *report) {
  span written[1 + LOOM_GEMM_EPILOGUE_MAX_STEPS], all[2 + LOOM_GEMM_EPILOGUE_MAX_STEPS];
  int nw = add_span(written, 0, &e->c);
  for (int m = 0; m < e->n && nw >= 0; ++m) nw = add_span(written, nw, &e->outs[m]);
  int na = -1;
  if (nw >= 0) {
    memcpy(all, written, (size_t)nw * sizeof *all);
    na = add_span(all, nw, &a->tensors[3]);
  }
  char *saved = NULL, *fused = NULL;
  if (na >= 0) {
    nw = merge_spans(written, nw);
    na = merge_spans(all, na);
    saved = malloc(spans_bytes(all, na));
    fused = malloc(spans_bytes(written, nw));
  }
  host_failure f;
  if (!saved || !fused) {
    free(saved);
    free(fused);
    host_fuse_count_verified(0);
    const int rc = run_fused(ctx, device, priority, e, a, &f);
    if (rc) host_launch_failed(e->lead, rc, f.begin, f.begin + a->grain, f.reason, report);
    return rc != 0;
  }
  copy_out(all, na, saved, 1);
  (void)run_fused(ctx, device, priority, e, a, &f);
  copy_out(written, nw, fused, 1);
  copy_out(all, na, saved, 0);
  loom_command lead = *e->lead; /* reading the panels where the pack put them */
  loom_tensor lt[5];
  memcpy(lt, lead.u.launch.tensors, lead.u.launch.num_tensors * sizeof *lt);
  lt[3].data = e->ws;
  lead.u.launch.tensors = lt;
  int failed = run_one(ctx, device, priority, &lead, report);
  for (int m = 0; m < e->n; ++m) failed |= run_one(ctx, device, priority, e->members[m], report);
  host_fuse_count_verified(1);
  size_t offset = 0;
  for (int i = 0; i < nw; ++i) {
    const size_t size = written[i].hi - written[i].lo;
    const char *now = (const char *)written[i].lo;
    if (memcmp(now, fused + offset, size) != 0) {
      size_t at = 0;
      while (now[at] == fused[offset + at]) ++at;
      const uintptr_t addr = written[i].lo + at;
      const char *owner = e->lead->name;
      for (int m = 0; m < e->n; ++m) {
        span s;
        if (host_fuse_tensor_span(&e->outs[m], &s) && s.lo <= addr && addr < s.hi) owner = e->members[m]->name;
      }
      loom_driver_report_error(report, LOOM_ERROR_INTERNAL,
                               "%s: LOOM_FUSE=verify: the GEMM with its epilogue (%s and %d "
                               "elementwise launches) wrote other bytes than its launches one "
                               "by one (at %#lx)",
                               owner, e->lead->name, e->n, (unsigned long)addr);
      break;
    }
    offset += size;
  }
  free(saved);
  free(fused);
  return failed;
}

void host_scratch_free(host_scratch *scratch) {
  if (scratch->p) host_segment_free(NULL, 0, scratch->p, scratch->bytes);
  scratch->p = NULL;
  scratch->bytes = 0;
}

/* Runs the pack the group took (into scratch if the steps use the
 * workspace's memory), as the queue runs a launch; the lead then reads its
 * panels from e->ws. 0 if there is no scratch: nothing ran. */
static int run_pack(host_context *ctx, int device, int priority, host_epilogue *e,
                    host_scratch *scratch, loom_stream_t *report) {
  e->ws = e->lead->u.launch.tensors[3].data;
  loom_command pack = *(e->pack ? e->pack : e->lead);
  loom_tensor t[5];
  memcpy(t, pack.u.launch.tensors, pack.u.launch.num_tensors * sizeof *t);
  if (e->moves_ws) {
    span s;
    const size_t bytes = host_fuse_tensor_span(&t[3], &s) ? s.hi - s.lo : 0;
    if (bytes == 0 || (uintptr_t)t[3].data != s.lo) return 0;
    if (scratch->bytes < bytes) { /* mapped as device memory is: huge pages for the panels */
      host_scratch_free(scratch);
      const size_t size = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
      if (host_segment_alloc(NULL, 0, size, &scratch->p) != LOOM_OK) {
        loom_clear_error();
        scratch->p = NULL;
        return 0;
      }
      scratch->bytes = size;
    }
    t[3].data = e->ws = scratch->p;
  }
  if (!e->pack) return 1;
  pack.u.launch.tensors = t;
  const uint64_t t0 = pack.trace ? loom_trace_now() : 0;
  (void)host_execute_launch(ctx, device, priority, &pack, report);
  if (pack.trace) loom_driver_trace_report(&pack, t0, loom_trace_now());
  if (pack.release) pack.release(pack.release_arg);
  return 1;
}

int host_epilogue_run(host_context *ctx, int device, int priority, host_epilogue *e,
                      host_scratch *scratch, loom_stream_t *report, uint64_t end) {
  if (!run_pack(ctx, device, priority, e, scratch, report)) return 0;
  loom_kernel_args a;
  plan_stores(e, report ? loom_stream_id(report) : 0, end);
  build_args(e, &a);
  const loom_command *all[1 + LOOM_GEMM_EPILOGUE_MAX_STEPS];
  all[0] = e->lead;
  int traced = e->lead->trace != NULL;
  for (int m = 0; m < e->n; ++m) {
    all[1 + m] = e->members[m];
    traced |= e->members[m]->trace != NULL;
  }
  const uint64_t t0 = traced ? loom_trace_now() : 0;
  if (loom_fuse_get_mode() == LOOM_FUSE_VERIFY) {
    (void)run_verified(ctx, device, priority, e, &a, report);
  } else {
    host_failure f;
    const int rc = run_fused(ctx, device, priority, e, &a, &f);
    /* The product's or a step's failure: the GEMM's launch names it. */
    if (rc) {
      const int64_t end = a.range - f.begin > a.grain ? f.begin + a.grain : a.range;
      host_launch_failed(e->lead, rc, f.begin, end, f.reason, report);
    }
  }
  if (traced) loom_driver_trace_report_group(all, (size_t)(1 + e->n), t0, loom_trace_now());
  for (int m = 0; m <= e->n; ++m)
    if (all[m]->release) all[m]->release(all[m]->release_arg);
  /* C and each intermediate, read by the next step from the cache */
  host_fuse_count_group(1 + e->n, 0,
                        (uint64_t)e->numel * (uint64_t)loom_dtype_size(e->c.dtype) * (uint64_t)e->n);
  host_fuse_count_not_written(e->not_written);
  return 1;
}
