/* base/stream_store.h — cache-bypassing stores for large outputs. */
#ifndef LOOM_BASE_STREAM_STORE_H
#define LOOM_BASE_STREAM_STORE_H

#include <stdint.h>

/* Launches writing at least this many bytes in all stream their output:
 * it would not stay in the last-level cache anyway. Below it, an output
 * and its inputs may all stay there for the next op (a 2 x 4M float
 * multiply: 0.81 ms cached, 1.49 ms streamed, with a 32 MB L3; at 12M,
 * streaming wins by 10-15%). */
#define LOOM_STREAM_STORE_BYTES (32 * 1024 * 1024)

/* Copies `bytes` from src to dst with non-temporal stores (AVX-512 CPUs
 * only). Such stores are weakly ordered: a kernel that used them calls
 * loom_stream_fence_avx512() before it returns. */
void loom_stream_store_avx512(void *dst, const void *src, int64_t bytes);
void loom_stream_fence_avx512(void);

#endif /* LOOM_BASE_STREAM_STORE_H */
