/* The elementwise ops built for AVX-512 (the file name selects the flags);
 * chosen at run time by pointwise.c when the CPU has the features. */
#define LOOM_PW_ISA _avx512
#include "kernels/pointwise/pointwise_math.c"
