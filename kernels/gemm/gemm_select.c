/* kernels/gemm/gemm_select.c — which GEMM variant runs on this CPU, and
 * the planner that turns it into launches ("gemm.plan"). The variant is
 * read once; it is a scalar of every launch, so kernels stay pure. */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

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
    case LOOM_GEMM_AMX: return avx512 && bf16 && amx; /* the OS's part: base/cpu.c */
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

/* ---- "gemm.plan" ----------------------------------------------------------- */

/* `d` with its last two dims swapped (a transposed view; no data moves). */
static loom_tensor loom_gemm_transposed(loom_tensor d) {
  const int64_t size = d.sizes[2], stride = d.strides[2];
  d.sizes[2] = d.sizes[3], d.strides[2] = d.strides[3];
  d.sizes[3] = size, d.strides[3] = stride;
  return d;
}

/* C^T = B^T A^T: the operands of the transposed product, in place. */
static void loom_gemm_transpose_product(loom_tensor *c, loom_tensor *a, loom_tensor *b) {
  const loom_tensor at = loom_gemm_transposed(*b), bt = loom_gemm_transposed(*a);
  *a = at, *b = bt, *c = loom_gemm_transposed(*c);
}

/* Wasted work of a register tile over an m x n result: padded area. */
static int64_t loom_gemm_padded_area(int64_t m, int64_t n, int64_t mr, int64_t nr) {
  return (m + mr - 1) / mr * mr * ((n + nr - 1) / nr * nr);
}

int loom_gemm_plan_for(const loom_kernel_args *args, loom_gemm_isa isa, loom_gemm_plan *out) {
  memset(out, 0, sizeof *out);
  if (args->num_tensors < 3 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_tensor c = args->tensors[0], a = args->tensors[1], b = args->tensors[2];
  const int64_t math = args->scalars[0].i, workers = args->scalars[1].i;
  if (c.rank != 4 || a.rank != 4 || b.rank != 4 || math < LOOM_GEMM_MATH_EXACT ||
      math > LOOM_GEMM_MATH_BF16X3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  out->passes = 1;
  /* A single result column (or row, transposed into one): a matrix-vector
   * product, which a register tile would mostly spend on padding. */
  if (c.sizes[3] == 1 || c.sizes[2] == 1) {
    out->route = LOOM_GEMM_ROUTE_GEMV;
    out->transposed = c.sizes[3] != 1;
    if (out->transposed) loom_gemm_transpose_product(&c, &a, &b);
    out->batch1 = c.sizes[0], out->batch2 = c.sizes[1];
    out->m = c.sizes[2], out->n = 1, out->k = a.sizes[3];
    out->compute_range = out->batch1 * out->batch2 * ((out->m + LOOM_GEMV_ROWS - 1) / LOOM_GEMV_ROWS);
    out->compute_grain = 1;
    return 0;
  }
  /* C^T = B^T A^T when C is column-major (no fp32 accumulator needed) or
   * when the transposed problem pads the register tile much less (thin C). */
  const int64_t m = c.sizes[2], n = c.sizes[3];
  int swap = n > 1 && c.strides[3] != 1 && (m == 1 || c.strides[2] == 1);
  if (!swap && (m == 1 || c.strides[2] == 1)) {
    loom_gemm_plan p;
    if (loom_gemm_plan_init(&c, &a, &b, isa, &p) == 0 &&
        loom_gemm_padded_area(n, m, p.mr, p.nr) * 2 < loom_gemm_padded_area(m, n, p.mr, p.nr))
      swap = 1;
  }
  if (swap) loom_gemm_transpose_product(&c, &a, &b);
  /* The precision policy for fp32 operands (torch's float32 matmul
   * precision: bf16 "where fast"):
   * - "medium" (LOOM_GEMM_MATH_BF16): A and B rounded to bf16 (nearest,
   *   ties to even) as they are packed, their products summed in fp32, on
   *   AMX tiles or by AVX512BF16's vdpbf16ps, which run bf16 at twice the
   *   fp32 FMA rate (2048^3: ~396 against ~199 GFLOP/s); both flush
   *   subnormal inputs and sums to zero (gemm.h). The generic and
   *   AVX512 variants have no bf16 products and stay exact fp32.
   * - "high" (LOOM_GEMM_MATH_BF16X3): on AMX only, three bf16 passes: the
   *   products of the low parts with the high ones, then of the high
   *   parts, each pass adding to C (small terms first). Three vdpbf16ps
   *   passes would cost 1.5 fp32 ones, so AVX512BF16 stays exact fp32.
   * - "highest": exact fp32 everywhere.
   * Each element's k still sums in one order whatever the threads. */
  int32_t flags[LOOM_GEMM_MAX_PASSES] = {0, 0, 0};
  int passes = 1;
  int32_t chosen = LOOM_GEMM_MATH_EXACT;
  if (a.dtype == LOOM_FLOAT32 &&
      ((math != LOOM_GEMM_MATH_EXACT && isa == LOOM_GEMM_AMX) ||
       (math == LOOM_GEMM_MATH_BF16 && isa == LOOM_GEMM_AVX512BF16))) {
    chosen = (int32_t)math;
    if (math == LOOM_GEMM_MATH_BF16) {
      flags[0] = LOOM_GEMM_BF16_MATH;
    } else {
      flags[0] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_A_LOW;
      flags[1] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_B_LOW;
      flags[2] = LOOM_GEMM_BF16_MATH;
      passes = 3;
    }
  }
  int32_t variant[LOOM_GEMM_MAX_PASSES] = {0, 0, 0};
  for (int p = 0; p < passes; ++p)
    variant[p] = (int32_t)isa | LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE | flags[p] |
                 LOOM_GEMM_WORKERS(workers);
  /* The passes differ only in which bf16 part they pack: one geometry. */
  const int rc = loom_gemm_plan_init(&c, &a, &b, variant[0], out);
  if (rc != 0) return loom_error((loom_status)rc, "unsupported operands for the loom GEMM");
  out->route = LOOM_GEMM_ROUTE_TILES;
  out->transposed = swap;
  out->math = chosen;
  out->passes = passes;
  for (int p = 0; p < passes; ++p) out->pass_variant[p] = variant[p];
  return 0;
}

int loom_gemm_planner(const loom_kernel_args *args, void *out_plan, uint64_t size) {
  if (size != sizeof(loom_gemm_plan)) return LOOM_ERROR_INVALID_ARGUMENT;
  return loom_gemm_plan_for(args, loom_gemm_isa_selected(), (loom_gemm_plan *)out_plan);
}

const loom_kernel_entry loom_gemm_kernels[] = {
    {"gemm.plan", NULL, loom_gemm_planner},
    {"gemm.pack", loom_gemm_pack_kernel, NULL},
    {"gemm.compute", loom_gemm_compute_kernel, NULL},
    {"gemm.compute_epilogue", loom_gemm_compute_epilogue_kernel, NULL},
    {"gemm.epilogue", loom_gemm_epilogue_kernel, NULL},
    {"gemv.compute", loom_gemv_kernel, NULL},
    {"gemm.f64", loom_gemm_f64_kernel, NULL},
    {"gemm.int", loom_gemm_int_kernel, NULL},
    {NULL, NULL, NULL},
};
