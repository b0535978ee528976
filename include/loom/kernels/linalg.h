/* loom/kernels/linalg.h — the dense linear algebra kernels' names and
 * argument contracts: batched factorizations and solves of small and
 * medium matrices, one matrix per item of the launch range. Every driver
 * provides these names.
 *
 * Matrices are rank-3 descriptors (batch, rows, cols) stored column-major,
 * as LAPACK stores them: strides[1] == 1, strides[2] (the leading
 * dimension) >= rows, any batch stride (0 broadcasts a read-only operand).
 * The float operands of one launch share one dtype, float32 or float64.
 * Integer vectors (pivots, info) are rank-2 (batch, k) / rank-1 (batch)
 * int32, any strides. Launches cover [0, batch); each item factors or
 * solves one matrix alone, in a fixed order, so results never depend on
 * the thread count or the grain. Failures of the mathematics (a matrix
 * that is singular or not positive-definite) are not errors: they are
 * reported per matrix in `info`, as LAPACK reports them.
 *
 * "linalg.cholesky": A = L L^T in place on A's lower triangle (the strict
 *   upper triangle is zeroed). info[b] = 0, or the order k of the first
 *   leading minor that is not positive-definite (its factor is left as far
 *   as it got). tensors: [0] A (batch, n, n), [1] info (batch).
 *
 * "linalg.lu": P A = L U with partial pivoting (the first largest
 *   magnitude in the column), in place: L (unit diagonal, not stored)
 *   below, U on and above the diagonal. pivots[b][i] (1-based): row i was
 *   swapped with that row. info[b] = 0, or the first i (1-based) with
 *   U[i-1][i-1] == 0 (the factorization still completes).
 *   tensors: [0] A (batch, m, n), [1] pivots (batch, min(m, n)),
 *   [2] info (batch), optionally [3] a source (batch, m, n) of A's dtype
 *   and any strides, not overlapping A, copied into A by each item first
 *   (one pass over a row-major matrix, in cache for its factorization).
 *
 * "linalg.trsm": solves op(A) X = B (or, with scalars[3].i, X op(A) = B)
 *   in place of B (X overwrites it), A triangular. tensors: [0] A (batch,
 *   n, n), [1] B (batch, n, k) (from the right: (batch, k, n)). scalars:
 *   [0].i upper (A's upper triangle, else its lower), [1].i transpose
 *   (op(A) = A^T), [2].i unit (the diagonal is taken as ones and not read),
 *   [3].i right (optional, default 0). Only A's triangle is read. From the
 *   right the rows of B are independent: a launch may split them into
 *   items over a broadcast A (batch stride 0).
 *
 * "linalg.lu_solve": solves A X = B (or A^T X = B) in place of B from
 *   the output of "linalg.lu". Pivots outside [1, n] fail with
 *   LOOM_ERROR_INDEX_OUT_OF_RANGE. tensors: [0] LU (batch, n, n),
 *   [1] pivots (batch, n), [2] B (batch, n, k). scalars: [0].i transpose.
 *
 * "linalg.lu_perm": the permutation matrix P of A = P L U from the pivots
 *   of "linalg.lu" (P is written whole, any strides, any float dtype).
 *   tensors: [0] pivots (batch, k), [1] P (batch, m, m), k <= m.
 *
 * Float vectors (tau, eigenvalues, singular values) are rank-2 (batch, k)
 * of the matrices' dtype, any strides.
 *
 * "linalg.geqrf": A = Q R by Householder reflectors in place, as LAPACK's
 *   geqrf stores them: R on and above the diagonal, reflector i's tail
 *   below it in column i (its head is 1), H_i = I - tau[i] v v^T.
 *   tensors: [0] A (batch, m, n), [1] tau (batch, min(m, n)).
 *
 * "linalg.orgqr": the first n columns of H_0 ... H_{k-1} in place of the
 *   reflectors (LAPACK's orgqr). tensors: [0] A (batch, m, n), n <= m,
 *   [1] tau (batch, k), k <= n.
 *
 * "linalg.ormqr": C = op(Q) C (left) or C op(Q) (right), op(Q) = Q or Q^T,
 *   Q = H_0 ... H_{k-1} from geqrf's reflectors. tensors: [0] V (batch,
 *   m if left else n, >= k), [1] tau (batch, k), [2] C (batch, m, n).
 *   scalars: [0].i left, [1].i transpose.
 *
 * "linalg.eigh": eigenvalues (ascending) and, when V is given (data not
 *   NULL), orthonormal eigenvectors (V's columns) of the symmetric A, of
 *   which only the upper (scalars[0].i) or lower triangle is read; A is
 *   destroyed. Cyclic Jacobi in a fixed rotation order: info[b] = 0, or the
 *   number of sweeps made without converging. tensors: [0] A (batch, n, n),
 *   [1] w (batch, n), [2] V (batch, n, n) or absent, [3] info (batch).
 *
 * "linalg.svd": A = U diag(s) V^T for m >= n, A given in U's first n
 *   columns; s descending. With V given: U's columns orthonormal, the ones
 *   beyond n (U (batch, m, m)) and those of negligible singular values
 *   completed to an orthonormal basis. One-sided Jacobi in a fixed order:
 *   info[b] = 0, or the sweeps made without converging. tensors: [0] U
 *   (batch, m, n or m), [1] s (batch, n), [2] V (batch, n, n) or absent,
 *   [3] info (batch). */
#ifndef LOOM_KERNELS_LINALG_CONTRACT_H
#define LOOM_KERNELS_LINALG_CONTRACT_H

#endif /* LOOM_KERNELS_LINALG_CONTRACT_H */
