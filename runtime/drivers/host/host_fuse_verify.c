/* LOOM_FUSE=verify (loom/fuse.h): a group runs fused, then its members one
 * by one from the saved inputs, and the bytes are compared; a difference
 * is the stream's error, naming the op whose tensor holds the first
 * differing byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/fuse.h"
#include "runtime/drivers/host/host_fuse.h"

static int by_lo(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The members' memory as disjoint sorted spans in `out`; their count, or
 * -1 if some tensor's span has gaps. */
static int memory_spans(const host_group *g, span *out) {
  int n = 0;
  for (int s = 0; s < g->nspans; ++s) {
    const loom_tensor *t = &g->members[g->span_member[s]]->u.launch.tensors[g->span_tensor[s]];
    if (!host_dense(t) || g->spans[s].hi == UINTPTR_MAX) return -1;
    out[n++] = g->spans[s];
  }
  qsort(out, (size_t)n, sizeof *out, by_lo);
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (k > 0 && out[i].lo <= out[k - 1].hi) {
      if (out[i].hi > out[k - 1].hi) out[k - 1].hi = out[i].hi;
    } else {
      out[k++] = out[i];
    }
  }
  return k;
}

static void copy_spans(const span *sp, int n, char *buffer, int to_buffer) {
  for (int i = 0; i < n; ++i) {
    const size_t size = sp[i].hi - sp[i].lo;
    if (to_buffer) memcpy(buffer, (const void *)sp[i].lo, size);
    else memcpy((void *)sp[i].lo, buffer, size);
    buffer += size;
  }
}

/* The op whose tensor holds the byte at `addr` (the first member's). */
static const char *owner_of(const host_group *g, uintptr_t addr) {
  for (int s = 0; s < g->nspans; ++s)
    if (g->spans[s].lo <= addr && addr < g->spans[s].hi) return g->members[g->span_member[s]]->name;
  return "?";
}

static void group_name(const host_group *g, char *out, size_t size) {
  size_t len = 0;
  out[0] = '\0';
  for (int m = 0; m < g->n && len < size; ++m)
    len += (size_t)snprintf(out + len, size - len, "%s%s", m ? ", " : "", g->members[m]->name);
}

/* Runs again, as the queue would have at that point, the launches run
 * ahead of the group that overwrote deferred outputs of the members before
 * `m`: the unfused members wrote those outputs in place. */
static void rerun_covers(host_context *ctx, int device, int priority, const host_group *g, int m) {
  for (int c = 0; c < g->ncovers; ++c) {
    if (g->cover_after[c] != m) continue;
    const loom_command *h = g->hoisted[g->cover_launch[c]];
    const loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                                .num_tensors = h->u.launch.num_tensors,
                                .tensors = h->u.launch.tensors,
                                .num_scalars = h->u.launch.num_scalars,
                                .scalars = h->u.launch.scalars,
                                .range = h->u.launch.range,
                                .grain = h->u.launch.grain};
    host_failure f; /* it ran once before the group and reported then */
    (void)host_pool_run(&ctx->devices[device].pool, priority, h->u.launch.fn, &a, &f);
  }
}

/* Runs the group fused, keeps what it wrote, restores the inputs, runs the
 * members one by one as the queue would, and compares. The unfused results
 * stay, and so do the unfused run's failures. */
void host_fuse_run_verified(host_context *ctx, int device, int priority, host_group *g,
                            loom_stream_t *report) {
  span *sp = malloc((size_t)g->nspans * sizeof *sp);
  const int n = sp ? memory_spans(g, sp) : -1;
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += sp[i].hi - sp[i].lo;
  char *saved = n > 0 ? malloc(total) : NULL, *fused = n > 0 ? malloc(total) : NULL;
  if (!saved || !fused) {
    host_fuse_count_verified(0);
    host_fuse_run_fused(ctx, device, priority, g);
    free(saved);
    free(fused);
    free(sp);
    return;
  }
  copy_spans(sp, n, saved, 1);
  host_fuse_run_fused(ctx, device, priority, g);
  copy_spans(sp, n, fused, 1);
  copy_spans(sp, n, saved, 0);
  host_fuse_clear_failures(g);
  for (int m = 0; m <= g->n; ++m) {
    rerun_covers(ctx, device, priority, g, m);
    if (m == g->n) break;
    loom_kernel_args a = g->margs[m];
    a.grain = g->members[m]->u.launch.grain;
    a.tensors = g->members[m]->u.launch.tensors;
    a.hints = 0;
    host_failure f;
    const int rc = host_pool_run(&ctx->devices[device].pool, priority, g->members[m]->u.launch.fn,
                                 &a, &f);
    if (rc != 0) {
      atomic_store(&g->failed[m], rc);
      g->failed_begin[m] = f.begin;
      g->failed_end[m] = a.range - f.begin > a.grain ? f.begin + a.grain : a.range;
      memcpy(g->failed_reason[m], f.reason, sizeof f.reason);
    }
  }
  host_fuse_count_verified(1);
  size_t offset = 0;
  for (int i = 0; i < n; ++i) {
    const size_t size = sp[i].hi - sp[i].lo;
    const char *now = (const char *)sp[i].lo;
    if (memcmp(now, fused + offset, size) != 0) {
      size_t at = 0;
      while (now[at] == fused[offset + at]) ++at;
      char names[256];
      group_name(g, names, sizeof names);
      loom_driver_report_error(report, LOOM_ERROR_INTERNAL,
                               "%s: LOOM_FUSE=verify: the fused group (%s) wrote other bytes "
                               "than its launches one by one (at %#lx)",
                               owner_of(g, sp[i].lo + at), names, (unsigned long)(sp[i].lo + at));
      break;
    }
    offset += size;
  }
  free(saved);
  free(fused);
  free(sp);
}
