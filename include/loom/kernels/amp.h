/* loom/kernels/amp.h — gradient scaling's two steps (torch.amp.GradScaler):
 * names and argument contracts. Every driver provides these names.
 *
 * Both read and write the scale state in device memory, so a training step
 * never waits for the device to decide whether it overflowed. The
 * arithmetic is PyTorch's (CPU and CUDA alike), bit for bit.
 *
 * "amp.check_and_unscale": range numel(grad), any chunking.
 * tensors: [grad (fp32, fp64, fp16 or bf16; any strides, no two elements at
 *           one address), found_inf (fp32, one element),
 *           inv_scale (fp32, one element)].
 * Multiplies every element of grad by inv_scale in place, in the grad's
 * dtype for fp32 and fp64 and in fp32 for fp16/bf16 (rounded to nearest
 * even), leaving grad untouched when inv_scale is 1; stores 1.0 into
 * found_inf when any element is inf or NaN and leaves it alone otherwise
 * (clearing it is the caller's business). Chunks that find one store the
 * same value; the stores are atomic.
 *
 * "amp.update_scale": range 1.
 * tensors: [scale (fp32, one element), growth_tracker (int32, one element),
 *           found_inf (fp32, one element)];
 * scalars: [growth_factor (f), backoff_factor (f), growth_interval (i)].
 * found_inf non-zero: scale *= backoff_factor, growth_tracker = 0. Else
 * growth_tracker + 1 reaching growth_interval multiplies scale by
 * growth_factor (unless that overflows to inf) and resets the tracker;
 * short of it, the tracker keeps the incremented count. Products are taken
 * in double and rounded to fp32, as PyTorch does. */
#ifndef LOOM_KERNELS_AMP_CONTRACT_H
#define LOOM_KERNELS_AMP_CONTRACT_H

#endif /* LOOM_KERNELS_AMP_CONTRACT_H */
