/* kernels/gemm/gemv.c — matrix-vector products (see gemv.h). Rows come in
 * blocks of LOOM_GEMV_ROWS: a row-major A is read row by row as dot
 * products against the vector, any other A column by column as axpys
 * into the block's accumulators. The vector and non-fp32 rows are staged
 * as fp32 in chunks of LOOM_GEMV_CHUNK. */
#include "kernels/gemm/gemv.h"

#include <string.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/base/lanes.h"
#include "loom/status.h"
#include "base/cpu.h"

#include "kernels/gemm/gemv_body.inc"

void loom_gemv_dot_f32_avx512(float *acc, const float *a, const float *x, int64_t n);
void loom_gemv_axpy_f32_avx512(float *y, const float *a, float xk, int64_t n);
void loom_gemv_axpy4_f32_avx512(float *y, const float *a0, const float *a1, const float *a2,
                                const float *a3, const float *x, int64_t n);

#define LOOM_GEMV_CHUNK 1024 /* a multiple of the 16 dot lanes */

/* n elements, `stride` apart, from element `off` of base, as fp32. */
static const float *gv_stage(float *buf, const char *base, int32_t dtype, int64_t off,
                             int64_t stride, int64_t n) {
  if (dtype == LOOM_FLOAT32 && stride == 1) return (const float *)base + off;
  for (int64_t i = 0; i < n; ++i) buf[i] = loom_gemm_load(base, dtype, off + i * stride);
  return buf;
}

static int64_t gv_offset(const loom_tensor *t, int64_t i1, int64_t i2) {
  return i1 * t->strides[0] + i2 * t->strides[1];
}

int loom_gemv_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2];
  const float alpha = (float)args->scalars[0].f, beta = (float)args->scalars[1].f;
  const loom_tensor *cin = args->num_tensors > 3 && beta != 0.0f ? &args->tensors[3] : NULL;
  if (c->rank != 4 || a->rank != 4 || b->rank != 4 || (cin && cin->rank != 4) ||
      !loom_gemm_operand_dtype(a->dtype) || b->dtype != a->dtype || !loom_gemm_operand_dtype(c->dtype) ||
      (cin && !loom_gemm_operand_dtype(cin->dtype)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t b2 = c->sizes[1], m = c->sizes[2], k = a->sizes[3];
  if (c->sizes[3] != 1 || a->sizes[2] != m || b->sizes[2] != k || b->sizes[3] != 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int vec = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const int64_t blocks = (m + LOOM_GEMV_ROWS - 1) / LOOM_GEMV_ROWS;
  const int row_major = a->strides[3] == 1 || k == 1;
  float xbuf[LOOM_GEMV_CHUNK], abuf[LOOM_GEMV_CHUNK]; /* >= LOOM_GEMV_ROWS */
  _Static_assert(LOOM_GEMV_CHUNK >= LOOM_GEMV_ROWS, "a column block stages in abuf");
  float acc[LOOM_GEMV_ROWS][16], y[LOOM_GEMV_ROWS];

  for (int64_t u = begin; u < end; ++u) {
    const int64_t blk = u % blocks, mat = u / blocks;
    const int64_t i1 = mat / b2, i2 = mat % b2;
    const int64_t r0 = blk * LOOM_GEMV_ROWS;
    const int64_t rows = m - r0 < LOOM_GEMV_ROWS ? m - r0 : LOOM_GEMV_ROWS;
    const char *ad = (const char *)a->data, *bd = (const char *)b->data;
    const int64_t a0 = gv_offset(a, i1, i2) + r0 * a->strides[2], b0 = gv_offset(b, i1, i2);
    if (row_major) {
      memset(acc, 0, sizeof acc);
      for (int64_t k0 = 0; k0 < k; k0 += LOOM_GEMV_CHUNK) {
        const int64_t kn = k - k0 < LOOM_GEMV_CHUNK ? k - k0 : LOOM_GEMV_CHUNK;
        const float *x = gv_stage(xbuf, bd, b->dtype, b0 + k0 * b->strides[2], b->strides[2], kn);
        for (int64_t i = 0; i < rows; ++i) {
          const float *row = gv_stage(abuf, ad, a->dtype, a0 + i * a->strides[2] + k0, 1, kn);
          if (vec) loom_gemv_dot_f32_avx512(acc[i], row, x, kn);
          else loom_gemv_dot_f32(acc[i], row, x, kn);
        }
      }
      for (int64_t i = 0; i < rows; ++i) y[i] = loom_lanes16_fold_f32(acc[i]);
    } else {
      memset(y, 0, sizeof y);
      int64_t kk = 0;
      if (a->dtype == LOOM_FLOAT32 && a->strides[2] == 1) {
        /* Four columns per pass over the block's accumulators. */
        const float *ab = (const float *)ad + a0;
        const int64_t sk = a->strides[3];
        for (; kk + 4 <= k; kk += 4) {
          float x4[4];
          for (int q = 0; q < 4; ++q) x4[q] = loom_gemm_load(bd, b->dtype, b0 + (kk + q) * b->strides[2]);
          const float *c0 = ab + kk * sk;
          if (vec) loom_gemv_axpy4_f32_avx512(y, c0, c0 + sk, c0 + 2 * sk, c0 + 3 * sk, x4, rows);
          else loom_gemv_axpy4_f32(y, c0, c0 + sk, c0 + 2 * sk, c0 + 3 * sk, x4, rows);
        }
      }
      for (; kk < k; ++kk) {
        const float xk = loom_gemm_load(bd, b->dtype, b0 + kk * b->strides[2]);
        const float *col = gv_stage(abuf, ad, a->dtype, a0 + kk * a->strides[3], a->strides[2], rows);
        if (vec) loom_gemv_axpy_f32_avx512(y, col, xk, rows);
        else loom_gemv_axpy_f32(y, col, xk, rows);
      }
    }
    char *cd = (char *)c->data;
    const int64_t c0 = gv_offset(c, i1, i2) + r0 * c->strides[2];
    for (int64_t i = 0; i < rows; ++i) {
      float v = alpha * y[i];
      if (cin) v += beta * loom_gemm_load((const char *)cin->data, cin->dtype,
                                   gv_offset(cin, i1, i2) + (r0 + i) * cin->strides[2]);
      loom_gemm_store(cd, c->dtype, c0 + i * c->strides[2], v);
    }
  }
  return 0;
}
