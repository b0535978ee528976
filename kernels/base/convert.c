#include "kernels/base/convert.h"

#include <string.h>

#include "kernels/base/dtype.h"

/* Loads into int64 (integral sources). */
static int load_i64(int64_t *out, const char *src, int32_t dtype,
                    int64_t stride, int64_t n) {
  switch (dtype) {
#define LOAD(T)                                                         \
  for (int64_t i = 0; i < n; ++i) out[i] = *(const T *)(src + i * stride); \
  return 0;
    case LOOM_INT8: LOAD(int8_t)
    case LOOM_INT16: LOAD(int16_t)
    case LOOM_INT32: LOAD(int32_t)
    case LOOM_INT64: LOAD(int64_t)
    case LOOM_UINT8: LOAD(uint8_t)
    case LOOM_BOOL:
      for (int64_t i = 0; i < n; ++i) out[i] = *(const uint8_t *)(src + i * stride) != 0;
      return 0;
#undef LOAD
    default: return 1;
  }
}

/* Loads into double pairs (floating and complex sources). */
static int load_f64(double *re, double *im, const char *src, int32_t dtype,
                    int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) im[i] = 0.0;
  switch (dtype) {
    case LOOM_FLOAT32:
      for (int64_t i = 0; i < n; ++i) re[i] = *(const float *)(src + i * stride);
      return 0;
    case LOOM_FLOAT64:
      for (int64_t i = 0; i < n; ++i) re[i] = *(const double *)(src + i * stride);
      return 0;
    case LOOM_FLOAT16:
      for (int64_t i = 0; i < n; ++i) re[i] = loom_f16_to_f32(*(const uint16_t *)(src + i * stride));
      return 0;
    case LOOM_BFLOAT16:
      for (int64_t i = 0; i < n; ++i) re[i] = loom_bf16_to_f32(*(const uint16_t *)(src + i * stride));
      return 0;
    case LOOM_COMPLEX64:
      for (int64_t i = 0; i < n; ++i) {
        const float *c = (const float *)(src + i * stride);
        re[i] = c[0];
        im[i] = c[1];
      }
      return 0;
    case LOOM_COMPLEX128:
      for (int64_t i = 0; i < n; ++i) {
        const double *c = (const double *)(src + i * stride);
        re[i] = c[0];
        im[i] = c[1];
      }
      return 0;
    default: return 1;
  }
}

static int store_from_i64(char *dst, int32_t dtype, int64_t stride,
                          const int64_t *v, int64_t n) {
  switch (dtype) {
#define STORE(T)                                                       \
  for (int64_t i = 0; i < n; ++i) *(T *)(dst + i * stride) = (T)v[i]; \
  return 0;
    case LOOM_INT8: STORE(int8_t)
    case LOOM_INT16: STORE(int16_t)
    case LOOM_INT32: STORE(int32_t)
    case LOOM_INT64: STORE(int64_t)
    case LOOM_UINT8: STORE(uint8_t)
    case LOOM_FLOAT32: STORE(float)
    case LOOM_FLOAT64: STORE(double)
#undef STORE
    case LOOM_BOOL:
      for (int64_t i = 0; i < n; ++i) *(uint8_t *)(dst + i * stride) = v[i] != 0;
      return 0;
    case LOOM_FLOAT16:
      for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_f16((float)v[i]);
      return 0;
    case LOOM_BFLOAT16:
      for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_bf16((float)v[i]);
      return 0;
    case LOOM_COMPLEX64:
      for (int64_t i = 0; i < n; ++i) {
        float *c = (float *)(dst + i * stride);
        c[0] = (float)v[i];
        c[1] = 0.0f;
      }
      return 0;
    case LOOM_COMPLEX128:
      for (int64_t i = 0; i < n; ++i) {
        double *c = (double *)(dst + i * stride);
        c[0] = (double)v[i];
        c[1] = 0.0;
      }
      return 0;
    default: return 1;
  }
}

static int store_from_f64(char *dst, int32_t dtype, int64_t stride,
                          const double *re, const double *im, int64_t n) {
  switch (dtype) {
    /* float -> integer goes through int64, as c10's casts do for uint8. */
#define STORE_INT(T)                                                            \
  for (int64_t i = 0; i < n; ++i) *(T *)(dst + i * stride) = (T)(int64_t)re[i]; \
  return 0;
    case LOOM_INT8: STORE_INT(int8_t)
    case LOOM_INT16: STORE_INT(int16_t)
    case LOOM_INT32: STORE_INT(int32_t)
    case LOOM_UINT8: STORE_INT(uint8_t)
#undef STORE_INT
    case LOOM_INT64:
      for (int64_t i = 0; i < n; ++i) *(int64_t *)(dst + i * stride) = (int64_t)re[i];
      return 0;
    case LOOM_BOOL:
      for (int64_t i = 0; i < n; ++i) *(uint8_t *)(dst + i * stride) = re[i] != 0.0 || im[i] != 0.0;
      return 0;
    case LOOM_FLOAT32:
      for (int64_t i = 0; i < n; ++i) *(float *)(dst + i * stride) = (float)re[i];
      return 0;
    case LOOM_FLOAT64:
      for (int64_t i = 0; i < n; ++i) *(double *)(dst + i * stride) = re[i];
      return 0;
    case LOOM_FLOAT16:
      for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_f16((float)re[i]);
      return 0;
    case LOOM_BFLOAT16:
      for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_bf16((float)re[i]);
      return 0;
    case LOOM_COMPLEX64:
      for (int64_t i = 0; i < n; ++i) {
        float *c = (float *)(dst + i * stride);
        c[0] = (float)re[i];
        c[1] = (float)im[i];
      }
      return 0;
    case LOOM_COMPLEX128:
      for (int64_t i = 0; i < n; ++i) {
        double *c = (double *)(dst + i * stride);
        c[0] = re[i];
        c[1] = im[i];
      }
      return 0;
    default: return 1;
  }
}

int loom_convert_run(char *dst, int32_t dst_dtype, int64_t dst_stride,
                     const char *src, int32_t src_dtype, int64_t src_stride,
                     int64_t n) {
  if (loom_dtype_is_integral(src_dtype)) {
    int64_t v[LOOM_CONVERT_BLOCK];
    if (load_i64(v, src, src_dtype, src_stride, n)) return 1;
    return store_from_i64(dst, dst_dtype, dst_stride, v, n);
  }
  double re[LOOM_CONVERT_BLOCK], im[LOOM_CONVERT_BLOCK];
  if (load_f64(re, im, src, src_dtype, src_stride, n)) return 1;
  return store_from_f64(dst, dst_dtype, dst_stride, re, im, n);
}

#define LOOM_CAST_NAME loom_convert_contig
#include "kernels/base/convert_cast.inc"
