/* loom/kernels/index.h — the kernel of indexing along one dim, its name and
 * argument contract: index_select, gather, scatter (assign, add, multiply,
 * amax, amin), index_add/index_copy/index_fill, and the embedding lookup.
 * Every driver provides this name.
 *
 * "index.along_dim": scalars[0].i op (loom_index_op), [1].i dim,
 * [2] value (.f for floating dst, .i for integral; scatter/fill with a
 * scalar, index_add's alpha), [3].i reduction (loom_index_reduce).
 *   SELECT:  tensors out, self, index (1-d); range numel(out)
 *   GATHER:  tensors out, self, index (out's sizes); range numel(out)
 *   SCATTER: tensors self (updated in place), index, src (data NULL: the
 *            scalar value); range numel(index) / index.size(dim)
 *   INDEX_ADD / INDEX_COPY: tensors self, index (1-d), source;
 *            range numel(source) / source.size(dim). INDEX_ADD with a
 *            reduction other than ASSIGN applies it (index_reduce)
 *            instead of adding alpha * source.
 *   INDEX_FILL: tensors self, index (1-d); range numel(self) / self.size(dim)
 * Writes that may collide (scatter, index_add...) are grouped so that one
 * call owns every write to a destination slice and applies them in index
 * order: results are deterministic. An index out of range returns
 * LOOM_ERROR_INVALID_ARGUMENT. Arithmetic runs in double or int64. */
#ifndef LOOM_KERNELS_INDEX_CONTRACT_H
#define LOOM_KERNELS_INDEX_CONTRACT_H

typedef enum loom_index_op {
  LOOM_INDEX_SELECT, LOOM_INDEX_GATHER, LOOM_INDEX_SCATTER, LOOM_INDEX_ADD,
  LOOM_INDEX_COPY, LOOM_INDEX_FILL,
} loom_index_op;

typedef enum loom_index_reduce {
  LOOM_INDEX_ASSIGN, LOOM_INDEX_SUM, LOOM_INDEX_PROD, LOOM_INDEX_AMAX,
  LOOM_INDEX_AMIN,
} loom_index_reduce;

#endif /* LOOM_KERNELS_INDEX_CONTRACT_H */
