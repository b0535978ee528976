/* kernels/base/iter.h — strided N-d iteration shared by the kernel files.
 *
 * All operands of an iteration have the same logical shape (broadcast
 * operands carry stride 0). The iterator walks a linear range of that shape
 * in row-major order as a sequence of 1-d runs along the innermost
 * (coalesced) dimension, so a kernel's inner loop is a plain strided loop. */
#ifndef LOOM_KERNELS_ITER_H
#define LOOM_KERNELS_ITER_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#define LOOM_ITER_MAX_OPS 8

typedef struct loom_iter {
  int32_t rank;
  int32_t nops;
  int64_t sizes[LOOM_MAX_DIMS];                       /* innermost last */
  int64_t strides[LOOM_ITER_MAX_OPS][LOOM_MAX_DIMS];  /* bytes */
  char *base[LOOM_ITER_MAX_OPS];
  int64_t index[LOOM_MAX_DIMS];
  int64_t remaining;
} loom_iter;

/* Sets up an iteration over the shape of ops[0] for `nops` operands whose
 * sizes equal ops[0]'s (ranks may be smaller only when 0: a scalar tensor is
 * broadcast). Dimensions of size 1 are dropped and neighbours that are
 * contiguous for every operand are merged. Returns 0, or nonzero if the
 * operands do not fit the contract. */
static inline int loom_iter_init(loom_iter *it, int nops,
                                 const loom_tensor *const *ops) {
  if (nops < 1 || nops > LOOM_ITER_MAX_OPS) return 1;
  const loom_tensor *shape = ops[0];
  it->nops = nops;
  it->rank = 0;
  for (int k = 0; k < nops; ++k) {
    if (ops[k]->rank != shape->rank && ops[k]->rank != 0) return 1;
    it->base[k] = (char *)ops[k]->data;
  }
  for (int32_t d = 0; d < shape->rank; ++d) {
    int64_t size = shape->sizes[d];
    if (size == 1) continue;
    int32_t r = it->rank;
    for (int k = 0; k < nops; ++k) {
      const loom_tensor *t = ops[k];
      int64_t es = loom_dtype_size(t->dtype);
      if (t->rank != 0 && t->sizes[d] != size) return 1;
      it->strides[k][r] = t->rank == 0 ? 0 : t->strides[d] * es;
    }
    /* Merge with the previous kept dim when, for every operand, stepping the
     * outer dim equals stepping `size` times the inner one. */
    int mergeable = r > 0;
    for (int k = 0; k < nops && mergeable; ++k)
      mergeable = it->strides[k][r - 1] == it->strides[k][r] * size;
    if (mergeable) {
      it->sizes[r - 1] *= size;
      for (int k = 0; k < nops; ++k) it->strides[k][r - 1] = it->strides[k][r];
    } else {
      it->sizes[r] = size;
      it->rank = r + 1;
    }
  }
  if (it->rank == 0) { /* a single element */
    it->rank = 1;
    it->sizes[0] = 1;
    for (int k = 0; k < nops; ++k) it->strides[k][0] = 0;
  }
  return 0;
}

/* Positions the iterator at linear element `begin` with `count` elements to
 * visit. */
static inline void loom_iter_seek(loom_iter *it, int64_t begin, int64_t count) {
  for (int32_t d = it->rank - 1; d >= 0; --d) {
    it->index[d] = begin % it->sizes[d];
    begin /= it->sizes[d];
  }
  it->remaining = count;
}

/* Produces the next run: ptrs[k] is operand k's address at the run start and
 * the run steps by it->strides[k][rank-1] bytes. Returns the run length, 0 at
 * the end. */
static inline int64_t loom_iter_next(loom_iter *it, char **ptrs) {
  if (it->remaining <= 0) return 0;
  int32_t last = it->rank - 1;
  int64_t n = it->sizes[last] - it->index[last];
  if (n > it->remaining) n = it->remaining;
  for (int k = 0; k < it->nops; ++k) {
    char *p = it->base[k];
    for (int32_t d = 0; d < it->rank; ++d) p += it->index[d] * it->strides[k][d];
    ptrs[k] = p;
  }
  it->remaining -= n;
  it->index[last] += n;
  for (int32_t d = last; d > 0 && it->index[d] == it->sizes[d]; --d) {
    it->index[d] = 0;
    it->index[d - 1] += 1;
  }
  return n;
}

/* As loom_iter_next, but at the start of a row (rank >= 2) takes every
 * whole row left in the current span of the next-to-last dim: returns the
 * row length n and in *rows their number (1 for a partial row); row r of
 * operand k starts at ptrs[k] + r * it->strides[k][rank - 2]. */
static inline int64_t loom_iter_next_rows(loom_iter *it, char **ptrs, int64_t *rows) {
  const int32_t last = it->rank - 1;
  *rows = 1;
  if (it->rank < 2 || it->remaining <= 0 || it->index[last] != 0 ||
      it->remaining < 2 * it->sizes[last])
    return loom_iter_next(it, ptrs);
  const int64_t n = it->sizes[last];
  int64_t r = it->sizes[last - 1] - it->index[last - 1];
  if (r > it->remaining / n) r = it->remaining / n;
  for (int k = 0; k < it->nops; ++k) {
    char *p = it->base[k];
    for (int32_t d = 0; d < it->rank; ++d) p += it->index[d] * it->strides[k][d];
    ptrs[k] = p;
  }
  it->remaining -= r * n;
  it->index[last - 1] += r;
  for (int32_t d = last - 1; d > 0 && it->index[d] == it->sizes[d]; --d) {
    it->index[d] = 0;
    it->index[d - 1] += 1;
  }
  *rows = r;
  return n;
}

#endif /* LOOM_KERNELS_ITER_H */
