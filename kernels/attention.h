/* kernels/attention.h — scaled dot-product attention, flash style: each
 * query row streams over the keys with an online softmax, so the L x S score
 * matrix is never stored. Batch and head dims are flattened into one leading
 * dim BH by the caller. Any float dtype, any strides; arithmetic in double.
 *
 * Masking: key j is dropped for query i when `causal` and j > i (the
 * top-left aligned lower triangle PyTorch uses), or when a bool mask holds
 * false; a float mask is added to the scaled scores. A query row that sees no
 * key gets output 0 and logsumexp -inf. Head dims are at most
 * LOOM_ATTENTION_MAX_HEAD_DIM. */
#ifndef LOOM_KERNELS_ATTENTION_H
#define LOOM_KERNELS_ATTENTION_H

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ATTENTION_MAX_HEAD_DIM 512

/* Range BH*L. tensors: [q (BH,L,E), k (BH,S,E), v (BH,S,Ev), mask? (BH,L,S),
 * out (BH,L,Ev), lse (BH,L)]; scalars: [scale (f), causal]. */
int loom_attention_forward(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

/* Range BH*L: grad of q, and delta_i = dout_i . out_i for the second pass.
 * tensors: [dout (BH,L,Ev), q, k, v, mask?, out, lse, dq (BH,L,E),
 *           delta (BH,L)]; scalars: [scale, causal]. */
int loom_attention_backward_q(const loom_kernel_args *args, int64_t begin,
                              int64_t end);

/* Range BH*S: grads of k and v, each key row summing over queries in order.
 * tensors: [dout, q, k, v, mask?, lse, delta, dk (BH,S,E), dv (BH,S,Ev)];
 * scalars: [scale, causal]. */
int loom_attention_backward_kv(const loom_kernel_args *args, int64_t begin,
                               int64_t end);

/* ---- blocked fp32 path ---------------------------------------------------
 * The same contracts for fp32/bf16/fp16 tensors with head dims up to
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

/* The forward on AMX tiles (kernels/attention_amx.c), bf16, flash style:
 * items of LOOM_ATTENTION_AMX_QUERIES queries walk the keys
 * LOOM_ATTENTION_AMX_KEYS at a time, the weights rounded to bf16 for the
 * second product. Head dims up to LOOM_ATTENTION_AMX_MAX_HEAD_DIM (the
 * tiles take them in steps of 32, zero-padded); no mask; S > 0; AMX CPUs
 * only.
 * Two launches over the same arguments: the pack, range BH * ceil(S /
 * KEYS), writes every block of KEYS keys and values in the tiles' layout
 * into [5] and [6]; the forward, range BH * ceil(L / QUERIES), reads them.
 * Without [5] and [6] (and the pack), each item of the forward packs its
 * key blocks as it goes: for one item per head (L <= QUERIES, decoding),
 * where the blocks would serve no other item.
 * tensors: [0] q (BH, L, E), [1] k (BH, S, E), [2] v (BH, S, Ev), [3] out
 * (BH, L, Ev), all bf16 with unit last stride; [4] lse (BH, L) fp32;
 * [5], [6] rank-1 workspaces of BH * ceil(S / KEYS) * KEYS * E32 and *
 * Ev32 bf16, E32 and Ev32 the head dims rounded up to 32 (names
 * LOOM_ATTENTION_AMX_*).
 * scalars: [0].f scale, [1].i causal. A row with a NaN or +inf score gets
 * NaN. */
#define LOOM_ATTENTION_AMX_MAX_HEAD_DIM 256
#define LOOM_ATTENTION_AMX_KEYS 256
#define LOOM_ATTENTION_AMX_QUERIES 64
int loom_attention_amx_pack(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Decoding (kernels/attention_amx.c, AVX-512): up to DECODE_QUERIES
 * queries of a head against up to DECODE_KEYS keys, every key and value
 * row read once for all of them; the same tensors and scalars as the
 * forward without [5] and [6], the same arithmetic but for the order of
 * the sums (the scores in fp32, softmax over all keys at once, weights
 * rounded to bf16). range: BH (one head per item). */
#define LOOM_ATTENTION_DECODE_QUERIES 4
#define LOOM_ATTENTION_DECODE_KEYS 16384
int loom_attention_amx_decode(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_attention_amx_forward(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_ATTENTION_H */
