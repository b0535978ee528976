/* The special functions' element loops built for AVX2 with FMA, the
 * multiply-adds contracted as the compiler contracts them in the CPU's own
 * vector-ISA build of the same formulas (kernels/pointwise/special.c chooses
 * this build where the CPU has FMA). */
#pragma GCC optimize("fp-contract=fast")

#define SP_ISA _avx2
#include "kernels/pointwise/special_types.inc"
