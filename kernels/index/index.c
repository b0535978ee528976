/* Indexing along one dim. Every write to a destination slice is made by the
 * call that owns the slice, in index order, so duplicate indices give the
 * same result whatever the thread count. */
#include "kernels/index/index.h"

#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* Element offset in `t` of the `linear`-th position of `shape`'s index
 * space (row-major), skipping dim `skip` (-1: none). */
static int64_t ix_offset(const loom_tensor *shape, const loom_tensor *t,
                         int64_t linear, int32_t skip) {
  int64_t off = 0;
  for (int32_t d = shape->rank - 1; d >= 0; --d) {
    if (d == skip) continue;
    const int64_t size = shape->sizes[d];
    off += (linear % size) * t->strides[d];
    linear /= size;
  }
  return off;
}

/* The index at element offset `off`, checked against [0, limit) as the CPU
 * backend does (negative indices are errors, except where `wrap` says they
 * count from the end, as index_fill's do); -1 if out of range, with the
 * reason left for the runtime by loom_error(). */
static int64_t ix_value(const loom_tensor *index, int64_t off, int64_t limit,
                        int32_t dim, int wrap) {
  const int64_t v = loom_nn_load_index(index->data, index->dtype, off);
  if (v >= 0 && v < limit) return v;
  if (wrap && v < 0 && v >= -limit) return v + limit;
  loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
             "index %lld is out of bounds for dimension %d with size %lld",
             (long long)v, (int)dim, (long long)limit);
  return -1;
}

/* The status of an out-of-range index, so that Python sees the CPU's
 * exception: IndexError for index_select / index_copy / index_fill,
 * RuntimeError for gather / scatter / index_add. */
static loom_status ix_range_status(int op) {
  return op == LOOM_INDEX_GATHER || op == LOOM_INDEX_SCATTER || op == LOOM_INDEX_ADD
             ? LOOM_ERROR_INVALID_ARGUMENT
             : LOOM_ERROR_INDEX_OUT_OF_RANGE;
}

/* One element in the general loops: f (and g, the imaginary part of a
 * complex element) for floating and complex dtypes, i for integral ones. */
typedef struct ix_value_t {
  double f, g;
  int64_t i;
} ix_val;

static ix_val ix_load(const loom_tensor *t, int64_t off, int integral) {
  ix_val v = {0.0, 0.0, 0};
  if (t->dtype == LOOM_COMPLEX64) {
    const float *p = (const float *)t->data + 2 * off;
    v.f = p[0];
    v.g = p[1];
  } else if (t->dtype == LOOM_COMPLEX128) {
    const double *p = (const double *)t->data + 2 * off;
    v.f = p[0];
    v.g = p[1];
  } else if (integral) {
    v.i = loom_nn_load_index(t->data, t->dtype, off);
  } else {
    v.f = loom_nn_load(t->data, t->dtype, off);
  }
  return v;
}

static void ix_store(const loom_tensor *t, int64_t off, int integral, ix_val v) {
  if (t->dtype == LOOM_COMPLEX64) {
    float *p = (float *)t->data + 2 * off;
    p[0] = (float)v.f;
    p[1] = (float)v.g;
    return;
  }
  if (t->dtype == LOOM_COMPLEX128) {
    double *p = (double *)t->data + 2 * off;
    p[0] = v.f;
    p[1] = v.g;
    return;
  }
  char *dst = (char *)t->data + off * loom_dtype_size(t->dtype);
  if (integral) loom_pw_store(LOOM_PW_I64, dst, t->dtype, 0, &v.i, 1);
  else loom_pw_store(LOOM_PW_F64, dst, t->dtype, 0, &v.f, 1);
}

/* a * b, complex (the imaginary parts zero for real dtypes). */
static void ix_mul(ix_val *a, double bf, double bg) {
  const double f = a->f * bf - a->g * bg;
  a->g = a->f * bg + a->g * bf;
  a->f = f;
}

/* dst[off] = reduce(dst[off], v). */
static void ix_apply(const loom_tensor *dst, int64_t off, int integral,
                     int reduce, ix_val v) {
  if (reduce != LOOM_INDEX_ASSIGN) {
    const ix_val cur = ix_load(dst, off, integral);
    switch (reduce) {
      case LOOM_INDEX_SUM:
        v.f += cur.f;
        v.g += cur.g;
        v.i = (int64_t)((uint64_t)v.i + (uint64_t)cur.i);
        break;
      case LOOM_INDEX_PROD:
        ix_mul(&v, cur.f, cur.g);
        v.i = (int64_t)((uint64_t)v.i * (uint64_t)cur.i);
        break;
      case LOOM_INDEX_AMAX:
        if (cur.f != cur.f || cur.f > v.f) v.f = cur.f;
        if (cur.i > v.i) v.i = cur.i;
        break;
      case LOOM_INDEX_AMIN:
        if (cur.f != cur.f || cur.f < v.f) v.f = cur.f;
        if (cur.i < v.i) v.i = cur.i;
        break;
    }
  }
  ix_store(dst, off, integral, v);
}

/* Length of the run of the last dim that moves as one for rows (or
 * elements) of a and b indexed along `dim`: the last dim's size where it
 * is another dim than `dim` and contiguous in both, else 1. */
static int64_t ix_last_run(const loom_tensor *a, const loom_tensor *b, int32_t dim) {
  const int32_t last = b->rank - 1;
  return last >= 0 && last != dim && a->strides[last] == 1 && b->strides[last] == 1
             ? b->sizes[last]
             : 1;
}

/* Positions from `pos` on in its run of `inner`, up to `end`. */
static inline int64_t ix_run_len(int64_t pos, int64_t end, int64_t inner) {
  const int64_t rest = inner - pos % inner;
  return rest < end - pos ? rest : end - pos;
}

typedef struct ix_bytes16 {
  uint64_t w[2];
} ix_bytes16;

/* gather of [begin, end) of out's elements from self of the same dtype by
 * int64 indices: one offset computation per run of out's last dim, and
 * the elements moved as they are. Returns 0, or -1 at an index out of
 * range (its reason left by ix_value). */
static __attribute__((noinline)) int ix_gather_same(const loom_tensor *out,
                                                    const loom_tensor *self,
                                                    const loom_tensor *index, int32_t dim,
                                                    int64_t begin, int64_t end) {
  const int32_t last = out->rank - 1;
  const int64_t inner = out->sizes[last], limit = self->sizes[dim];
  const int64_t os = out->strides[last], xs = index->strides[last];
  const int64_t ss = last == dim ? 0 : self->strides[last], sd = self->strides[dim];
  for (int64_t e = begin; e < end;) {
    const int64_t len = ix_run_len(e, end, inner);
    int64_t rest = e, dst = 0, src = 0, ioff = 0;
    for (int32_t d = last; d >= 0; --d) {
      const int64_t c = rest % out->sizes[d];
      rest /= out->sizes[d];
      dst += c * out->strides[d];
      ioff += c * index->strides[d];
      if (d != dim) src += c * self->strides[d];
    }
    const int64_t *ix = (const int64_t *)index->data + ioff;
    switch (loom_dtype_size(out->dtype)) {
#define GATHER(T)                                                                 \
  {                                                                               \
    T *o = (T *)out->data + dst;                                                  \
    const T *x = (const T *)self->data + src;                                     \
    for (int64_t j = 0; j < len; ++j) {                                           \
      const int64_t v = ix[j * xs];                                               \
      if ((uint64_t)v >= (uint64_t)limit)                                         \
        return (int)ix_value(index, ioff + j * xs, limit, dim, 0);                \
      o[j * os] = x[j * ss + v * sd];                                             \
    }                                                                             \
  }                                                                               \
  break;
      case 1: GATHER(uint8_t)
      case 2: GATHER(uint16_t)
      case 4: GATHER(uint32_t)
      case 8: GATHER(uint64_t)
      case 16: GATHER(ix_bytes16)
#undef GATHER
    }
    e += len;
  }
  return 0;
}

/* scatter (reduce ASSIGN, or SUM of float32) of rows [begin, end) of src
 * into self of the same dtype by int64 indices: the general loop's order
 * and arithmetic (a float32 sum rounds once from double), the elements
 * moved as they are. Returns 0, or -1 at an index out of range. */
static __attribute__((noinline)) int ix_scatter_same(const loom_tensor *self,
                                                     const loom_tensor *index,
                                                     const loom_tensor *src, int32_t dim,
                                                     int reduce, int64_t begin, int64_t end) {
  const int32_t skip = dim;
  const int64_t n = index->sizes[dim], limit = self->sizes[dim];
  const int64_t xs = index->strides[dim], ss = src->strides[dim], ds = self->strides[dim];
  for (int64_t row = begin; row < end; ++row) {
    const int64_t *ix = (const int64_t *)index->data + ix_offset(index, index, row, skip);
    const int64_t db = ix_offset(index, self, row, skip), sb = ix_offset(index, src, row, skip);
#define SCATTER(T, UPDATE)                                                         \
  do {                                                                             \
    T *d = (T *)self->data + db;                                                   \
    const T *x = (const T *)src->data + sb;                                        \
    for (int64_t k = 0; k < n; ++k) {                                              \
      const int64_t v = ix[k * xs];                                                \
      if ((uint64_t)v >= (uint64_t)limit)                                          \
        return (int)ix_value(index, (ix - (const int64_t *)index->data) + k * xs, limit, dim, 0); \
      UPDATE(d[v * ds], x[k * ss]);                                                \
    }                                                                              \
  } while (0)
#define ASSIGN(dst, v) dst = v
#define ADD_F32(dst, v) dst = (float)((double)(v) + (double)(dst))
    if (reduce == LOOM_INDEX_SUM) {
      SCATTER(float, ADD_F32);
      continue;
    }
    switch (loom_dtype_size(self->dtype)) {
      case 1: SCATTER(uint8_t, ASSIGN); break;
      case 2: SCATTER(uint16_t, ASSIGN); break;
      case 4: SCATTER(uint32_t, ASSIGN); break;
      case 8: SCATTER(uint64_t, ASSIGN); break;
      case 16: SCATTER(ix_bytes16, ASSIGN); break;
    }
#undef ADD_F32
#undef ASSIGN
#undef SCATTER
  }
  return 0;
}

int loom_kernel_index(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const int op = (int)args->scalars[0].i;
  const int32_t dim = (int32_t)args->scalars[1].i;
  const int reduce = (int)args->scalars[3].i;
  const loom_tensor *t0 = &args->tensors[0], *t1 = &args->tensors[1];
  const loom_tensor *t2 = args->num_tensors > 2 ? &args->tensors[2] : NULL;
  const int integral = loom_dtype_is_integral(t0->dtype);
  /* scalars[4], where given: the imaginary part of a complex value */
  ix_val scalar = {args->scalars[2].f, args->num_scalars > 4 ? args->scalars[4].f : 0.0,
                   args->scalars[2].i};
  if (integral) scalar.f = scalar.g = 0.0;
  const int cplx = t0->dtype == LOOM_COMPLEX64 || t0->dtype == LOOM_COMPLEX128;
  if (cplx && (reduce == LOOM_INDEX_AMAX || reduce == LOOM_INDEX_AMIN))
    return LOOM_ERROR_INVALID_ARGUMENT; /* complex numbers have no order */
  const int32_t skip = t0->rank ? dim : -1;

  switch (op) {
    case LOOM_INDEX_SELECT:   /* out, self, index */
    case LOOM_INDEX_GATHER: { /* out, self, index */
      if (!t2) return LOOM_ERROR_INVALID_ARGUMENT;
      const int64_t limit = t1->rank ? t1->sizes[dim] : 1;
      if (op == LOOM_INDEX_GATHER && t0->rank && t0->rank == t1->rank && t2->rank == t0->rank &&
          t0->dtype == t1->dtype && t2->dtype == LOOM_INT64)
        return ix_gather_same(t0, t1, t2, dim, begin, end) ? ix_range_status(op) : LOOM_OK;
      /* index_select (and embedding through it) of rows whose last dim is
       * contiguous in both tensors: one index lookup and one copy per run
       * of the last dim; otherwise element by element */
      const int64_t inner = ix_last_run(t1, t0, dim);
      const int runs = op == LOOM_INDEX_SELECT && t0->dtype == t1->dtype && inner > 1;
      const int64_t es = loom_dtype_size(t0->dtype);
      for (int64_t e = begin; e < end;) {
        const int64_t len = runs ? ix_run_len(e, end, inner) : 1;
        int64_t rest = e, k = 0, src = 0, dst = 0, ioff = 0;
        for (int32_t d = t0->rank - 1; d >= 0; --d) {
          const int64_t c = rest % t0->sizes[d];
          rest /= t0->sizes[d];
          dst += c * t0->strides[d];
          if (d == dim) k = c;
          else src += c * t1->strides[d];
          if (op == LOOM_INDEX_GATHER) ioff += c * t2->strides[d];
        }
        if (op == LOOM_INDEX_SELECT) ioff = t2->rank ? k * t2->strides[0] : 0;
        const int64_t v = ix_value(t2, ioff, limit, dim, 0);
        if (v < 0) return ix_range_status(op);
        if (t1->rank) src += v * t1->strides[dim];
        if (runs)
          memcpy((char *)t0->data + dst * es, (const char *)t1->data + src * es,
                 (size_t)(len * es));
        else
          ix_store(t0, dst, integral, ix_load(t1, src, integral));
        e += len;
      }
      return LOOM_OK;
    }
    case LOOM_INDEX_SCATTER: { /* self, index, src */
      if (t2 && t2->data && t0->rank && t1->rank == t0->rank && t2->rank == t0->rank &&
          t2->dtype == t0->dtype && t1->dtype == LOOM_INT64 &&
          (reduce == LOOM_INDEX_ASSIGN || (reduce == LOOM_INDEX_SUM && t0->dtype == LOOM_FLOAT32)))
        return ix_scatter_same(t0, t1, t2, dim, reduce, begin, end) ? ix_range_status(op) : LOOM_OK;
      const int64_t n = t1->rank ? t1->sizes[dim] : 1;
      const int64_t limit = t0->rank ? t0->sizes[dim] : 1;
      const int64_t xs = t1->rank ? t1->strides[dim] : 0;
      const int64_t ss = t2 && t2->data && t2->rank ? t2->strides[dim] : 0;
      const int64_t ds = t0->rank ? t0->strides[dim] : 0;
      for (int64_t row = begin; row < end; ++row) {
        const int64_t xb = ix_offset(t1, t1, row, skip);
        const int64_t db = ix_offset(t1, t0, row, skip);
        const int64_t sb = t2 && t2->data ? ix_offset(t1, t2, row, skip) : 0;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t v = ix_value(t1, xb + k * xs, limit, dim, 0);
          if (v < 0) return ix_range_status(op);
          const ix_val x = t2 && t2->data ? ix_load(t2, sb + k * ss, integral) : scalar;
          ix_apply(t0, db + v * ds, integral, reduce, x);
        }
      }
      return LOOM_OK;
    }
    case LOOM_INDEX_ADD:    /* self, index, source */
    case LOOM_INDEX_COPY: { /* self, index, source */
      if (!t2) return LOOM_ERROR_INVALID_ARGUMENT;
      const int64_t n = t2->rank ? t2->sizes[dim] : 1;
      const int64_t limit = t0->rank ? t0->sizes[dim] : 1;
      const int64_t ds = t0->rank ? t0->strides[dim] : 0;
      const int64_t ss = t2->rank ? t2->strides[dim] : 0;
      const int64_t xs = t1->rank ? t1->strides[0] : 0;
      if (op == LOOM_INDEX_COPY && t0->dtype == t2->dtype) {
        /* One dtype: the elements move as they are, without a round trip
         * through double (a KV cache's index_copy_ is all of this). Rows
         * that lie side by side in the last dim of both tensors move
         * together, one run per index: a row's writes still come in index
         * order, and every row stays with its own call. */
        const int64_t inner = ix_last_run(t0, t2, dim);
#define LOOM_IX_COPY(T)                                                            \
  do {                                                                             \
    T *d = (T *)t0->data;                                                          \
    const T *src = (const T *)t2->data;                                            \
    for (int64_t row = begin; row < end;) {                                        \
      const int64_t len = ix_run_len(row, end, inner);                            \
      const int64_t db = ix_offset(t2, t0, row, skip), sb = ix_offset(t2, t2, row, skip); \
      for (int64_t k = 0; k < n; ++k) {                                            \
        const int64_t v = ix_value(t1, k * xs, limit, dim, 0);                     \
        if (v < 0) return ix_range_status(op);                                     \
        T *dk = d + db + v * ds;                                                   \
        const T *sk = src + sb + k * ss;                                           \
        for (int64_t j = 0; j < len; ++j) dk[j] = sk[j];                           \
      }                                                                            \
      row += len;                                                                  \
    }                                                                              \
  } while (0)
        switch (loom_dtype_size(t0->dtype)) {
          case 8: LOOM_IX_COPY(uint64_t); return LOOM_OK;
          case 4: LOOM_IX_COPY(uint32_t); return LOOM_OK;
          case 2: LOOM_IX_COPY(uint16_t); return LOOM_OK;
          case 1: LOOM_IX_COPY(uint8_t); return LOOM_OK;
          default: break;
        }
#undef LOOM_IX_COPY
      }
      if (op == LOOM_INDEX_ADD && reduce == LOOM_INDEX_ASSIGN && t0->dtype == LOOM_FLOAT32 &&
          t2->dtype == LOOM_FLOAT32) {
        /* index_add_ of float32: the general loop's arithmetic (in double,
         * rounded once per addition), a run of the last dim per index */
        const int64_t inner = ix_last_run(t0, t2, dim);
        float *d = (float *)t0->data;
        const float *src = (const float *)t2->data;
        const double alpha = scalar.f;
        for (int64_t row = begin; row < end;) {
          const int64_t len = ix_run_len(row, end, inner);
          const int64_t db = ix_offset(t2, t0, row, skip), sb = ix_offset(t2, t2, row, skip);
          for (int64_t k = 0; k < n; ++k) {
            const int64_t v = ix_value(t1, k * xs, limit, dim, 0);
            if (v < 0) return ix_range_status(op);
            float *dk = d + db + v * ds;
            const float *sk = src + sb + k * ss;
            for (int64_t j = 0; j < len; ++j) dk[j] = (float)((double)sk[j] * alpha + (double)dk[j]);
          }
          row += len;
        }
        return LOOM_OK;
      }
      for (int64_t row = begin; row < end; ++row) {
        const int64_t db = ix_offset(t2, t0, row, skip);
        const int64_t sb = ix_offset(t2, t2, row, skip);
        for (int64_t k = 0; k < n; ++k) {
          const int64_t v = ix_value(t1, k * xs, limit, dim, 0);
          if (v < 0) return ix_range_status(op);
          ix_val x = ix_load(t2, sb + k * ss, integral);
          if (op == LOOM_INDEX_ADD && reduce == LOOM_INDEX_ASSIGN) { /* index_add: alpha */
            if (t0->dtype == LOOM_COMPLEX64) { /* source * alpha in complex<float>, as the CPU */
              const float xf = (float)x.f, xg = (float)x.g;
              const float af = (float)scalar.f, ag = (float)scalar.g;
              x.f = xf * af - xg * ag;
              x.g = xf * ag + xg * af;
            } else {
              ix_mul(&x, scalar.f, scalar.g);
            }
            x.i = (int64_t)((uint64_t)x.i * (uint64_t)args->scalars[2].i);
          }
          ix_apply(t0, db + v * ds, integral,
                   op == LOOM_INDEX_COPY ? LOOM_INDEX_ASSIGN
                                         : (reduce == LOOM_INDEX_ASSIGN ? LOOM_INDEX_SUM : reduce),
                   x);
        }
      }
      return LOOM_OK;
    }
    case LOOM_INDEX_FILL: { /* self, index */
      const int64_t n = loom_tensor_numel(t1);
      const int64_t limit = t0->rank ? t0->sizes[dim] : 1;
      const int64_t ds = t0->rank ? t0->strides[dim] : 0;
      const int64_t xs = t1->rank ? t1->strides[0] : 0;
      for (int64_t row = begin; row < end; ++row) {
        const int64_t db = ix_offset(t0, t0, row, skip);
        for (int64_t k = 0; k < n; ++k) {
          const int64_t v = ix_value(t1, k * xs, limit, dim, 1);
          if (v < 0) return ix_range_status(op);
          ix_store(t0, db + v * ds, integral, scalar);
        }
      }
      return LOOM_OK;
    }
    default: return LOOM_ERROR_INVALID_ARGUMENT;
  }
}

const loom_kernel_entry loom_index_kernels[] = {
    {"index.along_dim", loom_kernel_index, NULL},
    {NULL, NULL, NULL},
};
