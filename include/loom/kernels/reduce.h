/* loom/kernels/reduce.h — the reduction kernel's name and argument
 * contract: reductions over trailing dims, with a fixed summation order so
 * that results never depend on the thread count. Every driver provides
 * this name.
 *
 * "reduce.trailing_dims":
 *   tensors[0]  out: the values (rank k; data NULL when not wanted)
 *   tensors[1]  in:  rank k + r; its first k dims have out's sizes, the last
 *               r dims are reduced (the caller permutes the reduced dims last)
 *   tensors[2]  second output or data NULL: int64 indices (max/min/arg*) or
 *               the mean (var/std with mean)
 *   tensors[3]  scratch for two-stage reductions: float64, contiguous,
 *               numel(out) * parts * LOOM_REDUCE_STATE_DOUBLES (stages 1, 2)
 *   scalars[0].i op (loom_reduce_op)  [1].i r  [2].f parameter (correction
 *               for var/std, p for norm)  [3].i parts per output
 *               [4].i stage: 0 reduce whole, 1 partials into scratch,
 *               2 combine scratch in order into the outputs
 * Stage 0 and 2: the range is numel(out). Stage 1: the range is
 * numel(out) * parts, item w being part w / numel(out) of output
 * w % numel(out) (parts in order, each for every output), its state at
 * scratch[output * parts + part]; part j of an output covers reduced elements
 * [j * part, (j + 1) * part) in row-major order, where part is
 * loom_reduce_part(count) of the count reduced into each output, and parts
 * must be ceil(count / part).
 * Every output is reduced by one call in a fixed order either way.
 * Float inputs accumulate in double, integral ones in int64 (wrapping). */
#ifndef LOOM_KERNELS_REDUCE_CONTRACT_H
#define LOOM_KERNELS_REDUCE_CONTRACT_H

#include <stdint.h>

/* Elements per part when each output's `count` elements are reduced in
 * two stages: 64K, or a 32nd of count rounded up to 64K when that is more.
 * Every part starts a new stream, whose first lines come before the
 * prefetch runs ahead; long parts pay that less often (a sum of 16M
 * floats in parts of 512K: 31.2 against 28.9 GB/s in parts of 64K,
 * alternated in one process). Set by the shape alone. */
#define LOOM_REDUCE_PART_UNIT 65536
static inline int64_t loom_reduce_part(int64_t count) {
  const int64_t part = (count / 32 + LOOM_REDUCE_PART_UNIT - 1) / LOOM_REDUCE_PART_UNIT *
                       LOOM_REDUCE_PART_UNIT;
  return part > LOOM_REDUCE_PART_UNIT ? part : LOOM_REDUCE_PART_UNIT;
}
#define LOOM_REDUCE_STATE_DOUBLES 6

typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM, LOOM_REDUCE_NANSUM, LOOM_REDUCE_MEAN, LOOM_REDUCE_PROD,
  LOOM_REDUCE_MAX, LOOM_REDUCE_MIN, /* values and indices */
  LOOM_REDUCE_VAR, LOOM_REDUCE_STD, LOOM_REDUCE_NORM, LOOM_REDUCE_LOGSUMEXP,
  LOOM_REDUCE_ALL, LOOM_REDUCE_ANY,
  LOOM_REDUCE_OP_COUNT
} loom_reduce_op;

#endif /* LOOM_KERNELS_REDUCE_CONTRACT_H */
