/* kernels/nn/norm_batch_avx512.c — batch norm's fp32 row loops built for
 * AVX-512 (the file name selects the flags); chosen at run time. */
#define LOOM_BN_ISA _avx512
#include "kernels/nn/norm_batch_rows.inc"
