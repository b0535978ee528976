/* kernels/nn/nn_util.h — element access shared by the neural-network kernels
 * (softmax, norms, losses, embedding, attention, optimizers).
 *
 * These kernels read and write any float dtype through one pair of
 * functions and do their arithmetic in double: that is at least as exact as
 * the fp32 accumulation PyTorch uses for fp32/bf16/fp16, exact enough for
 * fp64, and the order of every sum is fixed by the element order alone, so
 * results never depend on the thread count or the chunking. Internal header:
 * not part of the public C contract. */
#ifndef LOOM_KERNELS_NN_UTIL_H
#define LOOM_KERNELS_NN_UTIL_H

#include <stdint.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "loom/kernel_abi.h"

/* Element `i` (in elements from `base`) as a double. Integer dtypes are
 * accepted too, for targets, indices and masks. */
static inline double loom_nn_load(const void *base, int32_t dtype, int64_t i) {
  switch (dtype) {
    case LOOM_FLOAT32: return ((const float *)base)[i];
    case LOOM_FLOAT64: return ((const double *)base)[i];
    case LOOM_FLOAT16: return loom_f16_to_f32(((const uint16_t *)base)[i]);
    case LOOM_BFLOAT16: return loom_bf16_to_f32(((const uint16_t *)base)[i]);
    case LOOM_INT8: return ((const int8_t *)base)[i];
    case LOOM_INT16: return ((const int16_t *)base)[i];
    case LOOM_INT32: return ((const int32_t *)base)[i];
    case LOOM_INT64: return (double)((const int64_t *)base)[i];
    case LOOM_UINT8: return ((const uint8_t *)base)[i];
    case LOOM_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return 0.0;
  }
}

static inline void loom_nn_store(void *base, int32_t dtype, int64_t i,
                                 double v) {
  switch (dtype) {
    case LOOM_FLOAT32: ((float *)base)[i] = (float)v; break;
    case LOOM_FLOAT64: ((double *)base)[i] = v; break;
    case LOOM_FLOAT16: ((uint16_t *)base)[i] = loom_f32_to_f16((float)v); break;
    case LOOM_BFLOAT16: ((uint16_t *)base)[i] = loom_f32_to_bf16((float)v); break;
    default: break;
  }
}

/* An integer element (targets, indices). */
static inline int64_t loom_nn_load_index(const void *base, int32_t dtype,
                                         int64_t i) {
  switch (dtype) {
    case LOOM_INT64: return ((const int64_t *)base)[i];
    case LOOM_INT32: return ((const int32_t *)base)[i];
    case LOOM_INT16: return ((const int16_t *)base)[i];
    case LOOM_INT8: return ((const int8_t *)base)[i];
    case LOOM_UINT8: return ((const uint8_t *)base)[i];
    default: return (int64_t)loom_nn_load(base, dtype, i);
  }
}

static inline int loom_nn_is_float(int32_t dtype) {
  return dtype == LOOM_FLOAT32 || dtype == LOOM_FLOAT64 ||
         dtype == LOOM_FLOAT16 || dtype == LOOM_BFLOAT16;
}

/* n contiguous elements from element `off` of `base` as floats / back into
 * `dtype`, for fp32, bf16 and fp16 (the types the float fast paths take). */
static inline void loom_nn_load_row_f32(float *dst, const void *base,
                                        int32_t dtype, int64_t off, int64_t n) {
  if (dtype == LOOM_FLOAT32) {
    memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float));
  } else if (dtype == LOOM_BFLOAT16) {
    const uint16_t *src = (const uint16_t *)base + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = loom_bf16_to_f32(src[i]);
  } else {
    const uint16_t *src = (const uint16_t *)base + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = loom_f16_to_f32(src[i]);
  }
}

static inline void loom_nn_store_row_f32(void *base, int32_t dtype,
                                         int64_t off, const float *src,
                                         int64_t n) {
  if (dtype == LOOM_FLOAT32) {
    memcpy((float *)base + off, src, (size_t)n * sizeof(float));
  } else if (dtype == LOOM_BFLOAT16) {
    uint16_t *dst = (uint16_t *)base + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = loom_f32_to_bf16(src[i]);
  } else {
    uint16_t *dst = (uint16_t *)base + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = loom_f32_to_f16(src[i]);
  }
}

static inline int loom_nn_is_f32_like(int32_t dtype) {
  return dtype == LOOM_FLOAT32 || dtype == LOOM_BFLOAT16 || dtype == LOOM_FLOAT16;
}

/* Element offset (in elements) of the `linear`-th element of `t`, counting
 * in row-major order over every dim except `skip` (-1: over all dims). This
 * is how a row kernel finds the start of row `linear` along dim `skip`. */
static inline int64_t loom_nn_offset(const loom_tensor *t, int64_t linear,
                                     int32_t skip) {
  int64_t off = 0;
  for (int32_t d = t->rank - 1; d >= 0; --d) {
    if (d == skip) continue;
    int64_t size = t->sizes[d];
    if (size <= 0) return 0;
    off += (linear % size) * t->strides[d];
    linear /= size;
  }
  return off;
}

/* Whether dims [first, rank) of t lie densely in row-major order, so that
 * the element at linear index i over them is at offset i (size-1 dims may
 * have any stride). first 0 asks it of the whole tensor. */
static inline int loom_nn_dense_from(const loom_tensor *t, int32_t first) {
  int64_t expect = 1;
  for (int32_t d = t->rank - 1; d >= first; --d) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return 0;
    expect *= t->sizes[d];
  }
  return 1;
}

/* Product of sizes, 1 for rank 0. */
static inline int64_t loom_nn_numel(const loom_tensor *t) {
  return loom_tensor_numel(t);
}

#endif /* LOOM_KERNELS_NN_UTIL_H */
