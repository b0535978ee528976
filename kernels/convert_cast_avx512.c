/* The contiguous casts (kernels/convert_cast.inc) built for AVX-512: the
 * same values, wider vectors (64-bit integer <-> float conversions exist
 * only here). */
#include "kernels/convert.h"
#include "kernels/dtype.h"

#define LOOM_CAST_NAME loom_convert_contig_avx512
#include "kernels/convert_cast.inc"
