/* loom/kernels/frexp.h — frexp's kernel name and argument contract. Every
 * driver provides this name.
 *
 * "pointwise.frexp": pointwise.apply's layout (loom/kernels/pointwise.h)
 * with two outputs: tensors [mantissa (the input's dtype), exponent
 * (int32), input (float32, float64, float16 or bfloat16)], all with the
 * same sizes (any strides; the input may broadcast); an input whose data is
 * NULL is the constant scalars[LOOM_PW_CONST + 1].f. Range numel; the other
 * scalars are ignored. mantissa * 2^exponent = input with |mantissa| in
 * [0.5, 1) (C's frexp, exact for every dtype); zero, infinities and NaN
 * keep their value with exponent 0 (a bfloat16 NaN mantissa is the
 * canonical quiet NaN 0x7FC0, as the CPU converts it). */
#ifndef LOOM_KERNELS_FREXP_CONTRACT_H
#define LOOM_KERNELS_FREXP_CONTRACT_H

#endif /* LOOM_KERNELS_FREXP_CONTRACT_H */
