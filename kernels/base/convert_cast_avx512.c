/* The contiguous casts (kernels/base/convert_cast.inc) built for AVX-512: the
 * same values, wider vectors (64-bit integer <-> float conversions exist
 * only here). */
#include "kernels/base/convert.h"
#include "kernels/base/dtype.h"

#define LOOM_CAST_NAME loom_convert_contig_avx512
#include "kernels/base/convert_cast.inc"
