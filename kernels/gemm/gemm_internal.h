/* kernels/gemm/gemm_internal.h — what the GEMM driver shares with its
 * per-ISA micro-kernels. Not part of any public contract. */
#ifndef LOOM_KERNELS_GEMM_INTERNAL_H
#define LOOM_KERNELS_GEMM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/gemm/gemm.h"

/* T[0:mr, 0:nr] += alpha * Ap @ Bp (or = alpha * Ap @ Bp when `accumulate`
 * is 0, T then never read), where T is fp32 with row stride ldt and
 * unit column stride. Ap is one packed A panel (kc steps of MR values, or of
 * MR bf16 pairs), Bp one packed B panel (kc steps of NR values or pairs).
 * Rows >= mr and columns >= nr of the tile are computed but not stored.
 * `accumulate` may instead be LOOM_GEMM_UKR_BF16_OUT (AVX-512 and
 * AVX512-BF16 micro-kernels only, and their _rows forms): T is then bf16
 * (ldt in its elements) and gets alpha * Ap @ Bp rounded as
 * loom_f32_to_bf16, the bits a zeroed fp32 T stored converted would hold. */
typedef void (*loom_gemm_ukr_fn)(int64_t kc, const void *ap, const void *bp,
                                 float *t, int64_t ldt, float alpha, int mr,
                                 int nr, int accumulate);
enum { LOOM_GEMM_UKR_BF16_OUT = 2 };

/* The same 12-row tile with A's rows read in place: row i's k run starts
 * at ap + i * lda elements (bf16: lda even, ap 4-byte aligned, kc pairs). */
typedef void (*loom_gemm_ukr_rows_fn)(int64_t kc, const void *ap, int64_t lda,
                                      const void *bp, float *t, int64_t ldt,
                                      float alpha, int nr, int accumulate);
void loom_gemm_ukr_avx512_f32_rows(int64_t kc, const void *ap, int64_t lda,
                                   const void *bp, float *t, int64_t ldt,
                                   float alpha, int nr, int accumulate);
void loom_gemm_ukr_avx512bf16_bf16_rows(int64_t kc, const void *ap, int64_t lda,
                                        const void *bp, float *t, int64_t ldt,
                                        float alpha, int nr, int accumulate);
/* AMX: the 32-row tile over k a multiple of 32 (lda any, in elements). */
void loom_gemm_ukr_amx_bf16_rows(int64_t kc, const void *ap, int64_t lda, const void *bp,
                                 float *t, int64_t ldt, float alpha, int nr, int accumulate);

/* Register tiles of each variant. */
enum {
  LOOM_GEMM_GENERIC_MR = 4,
  LOOM_GEMM_GENERIC_NR = 16,
  LOOM_GEMM_AVX512_MR = 12,
  LOOM_GEMM_AVX512_NR = 32,
  LOOM_GEMM_BF16_MR = 12,
  LOOM_GEMM_BF16_NR = 32,
  LOOM_GEMM_AMX_MR = 32, /* four 16x16 tiles */
  LOOM_GEMM_AMX_NR = 32,
  LOOM_GEMM_AMX_KB = 32, /* k per tile step; AMX plans round k up to it */
};

void loom_gemm_ukr_generic_f32(int64_t kc, const void *ap, const void *bp,
                               float *t, int64_t ldt, float alpha, int mr,
                               int nr, int accumulate);
void loom_gemm_ukr_avx512_f32(int64_t kc, const void *ap, const void *bp,
                              float *t, int64_t ldt, float alpha, int mr,
                              int nr, int accumulate);
void loom_gemm_ukr_avx512bf16_bf16(int64_t kc, const void *ap, const void *bp,
                                   float *t, int64_t ldt, float alpha, int mr,
                                   int nr, int accumulate);
/* A panel [kc/32][32][32] bf16 (rows' k runs of one tile step together),
 * B panel as for the AVX512-BF16 kernel; kc pairs, a multiple of 16. */
/* Around a run of AMX micro-kernel calls on one thread: the tile
 * configuration, and its release. Other code on the thread (a library's
 * own AMX kernels) may release or change it between runs. */
void loom_gemm_amx_begin(void);
void loom_gemm_amx_end(void);
void loom_gemm_ukr_amx_bf16(int64_t kc, const void *ap, const void *bp, float *t, int64_t ldt,
                            float alpha, int mr, int nr, int accumulate);

/* Element i of an fp32 / bf16 / fp16 buffer as fp32, and back. */
static inline int loom_gemm_operand_dtype(int32_t dt) {
  return dt == LOOM_FLOAT32 || dt == LOOM_BFLOAT16 || dt == LOOM_FLOAT16;
}

static inline float loom_gemm_load(const void *p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case LOOM_FLOAT32: return ((const float *)p)[i];
    case LOOM_BFLOAT16: return loom_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return loom_f16_to_f32(((const uint16_t *)p)[i]);
  }
}

static inline void loom_gemm_store(void *p, int32_t dtype, int64_t i, float v) {
  switch (dtype) {
    case LOOM_FLOAT32: ((float *)p)[i] = v; break;
    case LOOM_BFLOAT16: ((uint16_t *)p)[i] = loom_f32_to_bf16(v); break;
    default: ((uint16_t *)p)[i] = loom_f32_to_f16(v); break;
  }
}

/* Element (i0, i1, i2, i3) of a rank-4 operand. */
static inline const char *loom_gemm_elem(const loom_tensor *t, int64_t i0, int64_t i1,
                                         int64_t i2, int64_t i3) {
  return (const char *)t->data +
         (i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] +
          i3 * t->strides[3]) * loom_dtype_size(t->dtype);
}

/* Rows [*m0, *m0 + *rows) of C in row tile mi (plan.m_tiles_tall). */
static inline void loom_gemm_tile_rows(const loom_gemm_plan *p, int64_t mi, int64_t *m0,
                                       int64_t *rows) {
  const int64_t tall = p->m_tiles_tall, short_rows = p->mt - p->mr;
  const int64_t start = mi <= tall ? mi * p->mt : tall * p->mt + (mi - tall) * short_rows;
  const int64_t end = start + (mi < tall ? p->mt : short_rows);
  *m0 = start;
  *rows = (end < p->m ? end : p->m) - start;
}

/* Whether the pack launch takes A's panels four at a time
 * (loom_gemm_pack_rows12x4_avx512): fp32 12-row panels of an A whose rows
 * are along memory (a transposed A), packed as fp32. */
static inline int loom_gemm_a_rows12x4(const loom_gemm_plan *p, const loom_tensor *a) {
  return !p->packed_bf16 && p->mr == 12 && a->dtype == LOOM_FLOAT32 && a->strides[2] == 1 &&
         a->strides[3] != 1 && p->kp == p->k &&
         (p->isa == LOOM_GEMM_AVX512 || p->isa == LOOM_GEMM_AVX512BF16);
}

/* The same for bf16 A packed as bf16 k-pairs by the AVX512-BF16 variant
 * (loom_gemm_pack_pairs12x4_avx512). */
static inline int loom_gemm_a_pairs12x4(const loom_gemm_plan *p, const loom_tensor *a) {
  return p->packed_bf16 && !p->bf16_math && p->mr == 12 && a->dtype == LOOM_BFLOAT16 &&
         a->strides[2] == 1 && a->strides[3] != 1 && p->isa == LOOM_GEMM_AVX512BF16;
}

/* k block [pc, pc + kc) of row panel `panel` of A (is_a) or column panel
 * of B, of the distinct matrix `mat`, packed at dst (gemm_pack.c). */
void loom_gemm_pack_block(const loom_gemm_plan *p, const loom_tensor *src, int is_a,
                          int64_t mat, int64_t panel, int64_t pc, char *dst);

/* The micro-kernel for a plan's variant and operand format. */
loom_gemm_ukr_fn loom_gemm_ukr_for(const loom_gemm_plan *p);

/* Element offset of panel `panel`'s k block starting at `pc` within one
 * packed matrix: blocks of kc steps are outermost ([kp/kc][panels][kc][width]),
 * so the micro-panels the compute loop visits one after another are
 * adjacent in memory. */
static inline int64_t loom_gemm_panel_offset(const loom_gemm_plan *p, int64_t panels,
                                      int64_t width, int64_t pc, int64_t panel) {
  int64_t kcur = p->kp - pc < p->kc ? p->kp - pc : p->kc;
  return (pc * panels + panel * kcur) * width;
}

/* Packs with AVX-512 (callers check the CPU runs it).
 * t32: `lanes` (<= width) lanes of 32-bit words, lane l's k-run contiguous
 * at src + l * lane_bytes, into dst [k][width]; lanes >= `lanes` get 0.
 * pairs16: rows kk of `lanes` (<= width, width a multiple of 32) 16-bit
 * values at src + kk * s_k, into k-pairs dst [ceil(k/2)][width][2]; a
 * missing last row and lanes >= `lanes` get 0.
 * rows32: rows kk of `lanes` (<= width <= 32) 32-bit words at src + kk *
 * s_k, into dst [k][width]; lanes >= `lanes` get 0. */
void loom_gemm_pack_rows32_avx512(uint32_t *dst, const uint32_t *src, int64_t s_k,
                                  int64_t lanes, int64_t width, int64_t k);
/* rows12x4: four adjacent 12-lane panels of rows32's layout at once, panel
 * q at dst + q * panel_stride: rows kk < k of `lanes` (<= 48) 32-bit words
 * at src + kk * s_k, lanes >= `lanes` 0. Each row's lines are read once,
 * where four rows32 passes would read them twice. */
void loom_gemm_pack_rows12x4_avx512(uint32_t *dst, int64_t panel_stride, const uint32_t *src,
                                    int64_t s_k, int64_t lanes, int64_t k);
/* pairs12x4: rows12x4 for bf16 k-pairs, four 12-lane panels of
 * [pairs][12][2] at dst + q * panel_stride (32-bit words): rows kk < k of
 * `lanes` (<= 48) 16-bit values at src + kk * s_k, rows 2p and 2p + 1
 * interleaved into pair p < `pairs`; rows past k and lanes >= `lanes` 0. */
void loom_gemm_pack_pairs12x4_avx512(uint32_t *dst, int64_t panel_stride, const uint16_t *src,
                                     int64_t s_k, int64_t lanes, int64_t k, int64_t pairs);
void loom_gemm_pack_t32_avx512(uint32_t *dst, const void *src,
                               int64_t lane_bytes, int64_t lanes, int64_t width,
                               int64_t k);
void loom_gemm_pack_pairs16_avx512(uint16_t *dst, const uint16_t *src,
                                   int64_t s_k, int64_t lanes, int64_t width,
                                   int64_t k);

/* n contiguous fp32 values to bf16, rounded to nearest even; with `low`,
 * their low parts x - bf16(x), rounded (0 where x is not finite). */
void loom_gemm_split_bf16_avx512(uint16_t *dst, const float *src, int64_t n, int low);

/* One AMX tile step of a transposed bf16 A: rows kk < run (<= 32) of
 * `lanes` (<= 32) values at src + kk * s_k, into dst[32 lanes][32 k];
 * lanes >= `lanes` and k >= run get 0. */
void loom_gemm_pack_amx_t16_avx512(uint16_t *dst, const uint16_t *src, int64_t s_k,
                                   int64_t lanes, int64_t run);

/* n fp32 values into contiguous bf16 (`bf16`) or fp16, rounded as the
 * scalar conversions of kernels/dtype.h. */
void loom_gemm_store_row16_avx512(uint16_t *dst, const float *src, int64_t n,
                                  int bf16);

#endif /* LOOM_KERNELS_GEMM_INTERNAL_H */
