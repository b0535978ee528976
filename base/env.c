#include "base/env.h"

#include <ctype.h>
#include <stdlib.h>
#include <unistd.h>

int loom_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static long env_long(const char *name, long fallback, long lo, long hi) {
  const char *text = getenv(name);
  if (!text || !*text) return fallback;
  char *end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text) return fallback;
  if (v < lo) v = lo;
  if (v > hi) v = hi;
  return v;
}

/* torchrun's LOCAL_WORLD_SIZE: the processes of this job on this machine,
 * or 0 outside such a job. */
static int local_world_size(void) { return (int)env_long("LOCAL_WORLD_SIZE", 0, 0, 64); }

int loom_env_local_rank(void) {
  const int world = local_world_size();
  const int rank = (int)env_long("LOCAL_RANK", -1, -1, 64);
  return world > 0 && rank < world ? rank : -1;
}

int loom_env_num_devices(void) {
  /* As every process of a CUDA job sees the node's GPUs: one device per
   * local rank, so that loom:<LOCAL_RANK> exists in each. */
  const int world = local_world_size();
  return (int)env_long("LOOM_NUM_DEVICES", world > 0 ? world : 1, 1, 64);
}

int loom_env_num_threads(void) {
  /* The local ranks share the machine's cores: an equal part each, the
   * remainder to the lowest ranks, at least one. */
  int cores = loom_cpu_count();
  const int world = local_world_size(), rank = loom_env_local_rank();
  if (world > 1 && rank >= 0) {
    const int part = cores / world + (rank < cores % world);
    cores = part > 0 ? part : 1;
  }
  return (int)env_long("LOOM_NUM_THREADS", cores, 1, 1024);
}

uint64_t loom_parse_size(const char *text) {
  if (!text) return 0;
  while (isspace((unsigned char)*text)) ++text;
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || v <= 0) return 0;
  while (isspace((unsigned char)*end)) ++end;
  double scale = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': scale = 1024.0; ++end; break;
    case 'M': scale = 1024.0 * 1024; ++end; break;
    case 'G': scale = 1024.0 * 1024 * 1024; ++end; break;
    case 'T': scale = 1024.0 * 1024 * 1024 * 1024; ++end; break;
    case '\0': break;
    default: return 0;
  }
  /* Accept "512MB", "512MiB" and "512 M" alike. */
  if (toupper((unsigned char)*end) == 'I') ++end;
  if (toupper((unsigned char)*end) == 'B') ++end;
  while (isspace((unsigned char)*end)) ++end;
  if (*end) return 0;
  return (uint64_t)(v * scale);
}

static uint64_t physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return (uint64_t)1 << 32;
  return (uint64_t)pages * (uint64_t)page;
}

uint64_t loom_env_memory_limit(void) {
  uint64_t v = loom_parse_size(getenv("LOOM_MEMORY_LIMIT"));
  return v ? v : physical_memory();
}
