/* kernels/random/random.h — the random number kernels (contracts and names in
 * loom/kernels/random.h) and the Philox and Box-Muller steps they share
 * with the tests. */
#ifndef LOOM_KERNELS_RANDOM_H
#define LOOM_KERNELS_RANDOM_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox-4x32-10 block: out[0..3] from key (seed) and 128-bit counter
 * (c0 = low 64 bits, c1 = high 64 bits). */
void loom_philox4x32(uint64_t seed, uint64_t c0, uint64_t c1, uint32_t out[4]);

/* For j < n: radius[j] = sqrt(-2 ln u[j]) (u in (0, 1]), sine[j] and
 * cosine[j] of angle[j] (in [0, 2 pi)), in double arithmetic within 1e-11
 * relative; the AVX-512 build (AVX-512 CPUs only) gives the same bits. */
void loom_box_muller(const double *u, const double *angle, int64_t n, double *radius,
                     double *sine, double *cosine);
void loom_box_muller_avx512(const double *u, const double *angle, int64_t n, double *radius,
                            double *sine, double *cosine);

int loom_kernel_uniform(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_normal(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_random(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_bernoulli(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_bernoulli_tensor(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_exponential(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_RANDOM_H */
