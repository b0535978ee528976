/* kernels/nn/attention.h — the attention kernels and their planner (contracts
 * and names in loom/kernels/attention.h), with the geometry the planner
 * and the kernels share. */
#ifndef LOOM_KERNELS_ATTENTION_H
#define LOOM_KERNELS_ATTENTION_H

#include "loom/kernel_abi.h"
#include "loom/kernels/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An operand's heads: rank 3 (BH, n, d), or rank 4 (B, H, n, d) with any
 * strides, so that heads split from a fused projection, whose batch and
 * head dims do not merge into one stride, are read where they lie. Head
 * bh of a rank-4 operand is (bh / H, bh % H), the order of the flattened
 * dims. Returns 0, or -1 for another rank. */
static inline int loom_attention_shape(const loom_tensor *t, int64_t *bh, int64_t *n,
                                       int64_t *d) {
  if (t->rank != 3 && t->rank != 4) return -1;
  *bh = t->rank == 4 ? t->sizes[0] * t->sizes[1] : t->sizes[0];
  *n = t->sizes[t->rank - 2];
  *d = t->sizes[t->rank - 1];
  return 0;
}

/* Element offset of head bh's first row; its rows' and elements' strides
 * (0 for an absent mask's empty descriptor). */
static inline int64_t loom_attention_head(const loom_tensor *t, int64_t bh) {
  if (t->rank == 4)
    return bh / t->sizes[1] * t->strides[0] + bh % t->sizes[1] * t->strides[1];
  return t->rank == 3 ? bh * t->strides[0] : 0;
}
static inline int64_t loom_attention_row_stride(const loom_tensor *t) {
  return t->rank >= 3 ? t->strides[t->rank - 2] : 0;
}
static inline int64_t loom_attention_col_stride(const loom_tensor *t) {
  return t->rank >= 3 ? t->strides[t->rank - 1] : 0;
}

/* The exact row kernels (kernels/nn/attention.c): one launch item per query
 * row (forward, backward_q) or key row (backward_kv); arithmetic in
 * double. Ranges BH*L and BH*S. */
int loom_attention_forward(const loom_kernel_args *args, int64_t begin,
                           int64_t end);
int loom_attention_backward_q(const loom_kernel_args *args, int64_t begin,
                              int64_t end);
int loom_attention_backward_kv(const loom_kernel_args *args, int64_t begin,
                               int64_t end);

/* ---- blocked path (kernels/nn/attention_blocked.c) ---------------------------
 * fp32/bf16/fp16 tensors with head dims up to
 * LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM, computed in float on tiles: a launch
 * item is a block of LOOM_ATTENTION_BLOCK rows (queries for the forward and
 * backward_q, keys for backward_kv), so the ranges are BH * ceil(L / BLOCK)
 * and BH * ceil(S / BLOCK). Sums run in a fixed tile order, whatever the
 * block. A block of 64 rows reuses each transposed tile of the other side
 * for 64 rows; its tiles take up to 550 KiB of the running thread's stack. */
#define LOOM_ATTENTION_BLOCK 64
#define LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM 256

int loom_attention_blocked_forward(const loom_kernel_args *args, int64_t begin,
                                   int64_t end);
int loom_attention_blocked_backward_q(const loom_kernel_args *args,
                                      int64_t begin, int64_t end);
int loom_attention_blocked_backward_kv(const loom_kernel_args *args,
                                       int64_t begin, int64_t end);

/* The bf16 forward on AMX tiles (kernels/nn/attention_amx.c), flash style:
 * items of LOOM_ATTENTION_AMX_QUERIES queries walk the keys
 * LOOM_ATTENTION_AMX_KEYS at a time. Head dims up to
 * LOOM_ATTENTION_AMX_MAX_HEAD_DIM (the tiles take them in steps of 32,
 * zero-padded); no mask; S > 0; AMX CPUs only (the pack on any
 * AVX512-BF16 CPU). tensors [0]-[3] bf16 with
 * unit last stride.
 * The pack, range BH * ceil(S / KEYS), writes every block of KEYS keys and
 * values in the tiles' layout into [5] and [6] (BH * ceil(S / KEYS) * KEYS
 * * E32 and * Ev32 bf16, E32 and Ev32 the head dims rounded up to 32); the
 * forward, range BH * ceil(L / QUERIES), reads them. Without [5] and [6]
 * (and the pack), each item of the forward packs its key blocks as it goes:
 * for one item per head (L <= QUERIES, decoding), where the blocks would
 * serve no other item. */
#define LOOM_ATTENTION_AMX_MAX_HEAD_DIM 256
#define LOOM_ATTENTION_AMX_KEYS 256
#define LOOM_ATTENTION_AMX_QUERIES 64
int loom_attention_amx_pack(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_attention_amx_forward(const loom_kernel_args *args, int64_t begin, int64_t end);
/* The same forward on vdpbf16ps (kernels/nn/attention_avx512bf16.c), for
 * AVX512-BF16 CPUs without AMX: the same tensors, items, packs and
 * arithmetic but for the order of the products' sums (pairs along the head
 * dim and the keys, in order). */
int loom_attention_avx512bf16_forward(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Decoding (kernels/nn/attention_amx.c, AVX-512 and AVX512-BF16, no tiles): up to DECODE_QUERIES
 * queries of a head against up to DECODE_KEYS keys; the same tensors and
 * scalars as the forward without [5] and [6], the same arithmetic but for
 * the order of the sums (the scores in fp32, softmax over all keys at once,
 * weights rounded to bf16). range: BH (one head per item). */
#define LOOM_ATTENTION_DECODE_QUERIES 4
#define LOOM_ATTENTION_DECODE_KEYS 16384
int loom_attention_amx_decode(const loom_kernel_args *args, int64_t begin, int64_t end);

/* "attention.plan" for this process's GEMM variant; loom_attention_plan_for
 * plans as if the bf16 kernels ran (`amx`: AMX tiles or vdpbf16ps) or not, so that tests check the
 * plans of CPUs they do not run on. */
int loom_attention_planner(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_attention_plan_for(const loom_kernel_args *args, int amx, loom_attention_plan *out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_ATTENTION_H */
