/* kernels/linalg/linalg.h — the dense linear algebra kernels (contracts and
 * names in loom/kernels/linalg.h). */
#ifndef LOOM_KERNELS_LINALG_H
#define LOOM_KERNELS_LINALG_H

#include "loom/kernel_abi.h"
#include "loom/kernels/linalg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether `t` is a batch of `batch` column-major matrices of `dtype`, as
 * the contract requires; and a batch of int32 vectors of rank `rank` (1:
 * one value per item; 2: at least `k` values per item). */
int loom_linalg_matrix_ok(const loom_tensor *t, int32_t dtype, int64_t batch);
int loom_linalg_ints_ok(const loom_tensor *t, int rank, int64_t batch, int64_t k);

int loom_linalg_cholesky(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_lu(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_trsm(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_lu_solve(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_lu_perm(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_geqrf(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_orgqr(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_ormqr(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_eigh(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_linalg_svd(const loom_kernel_args *args, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_LINALG_H */
