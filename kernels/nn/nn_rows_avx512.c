/* The fp32 row primitives built for AVX-512 (the file name selects the
 * flags); loom_nn_rows() picks this build when the CPU has the features. */
#define LOOM_NN_ROWS_ISA _avx512
#include "kernels/nn/nn_rows.c"
