/* "ccl.reduce": the collectives' reductions (loom/kernels/ccl.h). Each
 * chunk runs in blocks: the block of input 0 is loaded into an accumulator
 * array of the accumulation type, every further input is combined into it
 * in rank order, and the block is rounded to dst once. Every element sees
 * the same operations in the same order whatever the chunking, so results
 * do not depend on the thread count. */
#include <stdint.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/registry.h"
#include "loom/kernel_abi.h"
#include "loom/kernels/ccl.h"
#include "loom/status.h"

#define BLOCK 256

/* ---- float16, bfloat16, float32: float accumulators ------------------------ */

static void load_f32(float *acc, const void *src, int32_t dtype, int64_t n) {
  if (dtype == LOOM_FLOAT32) {
    memcpy(acc, src, (size_t)n * sizeof *acc);
  } else if (dtype == LOOM_BFLOAT16) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; ++i) acc[i] = loom_bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; ++i) acc[i] = loom_f16_to_f32(s[i]);
  }
}

static void store_f32(void *dst, int32_t dtype, const float *acc, int64_t n) {
  if (dtype == LOOM_FLOAT32) {
    memcpy(dst, acc, (size_t)n * sizeof *acc);
  } else if (dtype == LOOM_BFLOAT16) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; ++i) d[i] = loom_f32_to_bf16(acc[i]);
  } else {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; ++i) d[i] = loom_f32_to_f16(acc[i]);
  }
}

/* One combine step for the floating types: acc = acc (op) x. MAX and MIN
 * keep a NaN from either side. */
#define COMBINE_FLOAT(T, acc, x, n, op)                                                 \
  do {                                                                                  \
    switch (op) {                                                                       \
      case LOOM_CCL_SUM:                                                                \
      case LOOM_CCL_AVG:                                                                \
      case LOOM_CCL_PREMUL_SUM:                                                         \
        for (int64_t i = 0; i < (n); ++i) (acc)[i] += (x)[i];                           \
        break;                                                                          \
      case LOOM_CCL_PROD:                                                               \
        for (int64_t i = 0; i < (n); ++i) (acc)[i] *= (x)[i];                           \
        break;                                                                          \
      case LOOM_CCL_MAX:                                                                \
        for (int64_t i = 0; i < (n); ++i) {                                             \
          const T a = (acc)[i], b = (x)[i];                                             \
          (acc)[i] = (a != a || a > b) ? a : b;                                         \
        }                                                                               \
        break;                                                                          \
      default: /* MIN */                                                                \
        for (int64_t i = 0; i < (n); ++i) {                                             \
          const T a = (acc)[i], b = (x)[i];                                             \
          (acc)[i] = (a != a || a < b) ? a : b;                                         \
        }                                                                               \
    }                                                                                   \
  } while (0)

static float factor_f32(const loom_kernel_args *args, int64_t n_in, int32_t dtype) {
  if ((int64_t)args->num_tensors > n_in + 1) {
    float f;
    load_f32(&f, args->tensors[n_in + 1].data, dtype, 1);
    return f;
  }
  return (float)args->scalars[1].f;
}

static double factor_f64(const loom_kernel_args *args, int64_t n_in) {
  if ((int64_t)args->num_tensors > n_in + 1) return *(const double *)args->tensors[n_in + 1].data;
  return args->scalars[1].f;
}

static void reduce_f32(const loom_kernel_args *args, int op, int64_t n_in, int64_t begin,
                       int64_t end) {
  const int32_t dtype = args->tensors[0].dtype;
  const int64_t es = loom_dtype_size(dtype);
  const float factor = op == LOOM_CCL_PREMUL_SUM ? factor_f32(args, n_in, dtype) : 1.0f;
  const float divisor = (float)args->scalars[2].i;
  float acc[BLOCK], x[BLOCK];
  for (int64_t b = begin; b < end; b += BLOCK) {
    const int64_t n = end - b < BLOCK ? end - b : BLOCK;
    load_f32(acc, (const char *)args->tensors[1].data + b * es, dtype, n);
    if (op == LOOM_CCL_PREMUL_SUM)
      for (int64_t i = 0; i < n; ++i) acc[i] *= factor;
    for (int64_t r = 1; r < n_in; ++r) {
      load_f32(x, (const char *)args->tensors[1 + r].data + b * es, dtype, n);
      if (op == LOOM_CCL_PREMUL_SUM)
        for (int64_t i = 0; i < n; ++i) x[i] *= factor;
      COMBINE_FLOAT(float, acc, x, n, op);
    }
    if (op == LOOM_CCL_AVG)
      for (int64_t i = 0; i < n; ++i) acc[i] /= divisor;
    store_f32((char *)args->tensors[0].data + b * es, dtype, acc, n);
  }
}

static void reduce_f64(const loom_kernel_args *args, int op, int64_t n_in, int64_t begin,
                       int64_t end) {
  const double factor = op == LOOM_CCL_PREMUL_SUM ? factor_f64(args, n_in) : 1.0;
  const double divisor = (double)args->scalars[2].i;
  double acc[BLOCK];
  for (int64_t b = begin; b < end; b += BLOCK) {
    const int64_t n = end - b < BLOCK ? end - b : BLOCK;
    memcpy(acc, (const double *)args->tensors[1].data + b, (size_t)n * sizeof *acc);
    if (op == LOOM_CCL_PREMUL_SUM)
      for (int64_t i = 0; i < n; ++i) acc[i] *= factor;
    for (int64_t r = 1; r < n_in; ++r) {
      double x[BLOCK];
      memcpy(x, (const double *)args->tensors[1 + r].data + b, (size_t)n * sizeof *x);
      if (op == LOOM_CCL_PREMUL_SUM)
        for (int64_t i = 0; i < n; ++i) x[i] *= factor;
      COMBINE_FLOAT(double, acc, x, n, op);
    }
    if (op == LOOM_CCL_AVG)
      for (int64_t i = 0; i < n; ++i) acc[i] /= divisor;
    memcpy((double *)args->tensors[0].data + b, acc, (size_t)n * sizeof *acc);
  }
}

/* ---- integers: 64-bit accumulators ------------------------------------------ */

static void load_i64(int64_t *acc, const void *src, int32_t dtype, int64_t n) {
  switch (dtype) {
#define LOAD(T)                                                           \
  {                                                                       \
    const T *s = src;                                                     \
    for (int64_t i = 0; i < n; ++i) acc[i] = (int64_t)s[i];               \
    return;                                                               \
  }
    case LOOM_INT8: LOAD(int8_t)
    case LOOM_UINT8: LOAD(uint8_t)
    case LOOM_INT16: LOAD(int16_t)
    case LOOM_INT32: LOAD(int32_t)
    default: LOAD(int64_t)
#undef LOAD
  }
}

/* Truncates to the type, as a two's complement wrap. */
static void store_i64(void *dst, int32_t dtype, const int64_t *acc, int64_t n) {
  switch (dtype) {
#define STORE(T, U)                                                       \
  {                                                                       \
    T *d = dst;                                                           \
    for (int64_t i = 0; i < n; ++i) d[i] = (T)(U)(uint64_t)acc[i];        \
    return;                                                               \
  }
    case LOOM_INT8: STORE(int8_t, uint8_t)
    case LOOM_UINT8: STORE(uint8_t, uint8_t)
    case LOOM_INT16: STORE(int16_t, uint16_t)
    case LOOM_INT32: STORE(int32_t, uint32_t)
    default: STORE(int64_t, uint64_t)
#undef STORE
  }
}

static void reduce_int(const loom_kernel_args *args, int op, int64_t n_in, int64_t begin,
                       int64_t end) {
  const int32_t dtype = args->tensors[0].dtype;
  const int64_t es = loom_dtype_size(dtype), divisor = args->scalars[2].i;
  int64_t acc[BLOCK], x[BLOCK];
  for (int64_t b = begin; b < end; b += BLOCK) {
    const int64_t n = end - b < BLOCK ? end - b : BLOCK;
    load_i64(acc, (const char *)args->tensors[1].data + b * es, dtype, n);
    for (int64_t r = 1; r < n_in; ++r) {
      load_i64(x, (const char *)args->tensors[1 + r].data + b * es, dtype, n);
      switch (op) {
        case LOOM_CCL_SUM:
        case LOOM_CCL_AVG: /* wraps: unsigned arithmetic */
          for (int64_t i = 0; i < n; ++i) acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)x[i]);
          break;
        case LOOM_CCL_PROD:
          for (int64_t i = 0; i < n; ++i) acc[i] = (int64_t)((uint64_t)acc[i] * (uint64_t)x[i]);
          break;
        case LOOM_CCL_MAX:
          for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] > x[i] ? acc[i] : x[i];
          break;
        default:
          for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] < x[i] ? acc[i] : x[i];
      }
    }
    if (op == LOOM_CCL_AVG)
      for (int64_t i = 0; i < n; ++i)
        acc[i] = acc[i] == INT64_MIN && divisor == -1 ? acc[i] : acc[i] / divisor;
    store_i64((char *)args->tensors[0].data + b * es, dtype, acc, n);
  }
}

/* ---- bool: or / and --------------------------------------------------------- */

static void reduce_bool(const loom_kernel_args *args, int op, int64_t n_in, int64_t begin,
                        int64_t end) {
  const int any = op == LOOM_CCL_SUM || op == LOOM_CCL_MAX;
  uint8_t *dst = (uint8_t *)args->tensors[0].data;
  for (int64_t b = begin; b < end; b += BLOCK) {
    const int64_t n = end - b < BLOCK ? end - b : BLOCK;
    uint8_t acc[BLOCK];
    const uint8_t *s0 = (const uint8_t *)args->tensors[1].data + b;
    for (int64_t i = 0; i < n; ++i) acc[i] = s0[i] != 0;
    for (int64_t r = 1; r < n_in; ++r) {
      const uint8_t *s = (const uint8_t *)args->tensors[1 + r].data + b;
      if (any)
        for (int64_t i = 0; i < n; ++i) acc[i] |= s[i] != 0;
      else
        for (int64_t i = 0; i < n; ++i) acc[i] &= s[i] != 0;
    }
    memcpy(dst + b, acc, (size_t)n);
  }
}

int loom_kernel_ccl_reduce(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const int op = (int)args->scalars[0].i;
  const int64_t n_in = args->scalars[3].i;
  if (n_in < 1 || (int64_t)args->num_tensors < n_in + 1 || op < 0 || op >= LOOM_CCL_OP_COUNT)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ccl.reduce: bad arguments (op %d, %lld inputs)",
                      op, (long long)n_in);
  const int32_t dtype = args->tensors[0].dtype;
  if (op == LOOM_CCL_AVG && args->scalars[2].i == 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "ccl.reduce: AVG with divisor 0");
  switch (dtype) {
    case LOOM_FLOAT32:
    case LOOM_FLOAT16:
    case LOOM_BFLOAT16:
      reduce_f32(args, op, n_in, begin, end);
      return 0;
    case LOOM_FLOAT64:
      reduce_f64(args, op, n_in, begin, end);
      return 0;
    case LOOM_INT8:
    case LOOM_UINT8:
    case LOOM_INT16:
    case LOOM_INT32:
    case LOOM_INT64:
      if (op == LOOM_CCL_PREMUL_SUM)
        return loom_error(LOOM_ERROR_NOT_SUPPORTED, "ccl.reduce: PREMUL_SUM needs floating data");
      reduce_int(args, op, n_in, begin, end);
      return 0;
    case LOOM_BOOL:
      if (op == LOOM_CCL_PREMUL_SUM || op == LOOM_CCL_AVG)
        return loom_error(LOOM_ERROR_NOT_SUPPORTED, "ccl.reduce: %s of bool data",
                          op == LOOM_CCL_AVG ? "AVG" : "PREMUL_SUM");
      reduce_bool(args, op, n_in, begin, end);
      return 0;
    default:
      return loom_error(LOOM_ERROR_NOT_SUPPORTED, "ccl.reduce: unsupported dtype %d", (int)dtype);
  }
}

const loom_kernel_entry loom_ccl_kernels[] = {
    {"ccl.reduce", loom_kernel_ccl_reduce, NULL},
    {NULL, NULL, NULL},
};
