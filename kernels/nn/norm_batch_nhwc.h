/* kernels/nn/norm_batch_nhwc.h — channels-last batch norm (contracts in
 * loom/kernels/norm.h): the kernels of norm_batch_nhwc.c, the fp32 loops they
 * run (norm_batch_nhwc_loops.inc, built generic and for AVX-512), and the
 * per-channel statistics step shared with norm_batch.c. */
#ifndef LOOM_KERNELS_NN_NORM_BATCH_NHWC_H
#define LOOM_KERNELS_NN_NORM_BATCH_NHWC_H

#include <stdint.h>

#include "loom/kernel_abi.h"

/* The channels one stats or gradient-sum loop call covers. */
#define LOOM_BNH_BLOCK 64

int loom_bnh_stats(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_bnh_finish(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_bnh_apply(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_bnh_grad_sums(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_bnh_grad_finish(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_bnh_dx(const loom_kernel_args *args, int64_t begin, int64_t end);

/* norm_batch.c: a channel's training statistics from its mean *mu and the
 * sum of squared deviations ssq of its `count` values; writes the saved and
 * running statistics of channel c (the running ones read from rm, rv and
 * written to rm_out, rv_out, in place where NULL) and leaves in *mu, *invstd
 * what the output is normalised with. */
void loom_bn_finish_stats(const loom_tensor *rm, const loom_tensor *rv, const loom_tensor *rm_out,
                          const loom_tensor *rv_out, const loom_tensor *sm, const loom_tensor *si,
                          int64_t c, int64_t count, double momentum, double eps, double ssq,
                          double *mu, double *invstd);

#define LOOM_BNH_LOOPS(sfx)                                                                    \
  void loom_bnh_stats_f32##sfx(const float *x, int64_t ld, int64_t r0, int64_t r1, int64_t nb, \
                               double *sum, double *m2);                                       \
  void loom_bnh_apply_f32##sfx(float *y, int64_t ldy, const float *x, int64_t ldx,             \
                               const float *res, int64_t ldr, int64_t r0, int64_t r1,          \
                               int64_t nb, const float *m, const float *a, const float *b,     \
                               int relu);                                                      \
  void loom_bnh_grad_sums_f32##sfx(const float *g, int64_t ldg, const float *x, int64_t ldx,   \
                                   const float *y, int64_t ldy, float *gm, int64_t ldm,        \
                                   int64_t r0, int64_t r1, int64_t nb, const double *mu,       \
                                   double *sg, double *sgx);                                   \
  void loom_bnh_dx_f32##sfx(float *dx, int64_t ldd, const float *g, int64_t ldg,               \
                            const float *x, int64_t ldx, int64_t r0, int64_t r1, int64_t nb,   \
                            const float *m, const float *k1, const float *k2,                \
                            const float *k3);
LOOM_BNH_LOOPS()
LOOM_BNH_LOOPS(_avx512)
#undef LOOM_BNH_LOOPS

#endif /* LOOM_KERNELS_NN_NORM_BATCH_NHWC_H */
