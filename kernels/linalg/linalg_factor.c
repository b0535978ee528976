/* The batched factorizations and solves (loom/kernels/linalg.h): Cholesky,
 * LU with partial pivoting, triangular solves, LU solves and the
 * permutation of an LU. Each item of a launch is one matrix, worked by the
 * typed routines of linalg_dense.inc. */
#include "kernels/linalg/linalg.h"

#include <math.h>
#include <stddef.h>

#include "loom/status.h"

#define T float
#define FN(name) name##_f32
#define SQRT sqrtf
#define ABS fabsf
#include "kernels/linalg/linalg_dense.inc"
#undef T
#undef FN
#undef SQRT
#undef ABS

#define T double
#define FN(name) name##_f64
#define SQRT sqrt
#define ABS fabs
#include "kernels/linalg/linalg_dense.inc"
#undef T
#undef FN
#undef SQRT
#undef ABS

int loom_linalg_matrix_ok(const loom_tensor *t, int32_t dtype, int64_t batch) {
  if (t->dtype != dtype || t->rank != 3 || t->sizes[1] < 0 || t->sizes[2] < 0) return 0;
  if (!t->data && batch > 0 && t->sizes[1] > 0 && t->sizes[2] > 0) return 0;
  if (t->sizes[0] != batch) return 0;
  if (t->sizes[1] > 1 && t->strides[1] != 1) return 0;
  if (t->sizes[2] > 1 && t->strides[2] < t->sizes[1]) return 0;
  return 1;
}

int loom_linalg_ints_ok(const loom_tensor *t, int rank, int64_t batch, int64_t k) {
  if (t->dtype != LOOM_INT32 || t->rank != rank || t->sizes[0] != batch) return 0;
  if (!t->data && batch > 0 && (rank == 1 || t->sizes[1] > 0)) return 0;
  return rank == 1 || t->sizes[1] >= k;
}

static int float_dtype(int32_t d) { return d == LOOM_FLOAT32 || d == LOOM_FLOAT64; }

/* Element b of a batched operand, as bytes. */
static char *item(const loom_tensor *t, int64_t b) {
  if (!t->data) return NULL; /* an empty operand: never read */
  return (char *)t->data + b * t->strides[0] * loom_dtype_size(t->dtype);
}

/* The leading dimension of a matrix (1 when it has at most one column). */
static int64_t lead(const loom_tensor *t) {
  return t->sizes[2] > 1 ? t->strides[2] : (t->sizes[1] > 0 ? t->sizes[1] : 1);
}

static int32_t *int_item(const loom_tensor *t, int64_t b) {
  if (!t->data) return NULL;
  return (int32_t *)t->data + b * t->strides[0];
}

int loom_linalg_cholesky(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *info = &args->tensors[1];
  const int64_t batch = args->range, n = a->sizes[1];
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      a->sizes[2] != n || !loom_linalg_ints_ok(info, 1, batch, 0))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.cholesky: bad tensor arguments");
  const int64_t ld = lead(a);
  for (int64_t b = begin; b < end; ++b) {
    int32_t r = a->dtype == LOOM_FLOAT32 ? potrf_f32((float *)item(a, b), n, ld)
                                         : potrf_f64((double *)item(a, b), n, ld);
    *int_item(info, b) = r;
  }
  return LOOM_OK;
}

/* Matrix b of src (any strides) into the column-major item of a. */
static void copy_item(const loom_tensor *src, const loom_tensor *a, int64_t b) {
  const int64_t m = a->sizes[1], n = a->sizes[2], ld = lead(a);
  const int64_t s1 = src->strides[1], s2 = src->strides[2];
  if (a->dtype == LOOM_FLOAT32) {
    const float *s = (const float *)item(src, b);
    float *d = (float *)item(a, b);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) d[i + j * ld] = s[i * s1 + j * s2];
  } else {
    const double *s = (const double *)item(src, b);
    double *d = (double *)item(a, b);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) d[i + j * ld] = s[i * s1 + j * s2];
  }
}

int loom_linalg_lu(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *piv = &args->tensors[1],
                    *info = &args->tensors[2];
  const loom_tensor *src = args->num_tensors > 3 ? &args->tensors[3] : NULL;
  const int64_t batch = args->range, m = a->sizes[1], n = a->sizes[2];
  const int64_t k = m < n ? m : n;
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      !loom_linalg_ints_ok(piv, 2, batch, k) || !loom_linalg_ints_ok(info, 1, batch, 0))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.lu: bad tensor arguments");
  if (src && (src->dtype != a->dtype || src->rank != 3 || src->sizes[0] != batch ||
              src->sizes[1] != m || src->sizes[2] != n ||
              (!src->data && batch > 0 && m > 0 && n > 0)))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.lu: bad source matrices");
  const int64_t ld = lead(a), ps = piv->strides[1];
  for (int64_t b = begin; b < end; ++b) {
    if (src && m > 0 && n > 0) copy_item(src, a, b);
    int32_t *p = int_item(piv, b);
    *int_item(info, b) = a->dtype == LOOM_FLOAT32
                             ? getrf_f32((float *)item(a, b), m, n, ld, p, ps)
                             : getrf_f64((double *)item(a, b), m, n, ld, p, ps);
  }
  return LOOM_OK;
}

int loom_linalg_trsm(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *x = &args->tensors[1];
  const int right = args->num_scalars > 3 && args->scalars[3].i != 0;
  const int64_t batch = args->range, n = a->sizes[1];
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      a->sizes[2] != n || !loom_linalg_matrix_ok(x, a->dtype, batch) ||
      x->sizes[right ? 2 : 1] != n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.trsm: bad tensor arguments");
  const int upper = args->scalars[0].i != 0, trans = args->scalars[1].i != 0,
            unit = args->scalars[2].i != 0;
  const int64_t lda = lead(a), ldb = lead(x), k = x->sizes[right ? 1 : 2];
  for (int64_t b = begin; b < end; ++b) {
    if (a->dtype == LOOM_FLOAT32) {
      const float *pa = (const float *)item(a, b);
      float *px = (float *)item(x, b);
      if (right) trsm_right_f32(pa, n, lda, px, k, ldb, upper, trans, unit);
      else trsm_f32(pa, n, lda, px, k, ldb, upper, trans, unit);
    } else {
      const double *pa = (const double *)item(a, b);
      double *px = (double *)item(x, b);
      if (right) trsm_right_f64(pa, n, lda, px, k, ldb, upper, trans, unit);
      else trsm_f64(pa, n, lda, px, k, ldb, upper, trans, unit);
    }
  }
  return LOOM_OK;
}

/* Pivots outside [1, n] would swap rows outside the matrix. */
static int pivots_in_range(const int32_t *p, int64_t stride, int64_t k, int64_t n) {
  for (int64_t i = 0; i < k; ++i)
    if (p[i * stride] < 1 || p[i * stride] > n) return 0;
  return 1;
}

int loom_linalg_lu_solve(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *lu = &args->tensors[0], *piv = &args->tensors[1], *x = &args->tensors[2];
  const int64_t batch = args->range, n = lu->sizes[1], k = x->sizes[2];
  if (!float_dtype(lu->dtype) || !loom_linalg_matrix_ok(lu, lu->dtype, batch) ||
      lu->sizes[2] != n || !loom_linalg_ints_ok(piv, 2, batch, n) ||
      !loom_linalg_matrix_ok(x, lu->dtype, batch) || x->sizes[1] != n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.lu_solve: bad tensor arguments");
  const int trans = args->scalars[0].i != 0;
  const int64_t lda = lead(lu), ldb = lead(x), ps = piv->sizes[1] > 1 ? piv->strides[1] : 1;
  for (int64_t b = begin; b < end; ++b) {
    const int32_t *p = int_item(piv, b);
    if (!pivots_in_range(p, ps, n, n))
      return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                        "linalg.lu_solve: a pivot is outside [1, %lld]", (long long)n);
    if (lu->dtype == LOOM_FLOAT32)
      getrs_f32((const float *)item(lu, b), n, lda, p, ps, (float *)item(x, b), k, ldb, trans);
    else
      getrs_f64((const double *)item(lu, b), n, lda, p, ps, (double *)item(x, b), k, ldb,
                trans);
  }
  return LOOM_OK;
}

/* P = S_0 S_1 ... S_{k-1} (S_i swaps i and pivots[i] - 1): the identity
 * with its columns swapped in that order. */
int loom_linalg_lu_perm(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *piv = &args->tensors[0], *p = &args->tensors[1];
  const int64_t batch = args->range, k = piv->rank == 2 ? piv->sizes[1] : -1;
  if (!loom_linalg_ints_ok(piv, 2, batch, 0) || !float_dtype(p->dtype) || p->rank != 3 ||
      p->sizes[0] != batch || p->sizes[1] != p->sizes[2] || k > p->sizes[1])
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "lu_unpack: bad tensor arguments");
  const int64_t m = p->sizes[1], s0 = p->strides[0], s1 = p->strides[1], s2 = p->strides[2];
  const int64_t ps = piv->strides[1];
  for (int64_t b = begin; b < end; ++b) {
    const int32_t *pv = int_item(piv, b);
    if (!pivots_in_range(pv, ps, k, m))
      return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                        "lu_unpack: a pivot is outside [1, %lld]", (long long)m);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        const int64_t off = b * s0 + i * s1 + j * s2;
        if (p->dtype == LOOM_FLOAT32)
          ((float *)p->data)[off] = i == j;
        else
          ((double *)p->data)[off] = i == j;
      }
    }
    for (int64_t i = 0; i < k; ++i) {
      const int64_t q = pv[i * ps] - 1;
      if (q == i) continue;
      for (int64_t r = 0; r < m; ++r) {
        const int64_t oi = b * s0 + r * s1 + i * s2, oq = b * s0 + r * s1 + q * s2;
        if (p->dtype == LOOM_FLOAT32) {
          float *d = p->data;
          const float t = d[oi];
          d[oi] = d[oq];
          d[oq] = t;
        } else {
          double *d = p->data;
          const double t = d[oi];
          d[oi] = d[oq];
          d[oq] = t;
        }
      }
    }
  }
  return LOOM_OK;
}
