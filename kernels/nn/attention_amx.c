/* kernels/nn/attention_amx.c — bf16 attention, flash style, on AMX tiles: an
 * item of up to two blocks of 32 queries walks the keys 256 at a time,
 * every key block packed once beforehand; the scores of a block (32 x 256,
 * fp32) and its weighted values come from tdpbf16ps, the online softmax
 * between them from AVX-512 in fp32 (wide key blocks spread each row's
 * reductions and rescaling over many keys: 64 at a time took 4.2 ms where
 * 256 take 3.1, B=4 H=8 T=512 D=64). The weights are rounded to bf16 for
 * the second product, as the GEMM route rounds them (the CPU's fused
 * kernel may keep them in float). Past the packed key and value blocks, nothing leaves the core's
 * caches but the output.
 *
 * Tiles (palette 1, kernels/gemm/gemm_amx.c's configuration): 0-3 the 2x2
 * results, 4-5 the A halves (rows 0-15, 16-31), 6-7 the B halves. */

#include "kernels/nn/attention_bf16_flash.h"
#include "kernels/gemm/gemm_internal.h"

/* Scores of block u against the packed key block at k0 (kn keys), its
 * online softmax, and O += P V. */
static void attend_keys(const bf16_attn *a, q_block *u, int64_t k0, int64_t kn, const uint32_t *kp,
                        const uint16_t *vp, float *sb, uint16_t *pb) {
  const int64_t e = a->e, ev = a->ev;
  const uint16_t *qb = u->q;
  float *ob = u->o;
  /* scores: per group of 32 keys, 2 x 2 tiles over e in steps of 32 */
  for (int h = 0; h < KB / 32; ++h) {
    const uint32_t *group = kp + h * (e / 2) * 32;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c = 0; c < e / 32; ++c) {
      _tile_loadd(4, qb + 32 * c, e * 2);
      _tile_loadd(5, qb + 16 * e + 32 * c, e * 2);
      _tile_loadd(6, group + c * 16 * 32, 32 * 4);
      _tile_loadd(7, group + c * 16 * 32 + 16, 32 * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, sb + 32 * h, KB * 4);
    _tile_stored(1, sb + 32 * h + 16, KB * 4);
    _tile_stored(2, sb + 16 * KB + 32 * h, KB * 4);
    _tile_stored(3, sb + 16 * KB + 32 * h + 16, KB * 4);
  }
  bf16_attn_softmax(a, u, k0, kn, sb, pb);
  /* O += P V, 32 columns at a time over the groups of 32 keys, the
   * tiles starting from O */
  for (int64_t g = 0; g < ev; g += 32) {
    _tile_loadd(0, ob + g, ev * 4);
    _tile_loadd(1, ob + g + 16, ev * 4);
    _tile_loadd(2, ob + 16 * ev + g, ev * 4);
    _tile_loadd(3, ob + 16 * ev + g + 16, ev * 4);
    for (int h = 0; h < KB / 32; ++h) {
      const uint16_t *vh = vp + h * 16 * ev * 2;
      _tile_loadd(4, pb + 32 * h, KB * 2);
      _tile_loadd(5, pb + 16 * KB + 32 * h, KB * 2);
      _tile_loadd(6, vh + g * 2, ev * 4);
      _tile_loadd(7, vh + g * 2 + 32, ev * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, ob + g, ev * 4);
    _tile_stored(1, ob + g + 16, ev * 4);
    _tile_stored(2, ob + 16 * ev + g, ev * 4);
    _tile_stored(3, ob + 16 * ev + g + 16, ev * 4);
  }
}

int loom_attention_amx_pack(const loom_kernel_args *args, int64_t begin, int64_t end) {
  bf16_attn a;
  if (!bf16_attn_of(args, &a) || !a.kp) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t blocks = (a.s + KB - 1) / KB;
  for (int64_t it = begin; it < end; ++it) {
    const int64_t b = it / blocks, k0 = it % blocks * KB, kn = a.s - k0 < KB ? a.s - k0 : KB;
    pack_keys((uint32_t *)a.kp->data + it * (KB * a.e / 2), a.k, b, k0, kn, a.e, a.e_in);
    pack_values((uint16_t *)a.vp->data + it * (KB * a.ev), a.v, b, k0, kn, a.ev, a.ev_in);
  }
  return LOOM_OK;
}

int loom_attention_amx_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  bf16_attn a;
  if (!bf16_attn_of(args, &a)) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t blocks = (a.l + QB * QN - 1) / (QB * QN);
  loom_gemm_amx_begin();
  for (int64_t it = begin; it < end; ++it) attend_blocks(&a, it / blocks, it % blocks * QB * QN, attend_keys);
  loom_gemm_amx_end();
  return LOOM_OK;
}

/* Decoding: a few queries per head, each key and value row read once. */
enum { DQ = LOOM_ATTENTION_DECODE_QUERIES, DS = LOOM_ATTENTION_DECODE_KEYS };

/* the scores, then the bf16-rounded weights, of a head's queries */
static _Thread_local _Alignas(64) float decode_w[DQ * DS];

/* 16 bf16 of a row from column c (n of them live) as fp32 */
static inline __m512 bf16x16(const uint16_t *row, int64_t c, int64_t n) {
  const __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + c)), 16));
}

static void decode_head(const bf16_attn *a, int64_t b) {
  const int64_t nq = a->l, ce = (a->e_in + 15) / 16;
  _Alignas(64) float q[DQ][MAXE];
  int64_t seen[DQ], s_end = 0;
  for (int64_t i = 0; i < nq; ++i) {
    const uint16_t *qr = row16(a->q, b, i);
    for (int64_t c = 0; c < ce; ++c) _mm512_store_ps(q[i] + 16 * c, bf16x16(qr, 16 * c, a->e_in - 16 * c));
    seen[i] = a->causal && i + 1 < a->s ? i + 1 : a->s; /* top-left aligned */
    if (seen[i] > s_end) s_end = seen[i];
  }
  /* scores, each key row once for all queries */
  for (int64_t j = 0; j < s_end; ++j) {
    const uint16_t *kr = row16(a->k, b, j);
    __m512 kv[MAXE / 16];
    for (int64_t c = 0; c < ce; ++c) kv[c] = bf16x16(kr, 16 * c, a->e_in - 16 * c);
    for (int64_t i = 0; i < nq; ++i) {
      __m512 acc = _mm512_mul_ps(kv[0], _mm512_load_ps(q[i]));
      for (int64_t c = 1; c < ce; ++c) acc = _mm512_fmadd_ps(kv[c], _mm512_load_ps(q[i] + 16 * c), acc);
      decode_w[i * DS + j] = _mm512_reduce_add_ps(acc) * a->scale;
    }
  }
  /* softmax; the weights rounded to bf16, 0 for keys a query does not see */
  float l[DQ], m[DQ];
  int bad[DQ];
  for (int64_t i = 0; i < nq; ++i) {
    float *w = decode_w + i * DS;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int64_t j = 0; j < seen[i]; j += 16) {
      const __mmask16 live = seen[i] - j >= 16 ? (__mmask16)0xffff
                                               : (__mmask16)((1u << (seen[i] - j)) - 1u);
      const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live, w + j);
      vmax = _mm512_max_ps(vmax, x);
      nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    }
    m[i] = _mm512_reduce_max_ps(vmax);
    bad[i] = nan || m[i] == INFINITY;
    __m512 psum = _mm512_setzero_ps();
    for (int64_t j = 0; j < s_end; j += 16) {
      const int64_t left = seen[i] - j;
      const __mmask16 live = left >= 16 ? (__mmask16)0xffff
                             : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
      const __m512 p = _mm512_maskz_mov_ps(
          live, exp_weights(_mm512_sub_ps(_mm512_loadu_ps(w + j), _mm512_set1_ps(m[i]))));
      psum = _mm512_add_ps(psum, p);
      /* the weight as bf16, back in fp32 */
      const __m256i h = (__m256i)_mm512_cvtneps_pbh(p);
      _mm512_storeu_ps(w + j, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    l[i] = _mm512_reduce_add_ps(psum);
  }
  /* out = the weighted values / l, 64 columns at a time */
  for (int64_t g = 0; g < a->ev_in; g += 64) {
    const int64_t cn = (a->ev_in - g + 15) / 16 < 4 ? (a->ev_in - g + 15) / 16 : 4;
    __m512 acc[DQ][4];
    for (int64_t i = 0; i < nq; ++i)
      for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < s_end; ++j) {
      const uint16_t *vr = row16(a->v, b, j);
      __m512 vv[4];
      for (int64_t c = 0; c < cn; ++c) vv[c] = bf16x16(vr, g + 16 * c, a->ev_in - g - 16 * c);
      for (int64_t i = 0; i < nq; ++i) {
        const __m512 wj = _mm512_set1_ps(decode_w[i * DS + j]);
        for (int64_t c = 0; c < cn; ++c) acc[i][c] = _mm512_fmadd_ps(wj, vv[c], acc[i][c]);
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const __m512 inv = _mm512_set1_ps(bad[i] ? NAN : 1.0f / l[i]);
      uint16_t *orow = (uint16_t *)a->out->data + b * a->out->strides[0] + i * a->out->strides[1];
      for (int64_t c = 0; c < cn; ++c)
        _mm256_mask_storeu_epi16(orow + g + 16 * c, (__mmask16)lanes32(a->ev_in - g - 16 * c),
                                 (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[i][c], inv)));
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    float *lr = (float *)a->lse->data + b * a->lse->strides[0] + i * a->lse->strides[1];
    *lr = bad[i] ? NAN : m[i] + logf(l[i]);
  }
}

int loom_attention_amx_decode(const loom_kernel_args *args, int64_t begin, int64_t end) {
  bf16_attn a;
  if (!bf16_attn_of(args, &a) || a.kp || a.l > DQ || a.s > DS) return LOOM_ERROR_INVALID_ARGUMENT;
  for (int64_t b = begin; b < end; ++b) decode_head(&a, b);
  return LOOM_OK;
}
