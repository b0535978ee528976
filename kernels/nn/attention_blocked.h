/* The two builds of the blocked attention kernels (attention_blocked.c for
 * the baseline ISA, attention_blocked_avx512.c for AVX-512): the entry
 * points of attention.h pick one at run time; tests call each directly. */
#ifndef LOOM_KERNELS_NN_ATTENTION_BLOCKED_H
#define LOOM_KERNELS_NN_ATTENTION_BLOCKED_H

#include <stdint.h>

#include "loom/kernel_abi.h"

int loom_attention_blocked_forward_impl(const loom_kernel_args *, int64_t, int64_t);
int loom_attention_blocked_backward_q_impl(const loom_kernel_args *, int64_t, int64_t);
int loom_attention_blocked_backward_kv_impl(const loom_kernel_args *, int64_t, int64_t);
int loom_attention_blocked_forward_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_attention_blocked_backward_q_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_attention_blocked_backward_kv_impl_avx512(const loom_kernel_args *, int64_t, int64_t);

#endif
