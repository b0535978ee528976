/* Advanced indexing and nonzero. The gather (GET) splits freely over
 * threads; assignments run as one call in element order; nonzero counts
 * and writes fixed chunks. */
#include "kernels/index/index_advanced.h"

#include <string.h>

#include "kernels/base/copy.h"
#include "kernels/base/iter.h"
#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* *dst += *src for one element of `dtype`, as the CPU's += does it. */
static void ia_add(char *dst, const char *src, int32_t dtype) {
  if (dtype == LOOM_COMPLEX64) { /* the two parts, each as float's += */
    float *d = (float *)dst;
    const float *x = (const float *)src;
    d[0] += x[0];
    d[1] += x[1];
    return;
  }
  if (dtype == LOOM_COMPLEX128) {
    double *d = (double *)dst;
    const double *x = (const double *)src;
    d[0] += x[0];
    d[1] += x[1];
    return;
  }
  if (loom_nn_is_float(dtype)) {
    loom_nn_store(dst, dtype, 0, loom_nn_load(dst, dtype, 0) + loom_nn_load(src, dtype, 0));
    return;
  }
  const int64_t v = (int64_t)((uint64_t)loom_nn_load_index(dst, dtype, 0) +
                              (uint64_t)loom_nn_load_index(src, dtype, 0));
  loom_pw_store(LOOM_PW_I64, dst, dtype, 0, &v, 1);
}

int loom_kernel_index_advanced(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int mode = (int)args->scalars[0].i;
  const int k = (int)args->scalars[1].i;
  if (k < 1 || k > LOOM_INDEX_ADVANCED_MAX || args->num_tensors != 2u + (uint32_t)k ||
      args->num_scalars < 2u + 2u * (uint32_t)k || mode < LOOM_INDEX_ADVANCED_GET ||
      mode > LOOM_INDEX_ADVANCED_PUT_ADD || args->tensors[0].dtype != args->tensors[1].dtype)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *ops[LOOM_ITER_MAX_OPS] = {0};
  for (int i = 0; i < 2 + k; ++i) {
    ops[i] = &args->tensors[i];
    if (i >= 2 && ops[i]->dtype != LOOM_INT64) return LOOM_ERROR_INVALID_ARGUMENT;
  }
  const int32_t dtype = ops[0]->dtype;
  const int64_t es = loom_dtype_size(dtype);
  int64_t size[LOOM_INDEX_ADVANCED_MAX], stride[LOOM_INDEX_ADVANCED_MAX];
  for (int j = 0; j < k; ++j) {
    size[j] = args->scalars[2 + j].i;
    stride[j] = args->scalars[2 + k + j].i * es;
  }
  loom_iter it;
  if (loom_iter_init(&it, 2 + k, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  const int32_t last = it.rank - 1;
  /* Whether the indices stay the same along a run: none of the indexed
   * dims is the innermost one (x[idx] of rows), so a run moves as one. */
  int constant = 1;
  for (int j = 0; j < k; ++j) constant &= it.strides[2 + j][last] == 0;
  const int64_t ds = it.strides[0][last], ss = it.strides[1][last];
  char *p[LOOM_ITER_MAX_OPS];
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) {
    const int64_t per_run = constant ? n : 1;
    for (int64_t i = 0; i < n; i += per_run) {
      int64_t off = 0;
      for (int j = 0; j < k; ++j) {
        int64_t v = *(const int64_t *)(p[2 + j] + i * it.strides[2 + j][last]);
        if (v < -size[j] || v >= size[j])
          return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                            "index %lld is out of bounds for dimension with size %lld",
                            (long long)v, (long long)size[j]);
        off += (v < 0 ? v + size[j] : v) * stride[j];
      }
      char *d = p[0] + i * ds;
      const char *x = p[1] + i * ss;
      if (mode == LOOM_INDEX_ADVANCED_GET) loom_move_run(d, ds, x + off, ss, per_run, es);
      else if (mode == LOOM_INDEX_ADVANCED_PUT) loom_move_run(d + off, ds, x, ss, per_run, es);
      else
        for (int64_t e = 0; e < per_run; ++e) ia_add(d + off + e * ds, x + e * ss, dtype);
    }
  }
  return LOOM_OK;
}

/* Whether one element is nonzero: floats compare with 0 (so -0.0 is zero
 * and NaN is not), everything else by its bytes. */
static int ia_nonzero(const char *p, int32_t dtype, int64_t es) {
  if (loom_nn_is_float(dtype)) return loom_nn_load(p, dtype, 0) != 0.0;
  for (int64_t b = 0; b < es; ++b)
    if (p[b]) return 1;
  return 0;
}

/* Runs `body` with `elem` pointing at each element of `in` in [begin, end),
 * row-major; a malformed `in` returns from the calling kernel. */
#define IA_FOR_EACH(in, begin, end, body)                                     \
  do {                                                                        \
    const loom_tensor *ia_ops[1] = {in};                                      \
    loom_iter ia_it;                                                          \
    if (loom_iter_init(&ia_it, 1, ia_ops)) return LOOM_ERROR_INVALID_ARGUMENT; \
    loom_iter_seek(&ia_it, begin, (end) - (begin));                           \
    const int64_t ia_step = ia_it.strides[0][ia_it.rank - 1];                 \
    char *ia_p[1];                                                            \
    int64_t ia_n;                                                             \
    while ((ia_n = loom_iter_next(&ia_it, ia_p)) > 0)                         \
      for (int64_t ia_i = 0; ia_i < ia_n; ++ia_i) {                           \
        const char *elem = ia_p[0] + ia_i * ia_step;                          \
        body                                                                  \
      }                                                                       \
  } while (0)

static int ia_chunk(const loom_kernel_args *args, int64_t c, int64_t *b, int64_t *e) {
  const int64_t len = args->scalars[0].i, numel = loom_tensor_numel(&args->tensors[0]);
  if (len <= 0) return LOOM_ERROR_INVALID_ARGUMENT;
  *b = c * len;
  *e = numel - *b < len ? numel : *b + len;
  return *b < *e ? 0 : LOOM_ERROR_INVALID_ARGUMENT;
}

/* Whether t is a dense row-major tensor of one-byte integers or bools (a
 * mask, nonzero's usual input), whose elements are scanned as bytes. */
static int ia_byte_mask(const loom_tensor *t) {
  return loom_dtype_size(t->dtype) == 1 && !loom_nn_is_float(t->dtype) &&
         loom_nn_dense_from(t, 0);
}

int loom_kernel_nonzero_count(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 2 || args->num_scalars < 1 || args->tensors[1].dtype != LOOM_INT64)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0];
  const int64_t es = loom_dtype_size(in->dtype);
  int64_t *counts = (int64_t *)args->tensors[1].data;
  for (int64_t c = begin; c < end; ++c) {
    int64_t b, e, count = 0;
    if (ia_chunk(args, c, &b, &e)) return LOOM_ERROR_INVALID_ARGUMENT;
    if (ia_byte_mask(in)) {
      const uint8_t *p = (const uint8_t *)in->data;
      for (int64_t i = b; i < e; ++i) count += p[i] != 0;
    } else {
      IA_FOR_EACH(in, b, e, { count += ia_nonzero(elem, in->dtype, es); });
    }
    counts[c * args->tensors[1].strides[0]] = count;
  }
  return LOOM_OK;
}

int loom_kernel_nonzero_write(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 3 || args->num_scalars < 1 || args->tensors[1].dtype != LOOM_INT64 ||
      args->tensors[2].dtype != LOOM_INT64 || args->tensors[2].rank != 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0], *out = &args->tensors[2];
  const int32_t rank = in->rank;
  if (out->sizes[1] != rank) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t es = loom_dtype_size(in->dtype);
  const int64_t *first = (const int64_t *)args->tensors[1].data;
  int64_t *od = (int64_t *)out->data;
  for (int64_t c = begin; c < end; ++c) {
    int64_t b, e, coord[LOOM_MAX_DIMS];
    if (ia_chunk(args, c, &b, &e)) return LOOM_ERROR_INVALID_ARGUMENT;
    int64_t lin = b;
    for (int32_t d = rank - 1; d >= 0; --d) {
      coord[d] = lin % in->sizes[d];
      lin /= in->sizes[d];
    }
    int64_t row = first[c * args->tensors[1].strides[0]];
    if (ia_byte_mask(in)) {
      /* zero bytes skipped eight at a time; a set one's coordinates come
       * from its position */
      const uint8_t *p = (const uint8_t *)in->data;
      for (int64_t i = b; i < e;) {
        uint64_t word;
        if (i + 8 <= e && (memcpy(&word, p + i, 8), word == 0)) {
          i += 8;
          continue;
        }
        if (p[i]) {
          if (row >= out->sizes[0]) return LOOM_ERROR_INVALID_ARGUMENT;
          int64_t q = i;
          for (int32_t d = rank - 1; d >= 0; --d) {
            od[row * out->strides[0] + d * out->strides[1]] = q % in->sizes[d];
            q /= in->sizes[d];
          }
          ++row;
        }
        ++i;
      }
      continue;
    }
    IA_FOR_EACH(in, b, e, {
      if (ia_nonzero(elem, in->dtype, es)) {
        if (row >= out->sizes[0]) return LOOM_ERROR_INVALID_ARGUMENT;
        for (int32_t d = 0; d < rank; ++d)
          od[row * out->strides[0] + d * out->strides[1]] = coord[d];
        ++row;
      }
      for (int32_t d = rank - 1; d >= 0 && ++coord[d] == in->sizes[d]; --d) coord[d] = 0;
    });
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_index_advanced_kernels[] = {
    {"index_advanced.get_put", loom_kernel_index_advanced, NULL},
    {"index_advanced.nonzero_count", loom_kernel_nonzero_count, NULL},
    {"index_advanced.nonzero_write", loom_kernel_nonzero_write, NULL},
    {NULL, NULL, NULL},
};
