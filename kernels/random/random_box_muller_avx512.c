/* The Box-Muller transform built for AVX-512 (the file name selects the
 * flags); chosen at run time by random.c when the CPU has the features. */
#define LOOM_BM_ISA _avx512
#include "kernels/random/random_box_muller.c"
