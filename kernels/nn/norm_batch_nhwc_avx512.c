/* kernels/nn/norm_batch_nhwc_avx512.c — channels-last batch norm's fp32
 * loops built for AVX-512 (the file name selects the flags); chosen at run
 * time. */
#define LOOM_BN_ISA _avx512
#include "kernels/nn/norm_batch_nhwc_loops.inc"
