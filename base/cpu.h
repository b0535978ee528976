/* CPU feature detection for kernel selection. */
#ifndef LOOM_BASE_CPU_H
#define LOOM_BASE_CPU_H

#include <stdint.h>

#include "loom/features.h"

/* LOOM_FEATURE_* bits usable by this process: the CPU supports them, the OS
 * saves their registers, and (AMX) the kernel granted the tile state.
 * LOOM_FEATURE_AVX512F stands for AVX-512 F, DQ, BW and VL, the set the
 * *_avx512.c files are built for.
 * LOOM_CPU_FEATURES=generic|avx2|avx512|avx512bf16|amx|native caps the set
 * (never raises it) so that every kernel path can be tested on one machine;
 * every ISA choice follows this set, directly or through
 * loom_gemm_isa_selected(). Computed once; thread-safe. */
uint32_t loom_cpu_features(void);

/* Human-readable CPU model name ("" if unknown). */
const char *loom_cpu_name(void);

#endif
