/* kernels/stream_store.h — cache-bypassing stores for large outputs. */
#ifndef LOOM_KERNELS_STREAM_STORE_H
#define LOOM_KERNELS_STREAM_STORE_H

#include <stdint.h>

/* Launches writing at least this many bytes in all stream their output:
 * it would not stay in the last-level cache anyway. */
#define LOOM_STREAM_STORE_BYTES (16 * 1024 * 1024)

/* Copies `bytes` from src to dst with non-temporal stores (AVX-512 CPUs
 * only). Such stores are weakly ordered: a kernel that used them calls
 * loom_stream_fence_avx512() before it returns. */
void loom_stream_store_avx512(void *dst, const void *src, int64_t bytes);
void loom_stream_fence_avx512(void);

#endif /* LOOM_KERNELS_STREAM_STORE_H */
