/* The linear algebra family's named entry points (loom/kernels/linalg.h). */
#include "kernels/linalg/linalg.h"

#include <stddef.h>

#include "kernels/registry.h"

const loom_kernel_entry loom_linalg_kernels[] = {
    {"linalg.cholesky", loom_linalg_cholesky, NULL},
    {"linalg.lu", loom_linalg_lu, NULL},
    {"linalg.trsm", loom_linalg_trsm, NULL},
    {"linalg.lu_solve", loom_linalg_lu_solve, NULL},
    {"linalg.lu_perm", loom_linalg_lu_perm, NULL},
    {"linalg.geqrf", loom_linalg_geqrf, NULL},
    {"linalg.orgqr", loom_linalg_orgqr, NULL},
    {"linalg.ormqr", loom_linalg_ormqr, NULL},
    {"linalg.eigh", loom_linalg_eigh, NULL},
    {"linalg.svd", loom_linalg_svd, NULL},
    {NULL, NULL, NULL},
};
