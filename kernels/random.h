/* kernels/random.h — counter-based random number kernels (Philox-4x32-10).
 *
 * Element i of the output (row-major over its logical shape) draws from
 * the Philox block with key = seed and counter = offset + i / k, where k
 * elements share a block's four words (k = 4 for narrow uniforms, 2 for
 * float64 uniforms and normal pairs, else 1). A result depends only on
 * (seed, offset, i): never on the thread count or on the chunking. The
 * caller advances its generator's offset by numel (an upper bound on the
 * blocks used) after each launch.
 *
 * Common scalars: scalars[0].u = seed, scalars[1].u = offset. tensors[0] is
 * the output (any strides; dtypes as listed). Range = numel(out); grain
 * LOOM_RANDOM_GRAIN. */
#ifndef LOOM_KERNELS_RANDOM_H
#define LOOM_KERNELS_RANDOM_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_RANDOM_GRAIN 16384

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

/* Uniform on [from, to): scalars[2].f = from, scalars[3].f = to. Floating
 * out. float64 uses 53 random bits, narrower types 24. */
int loom_kernel_uniform(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Normal (Box-Muller): scalars[2].f = mean, scalars[3].f = std. Floating. */
int loom_kernel_normal(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Integers uniform on [from, from + range): scalars[2].i = from,
 * scalars[3].u = range (0 means 2^64). Any real out dtype. */
int loom_kernel_random(const loom_kernel_args *args, int64_t begin, int64_t end);

/* 1 with probability p, else 0: scalars[2].f = p. Any real out dtype. */
int loom_kernel_bernoulli(const loom_kernel_args *args, int64_t begin, int64_t end);

/* As loom_kernel_bernoulli with per-element p from tensors[1] (floating,
 * out's sizes, stride 0 where it broadcasts). */
int loom_kernel_bernoulli_tensor(const loom_kernel_args *args, int64_t begin,
                                 int64_t end);

/* Exponential with rate scalars[2].f (> 0). Floating out. */
int loom_kernel_exponential(const loom_kernel_args *args, int64_t begin,
                            int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_RANDOM_H */
