/* kernels/nn/grid_sample.h — the 2-d grid sampling kernels (contracts and
 * names in loom/kernels/grid_sample.h). */
#ifndef LOOM_KERNELS_GRID_SAMPLE_H
#define LOOM_KERNELS_GRID_SAMPLE_H

#include "loom/kernel_abi.h"
#include "loom/kernels/grid_sample.h"
#include "loom/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sampling mode both grid samplers (2-d and 3-d) take as their first
 * three scalars: nearest (else bilinear/trilinear), the padding mode (0
 * zeros, 1 border, 2 reflection) and align_corners. */
typedef struct gs_params {
  int nearest, padding, align;
} gs_params;

/* Reads the mode into *q: 0, or LOOM_ERROR_INVALID_ARGUMENT when the
 * launch does not have `tensors` tensors and three valid scalars. */
static inline int gs_read_params(const loom_kernel_args *args, gs_params *q, unsigned tensors) {
  if (args->num_tensors != tensors || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  q->nearest = args->scalars[0].i == 1;
  q->padding = (int)args->scalars[1].i;
  q->align = args->scalars[2].i != 0;
  if ((args->scalars[0].i != 0 && args->scalars[0].i != 1) || q->padding < 0 || q->padding > 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

int loom_kernel_grid_sample(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_grid_sample_backward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_GRID_SAMPLE_H */
