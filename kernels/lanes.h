/* kernels/lanes.h — the fixed fold of accumulator lanes. Sums that keep
 * lane l of n for elements l, l + n, l + 2n, ... and fold them with these
 * add (or multiply) in an order that depends only on the length, whatever
 * the ISA build or the chunking. */
#ifndef LOOM_KERNELS_LANES_H
#define LOOM_KERNELS_LANES_H

/* acc[0] + ... + acc[n - 1] as a pairwise tree, n a power of two; acc is
 * overwritten. */
static inline double loom_lanes_fold_f64(double *acc, int n) {
  for (int w = n / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/* acc[0] * ... * acc[n - 1] in the same pairwise tree. */
static inline double loom_lanes_fold_mul_f64(double *acc, int n) {
  for (int w = n / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] *= acc[j + w];
  return acc[0];
}

static inline double loom_lanes16_fold_f64(double *acc) {
  return loom_lanes_fold_f64(acc, 16);
}

static inline float loom_lanes16_fold_f32(float *acc) {
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

#endif /* LOOM_KERNELS_LANES_H */
