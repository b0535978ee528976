/* loom/kernels/reduce_complex.h — the complex reductions' and scans' names
 * and argument contract (complex64 / complex128 inputs). Every driver
 * provides these names.
 *
 * "reduce.complex": tensors[0] out (rank k), tensors[1] in (rank k + r: its
 *   first k dims have out's sizes, the last r dims are reduced; the caller
 *   permutes them last). scalars[0].i op (loom_reduce_complex_op),
 *   [1].i r. The range is numel(out); each output is reduced by one call,
 *   its elements in row-major order.
 *   PROD: in and out complex (either width); the product accumulates in
 *     complex double, (a c - b d, a d + b c) per factor, rounded once into
 *     out; the product of no elements is 1.
 *   ALL, ANY: out bool; an element counts as true when either part is
 *     nonzero (NaN included); all of nothing is true, any of nothing false.
 *
 * "scan.complex_rows": tensors[0] out, tensors[1] in, both complex (either
 *   width) of the same sizes. scalars[0].i op (CUMSUM or CUMPROD),
 *   [1].i dim. The range is the number of rows (numel / size(dim)); each row
 *   is scanned in order by one call, accumulating in complex double (the
 *   CPU's accumulation type of complex64 and complex128) and rounding each
 *   prefix into out, so complex64 results are the CPU's bits. */
#ifndef LOOM_KERNELS_REDUCE_COMPLEX_CONTRACT_H
#define LOOM_KERNELS_REDUCE_COMPLEX_CONTRACT_H

typedef enum loom_reduce_complex_op {
  LOOM_REDUCE_COMPLEX_PROD = 0,
  LOOM_REDUCE_COMPLEX_ALL = 1,
  LOOM_REDUCE_COMPLEX_ANY = 2,
  LOOM_REDUCE_COMPLEX_CUMSUM = 3,
  LOOM_REDUCE_COMPLEX_CUMPROD = 4,
  LOOM_REDUCE_COMPLEX_OP_COUNT = 5,
} loom_reduce_complex_op;

#endif /* LOOM_KERNELS_REDUCE_COMPLEX_CONTRACT_H */
