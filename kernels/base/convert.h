/* kernels/base/convert.h — strided runs of elements converted between dtypes
 * through a small staging buffer, with PyTorch's cast semantics:
 * integers travel as int64, floating values as double, and a value bound
 * for a 16-bit float or float32 is first cast to float (as c10 does). */
#ifndef LOOM_KERNELS_CONVERT_H
#define LOOM_KERNELS_CONVERT_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#define LOOM_CONVERT_BLOCK 256

static inline int loom_dtype_is_integral(int32_t dtype) {
  return dtype >= LOOM_INT8 && dtype <= LOOM_BOOL;
}

static inline int loom_dtype_is_complex(int32_t dtype) {
  return dtype == LOOM_COMPLEX64 || dtype == LOOM_COMPLEX128;
}

/* Converts n elements (n <= LOOM_CONVERT_BLOCK) from a strided source run to
 * a strided destination run; strides in bytes. Returns 0, or nonzero for an
 * unknown dtype. */
int loom_convert_run(char *dst, int32_t dst_dtype, int64_t dst_stride,
                     const char *src, int32_t src_dtype, int64_t src_stride,
                     int64_t n);

/* Converts n contiguous elements between common dtype pairs (float32,
 * float64, int64, int32, uint8, bool), with loom_convert_run's values, by
 * loops that vectorize. Returns 0, or 1 for a pair it does not take; the
 * AVX-512 build is for AVX-512 CPUs only. */
int loom_convert_contig(char *dst, int32_t dst_dtype, const char *src, int32_t src_dtype,
                        int64_t n);
int loom_convert_contig_avx512(char *dst, int32_t dst_dtype, const char *src,
                               int32_t src_dtype, int64_t n);

/* n contiguous bfloat16 values to float32 and back (round to nearest even,
 * NaN quieted), with kernels/base/dtype.h's bits; AVX-512 CPUs only. */
void loom_bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n);
void loom_f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n);

/* The same for float16 (kernels/base/dtype.h's bits, NaN payloads included). */
void loom_f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n);
void loom_f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n);

#endif /* LOOM_KERNELS_CONVERT_H */
