/* base/stream_store_avx512.c — stores that bypass the cache, for
 * outputs too large to be read again from it: a normal store first reads
 * the line it writes (a third more memory traffic for a + b). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "base/stream_store.h"

void loom_stream_store_avx512(void *dst, const void *src, int64_t bytes) {
  char *d = (char *)dst;
  const char *s = (const char *)src;
  /* Head up to the first 64-byte boundary, then whole lines, then tail. */
  int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63);
  if (head > bytes) head = bytes;
  memcpy(d, s, (size_t)head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64)
    _mm512_stream_si512((__m512i *)d, _mm512_loadu_si512(s));
  memcpy(d, s, (size_t)bytes);
}

void loom_stream_fence_avx512(void) { _mm_sfence(); }
