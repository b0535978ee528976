/* The group-norm kernels built for AVX-512 (the file name selects the
 * flags); norm_group.c picks this build when the CPU has them. */
#define LOOM_GN_ISA _avx512
#include "kernels/nn/norm_group.c"
