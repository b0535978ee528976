/* kernels/pointwise/pointwise.h — the elementwise kernel (contract and name in
 * loom/kernels/pointwise.h) and the helpers the other kernel files share. */
#ifndef LOOM_KERNELS_POINTWISE_H
#define LOOM_KERNELS_POINTWISE_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/pointwise.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_kernel_pointwise(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

/* Applies `op` to n contiguous elements of the compute kind (used by the
 * kernel and by tests comparing the ISA versions). `in` has the op's arity;
 * `p` the 4 parameters. Returns 0 or a loom_status. */
int loom_pw_apply_f32(int op, int64_t n, float *out, const float *const *in,
                      const loom_scalar *p);
int loom_pw_apply_f64(int op, int64_t n, double *out, const double *const *in,
                      const loom_scalar *p);
int loom_pw_apply_i64(int op, int64_t n, int64_t *out,
                      const int64_t *const *in, const loom_scalar *p);
int loom_pw_apply_f32_avx512(int op, int64_t n, float *out,
                             const float *const *in, const loom_scalar *p);
int loom_pw_apply_f64_avx512(int op, int64_t n, double *out,
                             const double *const *in, const loom_scalar *p);
int loom_pw_apply_i64_avx512(int op, int64_t n, int64_t *out,
                             const int64_t *const *in, const loom_scalar *p);

/* Staging helpers shared with the other kernel files: load n elements of
 * `dtype` at a byte stride into a contiguous block of the compute kind, or
 * store such a block to `dtype`. Return 1, or 0 for an unknown dtype. */
int loom_pw_load(int kind, void *dst, const char *src, int32_t dtype,
                 int64_t stride, int64_t n);
int loom_pw_store(int kind, char *dst, int32_t dtype, int64_t stride,
                  const void *src, int64_t n);

/* Number of inputs `op` takes (1, 2 or 3). */
int loom_pw_arity(int op);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_POINTWISE_H */
