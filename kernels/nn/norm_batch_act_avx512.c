/* kernels/nn/norm_batch_act_avx512.c — batch norm + ReLU's fp32 row loops
 * built for AVX-512 (the file name selects the flags); chosen at run time. */
#define LOOM_BNA_ISA _avx512
#include "kernels/nn/norm_batch_act_rows.inc"
