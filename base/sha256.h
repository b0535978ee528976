/* SHA-256 (FIPS 180-4): content keys and checksums where a collision must
 * not be plausible, such as the JIT's cache keys and entry checksums. */
#ifndef LOOM_BASE_SHA256_H
#define LOOM_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_SHA256_SIZE 32

typedef struct loom_sha256_ctx {
  uint32_t state[8];
  uint64_t length; /* bytes hashed so far */
  uint8_t block[64];
  size_t used; /* bytes waiting in `block` */
} loom_sha256_ctx;

void loom_sha256_init(loom_sha256_ctx *h);
void loom_sha256_update(loom_sha256_ctx *h, const void *data, size_t size);
void loom_sha256_final(loom_sha256_ctx *h, uint8_t out[LOOM_SHA256_SIZE]);

/* The digest of one buffer. */
void loom_sha256(const void *data, size_t size, uint8_t out[LOOM_SHA256_SIZE]);

/* Lower-case hex of `size` bytes into `out` (2 * size + 1 bytes). */
void loom_hex(const uint8_t *bytes, size_t size, char *out);

#endif
