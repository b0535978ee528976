/* Runtime configuration read from the environment. */
#ifndef LOOM_BASE_ENV_H
#define LOOM_BASE_ENV_H

#include <stdint.h>

/* LOOM_NUM_DEVICES, clamped to [1, 64]; default LOCAL_WORLD_SIZE (set by
 * torchrun), else 1. */
int loom_env_num_devices(void);
/* LOOM_NUM_THREADS; default: online CPUs, or under torchrun
 * (LOCAL_WORLD_SIZE, LOCAL_RANK) this local rank's share of them. */
int loom_env_num_threads(void);
/* LOCAL_RANK when LOCAL_WORLD_SIZE is set and it lies in [0, that), else -1:
 * the device this process uses. */
int loom_env_local_rank(void);
/* LOOM_MEMORY_LIMIT in bytes (K/M/G/T suffix, powers of 1024), default:
 * physical memory. */
uint64_t loom_env_memory_limit(void);
/* Parses "123", "4K", "512M", "2G", "1.5G"; returns 0 on a malformed value. */
uint64_t loom_parse_size(const char *text);
/* Online CPUs (>= 1). */
int loom_cpu_count(void);

#endif
