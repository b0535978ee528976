/* loom/kernels/ctc_loss.h — the connectionist temporal classification loss
 * kernels' names and argument contracts (Graves et al., ICML 2006), in log
 * space, as PyTorch's CPU backend defines it: the forward recursion
 * (alphas, the negative log-likelihood) and the backward one (betas, the
 * gradient with respect to the log-probabilities). Every driver provides
 * these names.
 *
 * log_probs is [T, N, C] (any strides), float32 or float64. targets are
 * int32 or int64, either [N, S] padded or 1-d, the samples' targets
 * concatenated (any stride). Sample b's label sequence l' of length
 * 2 * L_b + 1 is blank, l_0, blank, l_1, ..., blank.
 *
 * Range N, one sample per item: each sample's recursions run in order within
 * one call, so results never depend on the chunking. Arithmetic is in
 * double; stored values are rounded once to the tensor's dtype.
 *
 * Both kernels take scalars [blank, zero_infinity, input_lengths[0..N),
 * target_lengths[0..N)] (2 + 2N values), lengths checked by the caller
 * (0 <= input length <= T; target length >= 0, within targets and
 * log_alpha). A target outside [0, C) fails with
 * LOOM_ERROR_INDEX_OUT_OF_RANGE. */
#ifndef LOOM_KERNELS_CTC_LOSS_CONTRACT_H
#define LOOM_KERNELS_CTC_LOSS_CONTRACT_H

/* "ctc_loss.forward":
 * tensors: [log_probs, targets, neg_log_likelihood [N], log_alpha [N, T, W]]
 * with W >= 2 * max(target_lengths) + 1 (any strides). log_alpha[b][t][s]
 * is log alpha_t(s) for t < input length and s < 2 * L_b + 1, -inf
 * elsewhere. An input of length 0 has loss 0 for an empty target, else inf.
 *
 * "ctc_loss.backward":
 * tensors: [grad_out [N], log_probs, targets, neg_log_likelihood [N],
 *           log_alpha [N, T, W], grad [T, N, C], scratch]
 * grad (any strides) receives, for t < input length,
 *   (exp(lp) - exp(log(sum over s with l'_s = c of alpha_t(s) beta_t(s))
 *                  + nll - lp)) * grad_out[b]
 * and 0 for later t. With zero_infinity, a sample whose loss is inf gets a
 * zero gradient. scratch is a contiguous double tensor [N, 2 * W + C]. */

#endif /* LOOM_KERNELS_CTC_LOSS_CONTRACT_H */
