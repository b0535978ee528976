/* The batched orthogonal factorizations (loom/kernels/linalg.h): Householder
 * QR (geqrf, the product of the reflectors, their application) and the
 * Jacobi eigenvalue and singular value decompositions. Each item of a
 * launch is one matrix, worked by the typed routines of linalg_orth.inc. */
#include <float.h>
#include <math.h>
#include <stddef.h>

#include "kernels/linalg/linalg.h"
#include "loom/status.h"

#define T float
#define FN(name) name##_f32
#define SQRT sqrtf
#define EPS FLT_EPSILON
#define TINY FLT_MIN
#include "kernels/linalg/linalg_orth.inc"
#undef T
#undef FN
#undef SQRT
#undef EPS
#undef TINY

#define T double
#define FN(name) name##_f64
#define SQRT sqrt
#define EPS DBL_EPSILON
#define TINY DBL_MIN
#include "kernels/linalg/linalg_orth.inc"
#undef T
#undef FN
#undef SQRT
#undef EPS
#undef TINY

static int float_dtype(int32_t d) { return d == LOOM_FLOAT32 || d == LOOM_FLOAT64; }

static char *item(const loom_tensor *t, int64_t b) {
  if (!t->data) return NULL; /* an empty operand: never read */
  return (char *)t->data + b * t->strides[0] * loom_dtype_size(t->dtype);
}

static int64_t lead(const loom_tensor *t) {
  return t->sizes[2] > 1 ? t->strides[2] : (t->sizes[1] > 0 ? t->sizes[1] : 1);
}

/* A batch of float vectors of `dtype` with at least k values each. */
static int vec_ok(const loom_tensor *t, int32_t dtype, int64_t batch, int64_t k) {
  return (t->data || batch == 0 || t->sizes[1] == 0) && t->dtype == dtype && t->rank == 2 &&
         t->sizes[0] == batch && t->sizes[1] >= k;
}

static int64_t vstride(const loom_tensor *t) { return t->sizes[1] > 1 ? t->strides[1] : 1; }

int loom_linalg_geqrf(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *tau = &args->tensors[1];
  const int64_t batch = args->range, m = a->sizes[1], n = a->sizes[2];
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      !vec_ok(tau, a->dtype, batch, m < n ? m : n))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.geqrf: bad tensor arguments");
  const int64_t ld = lead(a), ts = vstride(tau);
  for (int64_t b = begin; b < end; ++b) {
    if (a->dtype == LOOM_FLOAT32)
      geqrf_f32((float *)item(a, b), m, n, ld, (float *)item(tau, b), ts);
    else
      geqrf_f64((double *)item(a, b), m, n, ld, (double *)item(tau, b), ts);
  }
  return LOOM_OK;
}

int loom_linalg_orgqr(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *tau = &args->tensors[1];
  const int64_t batch = args->range, m = a->sizes[1], n = a->sizes[2];
  const int64_t k = tau->rank == 2 ? tau->sizes[1] : -1;
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      !vec_ok(tau, a->dtype, batch, 0) || n > m || k > n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.orgqr: bad tensor arguments");
  const int64_t ld = lead(a), ts = vstride(tau);
  for (int64_t b = begin; b < end; ++b) {
    if (a->dtype == LOOM_FLOAT32)
      orgqr_f32((float *)item(a, b), m, n, ld, (const float *)item(tau, b), ts, k);
    else
      orgqr_f64((double *)item(a, b), m, n, ld, (const double *)item(tau, b), ts, k);
  }
  return LOOM_OK;
}

int loom_linalg_ormqr(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *v = &args->tensors[0], *tau = &args->tensors[1], *c = &args->tensors[2];
  const int64_t batch = args->range, m = c->sizes[1], n = c->sizes[2];
  const int left = args->scalars[0].i != 0, trans = args->scalars[1].i != 0;
  const int64_t k = tau->rank == 2 ? tau->sizes[1] : -1, nq = left ? m : n;
  if (!float_dtype(c->dtype) || !loom_linalg_matrix_ok(c, c->dtype, batch) ||
      !loom_linalg_matrix_ok(v, c->dtype, batch) || !vec_ok(tau, c->dtype, batch, 0) ||
      v->sizes[1] != nq || v->sizes[2] < k || k > nq)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.ormqr: bad tensor arguments");
  const int64_t ldv = lead(v), ldc = lead(c), ts = vstride(tau);
  for (int64_t b = begin; b < end; ++b) {
    if (c->dtype == LOOM_FLOAT32)
      ormqr_f32((const float *)item(v, b), ldv, (const float *)item(tau, b), ts, k,
                (float *)item(c, b), m, n, ldc, left, trans);
    else
      ormqr_f64((const double *)item(v, b), ldv, (const double *)item(tau, b), ts, k,
                (double *)item(c, b), m, n, ldc, left, trans);
  }
  return LOOM_OK;
}

int loom_linalg_eigh(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *a = &args->tensors[0], *w = &args->tensors[1], *v = &args->tensors[2],
                    *info = &args->tensors[3];
  const int64_t batch = args->range, n = a->sizes[1];
  const int vectors = v->data != NULL;
  if (!float_dtype(a->dtype) || !loom_linalg_matrix_ok(a, a->dtype, batch) ||
      a->sizes[2] != n || !vec_ok(w, a->dtype, batch, n) ||
      (vectors && (!loom_linalg_matrix_ok(v, a->dtype, batch) || v->sizes[1] != n ||
                   v->sizes[2] != n)) ||
      !loom_linalg_ints_ok(info, 1, batch, 0))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.eigh: bad tensor arguments");
  const int upper = args->scalars[0].i != 0;
  const int64_t lda = lead(a), ws = vstride(w), ldv = vectors ? lead(v) : 1;
  for (int64_t b = begin; b < end; ++b) {
    int32_t r;
    if (a->dtype == LOOM_FLOAT32)
      r = syevj_f32((float *)item(a, b), n, lda, upper, (float *)item(w, b), ws,
                    vectors ? (float *)item(v, b) : NULL, ldv, vectors);
    else
      r = syevj_f64((double *)item(a, b), n, lda, upper, (double *)item(w, b), ws,
                    vectors ? (double *)item(v, b) : NULL, ldv, vectors);
    ((int32_t *)info->data)[b * info->strides[0]] = r;
  }
  return LOOM_OK;
}

int loom_linalg_svd(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *u = &args->tensors[0], *s = &args->tensors[1], *v = &args->tensors[2],
                    *info = &args->tensors[3];
  const int64_t batch = args->range, m = u->sizes[1], ucols = u->sizes[2];
  const int vectors = v->data != NULL;
  const int64_t n = s->rank == 2 ? s->sizes[1] : -1;
  if (!float_dtype(u->dtype) || !loom_linalg_matrix_ok(u, u->dtype, batch) ||
      !vec_ok(s, u->dtype, batch, 0) || n > m || ucols < n ||
      (vectors && (!loom_linalg_matrix_ok(v, u->dtype, batch) || v->sizes[1] != n ||
                   v->sizes[2] != n)) ||
      !loom_linalg_ints_ok(info, 1, batch, 0))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "linalg.svd: bad tensor arguments");
  const int64_t ldu = lead(u), ss = vstride(s), ldv = vectors ? lead(v) : 1;
  for (int64_t b = begin; b < end; ++b) {
    int32_t r;
    if (u->dtype == LOOM_FLOAT32)
      r = gesvj_f32((float *)item(u, b), m, n, ldu, vectors ? ucols : n, (float *)item(s, b),
                    ss, vectors ? (float *)item(v, b) : NULL, ldv, vectors);
    else
      r = gesvj_f64((double *)item(u, b), m, n, ldu, vectors ? ucols : n,
                    (double *)item(s, b), ss, vectors ? (double *)item(v, b) : NULL, ldv,
                    vectors);
    ((int32_t *)info->data)[b * info->strides[0]] = r;
  }
  return LOOM_OK;
}
