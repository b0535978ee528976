#include "kernels/base/copy.h"

#include <stdint.h>
#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/base/iter.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "base/stream_store.h"

/* The staging kind that converts between two dtypes exactly as c10's casts
 * do, or -1 when only the double path does (float64, int <-> float). */
static int fast_kind(int32_t dst, int32_t src) {
  const int f32ish_dst = dst == LOOM_FLOAT32 || dst == LOOM_FLOAT16 || dst == LOOM_BFLOAT16;
  const int f32ish_src = src == LOOM_FLOAT32 || src == LOOM_FLOAT16 || src == LOOM_BFLOAT16;
  if (f32ish_dst && f32ish_src) return LOOM_PW_F32;
  if (loom_dtype_is_integral(dst) && loom_dtype_is_integral(src)) return LOOM_PW_I64;
  return -1;
}

void loom_move_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n,
                   int64_t size) {
  /* Contiguous runs whose ends share their alignment take memcpy; others a
   * typed loop: the C library's copy is slow on some CPUs exactly when
   * the destination sits a few bytes off the source's alignment (a roll
   * along the last dim, 1024 rows of 4 KB at 12 bytes off: 8x slower). */
  if (ds == size && ss == size && ((uintptr_t)dst - (uintptr_t)src) % 64 == 0) {
    memcpy(dst, src, (size_t)(n * size));
    return;
  }
  switch (size) {
    /* contiguous and reversed (flip) runs vectorize */
#define MOVE(T)                                                                      \
  if (ds == (int64_t)sizeof(T) && ss == (int64_t)sizeof(T)) {                        \
    T *d = (T *)dst;                                                                 \
    const T *x = (const T *)src;                                                     \
    for (int64_t i = 0; i < n; ++i) d[i] = x[i];                                     \
  } else if (ds == (int64_t)sizeof(T) && ss == -(int64_t)sizeof(T)) {                \
    T *d = (T *)dst;                                                                 \
    const T *x = (const T *)src;                                                     \
    for (int64_t i = 0; i < n; ++i) d[i] = x[-i];                                    \
  } else {                                                                           \
    for (int64_t i = 0; i < n; ++i) *(T *)(dst + i * ds) = *(const T *)(src + i * ss); \
  }                                                                                  \
  return;
    case 1: MOVE(uint8_t)
    case 2: MOVE(uint16_t)
    case 4: MOVE(uint32_t)
    case 8: MOVE(uint64_t)
#undef MOVE
    default:
      for (int64_t i = 0; i < n; ++i) memcpy(dst + i * ds, src + i * ss, (size_t)size);
  }
}

/* Whether a same-dtype copy reads across the destination's rows: the
 * source steps by one element along the destination's second-to-last dim
 * and by more along its last, as in x.t().contiguous() or NCHW <-> NHWC. */
static int is_transpose(const loom_iter *it, int64_t size) {
  const int32_t r = it->rank;
  return r >= 2 && (size == 1 || size == 2 || size == 4 || size == 8) &&
         it->strides[0][r - 1] == size && it->strides[1][r - 1] != size &&
         it->strides[1][r - 2] == size;
}

/* A transposing copy moves tiles of one cache line by one cache line of
 * elements: the tile's source lines are read whole into a buffer and its
 * destination lines written whole from it. Lines a power-of-two stride
 * apart share a cache set, so a tile read across many of them straight
 * into its destination rows would evict what it reuses. */
#define TILE_BYTES 64

/* h <= TILE_BYTES / size destination rows of c elements, row a at
 * dst + a * dst_row; element (a, j) comes from src + a * size + j * src_col.
 * A whole tile also asks for the source lines that the next block of rows
 * will read: the lines of one tile are too few to keep memory busy. */
static void move_transposed(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                            int64_t h, int64_t c, int64_t size) {
  switch (size) {
#define TILE(T)                                                        \
  enum { N = TILE_BYTES / sizeof(T) };                                 \
  for (int64_t j0 = 0; j0 < c; j0 += N) {                              \
    const int64_t w = c - j0 < N ? c - j0 : N;                         \
    T buf[N][N];                                                       \
    if (h == N && w == N) { /* fixed trip counts */                    \
      for (int64_t j = 0; j < N; ++j) {                                \
        const char *x = src + (j0 + j) * src_col;                      \
        __builtin_prefetch(x + TILE_BYTES);                            \
        memcpy(buf[j], x, TILE_BYTES);                                 \
      }                                                                \
      for (int64_t a = 0; a < N; ++a) {                                \
        T *d = (T *)(dst + a * dst_row) + j0;                          \
        for (int64_t j = 0; j < N; ++j) d[j] = buf[j][a];              \
      }                                                                \
      continue;                                                        \
    }                                                                  \
    for (int64_t j = 0; j < w; ++j) {                                  \
      const T *x = (const T *)(src + (j0 + j) * src_col);              \
      for (int64_t a = 0; a < h; ++a) buf[j][a] = x[a];                \
    }                                                                  \
    for (int64_t a = 0; a < h; ++a) {                                  \
      T *d = (T *)(dst + a * dst_row) + j0;                            \
      for (int64_t j = 0; j < w; ++j) d[j] = buf[j][a];                \
    }                                                                  \
  }                                                                    \
  break;
    case 1: { TILE(uint8_t) }
    case 2: { TILE(uint16_t) }
    case 4: { TILE(uint32_t) }
    case 8: { TILE(uint64_t) }
#undef TILE
  }
}

/* The runs of [begin, end) of a transposing copy: whole rows in blocks of
 * one tile, partial rows and leftovers one run at a time. */
static void copy_transposed(loom_iter *it, int64_t size) {
  const int32_t r = it->rank;
  const int64_t cols = it->sizes[r - 1], rows = it->sizes[r - 2];
  char *p[2];
  while (it->remaining > 0) {
    int64_t h = 0;
    if (it->index[r - 1] == 0) {
      h = it->remaining / cols;
      if (h > rows - it->index[r - 2]) h = rows - it->index[r - 2];
      if (h > TILE_BYTES / size) h = TILE_BYTES / size;
    }
    const int64_t n = loom_iter_next(it, p);
    if (h < 2) {
      loom_move_run(p[0], size, p[1], it->strides[1][r - 1], n, size);
      continue;
    }
    move_transposed(p[0], it->strides[0][r - 2], p[1], it->strides[1][r - 1], h, cols, size);
    for (int64_t a = 1; a < h; ++a) loom_iter_next(it, p);
  }
}

int loom_kernel_copy(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dst = &args->tensors[0];
  const loom_tensor *src = &args->tensors[1];
  const int64_t dsize = loom_dtype_size(dst->dtype);
  if (dsize == 0 || loom_dtype_size(src->dtype) == 0)
    return LOOM_ERROR_NOT_SUPPORTED;

  const loom_tensor *ops[2] = {dst, src};
  loom_iter it;
  if (loom_iter_init(&it, 2, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  const int64_t ds = it.strides[0][it.rank - 1];
  const int64_t ss = it.strides[1][it.rank - 1];
  const int same = dst->dtype == src->dtype;
  const int kind = same ? -1 : fast_kind(dst->dtype, src->dtype);
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  /* A copy too large for the last-level cache writes its contiguous runs
   * past it (64 MB, one thread: 23 GB/s through memcpy, 35 streamed). */
  const int stream = same && ds == dsize && ss == dsize && dst->data != src->data &&
                     args->range * dsize >= LOOM_STREAM_STORE_BYTES && avx512 &&
                     !(args->hints & LOOM_KERNEL_HINT_CACHED);

  if (same && is_transpose(&it, dsize)) {
    copy_transposed(&it, dsize);
    return LOOM_OK;
  }

  char *p[2];
  int64_t n, rows = 1;
  while ((n = (same && !stream ? loom_iter_next_rows(&it, p, &rows) : loom_iter_next(&it, p))) > 0) {
    if (stream) {
      loom_stream_store_avx512(p[0], p[1], n * dsize);
      continue;
    }
    if (same) { /* short rows (a pad's interior, a slice) in one step */
      const int64_t dr = it.rank >= 2 ? it.strides[0][it.rank - 2] : 0;
      const int64_t sr = it.rank >= 2 ? it.strides[1][it.rank - 2] : 0;
      for (int64_t r = 0; r < rows; ++r) loom_move_run(p[0] + r * dr, ds, p[1] + r * sr, ss, n, dsize);
      continue;
    }
    if (ds == dsize && ss == loom_dtype_size(src->dtype) &&
        !(avx512 ? loom_convert_contig_avx512 : loom_convert_contig)(p[0], dst->dtype, p[1],
                                                                      src->dtype, n))
      continue;
    for (int64_t i = 0; i < n; i += LOOM_CONVERT_BLOCK) {
      int64_t m = n - i < LOOM_CONVERT_BLOCK ? n - i : LOOM_CONVERT_BLOCK;
      if (kind >= 0) { /* 16/32-bit floats via float, integers via int64 */
        int64_t stage[LOOM_CONVERT_BLOCK];
        if (!loom_pw_load(kind, stage, p[1] + i * ss, src->dtype, ss, m) ||
            !loom_pw_store(kind, p[0] + i * ds, dst->dtype, ds, stage, m))
          return LOOM_ERROR_NOT_SUPPORTED;
        continue;
      }
      if (loom_convert_run(p[0] + i * ds, dst->dtype, ds, p[1] + i * ss,
                           src->dtype, ss, m))
        return LOOM_ERROR_NOT_SUPPORTED;
    }
  }
  if (stream) loom_stream_fence_avx512();
  return LOOM_OK;
}

const loom_kernel_entry loom_copy_kernels[] = {
    {"copy.strided", loom_kernel_copy, NULL},
    {NULL, NULL, NULL},
};
