/* kernels/gemm/gemm_select.c — which GEMM variant runs on this CPU. Read
 * once; the choice is a scalar of every launch, so kernels stay pure. */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "runtime/base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long loom_gemm_xgetbv(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}

static int loom_gemm_cpu_has(loom_gemm_isa isa) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
  if (!osxsave || !fma) return 0;
  /* The OS must save the opmask and ZMM state (XCR0 bits 1, 2, 5, 6, 7). */
  if ((loom_gemm_xgetbv() & 0xe6) != 0xe6) return 0;
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  int avx512 = ((b >> 16) & 1) /* F */ && ((b >> 17) & 1) /* DQ */ &&
               ((b >> 30) & 1) /* BW */ && ((b >> 31) & 1) /* VL */;
  int amx = ((d >> 22) & 1) && ((d >> 24) & 1);
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  int bf16 = (a1 >> 5) & 1;
  switch (isa) {
    case LOOM_GEMM_GENERIC: return 1;
    case LOOM_GEMM_AVX512: return avx512;
    case LOOM_GEMM_AVX512BF16: return avx512 && bf16;
    case LOOM_GEMM_AMX: return avx512 && bf16 && amx; /* the OS's part: runtime/base/cpu.c */
    default: return 0;
  }
}
#else
static int loom_gemm_cpu_has(loom_gemm_isa isa) {
  return isa == LOOM_GEMM_GENERIC;
}
#endif

/* The runtime's feature set may be capped (LOOM_CPU_FEATURES); the GEMM
 * honours the cap on top of its own, stricter check (AVX-512 BW/DQ/VL). */
static int loom_gemm_runtime_allows(loom_gemm_isa isa) {
  uint32_t f = loom_cpu_features();
  switch (isa) {
    case LOOM_GEMM_AVX512: return (f & LOOM_FEATURE_AVX512F) != 0;
    case LOOM_GEMM_AVX512BF16:
      return (f & LOOM_FEATURE_AVX512F) && (f & LOOM_FEATURE_AVX512BF16);
    case LOOM_GEMM_AMX: return (f & LOOM_FEATURE_AMX_BF16) != 0;
    default: return 1;
  }
}

int loom_gemm_isa_supported(loom_gemm_isa isa) {
  return isa >= 0 && isa < LOOM_GEMM_ISA_COUNT && loom_gemm_cpu_has(isa) &&
         loom_gemm_runtime_allows(isa);
}

const char *loom_gemm_isa_name(loom_gemm_isa isa) {
  static const char *const names[LOOM_GEMM_ISA_COUNT] = {
      "generic", "avx512", "avx512bf16", "amx"};
  return (isa >= 0 && isa < LOOM_GEMM_ISA_COUNT) ? names[isa] : "unknown";
}

static loom_gemm_isa loom_gemm_isa_detect(void) {
  loom_gemm_isa best = LOOM_GEMM_GENERIC;
  for (int i = LOOM_GEMM_ISA_COUNT - 1; i > 0; --i) {
    if (loom_gemm_isa_supported((loom_gemm_isa)i)) {
      best = (loom_gemm_isa)i;
      break;
    }
  }
  const char *env = getenv("LOOM_GEMM");
  if (env == NULL || env[0] == '\0') return best;
  for (int i = 0; i < LOOM_GEMM_ISA_COUNT; ++i) {
    /* A request the CPU cannot run gets the best variant below it. */
    if (strcmp(env, loom_gemm_isa_name((loom_gemm_isa)i)) == 0) {
      for (int j = i; j > 0; --j)
        if (loom_gemm_isa_supported((loom_gemm_isa)j)) return (loom_gemm_isa)j;
      return LOOM_GEMM_GENERIC;
    }
  }
  return best;
}

loom_gemm_isa loom_gemm_isa_selected(void) {
  /* Racing first callers compute the same answer; the store is atomic. */
  static int cached = -1;
  int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
  if (v < 0) {
    v = (int)loom_gemm_isa_detect();
    __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
  }
  return (loom_gemm_isa)v;
}
