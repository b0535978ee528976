#include "base/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LOOM_X86 1
#endif

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint32_t detected_features;
static char cpu_name[64];
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

#ifdef LOOM_X86
static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

/* Linux hands out the AMX tile data state only to processes that ask. */
static int request_amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return 0;
#endif
}

static uint32_t detect_hardware(void) {
  unsigned a, b, c, d;
  uint32_t f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
  if (!osxsave) return 0;
  const uint64_t xcr0 = read_xcr0();
  const int os_avx = (xcr0 & 0x6) == 0x6;
  const int os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  const int os_amx = (xcr0 & 0x60000) == 0x60000;
  unsigned max_leaf = __get_cpuid_max(0, NULL);
  if (max_leaf < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned ebx7 = b, edx7 = d, max_sub7 = a;
  if (os_avx && fma) f |= LOOM_FEATURE_FMA;
  if (os_avx && ((ebx7 >> 5) & 1)) f |= LOOM_FEATURE_AVX2;
  /* Every *_avx512.c file is built for F, DQ, BW and VL together: a CPU
   * with F alone (Xeon Phi) must not run them. */
  const unsigned avx512_set = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  if (os_avx512 && (ebx7 & avx512_set) == avx512_set) {
    f |= LOOM_FEATURE_AVX512F;
    if ((edx7 >> 23) & 1) f |= LOOM_FEATURE_AVX512FP16;
    if (max_sub7 >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      if ((a >> 5) & 1) f |= LOOM_FEATURE_AVX512BF16;
    }
  }
  const int amx_bf16 = (edx7 >> 22) & 1, amx_tile = (edx7 >> 24) & 1;
  if (os_amx && amx_bf16 && amx_tile && request_amx_permission())
    f |= LOOM_FEATURE_AMX_BF16;
  return f;
}

static void detect_name(void) {
  unsigned regs[12];
  if (__get_cpuid_max(0x80000000, NULL) < 0x80000004) return;
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1],
                &regs[4 * i + 2], &regs[4 * i + 3]);
  memcpy(cpu_name, regs, 48);
  cpu_name[48] = '\0';
  /* The brand string is padded with leading spaces on some parts. */
  size_t lead = strspn(cpu_name, " ");
  memmove(cpu_name, cpu_name + lead, strlen(cpu_name + lead) + 1);
}
#else
static uint32_t detect_hardware(void) { return 0; }
static void detect_name(void) {}
#endif

static uint32_t cap_for(const char *level) {
  const uint32_t avx2 = LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA;
  const uint32_t avx512 = avx2 | LOOM_FEATURE_AVX512F;
  if (!strcmp(level, "generic")) return 0;
  if (!strcmp(level, "avx2")) return avx2;
  if (!strcmp(level, "avx512")) return avx512;
  if (!strcmp(level, "avx512bf16")) return avx512 | LOOM_FEATURE_AVX512BF16;
  if (!strcmp(level, "amx"))
    return avx512 | LOOM_FEATURE_AVX512BF16 | LOOM_FEATURE_AMX_BF16;
  return ~0u; /* "native" or unknown: no cap */
}

static void detect(void) {
  detected_features = detect_hardware();
  detect_name();
  const char *level = getenv("LOOM_CPU_FEATURES");
  if (level && *level) detected_features &= cap_for(level);
}

uint32_t loom_cpu_features(void) {
  pthread_once(&detect_once, detect);
  return detected_features;
}

const char *loom_cpu_name(void) {
  pthread_once(&detect_once, detect);
  return cpu_name;
}
