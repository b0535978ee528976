/* kernels/gemm/gemm_int.c — integer and bool matrix products ("gemm.int";
 * contract in loom/kernels/gemm.h): C = alpha * A @ B + beta * Cin over
 * rank-4 views, a row of C per launch item.
 *
 * Integers: every product and sum is taken modulo 2^32 (dtypes of at most
 * 32 bits) or 2^64 (int64) in unsigned arithmetic and the result truncated
 * to the dtype's width, which is the wrap-around the dtype's own arithmetic
 * gives in any order: the bits depend on nothing but the operands.
 * Bool: C = (alpha and OR_k(A[i,k] and B[k,j])) or (beta and Cin).
 *
 * A row is computed a block of columns at a time: the block's sums stay in
 * a stack array while k walks B's rows, an inner loop over consecutive
 * columns the compiler vectorizes where B's rows are along memory. */
#include <stdint.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* Columns of C summed at once (at most a 4 KiB stack array). */
enum { INT_BLOCK = 512 };

typedef struct int_product {
  const loom_tensor *c, *a, *b, *cin;
  uint64_t alpha, beta;
} int_product;

/* The row kernels, one per dtype: T the stored type, W the unsigned type the
 * products and sums wrap in, S the unsigned type of T's width (the store). */
#define INT_ROWS(NAME, T, W, S)                                                              \
  static void NAME(const int_product *p, int64_t begin, int64_t end) {                      \
    const loom_tensor *c = p->c, *a = p->a, *b = p->b, *cin = p->cin;                      \
    const int64_t m = c->sizes[2], n = c->sizes[3], k = a->sizes[3], b2 = c->sizes[1];      \
    const int64_t bs = b->strides[3];                                                       \
    const W alpha = (W)p->alpha, beta = (W)p->beta;                                         \
    W acc[INT_BLOCK];                                                                       \
    for (int64_t r = begin; r < end; ++r) {                                                 \
      const int64_t i = r % m, mat = r / m, i1 = mat / b2, i2 = mat % b2;                   \
      for (int64_t j0 = 0; j0 < n; j0 += INT_BLOCK) {                                       \
        const int64_t nb = n - j0 < INT_BLOCK ? n - j0 : INT_BLOCK;                         \
        memset(acc, 0, sizeof(W) * (size_t)nb);                                             \
        for (int64_t kk = 0; kk < k; ++kk) {                                                \
          const W x = (W)(int64_t) * (const T *)loom_gemm_elem(a, i1, i2, i, kk);           \
          const T *brow = (const T *)loom_gemm_elem(b, i1, i2, kk, j0);                     \
          if (bs == 1)                                                                      \
            for (int64_t j = 0; j < nb; ++j) acc[j] += x * (W)(int64_t)brow[j];             \
          else                                                                              \
            for (int64_t j = 0; j < nb; ++j) acc[j] += x * (W)(int64_t)brow[j * bs];        \
        }                                                                                   \
        for (int64_t j = 0; j < nb; ++j) {                                                  \
          W v = alpha * acc[j];                                                             \
          if (cin) v += beta * (W)(int64_t) * (const T *)loom_gemm_elem(cin, i1, i2, i, j0 + j); \
          *(S *)loom_gemm_elem(c, i1, i2, i, j0 + j) = (S)v;                                \
        }                                                                                   \
      }                                                                                     \
    }                                                                                       \
  }

INT_ROWS(rows_i8, int8_t, uint32_t, uint8_t)
INT_ROWS(rows_u8, uint8_t, uint32_t, uint8_t)
INT_ROWS(rows_i16, int16_t, uint32_t, uint16_t)
INT_ROWS(rows_i32, int32_t, uint32_t, uint32_t)
INT_ROWS(rows_i64, int64_t, uint64_t, uint64_t)

static void rows_bool(const int_product *p, int64_t begin, int64_t end) {
  const loom_tensor *c = p->c, *a = p->a, *b = p->b, *cin = p->cin;
  const int64_t m = c->sizes[2], n = c->sizes[3], k = a->sizes[3], b2 = c->sizes[1];
  const int64_t bs = b->strides[3];
  const uint8_t alpha = p->alpha != 0, beta = p->beta != 0;
  uint8_t acc[INT_BLOCK];
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i = r % m, mat = r / m, i1 = mat / b2, i2 = mat % b2;
    for (int64_t j0 = 0; j0 < n; j0 += INT_BLOCK) {
      const int64_t nb = n - j0 < INT_BLOCK ? n - j0 : INT_BLOCK;
      memset(acc, 0, (size_t)nb);
      for (int64_t kk = 0; kk < k; ++kk) {
        if (*(const uint8_t *)loom_gemm_elem(a, i1, i2, i, kk) == 0) continue;
        const uint8_t *brow = (const uint8_t *)loom_gemm_elem(b, i1, i2, kk, j0);
        for (int64_t j = 0; j < nb; ++j) acc[j] |= brow[j * bs] != 0;
      }
      for (int64_t j = 0; j < nb; ++j) {
        uint8_t v = alpha && acc[j];
        if (cin && beta && *(const uint8_t *)loom_gemm_elem(cin, i1, i2, i, j0 + j)) v = 1;
        *(uint8_t *)loom_gemm_elem(c, i1, i2, i, j0 + j) = v;
      }
    }
  }
}

static int int_dtype(int32_t d) {
  return d == LOOM_INT8 || d == LOOM_UINT8 || d == LOOM_INT16 || d == LOOM_INT32 ||
         d == LOOM_INT64 || d == LOOM_BOOL;
}

static int view_ok(const loom_tensor *t, int32_t dtype) {
  return t->rank == 4 && t->dtype == dtype;
}

int loom_gemm_int_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.int: needs C, A, B, alpha and beta");
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2];
  const int64_t beta = args->scalars[1].i;
  const loom_tensor *cin = args->num_tensors > 3 && beta != 0 ? &args->tensors[3] : NULL;
  const int32_t dt = c->dtype;
  if (!int_dtype(dt) || !view_ok(c, dt) || !view_ok(a, dt) || !view_ok(b, dt) ||
      (cin && !view_ok(cin, dt)))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "gemm.int: operands must be rank-4 views of one integer or bool dtype");
  const int64_t m = c->sizes[2], n = c->sizes[3], k = a->sizes[3];
  if (a->sizes[2] != m || b->sizes[2] != k || b->sizes[3] != n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.int: [m, k] @ [k, n] sizes differ");
  if (m == 0 || c->sizes[1] == 0 || n == 0) return LOOM_OK;
  const int_product p = {c, a, b, cin, (uint64_t)args->scalars[0].i, (uint64_t)beta};
  switch (dt) {
    case LOOM_INT8: rows_i8(&p, begin, end); break;
    case LOOM_UINT8: rows_u8(&p, begin, end); break;
    case LOOM_INT16: rows_i16(&p, begin, end); break;
    case LOOM_INT32: rows_i32(&p, begin, end); break;
    case LOOM_INT64: rows_i64(&p, begin, end); break;
    default: rows_bool(&p, begin, end); break;
  }
  return LOOM_OK;
}
