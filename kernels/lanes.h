/* kernels/lanes.h — the fixed fold of 16 accumulator lanes. Sums that keep
 * lane l for elements l, l + 16, l + 32, ... and fold them with these add
 * in an order that depends only on the length, whatever the ISA build or
 * the chunking. */
#ifndef LOOM_KERNELS_LANES_H
#define LOOM_KERNELS_LANES_H

/* acc[0] + ... + acc[15] as a pairwise tree; acc is overwritten. */
static inline double loom_lanes16_fold_f64(double *acc) {
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

static inline float loom_lanes16_fold_f32(float *acc) {
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

#endif /* LOOM_KERNELS_LANES_H */
