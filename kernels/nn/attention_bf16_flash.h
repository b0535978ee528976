/* kernels/nn/attention_bf16_flash.h — what the two bf16 flash-attention
 * forwards share (kernels/nn/attention_amx.c on AMX tiles,
 * kernels/nn/attention_avx512bf16.c on vdpbf16ps): the key and value blocks
 * packed into bf16 pairs, a block of queries' running state, its online
 * softmax in fp32 (the weights rounded to bf16 for the second product), and
 * the walk of an item's query blocks over the key blocks. Included only by
 * files built with AVX512-BF16. */
#ifndef LOOM_KERNELS_NN_ATTENTION_BF16_FLASH_H
#define LOOM_KERNELS_NN_ATTENTION_BF16_FLASH_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/nn/attention.h"
#include "kernels/gemm/transpose_avx512.h"
#include "loom/status.h"

enum { QB = 32, KB = LOOM_ATTENTION_AMX_KEYS, MAXE = LOOM_ATTENTION_AMX_MAX_HEAD_DIM };

/* exp(x) for x <= 0 to about 3e-6 relative, 0 below -87 (the -inf of
 * hidden keys included): 2^n 2^f, t = x log2(e), n = t rounded, f = t - n
 * in [-1/2, 1/2], 2^f by its degree-5 Taylor polynomial. Plenty for
 * weights rounded to bf16. */
static inline __m512 exp_weights(__m512 x) {
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.3333558146e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108665e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650696e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718056e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(live, p, n);
}

/* e and ev are the head dims rounded up to 32, the tiles' steps, with
 * zeros past e_in and ev_in, the tensors' own. */
typedef struct bf16_attn {
  const loom_tensor *q, *k, *v, *out, *lse, *kp, *vp;
  int64_t l, s, e, ev, e_in, ev_in;
  float scale;
  int causal;
} bf16_attn;

/* Rows [r0, r0 + n) of t[b] (bf16, unit last stride, `cols` wide) into
 * dst rows `ld` apart; rows past n and columns past cols are zero. */
static inline void load_rows16(uint16_t *dst, int64_t ld, const loom_tensor *t, int64_t b, int64_t r0,
                        int64_t n, int64_t rows, int64_t cols) {
  memset(dst, 0, (size_t)(rows * ld) * sizeof(uint16_t));
  for (int64_t r = 0; r < n && r < rows; ++r)
    memcpy(dst + r * ld, (const uint16_t *)t->data + b * t->strides[0] + (r0 + r) * t->strides[1],
           (size_t)cols * sizeof(uint16_t));
}

/* Lanes [0, n) of 32, clipped. */
static inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? ~(__mmask32)0 : n <= 0 ? (__mmask32)0 : (((__mmask32)1 << n) - 1u);
}

/* Row r of t[b] (bf16, unit last stride). */
static inline const uint16_t *row16(const loom_tensor *t, int64_t b, int64_t r) {
  return (const uint16_t *)t->data + b * t->strides[0] + r * t->strides[1];
}

/* The key block at k0 (kn keys, the rest zero) as the B operand of Q K^T,
 * in groups of 32 keys: kp[group][c][pair r][key j] holds K's elements
 * 32c + 2r, 32c + 2r + 1 of key 32 group + j (32-bit words). */
static inline void pack_keys(uint32_t *kp, const loom_tensor *k, int64_t b, int64_t k0, int64_t kn,
                      int64_t e, int64_t e_in) {
  for (int64_t q = 0; q < KB / 16; ++q) { /* 16 keys at a time */
    uint32_t *group = kp + q / 2 * (e / 2) * 32;
    for (int64_t c = 0; c < e / 32; ++c) {
      const __mmask32 cols = lanes32(e_in - 32 * c);
      __m512i r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = 16 * q + j < kn
                   ? _mm512_maskz_loadu_epi16(cols, row16(k, b, k0 + 16 * q + j) + 32 * c)
                   : _mm512_setzero_si512();
      loom_gemm_transpose16(r); /* r[p] = pair p of the 16 keys */
      for (int p = 0; p < 16; ++p)
        _mm512_storeu_si512(group + (c * 16 + p) * 32 + 16 * (q % 2), r[p]);
    }
  }
}

/* The value block at k0 (kn rows, the rest zero) as the B operand of P V:
 * vp[pair r][col][2] holds values 2r and 2r + 1 of each column. */
static inline void pack_values(uint16_t *vp, const loom_tensor *v, int64_t b, int64_t k0, int64_t kn,
                        int64_t ev, int64_t ev_in) {
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  for (int64_t p = 0; p < KB / 2; ++p) {
    const uint16_t *v0 = 2 * p < kn ? row16(v, b, k0 + 2 * p) : NULL;
    const uint16_t *v1 = 2 * p + 1 < kn ? row16(v, b, k0 + 2 * p + 1) : NULL;
    for (int64_t g = 0; g < ev; g += 32) {
      const __mmask32 cols = lanes32(ev_in - g);
      const __m512i r0 = v0 ? _mm512_maskz_loadu_epi16(cols, v0 + g) : _mm512_setzero_si512();
      const __m512i r1 = v1 ? _mm512_maskz_loadu_epi16(cols, v1 + g) : _mm512_setzero_si512();
      _mm512_storeu_si512(vp + (p * ev + g) * 2, _mm512_permutex2var_epi16(r0, lo, r1));
      _mm512_storeu_si512(vp + (p * ev + g) * 2 + 32, _mm512_permutex2var_epi16(r0, hi, r1));
    }
  }
}

/* The running state of one block of 32 queries. */
typedef struct q_block {
  _Alignas(64) uint16_t q[QB * MAXE];
  _Alignas(64) float o[QB * MAXE];
  float m[QB], l[QB];
  int bad[QB]; /* a NaN or +inf score: the row's result is NaN */
  int64_t q0, qn;
} q_block;

/* The online softmax of block u's scores sb against the key block at k0
 * (kn keys): the scores scaled in place, the bf16 weights into pb, the
 * running max, sum and output rescaled. */
static inline void bf16_attn_softmax(const bf16_attn *a, q_block *u, int64_t k0, int64_t kn,
                                     float *sb, uint16_t *pb) {
  const int64_t ev = a->ev, q0 = u->q0, qn = u->qn;
  float *ob = u->o, *m = u->m, *l = u->l;
  int *bad = u->bad;
  /* online softmax, row by row; the rows past qn, whose results are never
   * read, keep the weights pb has (zero, or another block's) */
  const __m512 vs = _mm512_set1_ps(a->scale), ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < qn; ++i) {
    float *srow = sb + i * KB;
    uint16_t *prow = pb + i * KB;
    /* keys this row sees: below kn, and (causal) up to its own index */
    int64_t seen = kn;
    if (a->causal && q0 + i - k0 + 1 < seen) seen = q0 + i - k0 + 1 > 0 ? q0 + i - k0 + 1 : 0;
    /* the scaled scores, hidden keys -inf, back in place; their max */
    __m512 vmax = ninf;
    __mmask16 nan = 0;
    for (int64_t c = 0; c < KB; c += 16) {
      const int64_t left = seen - c;
      const __mmask16 vis = left >= 16 ? (__mmask16)0xffff
                            : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
      const __m512 x = _mm512_mask_mul_ps(ninf, vis, _mm512_load_ps(srow + c), vs);
      _mm512_store_ps(srow + c, x);
      vmax = _mm512_max_ps(vmax, x);
      nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    }
    const float bm = _mm512_reduce_max_ps(vmax);
    if (nan || bm == INFINITY) bad[i] = 1; /* a NaN or +inf score */
    const float mn = bm > m[i] ? bm : m[i];
    if (mn == -INFINITY || bad[i]) { /* nothing seen yet: weights 0, sums as they are */
      memset(prow, 0, KB * sizeof(uint16_t));
      continue;
    }
    /* 0 when m[i] is -inf, exactly 1 when the max stays */
    const float alpha = _mm512_cvtss_f32(exp_weights(_mm512_set1_ps(m[i] - mn)));
    const __m512 vm = _mm512_set1_ps(mn);
    __m512 psum = _mm512_setzero_ps();
    for (int64_t c = 0; c < KB; c += 16) {
      const __m512 p = exp_weights(_mm512_sub_ps(_mm512_load_ps(srow + c), vm));
      psum = _mm512_add_ps(psum, p);
      _mm256_store_si256((__m256i *)(prow + c), (__m256i)_mm512_cvtneps_pbh(p));
    }
    l[i] = l[i] * alpha + _mm512_reduce_add_ps(psum);
    m[i] = mn;
    if (alpha != 1.0f) {
      const __m512 va = _mm512_set1_ps(alpha);
      for (int64_t c = 0; c < ev; c += 16)
        _mm512_store_ps(ob + i * ev + c, _mm512_mul_ps(va, _mm512_load_ps(ob + i * ev + c)));
    }
  }
}

/* The scores of block u against a packed key block, its softmax and
 * O += P V (sb and pb: QB x KB scratch). */
typedef void (*bf16_attend_fn)(const bf16_attn *a, q_block *u, int64_t k0, int64_t kn,
                               const uint32_t *kp, const uint16_t *vp, float *sb, uint16_t *pb);

/* Up to QN blocks of 32 queries of head b from q0, each key block attended
 * by `attend`. */
enum { QN = LOOM_ATTENTION_AMX_QUERIES / QB };
static inline void attend_blocks(const bf16_attn *a, int64_t b, int64_t q0, bf16_attend_fn attend) {
  _Alignas(64) uint16_t pb[QB * KB];
  _Alignas(64) float sb[QB * KB];
  /* the key and value blocks, when no pack launch wrote them */
  _Alignas(64) uint32_t own_kp[KB * MAXE / 2];
  _Alignas(64) uint16_t own_vp[KB * MAXE];
  q_block blk[QN];
  const int64_t e = a->e, ev = a->ev;
  memset(pb, 0, sizeof pb);
  int nb = 0;
  for (; nb < QN && q0 + nb * QB < a->l; ++nb) {
    q_block *u = &blk[nb];
    u->q0 = q0 + nb * QB;
    u->qn = a->l - u->q0 < QB ? a->l - u->q0 : QB;
    load_rows16(u->q, e, a->q, b, u->q0, u->qn, QB, a->e_in);
    memset(u->o, 0, (size_t)(QB * ev) * sizeof(float));
    for (int i = 0; i < QB; ++i) u->m[i] = -INFINITY, u->l[i] = 0.0f, u->bad[i] = 0;
  }
  /* causal: keys past the last query are hidden from all of them */
  const int64_t last = blk[nb - 1].q0 + blk[nb - 1].qn;
  const int64_t s_end = a->causal && last < a->s ? last : a->s;
  for (int64_t k0 = 0; k0 < s_end; k0 += KB) {
    const int64_t kn = s_end - k0 < KB ? s_end - k0 : KB;
    const int64_t packed = b * ((a->s + KB - 1) / KB) + k0 / KB; /* the pack's item */
    const uint32_t *kp = own_kp;
    const uint16_t *vp = own_vp;
    if (a->kp) {
      kp = (const uint32_t *)a->kp->data + packed * (KB * e / 2);
      vp = (const uint16_t *)a->vp->data + packed * (KB * ev);
    } else {
      pack_keys(own_kp, a->k, b, k0, kn, e, a->e_in);
      pack_values(own_vp, a->v, b, k0, kn, ev, a->ev_in);
    }
    for (int j = 0; j < nb; ++j)
      if (!a->causal || blk[j].q0 + blk[j].qn > k0) /* else it sees none of these keys */
        attend(a, &blk[j], k0, kn, kp, vp, sb, pb);
  }
  for (int j = 0; j < nb; ++j) {
    const q_block *u = &blk[j];
    for (int64_t i = 0; i < u->qn; ++i) {
      const float inv = u->bad[i] ? NAN : 1.0f / u->l[i];
      uint16_t *orow = (uint16_t *)a->out->data + b * a->out->strides[0] +
                       (u->q0 + i) * a->out->strides[1];
      for (int64_t c = 0; c < a->ev_in; c += 16) {
        const __m512 o = _mm512_mul_ps(_mm512_load_ps(u->o + i * ev + c), _mm512_set1_ps(inv));
        _mm256_mask_storeu_epi16(orow + c, (__mmask16)lanes32(a->ev_in - c),
                                 (__m256i)_mm512_cvtneps_pbh(o));
      }
      float *lr = (float *)a->lse->data + b * a->lse->strides[0] + (u->q0 + i) * a->lse->strides[1];
      *lr = u->bad[i] ? NAN : u->m[i] + logf(u->l[i]);
    }
  }
}

/* The shapes of the kernels' tensors (kernels/nn/attention.h); 0 if wrong. */
static inline int bf16_attn_of(const loom_kernel_args *args, bf16_attn *a) {
  if ((args->num_tensors != 5 && args->num_tensors != 7) || args->num_scalars != 2) return 0;
  const loom_tensor *t = args->tensors;
  const int packed = args->num_tensors == 7;
  *a = (bf16_attn){.q = &t[0], .k = &t[1], .v = &t[2], .out = &t[3], .lse = &t[4],
                  .kp = packed ? &t[5] : NULL, .vp = packed ? &t[6] : NULL,
                  .l = t[0].sizes[1], .s = t[1].sizes[1], .e = (t[0].sizes[2] + 31) / 32 * 32,
                  .ev = (t[2].sizes[2] + 31) / 32 * 32, .e_in = t[0].sizes[2],
                  .ev_in = t[2].sizes[2], .scale = (float)args->scalars[0].f,
                  .causal = args->scalars[1].i != 0};
  for (int i = 0; i < 4; ++i)
    if (t[i].rank != 3 || t[i].dtype != LOOM_BFLOAT16 || t[i].strides[2] != 1) return 0;
  const int64_t bh = t[0].sizes[0], blocks = (a->s + KB - 1) / KB;
  return t[4].rank == 2 && t[4].dtype == LOOM_FLOAT32 && t[1].sizes[0] == bh &&
         t[2].sizes[0] == bh && t[1].sizes[2] == a->e_in && t[2].sizes[1] == a->s &&
         t[3].sizes[0] == bh && t[3].sizes[1] == a->l && t[3].sizes[2] == a->ev_in &&
         a->e <= MAXE && a->ev <= MAXE && a->e_in > 0 && a->ev_in > 0 && a->s > 0 &&
         (!packed ||
          (t[5].rank == 1 && t[6].rank == 1 &&
           t[5].sizes[0] * loom_dtype_size(t[5].dtype) >= bh * blocks * KB * a->e * 2 &&
           t[6].sizes[0] * loom_dtype_size(t[6].dtype) >= bh * blocks * KB * a->ev * 2));
}

#endif /* LOOM_KERNELS_NN_ATTENTION_BF16_FLASH_H */
