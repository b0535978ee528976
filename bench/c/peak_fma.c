/* peak_fma — the arithmetic limit of this CPU, measured.
 *
 * Runs register-only multiply-add loops long enough to reach steady state and
 * reports the best GFLOP/s over several trials, on one thread and on N pinned
 * threads (pthreads):
 *   fp32_avx512_fma   vfmadd on zmm, 16 independent accumulators (enough to
 *                     cover the FMA latency times the number of FMA pipes);
 *   bf16_avx512_dp    vdpbf16ps (AVX-512-BF16): 32 bf16 products per lane
 *                     group, accumulated in fp32;
 *   bf16_amx          tdpbf16ps on AMX tiles (4 accumulator tiles).
 * A kernel whose instructions the CPU (or the OS) does not offer is reported
 * as unavailable with the reason; nothing is assumed from the build flags,
 * every choice is made from cpuid/xgetbv at run time.
 *
 * Output: one JSON object on stdout. Usage: peak_fma [--quick] [--threads N]
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct cpu_features {
  bool fma, avx512f, avx512bf16, amx_tile, amx_bf16;
  bool os_avx512, os_amx;
  char model[64];
} cpu_features;

static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static void cpu_detect(cpu_features *f) {
  memset(f, 0, sizeof *f);
  unsigned a, b, c, d;
  bool osxsave = false;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f->fma = (c >> 12) & 1;
    osxsave = (c >> 27) & 1;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f->avx512f = (b >> 16) & 1;
    f->amx_bf16 = (d >> 22) & 1;
    f->amx_tile = (d >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512bf16 = (a >> 5) & 1;
  if (osxsave) {
    uint64_t xcr0 = read_xcr0();
    /* opmask, upper halves of zmm0-15 and zmm16-31 must all be enabled */
    f->os_avx512 = (xcr0 & 0xe6) == 0xe6;
    /* XTILECFG (17) and XTILEDATA (18) */
    f->os_amx = (xcr0 & (3u << 17)) == (3u << 17);
  }
  unsigned brand[12] = {0};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; i++)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1],
                  &brand[4 * i + 2], &brand[4 * i + 3]);
  }
  const char *s = (const char *)brand;
  while (*s == ' ') s++;
  snprintf(f->model, sizeof f->model, "%s", s);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Written at the end of every kernel so that no loop is dead code. */
static volatile float g_sink;

/* ---- kernels ---------------------------------------------------------------
 * Each runs `iters` iterations and returns the FLOPs it performed. */

#pragma GCC push_options
#pragma GCC target("avx512f,fma")
static double kernel_fp32_fma(uint64_t iters) {
  __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
  /* distinct starting values: identical chains would be merged into one */
  __m512 a0 = _mm512_set1_ps(0.10f), a1 = _mm512_set1_ps(0.11f),
         a2 = _mm512_set1_ps(0.12f), a3 = _mm512_set1_ps(0.13f),
         a4 = _mm512_set1_ps(0.14f), a5 = _mm512_set1_ps(0.15f),
         a6 = _mm512_set1_ps(0.16f), a7 = _mm512_set1_ps(0.17f),
         a8 = _mm512_set1_ps(0.18f), a9 = _mm512_set1_ps(0.19f),
         a10 = _mm512_set1_ps(0.20f), a11 = _mm512_set1_ps(0.21f),
         a12 = _mm512_set1_ps(0.22f), a13 = _mm512_set1_ps(0.23f),
         a14 = _mm512_set1_ps(0.24f), a15 = _mm512_set1_ps(0.25f);
  for (uint64_t i = 0; i < iters; i++) {
    a0 = _mm512_fmadd_ps(a0, x, y);
    a1 = _mm512_fmadd_ps(a1, x, y);
    a2 = _mm512_fmadd_ps(a2, x, y);
    a3 = _mm512_fmadd_ps(a3, x, y);
    a4 = _mm512_fmadd_ps(a4, x, y);
    a5 = _mm512_fmadd_ps(a5, x, y);
    a6 = _mm512_fmadd_ps(a6, x, y);
    a7 = _mm512_fmadd_ps(a7, x, y);
    a8 = _mm512_fmadd_ps(a8, x, y);
    a9 = _mm512_fmadd_ps(a9, x, y);
    a10 = _mm512_fmadd_ps(a10, x, y);
    a11 = _mm512_fmadd_ps(a11, x, y);
    a12 = _mm512_fmadd_ps(a12, x, y);
    a13 = _mm512_fmadd_ps(a13, x, y);
    a14 = _mm512_fmadd_ps(a14, x, y);
    a15 = _mm512_fmadd_ps(a15, x, y);
  }
  __m512 s = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                    _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
      _mm512_add_ps(
          _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
          _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
  g_sink = _mm512_reduce_add_ps(s);
  return (double)iters * 16 /* instr */ * 16 /* lanes */ * 2 /* mul+add */;
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")
static double kernel_bf16_dp(uint64_t iters) {
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3c00); /* bf16 2^-7 */
  __m512bh y = (__m512bh)_mm512_set1_epi16(0x3c00);
  __m512 a0 = _mm512_set1_ps(0.10f), a1 = _mm512_set1_ps(0.11f),
         a2 = _mm512_set1_ps(0.12f), a3 = _mm512_set1_ps(0.13f),
         a4 = _mm512_set1_ps(0.14f), a5 = _mm512_set1_ps(0.15f),
         a6 = _mm512_set1_ps(0.16f), a7 = _mm512_set1_ps(0.17f),
         a8 = _mm512_set1_ps(0.18f), a9 = _mm512_set1_ps(0.19f),
         a10 = _mm512_set1_ps(0.20f), a11 = _mm512_set1_ps(0.21f),
         a12 = _mm512_set1_ps(0.22f), a13 = _mm512_set1_ps(0.23f),
         a14 = _mm512_set1_ps(0.24f), a15 = _mm512_set1_ps(0.25f);
  for (uint64_t i = 0; i < iters; i++) {
    a0 = _mm512_dpbf16_ps(a0, x, y);
    a1 = _mm512_dpbf16_ps(a1, x, y);
    a2 = _mm512_dpbf16_ps(a2, x, y);
    a3 = _mm512_dpbf16_ps(a3, x, y);
    a4 = _mm512_dpbf16_ps(a4, x, y);
    a5 = _mm512_dpbf16_ps(a5, x, y);
    a6 = _mm512_dpbf16_ps(a6, x, y);
    a7 = _mm512_dpbf16_ps(a7, x, y);
    a8 = _mm512_dpbf16_ps(a8, x, y);
    a9 = _mm512_dpbf16_ps(a9, x, y);
    a10 = _mm512_dpbf16_ps(a10, x, y);
    a11 = _mm512_dpbf16_ps(a11, x, y);
    a12 = _mm512_dpbf16_ps(a12, x, y);
    a13 = _mm512_dpbf16_ps(a13, x, y);
    a14 = _mm512_dpbf16_ps(a14, x, y);
    a15 = _mm512_dpbf16_ps(a15, x, y);
  }
  __m512 s = _mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                    _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
      _mm512_add_ps(
          _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
          _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
  g_sink = _mm512_reduce_add_ps(s);
  /* one vdpbf16ps: 16 fp32 lanes, each 2 bf16 products summed in */
  return (double)iters * 16 * 32 /* products */ * 2;
}
#pragma GCC pop_options

/* AMX tile configuration, palette 1: tiles 0-3 accumulate C (16x16 fp32),
 * 4-5 hold A (16 rows x 32 bf16), 6-7 hold B (16 rows of 16 bf16 pairs). */
typedef struct __attribute__((packed, aligned(64))) amx_tilecfg {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_tilecfg;

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
static double kernel_bf16_amx(uint64_t iters) {
  amx_tilecfg cfg = {.palette = 1};
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  static const uint16_t zeros[16 * 32] __attribute__((aligned(64))) = {0};
  float out[16 * 16] __attribute__((aligned(64)));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  for (uint64_t i = 0; i < iters; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  g_sink = out[0];
  return (double)iters * 4 * (2.0 * 16 * 16 * 32);
}
#pragma GCC pop_options

/* ---- threads ------------------------------------------------------------ */

typedef double (*kernel_fn)(uint64_t iters);

typedef struct worker {
  pthread_t thread;
  int cpu;
  kernel_fn fn;
  uint64_t iters;
  pthread_barrier_t *barrier;
  double flops, t_start, t_end;
} worker;

static void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  /* best effort: a container may forbid it, the measurement still stands */
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  pin_to_cpu(w->cpu);
  w->fn(w->iters / 16 + 1); /* warm the core up to its steady clock */
  pthread_barrier_wait(w->barrier);
  w->t_start = now_s();
  w->flops = w->fn(w->iters);
  w->t_end = now_s();
  return NULL;
}

/* Aggregate GFLOP/s of `threads` workers running `iters` iterations each:
 * total work over the time from the first start to the last end (workers
 * that did not actually overlap, on a busy machine, then do not count
 * double). Returns < 0 on failure. */
static double run_once(kernel_fn fn, int threads, uint64_t iters,
                       double *out_seconds) {
  worker w[64];
  pthread_barrier_t barrier;
  if (threads > 64) threads = 64;
  pthread_barrier_init(&barrier, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++) {
    w[i] = (worker){.cpu = i, .fn = fn, .iters = iters, .barrier = &barrier};
    if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
      /* the started workers wait at a barrier sized for all: give up */
      printf("\n  ],\n  \"error\": \"cannot start thread %d\"\n}\n", i);
      fflush(stdout);
      _exit(1);
    }
  }
  double flops = 0, first = 0, last = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(w[i].thread, NULL);
    flops += w[i].flops;
    if (i == 0 || w[i].t_start < first) first = w[i].t_start;
    if (i == 0 || w[i].t_end > last) last = w[i].t_end;
  }
  pthread_barrier_destroy(&barrier);
  double span = last - first;
  *out_seconds = span;
  return span > 0 ? flops / span * 1e-9 : -1.0;
}

/* Calibrates the iteration count to about `target_s` per trial (taking the
 * fastest calibration run, as the machine may be busy), then keeps the best
 * of `trials`: the limit is the fastest the machine ever went. */
static double measure(kernel_fn fn, int threads, double target_s, int trials) {
  uint64_t iters = 1u << 12;
  double secs = 0;
  for (;;) {
    if (run_once(fn, 1, iters, &secs) < 0) return -1.0;
    if (secs > target_s / 8 || iters > (1ull << 40)) break;
    iters *= 4;
  }
  double best_secs = secs;
  for (int i = 0; i < 4; i++) {
    if (run_once(fn, 1, iters, &secs) >= 0 && secs < best_secs) best_secs = secs;
  }
  iters = (uint64_t)((double)iters * target_s / (best_secs > 0 ? best_secs : 1e-9)) + 1;
  double best = -1.0;
  for (int t = 0; t < trials; t++) {
    double g = run_once(fn, threads, iters, &secs);
    if (g > best) best = g;
  }
  return best;
}

typedef struct kernel_spec {
  const char *name;
  const char *dtype;
  kernel_fn fn;
  const char *missing; /* NULL when runnable, else why not */
} kernel_spec;

int main(int argc, char **argv) {
  bool quick = false;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int max_threads = ncpu > 0 ? (int)ncpu : 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      max_threads = atoi(argv[++i]);
      if (max_threads < 1) max_threads = 1;
      if (max_threads > 64) max_threads = 64;
    } else {
      fprintf(stderr, "usage: %s [--quick] [--threads N]\n", argv[0]);
      return 2;
    }
  }

  cpu_features f;
  cpu_detect(&f);
  bool amx_perm = false;
  if (f.amx_tile && f.amx_bf16 && f.os_amx)
    amx_perm = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM,
                       XFEATURE_XTILEDATA) == 0;

  kernel_spec specs[] = {
      {"fp32_avx512_fma", "float32", kernel_fp32_fma,
       !(f.avx512f && f.fma) ? "CPU lacks AVX-512F/FMA"
       : !f.os_avx512        ? "OS has not enabled AVX-512 state"
                             : NULL},
      {"bf16_avx512_dp", "bfloat16", kernel_bf16_dp,
       !(f.avx512f && f.avx512bf16) ? "CPU lacks AVX-512-BF16 (vdpbf16ps)"
       : !f.os_avx512               ? "OS has not enabled AVX-512 state"
                                    : NULL},
      {"bf16_amx", "bfloat16", kernel_bf16_amx,
       !(f.amx_tile && f.amx_bf16) ? "CPU lacks AMX-BF16 (tdpbf16ps)"
       : !f.os_amx                 ? "OS has not enabled AMX tile state"
       : !amx_perm ? "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused"
                   : NULL},
  };
  int thread_counts[2] = {1, max_threads};
  int n_counts = max_threads > 1 ? 2 : 1;
  /* many short trials: on a shared machine the best of them is the one
   * that ran without being descheduled */
  double target = quick ? 0.005 : 0.02;
  int trials = quick ? 2 : 40;

  printf("{\n  \"benchmark\": \"peak_fma\",\n  \"quick\": %s,\n",
         quick ? "true" : "false");
  printf("  \"cpu\": {\"model\": \"%s\", \"online_cpus\": %ld, \"fma\": %s, "
         "\"avx512f\": %s, \"avx512bf16\": %s, \"amx_tile\": %s, "
         "\"amx_bf16\": %s, \"os_avx512\": %s, \"os_amx\": %s},\n",
         f.model, ncpu, f.fma ? "true" : "false", f.avx512f ? "true" : "false",
         f.avx512bf16 ? "true" : "false", f.amx_tile ? "true" : "false",
         f.amx_bf16 ? "true" : "false", f.os_avx512 ? "true" : "false",
         f.os_amx ? "true" : "false");
  printf("  \"results\": [");
  bool first = true;
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
    for (int c = 0; c < n_counts; c++) {
      int threads = thread_counts[c];
      printf("%s\n    {\"kernel\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, ",
             first ? "" : ",", specs[k].name, specs[k].dtype, threads);
      first = false;
      if (specs[k].missing) {
        printf("\"available\": false, \"reason\": \"%s\"}", specs[k].missing);
        continue;
      }
      double g = measure(specs[k].fn, threads, target, trials);
      if (g < 0)
        printf("\"available\": false, \"reason\": \"thread start failed\"}");
      else
        printf("\"available\": true, \"gflops\": %.2f}", g);
      fflush(stdout);
    }
  }
  printf("\n  ]\n}\n");
  return 0;
}
