/* kernels/gemm/gemm_f64.c — float64 matrix products ("gemm.f64"; contract
 * in loom/kernels/gemm.h): C = alpha * A @ B + beta * Cin over rank-4
 * views, a row of C per launch item.
 *
 * Each element's products are added in k order into a double, so the bits
 * depend on nothing but the operands (not on the chunking or the thread
 * count). A row is computed a block of columns at a time: the block's sums
 * stay in a stack array while k walks B's rows, an inner loop over
 * consecutive columns the compiler vectorizes where B's rows are along
 * memory. */
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* Columns of C summed at once (a 4 KiB stack array). */
enum { F64_BLOCK = 512 };

static int f64_view_ok(const loom_tensor *t) { return t->rank == 4 && t->dtype == LOOM_FLOAT64; }

int loom_gemm_f64_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.f64: needs C, A, B, alpha and beta");
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2];
  const double alpha = args->scalars[0].f, beta = args->scalars[1].f;
  const loom_tensor *cin = args->num_tensors > 3 && beta != 0.0 ? &args->tensors[3] : NULL;
  if (!f64_view_ok(c) || !f64_view_ok(a) || !f64_view_ok(b) || (cin && !f64_view_ok(cin)))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.f64: operands must be rank-4 float64");
  const int64_t m = c->sizes[2], n = c->sizes[3], k = a->sizes[3], b2 = c->sizes[1];
  if (a->sizes[2] != m || b->sizes[2] != k || b->sizes[3] != n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.f64: [m, k] @ [k, n] sizes differ");
  if (m == 0 || b2 == 0) return LOOM_OK;
  const int64_t bs = b->strides[3];
  double acc[F64_BLOCK];
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i = r % m, mat = r / m, i1 = mat / b2, i2 = mat % b2;
    for (int64_t j0 = 0; j0 < n; j0 += F64_BLOCK) {
      const int64_t nb = n - j0 < F64_BLOCK ? n - j0 : F64_BLOCK;
      memset(acc, 0, sizeof(double) * (size_t)nb);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double x = *(const double *)loom_gemm_elem(a, i1, i2, i, kk);
        const double *brow = (const double *)loom_gemm_elem(b, i1, i2, kk, j0);
        if (bs == 1)
          for (int64_t j = 0; j < nb; ++j) acc[j] += x * brow[j];
        else
          for (int64_t j = 0; j < nb; ++j) acc[j] += x * brow[j * bs];
      }
      for (int64_t j = 0; j < nb; ++j) {
        double v = alpha * acc[j];
        if (cin) v += beta * *(const double *)loom_gemm_elem(cin, i1, i2, i, j0 + j);
        *(double *)loom_gemm_elem(c, i1, i2, i, j0 + j) = v;
      }
    }
  }
  return LOOM_OK;
}
