/* loom/kernels/grid_sample3d.h — the 3-d grid sampling kernels' names and
 * argument contracts (F.grid_sample of 5-d inputs, aten::grid_sampler_3d):
 * trilinear ("bilinear") and nearest interpolation, zeros / border /
 * reflection padding, forward and backward, with the CPU backend's
 * coordinate and weight arithmetic, unfused (in float for float32 and the
 * 16-bit floats, in double for float64). Every driver provides these names.
 *
 * scalars: [0].i interpolation (0 bilinear, 1 nearest), [1].i padding (0
 * zeros, 1 border, 2 reflection), [2].i align_corners.
 * "grid_sample3d.forward": tensors [0] out (N, C, Do, Ho, Wo), [1] input
 *   (N, C, D, H, W), [2] grid (N, Do, Ho, Wo, 3); any strides. range:
 *   N * Do.
 * "grid_sample3d.backward": tensors [0] grad_input (N, C, D, H, W; float32
 *   or float64, overwritten; data NULL: not wanted), [1] grad_grid (N, Do,
 *   Ho, Wo, 3), [2] grad_output, [3] input, [4] grid. range: N (an image's
 *   gradient shares add in output order, channels innermost, as the CPU
 *   adds them). */
#ifndef LOOM_KERNELS_GRID_SAMPLE3D_CONTRACT_H
#define LOOM_KERNELS_GRID_SAMPLE3D_CONTRACT_H

#endif /* LOOM_KERNELS_GRID_SAMPLE3D_CONTRACT_H */
