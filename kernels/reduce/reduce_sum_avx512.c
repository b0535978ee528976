/* The contiguous sums built for AVX-512 (the file name selects the flags);
 * chosen at run time by reduce.c when the CPU has the features. */
#define LOOM_REDUCE_ISA _avx512
#include "kernels/reduce/reduce_sum.c"
