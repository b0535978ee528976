/* The kernel library's table: every family's named entry points. */
#include "kernels/registry.h"

#include <stddef.h>
#include <string.h>

extern const loom_kernel_entry loom_loss_kernels[];
extern const loom_kernel_entry loom_margin_loss_kernels[];
extern const loom_kernel_entry loom_distance_kernels[];
extern const loom_kernel_entry loom_pointwise_kernels[];
extern const loom_kernel_entry loom_copy_kernels[];
extern const loom_kernel_entry loom_fill_kernels[];
extern const loom_kernel_entry loom_random_kernels[];
extern const loom_kernel_entry loom_factory_kernels[];
extern const loom_kernel_entry loom_scan_kernels[];
extern const loom_kernel_entry loom_histogram_kernels[];
extern const loom_kernel_entry loom_frexp_kernels[];
extern const loom_kernel_entry loom_softmax_kernels[];
extern const loom_kernel_entry loom_norm_kernels[];
extern const loom_kernel_entry loom_norm_batch_act_kernels[];
extern const loom_kernel_entry loom_norm_batch_nhwc_kernels[];
extern const loom_kernel_entry loom_optim_kernels[];
extern const loom_kernel_entry loom_amp_scale_kernels[];
extern const loom_kernel_entry loom_rnn_kernels[];
extern const loom_kernel_entry loom_ctc_loss_kernels[];
extern const loom_kernel_entry loom_weight_norm_kernels[];
extern const loom_kernel_entry loom_reduce_kernels[];
extern const loom_kernel_entry loom_segment_reduce_kernels[];
extern const loom_kernel_entry loom_search_kernels[];
extern const loom_kernel_entry loom_sort_kernels[];
extern const loom_kernel_entry loom_index_kernels[];
extern const loom_kernel_entry loom_index_advanced_kernels[];
extern const loom_kernel_entry loom_embedding_kernels[];
extern const loom_kernel_entry loom_embedding_bag_kernels[];
extern const loom_kernel_entry loom_gemm_kernels[];
extern const loom_kernel_entry loom_attention_kernels[];
extern const loom_kernel_entry loom_padding_kernels[];
extern const loom_kernel_entry loom_grid_sample_kernels[];
extern const loom_kernel_entry loom_upsample_kernels[];
extern const loom_kernel_entry loom_upsample_nd_kernels[];
extern const loom_kernel_entry loom_grid_sample3d_kernels[];
extern const loom_kernel_entry loom_pool_fractional_kernels[];
extern const loom_kernel_entry loom_pool_kernels[];
extern const loom_kernel_entry loom_pool_nhwc_kernels[];
extern const loom_kernel_entry loom_im2col_kernels[];
extern const loom_kernel_entry loom_conv_kernels[];
extern const loom_kernel_entry loom_conv_nhwc_kernels[];
extern const loom_kernel_entry loom_ccl_kernels[];
extern const loom_kernel_entry loom_fft_kernels[];
extern const loom_kernel_entry loom_complex_kernels[];
extern const loom_kernel_entry loom_reduce_complex_kernels[];
extern const loom_kernel_entry loom_special_kernels[];
extern const loom_kernel_entry loom_linalg_kernels[];

static const loom_kernel_entry *const families[] = {
    loom_loss_kernels,
    loom_margin_loss_kernels,
    loom_distance_kernels,
    loom_pointwise_kernels,
    loom_copy_kernels,
    loom_fill_kernels,
    loom_random_kernels,
    loom_factory_kernels,
    loom_scan_kernels,
    loom_histogram_kernels,
    loom_frexp_kernels,
    loom_softmax_kernels,
    loom_norm_kernels,
    loom_norm_batch_act_kernels,
    loom_norm_batch_nhwc_kernels,
    loom_optim_kernels,
    loom_amp_scale_kernels,
    loom_rnn_kernels,
    loom_ctc_loss_kernels,
    loom_weight_norm_kernels,
    loom_reduce_kernels,
    loom_segment_reduce_kernels,
    loom_search_kernels,
    loom_sort_kernels,
    loom_index_kernels,
    loom_index_advanced_kernels,
    loom_embedding_kernels,
    loom_embedding_bag_kernels,
    loom_gemm_kernels,
    loom_attention_kernels,
    loom_padding_kernels,
    loom_grid_sample_kernels,
    loom_upsample_kernels,
    loom_upsample_nd_kernels,
    loom_grid_sample3d_kernels,
    loom_pool_fractional_kernels,
    loom_pool_kernels,
    loom_pool_nhwc_kernels,
    loom_im2col_kernels,
    loom_conv_kernels,
    loom_conv_nhwc_kernels,
    loom_ccl_kernels,
    loom_fft_kernels,
    loom_complex_kernels,
    loom_reduce_complex_kernels,
    loom_special_kernels,
    loom_linalg_kernels,
};

void loom_kernel_library_each(void (*visit)(const loom_kernel_entry *entry, void *user),
                              void *user) {
  for (size_t f = 0; f < sizeof families / sizeof *families; ++f)
    for (const loom_kernel_entry *e = families[f]; e->name; ++e) visit(e, user);
}

const loom_kernel_entry *loom_kernel_library_find(const char *name) {
  for (size_t f = 0; f < sizeof families / sizeof *families; ++f)
    for (const loom_kernel_entry *e = families[f]; e->name; ++e)
      if (!strcmp(e->name, name)) return e;
  return NULL;
}
