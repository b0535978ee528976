/* kernels/nn/pool_nhwc_avx512.c — the channels-last pooling loops built
 * for AVX-512 (the file name selects the flags); chosen at run time. */
#define LOOM_POOL_ISA _avx512
#include "kernels/nn/pool_nhwc_loops.inc"
