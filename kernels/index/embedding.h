/* kernels/index/embedding.h — the embedding gradient's kernels (contracts and
 * names in loom/kernels/embedding.h). */
#ifndef LOOM_KERNELS_EMBEDDING_H
#define LOOM_KERNELS_EMBEDDING_H

#include "loom/kernel_abi.h"
#include "loom/kernels/embedding.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_embedding_backward_bucket(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_embedding_backward_rows(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_embedding_renorm_rows(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_EMBEDDING_H */
