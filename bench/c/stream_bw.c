/* stream_bw — the memory-bandwidth limit of this machine, measured.
 *
 * STREAM-style kernels over arrays far larger than the last-level cache, on
 * one thread and on N pinned threads (pthreads), each thread owning (and
 * first-touching) a contiguous slice:
 *   read    s += a[i]            bytes counted: 8 per element
 *   write   a[i] = s             8
 *   copy    c[i] = a[i]          16
 *   triad   a[i] = b[i] + s*c[i] 24
 * and, with AVX-512, write_nt / copy_nt / triad_nt: the same with
 * non-temporal stores, which skip the read of each written line (what
 * STREAM compilers emit). Bytes are counted the STREAM way (write-allocate
 * traffic not included), so a kernel that moves the same arrays is directly
 * comparable. The best of several trials is reported. AVX-512 is used when
 * cpuid says so, otherwise plain C loops.
 *
 * Output: one JSON object on stdout.
 * Usage: stream_bw [--quick] [--threads N] [--mib MiB-per-array]
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
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { K_READ, K_WRITE, K_COPY, K_TRIAD, K_WRITE_NT, K_COPY_NT, K_TRIAD_NT, K_COUNT };
static const char *const kernel_names[K_COUNT] = {
    "read", "write", "copy", "triad", "write_nt", "copy_nt", "triad_nt"};
static const double kernel_bytes_per_elem[K_COUNT] = {8, 8, 16, 24, 8, 16, 24};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool cpu_has_avx512f(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 16) & 1))
    return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;
}

/* ---- kernels over [0, n) of a slice ------------------------------------- */

static double generic_read(const double *a, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
  }
  for (; i < n; i++) s0 += a[i];
  return s0 + s1 + s2 + s3;
}
static void generic_write(double *a, size_t n, double s) {
  for (size_t i = 0; i < n; i++) a[i] = s;
}
static void generic_copy(double *restrict c, const double *restrict a,
                         size_t n) {
  for (size_t i = 0; i < n; i++) c[i] = a[i];
}
static void generic_triad(double *restrict a, const double *restrict b,
                          const double *restrict c, size_t n, double s) {
  for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* Slices are 64-byte aligned and a multiple of 32 elements long (see
 * slice_bounds), so the AVX-512 loops need no tails. */
#pragma GCC push_options
#pragma GCC target("avx512f")
static double avx512_read(const double *a, size_t n) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 32) {
    s0 = _mm512_add_pd(s0, _mm512_load_pd(a + i));
    s1 = _mm512_add_pd(s1, _mm512_load_pd(a + i + 8));
    s2 = _mm512_add_pd(s2, _mm512_load_pd(a + i + 16));
    s3 = _mm512_add_pd(s3, _mm512_load_pd(a + i + 24));
  }
  return _mm512_reduce_add_pd(
      _mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}
static void avx512_write(double *a, size_t n, double s) {
  __m512d v = _mm512_set1_pd(s);
  for (size_t i = 0; i < n; i += 32) {
    _mm512_store_pd(a + i, v);
    _mm512_store_pd(a + i + 8, v);
    _mm512_store_pd(a + i + 16, v);
    _mm512_store_pd(a + i + 24, v);
  }
}
static void avx512_copy(double *restrict c, const double *restrict a,
                        size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    _mm512_store_pd(c + i, _mm512_load_pd(a + i));
    _mm512_store_pd(c + i + 8, _mm512_load_pd(a + i + 8));
    _mm512_store_pd(c + i + 16, _mm512_load_pd(a + i + 16));
    _mm512_store_pd(c + i + 24, _mm512_load_pd(a + i + 24));
  }
}
static void avx512_triad(double *restrict a, const double *restrict b,
                         const double *restrict c, size_t n, double s) {
  __m512d vs = _mm512_set1_pd(s);
  for (size_t i = 0; i < n; i += 16) {
    _mm512_store_pd(a + i, _mm512_fmadd_pd(vs, _mm512_load_pd(c + i),
                                           _mm512_load_pd(b + i)));
    _mm512_store_pd(a + i + 8, _mm512_fmadd_pd(vs, _mm512_load_pd(c + i + 8),
                                               _mm512_load_pd(b + i + 8)));
  }
}
/* Non-temporal stores are weakly ordered: each kernel fences before the
 * thread reads its clock. */
static void avx512_write_nt(double *a, size_t n, double s) {
  __m512d v = _mm512_set1_pd(s);
  for (size_t i = 0; i < n; i += 32) {
    _mm512_stream_pd(a + i, v);
    _mm512_stream_pd(a + i + 8, v);
    _mm512_stream_pd(a + i + 16, v);
    _mm512_stream_pd(a + i + 24, v);
  }
  _mm_sfence();
}
static void avx512_copy_nt(double *restrict c, const double *restrict a,
                           size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    _mm512_stream_pd(c + i, _mm512_load_pd(a + i));
    _mm512_stream_pd(c + i + 8, _mm512_load_pd(a + i + 8));
    _mm512_stream_pd(c + i + 16, _mm512_load_pd(a + i + 16));
    _mm512_stream_pd(c + i + 24, _mm512_load_pd(a + i + 24));
  }
  _mm_sfence();
}
static void avx512_triad_nt(double *restrict a, const double *restrict b,
                            const double *restrict c, size_t n, double s) {
  __m512d vs = _mm512_set1_pd(s);
  for (size_t i = 0; i < n; i += 16) {
    _mm512_stream_pd(a + i, _mm512_fmadd_pd(vs, _mm512_load_pd(c + i),
                                            _mm512_load_pd(b + i)));
    _mm512_stream_pd(a + i + 8, _mm512_fmadd_pd(vs, _mm512_load_pd(c + i + 8),
                                                _mm512_load_pd(b + i + 8)));
  }
  _mm_sfence();
}
#pragma GCC pop_options

/* ---- threads ------------------------------------------------------------ */

typedef struct shared_state {
  double *a, *b, *c;
  size_t n;
  int threads;
  int kernel;
  int trials;
  bool avx512;
  pthread_barrier_t barrier;
  double t_start[64], t_end[64]; /* per thread, of the current trial */
  double best_s;                 /* written by thread 0 only */
} shared_state;

typedef struct worker {
  pthread_t thread;
  int index;
  shared_state *st;
  double sink;
} worker;

static void slice_bounds(size_t n, int threads, int index, size_t *lo,
                         size_t *hi) {
  size_t per = (n / (size_t)threads) & ~(size_t)31;
  *lo = per * (size_t)index;
  *hi = index == threads - 1 ? (n & ~(size_t)31) : *lo + per;
}

static void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static double run_kernel(shared_state *st, size_t lo, size_t hi) {
  double *a = st->a + lo, *b = st->b + lo, *c = st->c + lo;
  size_t n = hi - lo;
  double r = 0;
  switch (st->kernel) {
    case K_READ:
      r = st->avx512 ? avx512_read(a, n) : generic_read(a, n);
      break;
    case K_WRITE:
      st->avx512 ? avx512_write(c, n, 1.5) : generic_write(c, n, 1.5);
      break;
    case K_COPY:
      st->avx512 ? avx512_copy(c, a, n) : generic_copy(c, a, n);
      break;
    case K_TRIAD:
      st->avx512 ? avx512_triad(a, b, c, n, 0.5)
                 : generic_triad(a, b, c, n, 0.5);
      break;
    case K_WRITE_NT:
      avx512_write_nt(c, n, 1.5);
      break;
    case K_COPY_NT:
      avx512_copy_nt(c, a, n);
      break;
    case K_TRIAD_NT:
      avx512_triad_nt(a, b, c, n, 0.5);
      break;
  }
  return r;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  shared_state *st = w->st;
  size_t lo, hi;
  pin_to_cpu(w->index);
  slice_bounds(st->n, st->threads, w->index, &lo, &hi);
  run_kernel(st, lo, hi); /* warm-up: TLBs, page tables, clocks */
  for (int t = 0; t < st->trials; t++) {
    pthread_barrier_wait(&st->barrier);
    st->t_start[w->index] = now_s();
    w->sink += run_kernel(st, lo, hi);
    st->t_end[w->index] = now_s();
    pthread_barrier_wait(&st->barrier);
    /* the trial lasts from the first start to the last end: a thread
     * descheduled before reading its clock cannot shorten it */
    if (w->index == 0) {
      double first = st->t_start[0], last = st->t_end[0];
      for (int i = 1; i < st->threads; i++) {
        if (st->t_start[i] < first) first = st->t_start[i];
        if (st->t_end[i] > last) last = st->t_end[i];
      }
      if (last - first < st->best_s) st->best_s = last - first;
    }
    /* nobody overwrites the times before thread 0 has read them */
    pthread_barrier_wait(&st->barrier);
  }
  return NULL;
}

/* First touch from the thread that will use each slice, so that pages land
 * where that thread runs (matters on multi-socket machines). */
static void *toucher_main(void *arg) {
  worker *w = arg;
  shared_state *st = w->st;
  size_t lo, hi;
  pin_to_cpu(w->index);
  slice_bounds(st->n, st->threads, w->index, &lo, &hi);
  for (size_t i = lo; i < hi; i++) {
    st->a[i] = 1.0;
    st->b[i] = 2.0;
    st->c[i] = 0.0;
  }
  return NULL;
}

/* The workers meet at barriers sized for all of them: if one cannot start,
 * the others would wait forever, so the program reports and exits instead. */
static void run_threads(shared_state *st, void *(*fn)(void *), worker *w) {
  for (int i = 0; i < st->threads; i++) {
    w[i] = (worker){.index = i, .st = st};
    if (pthread_create(&w[i].thread, NULL, fn, &w[i]) != 0) {
      printf("{\"benchmark\": \"stream_bw\", \"error\": \"cannot start "
             "thread %d\"}\n", i);
      fflush(stdout);
      _exit(1);
    }
  }
  for (int i = 0; i < st->threads; i++) pthread_join(w[i].thread, NULL);
}

static double *alloc_array(size_t bytes) {
  /* 2 MiB alignment lets the kernel back the array with huge pages */
  size_t align = 2u << 20;
  size_t rounded = (bytes + align - 1) / align * align;
  double *p = aligned_alloc(align, rounded);
  if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

int main(int argc, char **argv) {
  bool quick = false;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int max_threads = ncpu > 0 ? (int)ncpu : 1;
  double mib = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      max_threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
      mib = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--quick] [--threads N] [--mib M]\n",
              argv[0]);
      return 2;
    }
  }
  if (max_threads < 1) max_threads = 1;
  if (max_threads > 64) max_threads = 64;
  if (mib <= 0) mib = quick ? 16 : 256;
  size_t n = ((size_t)(mib * (1u << 20)) / sizeof(double)) & ~(size_t)1023;
  if (n < 1024) n = 1024;

  shared_state st = {.n = n, .avx512 = cpu_has_avx512f()};
  st.a = alloc_array(n * sizeof(double));
  st.b = alloc_array(n * sizeof(double));
  st.c = alloc_array(n * sizeof(double));
  if (!st.a || !st.b || !st.c) {
    printf("{\"benchmark\": \"stream_bw\", \"error\": \"out of memory for 3 x "
           "%.0f MiB\"}\n", mib);
    return 1;
  }
  worker w[64];
  st.threads = max_threads;
  run_threads(&st, toucher_main, w);

  printf("{\n  \"benchmark\": \"stream_bw\",\n  \"quick\": %s,\n",
         quick ? "true" : "false");
  printf("  \"array_mib\": %.1f,\n  \"elements\": %zu,\n  \"isa\": \"%s\",\n",
         (double)(n * sizeof(double)) / (1u << 20), n,
         st.avx512 ? "avx512" : "generic");
  printf("  \"results\": [");
  int thread_counts[2] = {1, max_threads};
  int n_counts = max_threads > 1 ? 2 : 1;
  bool first = true;
  for (int k = 0; k < K_COUNT; k++) {
    for (int c = 0; c < n_counts; c++) {
      st.threads = thread_counts[c];
      st.kernel = k;
      /* the best of many: on a shared machine some trials are disturbed */
      st.trials = quick ? 2 : 30;
      st.best_s = 1e30;
      bool runs = k < K_WRITE_NT || st.avx512; /* NT kernels are AVX-512 */
      if (runs) {
        pthread_barrier_init(&st.barrier, NULL, (unsigned)st.threads);
        run_threads(&st, worker_main, w);
        pthread_barrier_destroy(&st.barrier);
      }
      size_t elems = n & ~(size_t)31;
      printf("%s\n    {\"kernel\": \"%s\", \"threads\": %d, ", first ? "" : ",",
             kernel_names[k], st.threads);
      first = false;
      if (!runs)
        printf("\"available\": false, \"reason\": \"no AVX-512 for streaming stores\"}");
      else if (st.best_s >= 1e30)
        printf("\"available\": false, \"reason\": \"no trial ran\"}");
      else
        printf("\"available\": true, \"gbps\": %.2f}",
               kernel_bytes_per_elem[k] * (double)elems / st.best_s * 1e-9);
      fflush(stdout);
    }
  }
  printf("\n  ]\n}\n");
  free(st.a);
  free(st.b);
  free(st.c);
  return 0;
}
