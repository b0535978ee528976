/* The FFT's row transforms built with AVX-512 flags: the same source as the
 * baseline build (fft_body.inc), vectorized by the compiler over the
 * Stockham stages' contiguous runs. */
#include "kernels/fft/fft.h"

#define T float
#define SFX _f32_avx512
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX
#define T double
#define SFX _f64_avx512
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX
