/* The elementwise engine: walks the operands' strided runs, converts what is
 * not already contiguous in the compute type into small staging blocks, and
 * hands contiguous blocks to the op (pointwise_math.c). Contiguous operands
 * of the compute type are used in place, so the common case (same dtype,
 * contiguous) runs the op straight over memory. */
#include "kernels/pointwise/pointwise.h"
#include "base/stream_store.h"

#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/base/dtype.h"
#include "kernels/base/iter.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

#define PW_BLOCK 512
/* A streamed output is computed in blocks this small: loads and
 * cache-bypassing stores then interleave finely (2 x 16M float add, one
 * thread: 24 GB/s in blocks of 512, 32 GB/s in blocks of 128). */
#define PW_STREAM_BLOCK 128

int loom_pw_arity(int op) {
  if (op >= LOOM_PW_WHERE) return 3;
  if (op >= LOOM_PW_ADD) return 2;
  return 1;
}

/* Float to int64 without undefined behaviour: NaN and out-of-range values
 * give INT64_MIN, which is what x86's conversion produces. */
static inline int64_t pw_f2i(double x) {
  return (x > -9.2233720368547758e18 && x < 9.2233720368547758e18) ? (int64_t)x
                                                                    : INT64_MIN;
}

/* The byte step of a run: a constant for a contiguous one (CONTIG 1), so
 * that the compiler vectorizes its loop. */
#define PW_STEP(T, stride, CONTIG) ((CONTIG) ? (int64_t)sizeof(T) : (stride))

#define PW_LOAD(DST_T, dst, src, dtype, stride, n, ok, CONTIG)                          \
  switch (dtype) {                                                            \
    case LOOM_FLOAT32: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const float *)(src + i * PW_STEP(float, stride, CONTIG)); break; \
    case LOOM_FLOAT64: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const double *)(src + i * PW_STEP(double, stride, CONTIG)); break; \
    case LOOM_FLOAT16: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)loom_f16_to_f32(*(const uint16_t *)(src + i * PW_STEP(uint16_t, stride, CONTIG))); break; \
    case LOOM_BFLOAT16: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)loom_bf16_to_f32(*(const uint16_t *)(src + i * PW_STEP(uint16_t, stride, CONTIG))); break; \
    case LOOM_INT8: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const int8_t *)(src + i * PW_STEP(int8_t, stride, CONTIG)); break; \
    case LOOM_INT16: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const int16_t *)(src + i * PW_STEP(int16_t, stride, CONTIG)); break; \
    case LOOM_INT32: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const int32_t *)(src + i * PW_STEP(int32_t, stride, CONTIG)); break; \
    case LOOM_INT64: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const int64_t *)(src + i * PW_STEP(int64_t, stride, CONTIG)); break; \
    case LOOM_UINT8: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)*(const uint8_t *)(src + i * PW_STEP(uint8_t, stride, CONTIG)); break; \
    case LOOM_BOOL: for (int64_t i = 0; i < n; ++i) dst[i] = (DST_T)(*(const uint8_t *)(src + i * PW_STEP(uint8_t, stride, CONTIG)) != 0); break; \
    default: ok = 0;                                                          \
  }

/* Stores values of a floating compute type to any dtype. */
#define PW_STORE_FLOAT(src, dst, dtype, stride, n, ok, CONTIG)                          \
  switch (dtype) {                                                            \
    case LOOM_FLOAT32: for (int64_t i = 0; i < n; ++i) *(float *)(dst + i * PW_STEP(float, stride, CONTIG)) = (float)src[i]; break; \
    case LOOM_FLOAT64: for (int64_t i = 0; i < n; ++i) *(double *)(dst + i * PW_STEP(double, stride, CONTIG)) = (double)src[i]; break; \
    case LOOM_FLOAT16: for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * PW_STEP(uint16_t, stride, CONTIG)) = loom_f32_to_f16((float)src[i]); break; \
    case LOOM_BFLOAT16: for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * PW_STEP(uint16_t, stride, CONTIG)) = loom_f32_to_bf16((float)src[i]); break; \
    case LOOM_INT8: for (int64_t i = 0; i < n; ++i) *(int8_t *)(dst + i * PW_STEP(int8_t, stride, CONTIG)) = (int8_t)pw_f2i(src[i]); break; \
    case LOOM_INT16: for (int64_t i = 0; i < n; ++i) *(int16_t *)(dst + i * PW_STEP(int16_t, stride, CONTIG)) = (int16_t)pw_f2i(src[i]); break; \
    case LOOM_INT32: for (int64_t i = 0; i < n; ++i) *(int32_t *)(dst + i * PW_STEP(int32_t, stride, CONTIG)) = (int32_t)pw_f2i(src[i]); break; \
    case LOOM_INT64: for (int64_t i = 0; i < n; ++i) *(int64_t *)(dst + i * PW_STEP(int64_t, stride, CONTIG)) = pw_f2i(src[i]); break; \
    case LOOM_UINT8: for (int64_t i = 0; i < n; ++i) *(uint8_t *)(dst + i * PW_STEP(uint8_t, stride, CONTIG)) = (uint8_t)pw_f2i(src[i]); break; \
    case LOOM_BOOL: for (int64_t i = 0; i < n; ++i) *(uint8_t *)(dst + i * PW_STEP(uint8_t, stride, CONTIG)) = src[i] != 0; break; \
    default: ok = 0;                                                          \
  }

int loom_pw_load(int kind, void *dst, const char *src, int32_t dtype,
                   int64_t stride, int64_t n) {
  int ok = 1;
  if (stride == 0 && n > 1) { /* a broadcast value: converted once */
    if (!loom_pw_load(kind, dst, src, dtype, 0, 1)) return 0;
    if (kind == LOOM_PW_F32) {
      float *d = dst;
      for (int64_t i = 1; i < n; ++i) d[i] = d[0];
    } else if (kind == LOOM_PW_F64) {
      double *d = dst;
      for (int64_t i = 1; i < n; ++i) d[i] = d[0];
    } else {
      int64_t *d = dst;
      for (int64_t i = 1; i < n; ++i) d[i] = d[0];
    }
    return 1;
  }
  const int contig = stride == loom_dtype_size(dtype);
  if (kind == LOOM_PW_F32 && contig && (loom_cpu_features() & LOOM_FEATURE_AVX512F)) {
    if (dtype == LOOM_BFLOAT16) {
      loom_bf16_to_f32_avx512(dst, (const uint16_t *)src, n);
      return 1;
    }
    if (dtype == LOOM_FLOAT16) {
      loom_f16_to_f32_avx512(dst, (const uint16_t *)src, n);
      return 1;
    }
  }
  if (kind == LOOM_PW_F32) {
    float *d = dst;
    if (contig) { PW_LOAD(float, d, src, dtype, stride, n, ok, 1) }
    else { PW_LOAD(float, d, src, dtype, stride, n, ok, 0) }
  } else if (kind == LOOM_PW_F64) {
    double *d = dst;
    if (contig) { PW_LOAD(double, d, src, dtype, stride, n, ok, 1) }
    else { PW_LOAD(double, d, src, dtype, stride, n, ok, 0) }
  } else {
    int64_t *d = dst;
    if (contig) { PW_LOAD(int64_t, d, src, dtype, stride, n, ok, 1) }
    else { PW_LOAD(int64_t, d, src, dtype, stride, n, ok, 0) }
  }
  return ok;
}

int loom_pw_store(int kind, char *dst, int32_t dtype, int64_t stride,
                    const void *src, int64_t n) {
  int ok = 1;
  const int contig = stride == loom_dtype_size(dtype);
  if (kind == LOOM_PW_F32 && contig && (loom_cpu_features() & LOOM_FEATURE_AVX512F)) {
    if (dtype == LOOM_BFLOAT16) {
      loom_f32_to_bf16_avx512((uint16_t *)dst, src, n);
      return 1;
    }
    if (dtype == LOOM_FLOAT16) {
      loom_f32_to_f16_avx512((uint16_t *)dst, src, n);
      return 1;
    }
  }
  if (kind == LOOM_PW_F32) {
    const float *s = src;
    if (contig) { PW_STORE_FLOAT(s, dst, dtype, stride, n, ok, 1) }
    else { PW_STORE_FLOAT(s, dst, dtype, stride, n, ok, 0) }
  } else if (kind == LOOM_PW_F64) {
    const double *s = src;
    if (contig) { PW_STORE_FLOAT(s, dst, dtype, stride, n, ok, 1) }
    else { PW_STORE_FLOAT(s, dst, dtype, stride, n, ok, 0) }
  } else {
    const int64_t *s = src;
    switch (dtype) {
#define STORE_INT(T) for (int64_t i = 0; i < n; ++i) *(T *)(dst + i * stride) = (T)s[i]; break;
      case LOOM_FLOAT32: STORE_INT(float)
      case LOOM_FLOAT64: STORE_INT(double)
      case LOOM_INT8: STORE_INT(int8_t)
      case LOOM_INT16: STORE_INT(int16_t)
      case LOOM_INT32: STORE_INT(int32_t)
      case LOOM_INT64: STORE_INT(int64_t)
      case LOOM_UINT8: STORE_INT(uint8_t)
#undef STORE_INT
      case LOOM_FLOAT16:
        for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_f16((float)s[i]);
        break;
      case LOOM_BFLOAT16:
        for (int64_t i = 0; i < n; ++i) *(uint16_t *)(dst + i * stride) = loom_f32_to_bf16((float)s[i]);
        break;
      case LOOM_BOOL:
        for (int64_t i = 0; i < n; ++i) *(uint8_t *)(dst + i * stride) = s[i] != 0;
        break;
      default: ok = 0;
    }
  }
  return ok;
}

typedef int (*pw_apply_fn)(int op, int64_t n, void *out,
                           const void *const *in, const loom_scalar *p);

static pw_apply_fn pw_select(int kind) {
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  switch (kind) {
    case LOOM_PW_F32:
      return (pw_apply_fn)(avx512 ? loom_pw_apply_f32_avx512 : loom_pw_apply_f32);
    case LOOM_PW_F64:
      return (pw_apply_fn)(avx512 ? loom_pw_apply_f64_avx512 : loom_pw_apply_f64);
    case LOOM_PW_I64:
      return (pw_apply_fn)(avx512 ? loom_pw_apply_i64_avx512 : loom_pw_apply_i64);
    default: return NULL;
  }
}

static int32_t pw_kind_dtype(int kind) {
  return kind == LOOM_PW_F32 ? LOOM_FLOAT32
                             : (kind == LOOM_PW_F64 ? LOOM_FLOAT64 : LOOM_INT64);
}

int loom_kernel_pointwise(const loom_kernel_args *args, int64_t begin,
                          int64_t end) {
  if (args->num_scalars < LOOM_PW_CONST) return LOOM_ERROR_INVALID_ARGUMENT;
  const int op = (int)args->scalars[0].i, kind = (int)args->scalars[1].i;
  if (op < 0 || op >= LOOM_PW_OP_COUNT) return LOOM_ERROR_INVALID_ARGUMENT;
  const int arity = loom_pw_arity(op), nops = 1 + arity;
  if ((int)args->num_tensors < nops ||
      (int)args->num_scalars < LOOM_PW_CONST + arity)
    return LOOM_ERROR_INVALID_ARGUMENT;
  pw_apply_fn apply = pw_select(kind);
  if (!apply) return LOOM_ERROR_INVALID_ARGUMENT;
  const int32_t kdtype = pw_kind_dtype(kind);
  const int64_t ksize = loom_dtype_size(kdtype);
  const loom_scalar *params = args->scalars + LOOM_PW_PARAM;

  /* Constant inputs join the iteration as rank-0 operands with no data. */
  /* (rank 0: its sizes and strides are never read, and left unset, as a
   * zeroed struct costs a one-element launch a third of its time) */
  loom_tensor constant;
  constant.data = NULL, constant.dtype = kdtype, constant.rank = 0;
  const loom_tensor *ops[1 + LOOM_PW_MAX_INPUTS];
  int is_const[1 + LOOM_PW_MAX_INPUTS] = {0};
  for (int k = 0; k < nops; ++k) {
    const loom_tensor *t = &args->tensors[k];
    is_const[k] = k > 0 && t->data == NULL;
    ops[k] = is_const[k] ? &constant : t;
    if (!is_const[k] && loom_dtype_size(t->dtype) == 0)
      return LOOM_ERROR_NOT_SUPPORTED;
  }
  loom_iter it;
  if (loom_iter_init(&it, nops, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  /* A single element (the iterator gives it stride 0): each tensor's own
   * element size, so that operands of the compute type are used in place
   * rather than staged. */
  if (it.rank == 1 && it.sizes[0] == 1)
    for (int k = 0; k < nops; ++k)
      it.strides[k][0] = is_const[k] ? 0 : loom_dtype_size(ops[k]->dtype);

  /* A staging block per operand; the last dim's strides are fixed for the
   * whole walk, so which operands can be used in place is decided once. */
  union {
    _Alignas(64) float f[PW_BLOCK];
    double d[PW_BLOCK];
    int64_t i[PW_BLOCK];
  } stage[1 + LOOM_PW_MAX_INPUTS];
  int direct[1 + LOOM_PW_MAX_INPUTS];
  int all_direct = 1;
  const int64_t last = it.rank - 1;
  for (int k = 0; k < nops; ++k) {
    direct[k] = !is_const[k] && ops[k]->dtype == kdtype &&
                it.strides[k][last] == ksize;
    all_direct &= direct[k];
    if (is_const[k]) {
      /* as many copies as a block of this launch takes */
      const loom_scalar v = args->scalars[LOOM_PW_CONST + k - 1];
      const int64_t copies = end - begin < PW_BLOCK ? end - begin : PW_BLOCK;
      for (int64_t i = 0; i < copies; ++i) {
        if (kind == LOOM_PW_F32) stage[k].f[i] = (float)v.f;
        else if (kind == LOOM_PW_F64) stage[k].d[i] = v.f;
        else stage[k].i[i] = v.i;
      }
    }
  }

  /* A large contiguous output is computed into the staging block and
   * streamed past the cache, unless it is also an input: its lines were
   * just read into the cache, and a cache-bypassing store to them costs
   * more than an ordinary one (an in-place add of 16M floats: 6.1 ms
   * streamed, 4.1 ms not), or unless a fused launch reads it next
   * (LOOM_KERNEL_HINT_CACHED). */
  int in_place = 0;
  for (int k = 1; k < nops; ++k) in_place |= !is_const[k] && ops[k]->data == ops[0]->data;
  const int stream = direct[0] && !in_place && (loom_cpu_features() & LOOM_FEATURE_AVX512F) &&
                     args->range * ksize >= LOOM_STREAM_STORE_BYTES &&
                     !(args->hints & LOOM_KERNEL_HINT_CACHED);
  if (stream) direct[0] = 0;

  char *p[1 + LOOM_PW_MAX_INPUTS];
  const void *in[LOOM_PW_MAX_INPUTS] = {NULL, NULL, NULL};
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) {
    const int64_t block = all_direct && !stream ? n : (stream ? PW_STREAM_BLOCK : PW_BLOCK);
    for (int64_t off = 0; off < n; off += block) {
      const int64_t m = n - off < block ? n - off : block;
      for (int k = 1; k < nops; ++k) {
        const int64_t s = it.strides[k][last];
        if (direct[k] || is_const[k]) {
          in[k - 1] = direct[k] ? (const void *)(p[k] + off * s) : stage[k].f;
        } else {
          if (!loom_pw_load(kind, stage[k].f, p[k] + off * s, ops[k]->dtype, s, m))
            return LOOM_ERROR_NOT_SUPPORTED;
          in[k - 1] = stage[k].f;
        }
      }
      const int64_t os = it.strides[0][last];
      void *out = direct[0] ? (void *)(p[0] + off * os) : (void *)stage[0].f;
      int rc = apply(op, m, out, in, params);
      if (rc) return rc;
      if (stream) {
        loom_stream_store_avx512(p[0] + off * os, stage[0].f, m * ksize);
      } else if (!direct[0] &&
                 !loom_pw_store(kind, p[0] + off * os, ops[0]->dtype, os, stage[0].f, m)) {
        return LOOM_ERROR_NOT_SUPPORTED;
      }
    }
  }
  if (stream) loom_stream_fence_avx512();
  return LOOM_OK;
}

const loom_kernel_entry loom_pointwise_kernels[] = {
    {"pointwise.apply", loom_kernel_pointwise, NULL},
    {NULL, NULL, NULL},
};
