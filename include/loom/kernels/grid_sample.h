/* loom/kernels/grid_sample.h — the 2-d grid sampling kernels' names and
 * argument contracts (F.grid_sample): bilinear and nearest interpolation,
 * zeros / border / reflection padding, forward and backward, with the CPU
 * backend's coordinate arithmetic (in float for float32 and the 16-bit
 * floats, in double for float64). Every driver provides these names.
 *
 * scalars: [0].i interpolation (0 bilinear, 1 nearest), [1].i padding (0
 * zeros, 1 border, 2 reflection), [2].i align_corners.
 * "grid_sample.forward": tensors [0] out (N, C, Ho, Wo), [1] input (N,
 *   C, H, W), [2] grid (N, Ho, Wo, 2); any strides. range: N * Ho.
 * "grid_sample.backward": tensors [0] grad_input (N, C, H, W; float32 or
 *   float64, overwritten), [1] grad_grid (N, Ho, Wo, 2), [2] grad_output,
 *   [3] input, [4] grid. range: N (an image's gradient shares add in
 *   output order). */
#ifndef LOOM_KERNELS_GRID_SAMPLE_CONTRACT_H
#define LOOM_KERNELS_GRID_SAMPLE_CONTRACT_H

#endif /* LOOM_KERNELS_GRID_SAMPLE_CONTRACT_H */
