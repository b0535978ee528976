/* loom/kernels/attention.h — scaled dot-product attention's names and
 * argument contracts, flash style: each query row streams over the keys
 * with an online softmax, so the L x S score matrix is never stored. Batch
 * and head dims are one leading dim BH, or, for the q, k, v, out, dout, dq,
 * dk and dv of the ROWS and BLOCKED kernels, two (B, H, n, d) with any
 * strides, head bh being (bh / H, bh % H): the heads of a fused projection
 * are read and written where they lie. Every driver provides these names.
 *
 * Masking: key j is dropped for query i when `causal` and j > i (the
 * top-left aligned lower triangle PyTorch uses), or when a bool mask holds
 * false; a float mask is added to the scaled scores. A query row that sees
 * no key gets output 0 and logsumexp -inf. Head dims are at most
 * LOOM_ATTENTION_MAX_HEAD_DIM; the tensors are q (BH, L, E), k (BH, S, E),
 * v (BH, S, Ev), mask? (BH, L, S) bool or float, any strides.
 *
 * "attention.plan" (a planner): tensors: [q, k, v, mask?] (shapes, dtypes,
 * strides; data is never read); no scalars. Fills a loom_attention_plan:
 * which kernels the forward and the backward launch, their ranges and
 * grains, and the forward's workspaces. The family chooses: an exact path
 * (arithmetic in double) for any float dtype and head dim, a blocked path
 * (float tiles) where the head dims fit its tiles, and on CPUs with bf16
 * tiles or vdpbf16ps a bf16 path without a mask. */
#ifndef LOOM_KERNELS_ATTENTION_CONTRACT_H
#define LOOM_KERNELS_ATTENTION_CONTRACT_H

#include <stdint.h>

#define LOOM_ATTENTION_MAX_HEAD_DIM 512

/* The kernels a plan names; scalars are [0].f scale, [1].i causal for all.
 *
 * LOOM_ATTENTION_ROWS (forward and backward), any float dtype:
 *  "attention.forward": tensors: [q, k, v, mask?, out (BH,L,Ev), lse (BH,L)].
 *  "attention.backward_q": grad of q, and delta_i = dout_i . out_i for the
 *    second pass. tensors: [dout (BH,L,Ev), q, k, v, mask?, out, lse,
 *    dq (BH,L,E), delta (BH,L)].
 *  "attention.backward_kv": grads of k and v, each key row summing over
 *    queries in order. tensors: [dout, q, k, v, mask?, lse, delta,
 *    dk (BH,S,E), dv (BH,S,Ev)].
 * LOOM_ATTENTION_BLOCKED: "attention.blocked_forward",
 *  "attention.blocked_backward_q", "attention.blocked_backward_kv", the same
 *  contracts, computed in float, sums in a fixed order whatever the chunks.
 * LOOM_ATTENTION_BF16 (forward only; bf16, no mask; rank-3 tensors, which
 *  the plan also accepts as rank 4): the weights are
 *  rounded to bf16 for the second product, as the CPU's fused kernels do;
 *  a row with a NaN or +inf score gets NaN. tensors: [q, k, v, out, lse
 *  (fp32)], then, when the plan's pack_range > 0, [k_packed, v_packed]:
 *  rank-1 bf16 workspaces of k_pack and v_pack elements, written by
 *  "attention.bf16_pack" over [0, pack_range) (grain pack_grain) and read
 *  by "attention.bf16_forward"; without them each item packs its own keys.
 * LOOM_ATTENTION_BF16_DECODE (forward only; the BF16 case of a few queries):
 *  "attention.bf16_decode", tensors [q, k, v, out, lse]: every key and
 *  value row read once for all queries of a head. */
enum {
  LOOM_ATTENTION_ROWS = 0,
  LOOM_ATTENTION_BLOCKED = 1,
  LOOM_ATTENTION_BF16 = 2,
  LOOM_ATTENTION_BF16_DECODE = 3,
};

typedef struct loom_attention_plan {
  int32_t forward;  /* LOOM_ATTENTION_*: the forward's kernels */
  int32_t backward; /* LOOM_ATTENTION_ROWS or _BLOCKED: the backward's */
  int64_t forward_range, forward_grain;
  int64_t pack_range, pack_grain; /* BF16: 0, or the pack's launch */
  int64_t k_pack, v_pack;         /* elements of the two bf16 workspaces */
  int64_t backward_q_range, backward_q_grain;
  int64_t backward_kv_range, backward_kv_grain;
} loom_attention_plan;

#endif /* LOOM_KERNELS_ATTENTION_CONTRACT_H */
