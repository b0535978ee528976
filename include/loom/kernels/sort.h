/* loom/kernels/sort.h — the sort kernel's name and argument contract:
 * sorting along one dim, and its first k (topk). Every driver provides
 * this name.
 *
 * "sort.along_dim": tensors [0] values, [1] indices (int64), [2] input,
 * [3] workspace (uint8, LOOM_SORT_WORKSPACE_PER_ELEMENT * n bytes per
 * chunk of slices); rank >= 1; values and indices have the input's shape
 * with k in place of n = input.size(dim).
 * scalars [0].i dim, [1].i descending (topk: largest), [2].i k (n unless
 * topk or kthvalue; 1 for the other picks), [3].i slices per chunk (the launch grain, which picks each
 * chunk's workspace), [4].i mode (loom_sort_mode). range: the number of
 * slices along dim (numel / n).
 *
 * NaN sorts above every number (last ascending, first descending); -0.0
 * equals 0.0. Floating keys compare as double and integer keys as int64,
 * both exact. Equal keys keep their order in the stable sort and land
 * where the CPU backend's algorithms put them in the other modes. */
#ifndef LOOM_KERNELS_SORT_CONTRACT_H
#define LOOM_KERNELS_SORT_CONTRACT_H

enum { LOOM_SORT_WORKSPACE_PER_ELEMENT = 32 };

typedef enum loom_sort_mode {
  LOOM_SORT_STABLE,        /* merge sort */
  LOOM_SORT_CPU_ORDER,     /* the CPU's unstable sort (introsort) */
  LOOM_SORT_TOPK_SORTED,   /* the CPU's topk, sorted=True */
  LOOM_SORT_TOPK_UNSORTED, /* the CPU's topk, sorted=False */
  /* One element per slice (values and indices have size 1 along dim): */
  LOOM_SORT_KTHVALUE,      /* the k-th smallest (k from 1), as the CPU picks it */
  LOOM_SORT_MEDIAN,        /* the lower median; the first NaN if there is one */
  LOOM_SORT_NANMEDIAN,     /* the lower median of the numbers */
  LOOM_SORT_MODE,          /* the most frequent value, as the CPU picks it */
} loom_sort_mode;

#endif /* LOOM_KERNELS_SORT_CONTRACT_H */
