/* kernels/nn/attention_avx512bf16.c — bf16 attention, flash style, on
 * vdpbf16ps (AVX512-BF16 CPUs without AMX): the AMX forward's items, packs
 * and online softmax (kernels/nn/attention_bf16_flash.h), with both products
 * from _mm512_dpbf16_ps over the packed bf16 pairs. Scores: 8 queries x 32
 * keys a step, each query pair broadcast against the key block's pairs;
 * O += P V: 4 queries x 64 columns a step, each weight pair broadcast against
 * the value block's pairs. Sums run over the head dim and the keys in pair
 * order, whatever the threads. */

#include "kernels/nn/attention_bf16_flash.h"

/* Scores of rows [0, rows) (a multiple of 8) of u against key groups
 * [0, groups) of 32 keys of the packed block kp, unscaled, into sb. */
static void dp_scores(const uint32_t *qw, int64_t e2, const uint32_t *kp, int64_t groups,
                      int64_t rows, float *sb) {
  for (int64_t h = 0; h < groups; ++h) {
    const uint32_t *group = kp + h * e2 * 32;
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
      __m512 acc[8][2];
      for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (int64_t p = 0; p < e2; ++p) {
        const __m512bh k0 = (__m512bh)_mm512_loadu_si512(group + p * 32);
        const __m512bh k1 = (__m512bh)_mm512_loadu_si512(group + p * 32 + 16);
        for (int r = 0; r < 8; ++r) {
          const __m512bh qp = (__m512bh)_mm512_set1_epi32((int)qw[(i0 + r) * e2 + p]);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qp, k0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qp, k1);
        }
      }
      for (int r = 0; r < 8; ++r) {
        _mm512_store_ps(sb + (i0 + r) * KB + 32 * h, acc[r][0]);
        _mm512_store_ps(sb + (i0 + r) * KB + 32 * h + 16, acc[r][1]);
      }
    }
  }
}

/* O[rows, g .. g + 16 CN) += P V over key pairs [0, pairs) of the packed
 * value block vp (ev columns), rows a multiple of 4. */
static inline void dp_values(float *ob, int64_t ev, int64_t g, const uint32_t *pw,
                             const uint32_t *vw, int64_t pairs, int64_t rows, const int cn) {
  for (int64_t i0 = 0; i0 < rows; i0 += 4) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < cn; ++c) acc[r][c] = _mm512_load_ps(ob + (i0 + r) * ev + g + 16 * c);
    for (int64_t p = 0; p < pairs; ++p) {
      __m512bh vv[4];
      for (int c = 0; c < cn; ++c)
        vv[c] = (__m512bh)_mm512_loadu_si512(vw + p * ev + g + 16 * c);
      for (int r = 0; r < 4; ++r) {
        const __m512bh wp = (__m512bh)_mm512_set1_epi32((int)pw[(i0 + r) * (KB / 2) + p]);
        for (int c = 0; c < cn; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wp, vv[c]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < cn; ++c) _mm512_store_ps(ob + (i0 + r) * ev + g + 16 * c, acc[r][c]);
  }
}

/* Scores of block u against the packed key block at k0 (kn keys), its
 * online softmax, and O += P V; keys past those any of its rows sees (kn,
 * or causal, its last query) are skipped, their weights being 0. */
static void dp_attend_keys(const bf16_attn *a, q_block *u, int64_t k0, int64_t kn,
                           const uint32_t *kp, const uint16_t *vp, float *sb, uint16_t *pb) {
  int64_t live = kn;
  if (a->causal && u->q0 + u->qn - k0 < live) live = u->q0 + u->qn - k0;
  const int64_t groups = (live + 31) / 32;
  const int64_t rows8 = (u->qn + 7) / 8 * 8, rows4 = (u->qn + 3) / 4 * 4;
  dp_scores((const uint32_t *)u->q, a->e / 2, kp, groups, rows8, sb);
  bf16_attn_softmax(a, u, k0, kn, sb, pb);
  const uint32_t *pw = (const uint32_t *)pb, *vw = (const uint32_t *)vp;
  int64_t g = 0;
  for (; g + 64 <= a->ev; g += 64) dp_values(u->o, a->ev, g, pw, vw, groups * 16, rows4, 4);
  if (g < a->ev) dp_values(u->o, a->ev, g, pw, vw, groups * 16, rows4, 2); /* ev % 64 == 32 */
}

int loom_attention_avx512bf16_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  bf16_attn a;
  if (!bf16_attn_of(args, &a)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t blocks = (a.l + QB * QN - 1) / (QB * QN);
  for (int64_t it = begin; it < end; ++it)
    attend_blocks(&a, it / blocks, it % blocks * QB * QN, dp_attend_keys);
  return LOOM_OK;
}
