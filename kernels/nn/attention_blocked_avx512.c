/* The blocked attention kernels built for AVX-512 (the file name selects the
 * flags); attention_blocked.c picks this build when the CPU has them. */
#define LOOM_ATTN_ISA _avx512
#include "kernels/nn/attention_blocked.c"
