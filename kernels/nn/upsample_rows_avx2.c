/* The float32 (bi)linear rows built for AVX2 + FMA (the file name selects
 * the flags): fmaf is one instruction. Chosen by upsample.c. */
#define LOOM_US_ISA _avx2
#include "kernels/nn/upsample_rows.c"
