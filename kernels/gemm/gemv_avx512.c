/* kernels/gemm/gemv_avx512.c — the matrix-vector inner loops built for
 * AVX-512 (the file name selects the flags); chosen at run time. */
#define LOOM_GEMV_ISA _avx512
#include "kernels/gemm/gemv_body.inc"
