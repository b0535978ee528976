/* kernels/gemm/gemm_pack.c — the pack launch: panels of A and B copied
 * into the register tiles' layout (zero-padded, k blocks outermost), and
 * the one-block pack the compute launch uses for a B it packs itself. */
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* Packs `lanes` (<= width) lanes of a k-major panel: lane l, step kk reads
 * src[l*s_lane + kk*s_k]; fp32 destination [kp][width]. */
static void loom_gemm_pack_f32(float *dst, const void *src, int32_t dtype,
                               int64_t s_lane, int64_t s_k, int64_t lanes,
                               int64_t width, int64_t k, int64_t kp, int vec) {
  if (dtype == LOOM_FLOAT32 && s_k == 1 && s_lane != 1 && vec) {
    loom_gemm_pack_t32_avx512((uint32_t *)dst, src, s_lane * 4, lanes, width, k);
    return;
  }
  if (dtype == LOOM_FLOAT32 && s_lane == 1 && width <= 32 && vec) {
    loom_gemm_pack_rows32_avx512((uint32_t *)dst, (const uint32_t *)src, s_k, lanes, width, k);
    if (kp > k) memset(dst + k * width, 0, (size_t)((kp - k) * width) * sizeof(float));
    return;
  }
  if (lanes < width || kp > k) memset(dst, 0, (size_t)(kp * width) * sizeof(float));
  if (dtype == LOOM_FLOAT32) {
    const float *s = (const float *)src;
    if (s_lane == 1) {
      for (int64_t kk = 0; kk < k; ++kk)
        memcpy(dst + kk * width, s + kk * s_k, (size_t)lanes * sizeof(float));
    } else if (s_k == 1) {
      for (int64_t l = 0; l < lanes; ++l) {
        const float *row = s + l * s_lane;
        for (int64_t kk = 0; kk < k; ++kk) dst[kk * width + l] = row[kk];
      }
    } else {
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t l = 0; l < lanes; ++l)
          dst[kk * width + l] = s[l * s_lane + kk * s_k];
    }
    return;
  }
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t l = 0; l < lanes; ++l)
      dst[kk * width + l] = loom_gemm_load(src, dtype, l * s_lane + kk * s_k);
}

/* As above for bf16 operands kept in bf16: [kp/2][width][2] k-pairs. */
static void loom_gemm_pack_bf16(uint16_t *dst, const uint16_t *src,
                                int64_t s_lane, int64_t s_k, int64_t lanes,
                                int64_t width, int64_t k, int64_t kp) {
  /* Only the AVX512-BF16 and AMX variants pack bf16, so AVX-512 is there.
   * The vector packs fill ceil(k/2) pairs; AMX's k granule leaves more. */
  const int64_t filled = (k + 1) / 2 * 2 * width;
  if (s_k == 1 && s_lane != 1) {
    loom_gemm_pack_t32_avx512((uint32_t *)dst, src, s_lane * 2, lanes, width, k / 2);
    if (k & 1) {
      uint16_t *d = dst + (k >> 1) * 2 * width;
      memset(d, 0, (size_t)(2 * width) * sizeof(uint16_t));
      for (int64_t l = 0; l < lanes; ++l) d[2 * l] = src[l * s_lane + k - 1];
    }
    memset(dst + filled, 0, (size_t)(kp * width - filled) * sizeof(uint16_t));
    return;
  }
  if (s_lane == 1 && width % 32 == 0) {
    loom_gemm_pack_pairs16_avx512(dst, src, s_k, lanes, width, k);
    memset(dst + filled, 0, (size_t)(kp * width - filled) * sizeof(uint16_t));
    return;
  }
  if (lanes < width || kp > k) memset(dst, 0, (size_t)(kp * width) * sizeof(uint16_t));
  if (s_k == 1) {
    for (int64_t l = 0; l < lanes; ++l) {
      const uint16_t *row = src + l * s_lane;
      for (int64_t kk = 0; kk < k; ++kk)
        dst[(kk >> 1) * 2 * width + 2 * l + (kk & 1)] = row[kk];
    }
    return;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    uint16_t *d = dst + (kk >> 1) * 2 * width + (kk & 1);
    const uint16_t *s = src + kk * s_k;
    for (int64_t l = 0; l < lanes; ++l) d[2 * l] = s[l * s_lane];
  }
}

/* A panel for AMX tiles: [kp/32][width][32] bf16, each row's k run of a
 * tile step contiguous; rows >= lanes and k >= k give 0. */
static void loom_gemm_pack_amx_a(uint16_t *dst, const uint16_t *src, int64_t s_lane,
                                 int64_t s_k, int64_t lanes, int64_t width, int64_t k,
                                 int64_t kp) {
  enum { KB = LOOM_GEMM_AMX_KB };
  for (int64_t k0 = 0; k0 < kp; k0 += KB, dst += width * KB) {
    const int64_t run = k - k0 >= KB ? KB : k - k0 > 0 ? k - k0 : 0;
    if (s_lane == 1 && width == KB) { /* only AMX plans get here: AVX-512 is there */
      loom_gemm_pack_amx_t16_avx512(dst, src + k0 * s_k, s_k, lanes, run);
      continue;
    }
    if (lanes < width || run < KB) memset(dst, 0, (size_t)(width * KB) * sizeof(uint16_t));
    if (s_k == 1) {
      for (int64_t l = 0; l < lanes; ++l)
        memcpy(dst + l * KB, src + l * s_lane + k0, (size_t)run * sizeof(uint16_t));
    } else {
      /* lanes along memory (a transposed A): read rows of lanes */
      for (int64_t kk = 0; kk < run; ++kk) {
        const uint16_t *s = src + (k0 + kk) * s_k;
        for (int64_t l = 0; l < lanes; ++l) dst[l * KB + kk] = s[l * s_lane];
      }
    }
  }
}

/* A k block of an fp32 operand, at most 32 lanes by 512 k, in bf16 (its
 * high or low parts): bf16 math packs from here. */
static _Thread_local _Alignas(64) uint16_t loom_gemm_split[32 * 512];

/* Lanes [0, lanes) by k [0, k) of fp32 src (lane l, step kk at
 * l * s_lane + kk * s_k) into loom_gemm_split, kept along the source's
 * contiguous dim; *s_lane, *s_k become the copy's strides. */
static const uint16_t *loom_gemm_split_block(const float *src, int64_t *s_lane, int64_t *s_k,
                                             int64_t lanes, int64_t width, int64_t k, int low) {
  uint16_t *d = loom_gemm_split;
  if (*s_lane == 1 && *s_k != 1) { /* rows of lanes */
    for (int64_t kk = 0; kk < k; ++kk) {
      /* rows far apart: the hardware prefetcher does not follow */
      if (kk + 8 < k) {
        __builtin_prefetch(src + (kk + 8) * *s_k);
        __builtin_prefetch(src + (kk + 8) * *s_k + lanes - 1);
      }
      loom_gemm_split_bf16_avx512(d + kk * width, src + kk * *s_k, lanes, low);
    }
    *s_k = width;
    return d;
  }
  for (int64_t l = 0; l < lanes; ++l) { /* runs of k */
    if (*s_k == 1) {
      loom_gemm_split_bf16_avx512(d + l * k, src + l * *s_lane, k, low);
      continue;
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      const float x = src[l * *s_lane + kk * *s_k];
      const uint16_t h = loom_f32_to_bf16(x);
      d[l * k + kk] = low ? (x - x == 0.0f ? loom_f32_to_bf16(x - loom_bf16_to_f32(h)) : 0) : h;
    }
  }
  *s_lane = k, *s_k = 1;
  return d;
}

void loom_gemm_pack_block(const loom_gemm_plan *p, const loom_tensor *src, int is_a,
                          int64_t mat, int64_t panel, int64_t pc, char *dst) {
  const int64_t count2 = is_a ? p->a_count2 : p->b_count2;
  const int64_t width = is_a ? p->mr : p->nr, lanes_total = is_a ? p->m : p->n;
  const int64_t s_lane = is_a ? src->strides[2] : src->strides[3];
  const int64_t s_k = is_a ? src->strides[3] : src->strides[2];
  const int64_t i1 = mat / count2, i2 = mat % count2, l0 = panel * width;
  const int64_t lanes = lanes_total - l0 < width ? lanes_total - l0 : width;
  const char *s = is_a ? loom_gemm_elem(src, i1, i2, l0, pc) : loom_gemm_elem(src, i1, i2, pc, l0);
  const int64_t kcur = p->kp - pc < p->kc ? p->kp - pc : p->kc;
  const int64_t kreal = p->k - pc < kcur ? p->k - pc : kcur;
  int64_t sl = s_lane, sk = s_k;
  if (p->bf16_math && kreal > 0) {
    const int low = (p->bf16_math & (is_a ? LOOM_GEMM_A_LOW : LOOM_GEMM_B_LOW)) != 0;
    s = (const char *)loom_gemm_split_block((const float *)s, &sl, &sk, lanes, width, kreal, low);
  }
  if (p->packed_bf16 && is_a && p->isa == LOOM_GEMM_AMX)
    loom_gemm_pack_amx_a((uint16_t *)dst, (const uint16_t *)s, sl, sk, lanes, width, kreal, kcur);
  else if (p->packed_bf16)
    loom_gemm_pack_bf16((uint16_t *)dst, (const uint16_t *)s, sl, sk, lanes, width, kreal, kcur);
  else
    loom_gemm_pack_f32((float *)dst, s, src->dtype, s_lane, s_k, lanes, width, kreal, kcur,
                       p->isa != LOOM_GEMM_GENERIC);
}

int loom_gemm_pack_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1],
                    *b = &args->tensors[2];
  loom_gemm_plan p;
  int rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &p);
  if (rc) return rc;
  char *ws = (char *)args->tensors[3].data;
  int64_t width_bytes = p.packed_bf16 ? 2 : 4;
  const int a_rows12 = loom_gemm_a_rows12x4(&p, a), a_pairs12 = loom_gemm_a_pairs12x4(&p, a);
  for (int64_t u = begin; u < end; ++u) {
    const int is_a = u < p.pack_units_a;
    const int64_t unit = is_a ? u : u - p.pack_units_a;
    const int64_t panels = is_a ? p.m_panels : p.n_panels, width = is_a ? p.mr : p.nr;
    const int64_t mat = unit / panels, panel = unit % panels;
    if (is_a && p.a_in_place && (panel + 1) * width <= p.m) continue; /* read in place */
    char *base = ws + (is_a ? p.a_offset + mat * p.a_bytes : p.b_offset + mat * p.b_bytes);
    if (is_a && (a_rows12 || a_pairs12) && panel % 4 == 0 && panel + 4 <= panels &&
        u + 4 <= end) {
      /* four panels of a transposed A in one pass over its rows */
      const int64_t i1 = mat / p.a_count2, i2 = mat % p.a_count2, l0 = panel * width;
      const int64_t lanes = p.m - l0 < 4 * width ? p.m - l0 : 4 * width;
      for (int64_t pc = 0; pc < p.kp; pc += p.kc) {
        const int64_t kcur = p.kp - pc < p.kc ? p.kp - pc : p.kc;
        uint32_t *dst = (uint32_t *)(base + loom_gemm_panel_offset(&p, panels, width, pc, panel) *
                                                width_bytes);
        if (a_rows12)
          loom_gemm_pack_rows12x4_avx512(dst, kcur * width,
                                         (const uint32_t *)loom_gemm_elem(a, i1, i2, l0, pc),
                                         a->strides[3], lanes, kcur);
        else /* bf16 pairs: a k block's words are half its k */
          loom_gemm_pack_pairs12x4_avx512(dst, kcur / 2 * width,
                                          (const uint16_t *)loom_gemm_elem(a, i1, i2, l0, pc),
                                          a->strides[3], lanes, p.k - pc, kcur / 2);
      }
      u += 3;
      continue;
    }
    for (int64_t pc = 0; pc < p.kp; pc += p.kc)
      loom_gemm_pack_block(&p, is_a ? a : b, is_a, mat, panel, pc,
                           base + loom_gemm_panel_offset(&p, panels, width, pc, panel) * width_bytes);
  }
  return 0;
}
