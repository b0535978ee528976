/* loomccl across processes: each test forks its ranks (the runtime starts
 * in the children only), which check their results and exit with their
 * failure count. Every collective against a reference computed here in
 * rank order (bitwise), results identical from run to run; several chunks
 * per collective (a small staging buffer) and an uneven world of 3; the
 * staged path on the guarded driver; a rank that dies makes its peer fail
 * at once (not at the timeout) and nothing of the segment is left; ranks
 * that run different collectives fail with both named; bad arguments;
 * shared regions (private sealed memfds, a second mapping of one, release
 * by either holder, bad arguments, refused where the host cannot address
 * device memory). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/base/dtype.h"
#include "loom/ccl.h"
#include "loom/hal.h"
#include "runtime/ccl/ccl_internal.h"
#include "test_util.h"

enum { SMALL_BUFFER = 8192 }; /* 2048 float32 per chunk: collectives of 5000 take several */

typedef void (*rank_fn)(int rank, int world, const char *job);

/* Forks `world` ranks running fn (on `driver`, NULL: the default) and
 * checks that each exits cleanly. */
static void run_ranks(int world, const char *driver, rank_fn fn) {
  char job[LOOM_CCL_JOB_ID_LEN + 1];
  CHECK_OK(loom_ccl_make_job_id(job));
  pid_t pids[8];
  fflush(NULL);
  for (int r = 0; r < world; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(120); /* a hang fails the test instead of the suite's timeout */
      if (driver) setenv("LOOM_DRIVER", driver, 1);
      test_failed = 0;
      fn(r, world, job);
      loom_shutdown();
      fflush(NULL);
      exit(test_failed ? 1 : 0);
    }
  }
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: %s %d", r,
              WIFEXITED(status) ? "exit status" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
}

static loom_stream_t *stream;

static loom_status try_join(int rank, int world, const char *job, size_t buffer,
                            uint64_t timeout_ms, loom_ccl_comm_t **comm) {
  CHECK_OK(loom_stream_create(0, -1, &stream));
  loom_ccl_config config = {.rank = rank, .world_size = world, .stream = stream,
                            .timeout_ms = timeout_ms, .buffer_bytes = buffer};
  memcpy(config.job_id, job, sizeof config.job_id);
  return loom_ccl_comm_create(&config, comm);
}

static loom_ccl_comm_t *join(int rank, int world, const char *job, size_t buffer,
                             uint64_t timeout_ms) {
  loom_ccl_comm_t *comm = NULL;
  CHECK_OK(try_join(rank, world, job, buffer, timeout_ms, &comm));
  return comm;
}

static void leave(loom_ccl_comm_t *comm) {
  loom_ccl_comm_destroy(comm);
  loom_stream_release(stream);
  stream = NULL;
}

static void *device_copy(const void *host, size_t bytes) {
  void *p = NULL;
  CHECK_OK(loom_malloc(0, bytes, NULL, &p));
  loom_stream_t *s = NULL;
  loom_stream_default(0, &s);
  CHECK_OK(loom_memcpy(s, p, host, bytes));
  CHECK_OK(loom_stream_synchronize(s));
  return p;
}

static void host_copy(void *host, const void *dev, size_t bytes) {
  loom_stream_t *s = NULL;
  loom_stream_default(0, &s);
  CHECK_OK(loom_memcpy(s, host, dev, bytes));
}

/* Runs one piece of work: begin on the default stream, fn, end, wait. */
#define WORK(comm, body)                                                  \
  do {                                                                    \
    loom_stream_t *def_ = NULL;                                           \
    loom_stream_default(0, &def_);                                        \
    loom_ccl_work_t *work = NULL;                                         \
    CHECK_OK(loom_ccl_begin((comm), def_, "test", &work));                \
    body;                                                                 \
    CHECK_OK(loom_ccl_end(work));                                         \
    CHECK_OK(loom_ccl_work_wait(work, def_));                             \
    CHECK_OK(loom_stream_synchronize(def_));                              \
    CHECK_OK(loom_ccl_work_query(work));                                  \
    loom_ccl_work_release(work);                                          \
  } while (0)

/* ---- data and references ---------------------------------------------------------- */

static const loom_dtype dtypes[] = {LOOM_FLOAT32, LOOM_FLOAT64, LOOM_FLOAT16, LOOM_BFLOAT16,
                                   LOOM_INT8,    LOOM_UINT8,   LOOM_INT32,   LOOM_INT64,
                                   LOOM_BOOL};

/* Element i of rank r's input: floats with many significant bits (so the
 * order of a sum matters), small integers that overflow int8 in a product. */
static double value(loom_dtype d, int rank, size_t i) {
  const unsigned h = (unsigned)(i * 2654435761u + (unsigned)rank * 40503u);
  switch (d) {
    case LOOM_BOOL: return (h >> 7) % 3 == 0;
    case LOOM_INT8: case LOOM_UINT8: case LOOM_INT32: case LOOM_INT64:
      return (double)((int)((h >> 5) % 23) - 11);
    default: return ((double)((h >> 3) % 100000) - 50000.0) / 977.0;
  }
}

static void store(void *buf, loom_dtype d, size_t i, double v) {
  switch (d) {
    case LOOM_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case LOOM_FLOAT64: ((double *)buf)[i] = v; break;
    case LOOM_FLOAT16: ((uint16_t *)buf)[i] = loom_f32_to_f16((float)v); break;
    case LOOM_BFLOAT16: ((uint16_t *)buf)[i] = loom_f32_to_bf16((float)v); break;
    case LOOM_INT8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; break;
    case LOOM_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    case LOOM_INT32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
    case LOOM_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint8_t *)buf)[i] = v != 0; break;
  }
}

static void *make_input(loom_dtype d, int rank, size_t n) {
  void *host = calloc(n, 8);
  for (size_t i = 0; i < n; ++i) store(host, d, i, value(d, rank, i));
  return host;
}

static int valid_op(loom_dtype d, int op) {
  const int floating = d == LOOM_FLOAT32 || d == LOOM_FLOAT64 || d == LOOM_FLOAT16 ||
                       d == LOOM_BFLOAT16;
  if (op == LOOM_CCL_PREMUL_SUM) return floating;
  if (op == LOOM_CCL_AVG) return d != LOOM_BOOL;
  return 1;
}

/* The reduction over ranks 0..world-1 of element i, in the contract's
 * arithmetic (loom/kernels/ccl.h), written into ref[i]. */
static void reference(void *ref, loom_dtype d, int op, double factor, int world, size_t i) {
  void *one = calloc(1, 8);
  if (d == LOOM_FLOAT64) {
    double acc = 0;
    for (int r = 0; r < world; ++r) {
      double x = value(d, r, i);
      if (op == LOOM_CCL_PREMUL_SUM) x *= factor;
      if (r == 0) acc = x;
      else if (op == LOOM_CCL_PROD) acc *= x;
      else if (op == LOOM_CCL_MAX) acc = acc > x ? acc : x;
      else if (op == LOOM_CCL_MIN) acc = acc < x ? acc : x;
      else acc += x;
    }
    if (op == LOOM_CCL_AVG) acc /= world;
    ((double *)ref)[i] = acc;
  } else if (d == LOOM_FLOAT32 || d == LOOM_FLOAT16 || d == LOOM_BFLOAT16) {
    float acc = 0;
    for (int r = 0; r < world; ++r) {
      store(one, d, 0, value(d, r, i)); /* the input as stored, widened */
      float x = d == LOOM_FLOAT32 ? *(float *)one
                : d == LOOM_FLOAT16 ? loom_f16_to_f32(*(uint16_t *)one)
                                    : loom_bf16_to_f32(*(uint16_t *)one);
      if (op == LOOM_CCL_PREMUL_SUM) x *= (float)factor;
      if (r == 0) acc = x;
      else if (op == LOOM_CCL_PROD) acc *= x;
      else if (op == LOOM_CCL_MAX) acc = acc > x ? acc : x;
      else if (op == LOOM_CCL_MIN) acc = acc < x ? acc : x;
      else acc += x;
    }
    if (op == LOOM_CCL_AVG) acc /= (float)world;
    store(ref, d, i, acc);
  } else if (d == LOOM_BOOL) {
    int acc = value(d, 0, i) != 0;
    for (int r = 1; r < world; ++r) {
      const int x = value(d, r, i) != 0;
      acc = (op == LOOM_CCL_SUM || op == LOOM_CCL_MAX) ? (acc | x) : (acc & x);
    }
    ((uint8_t *)ref)[i] = (uint8_t)acc;
  } else {
    int64_t acc = 0;
    for (int r = 0; r < world; ++r) {
      store(one, d, 0, value(d, r, i));
      int64_t x = d == LOOM_INT8 ? *(int8_t *)one : d == LOOM_UINT8 ? *(uint8_t *)one
                  : d == LOOM_INT32 ? *(int32_t *)one : *(int64_t *)one;
      if (r == 0) acc = x;
      else if (op == LOOM_CCL_PROD) acc = (int64_t)((uint64_t)acc * (uint64_t)x);
      else if (op == LOOM_CCL_MAX) acc = acc > x ? acc : x;
      else if (op == LOOM_CCL_MIN) acc = acc < x ? acc : x;
      else acc += x;
    }
    if (op == LOOM_CCL_AVG) acc /= world;
    store(ref, d, i, (double)acc);
    if (d == LOOM_INT64) ((int64_t *)ref)[i] = acc;
    else if (d == LOOM_INT32) ((int32_t *)ref)[i] = (int32_t)(uint32_t)(uint64_t)acc;
    else if (d == LOOM_INT8) ((int8_t *)ref)[i] = (int8_t)(uint8_t)(uint64_t)acc;
    else ((uint8_t *)ref)[i] = (uint8_t)(uint64_t)acc;
  }
  free(one);
}

/* ---- tests --------------------------------------------------------------------- */

enum { N = 5000 };

static void allreduce_rank(int rank, int world, const char *job) {
  loom_ccl_comm_t *comm = join(rank, world, job, SMALL_BUFFER, 60000);
  if (!comm) return;
  for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; ++t) {
    const loom_dtype d = dtypes[t];
    const size_t es = (size_t)loom_dtype_size(d);
    void *host = make_input(d, rank, N);
    void *in = device_copy(host, N * es);
    void *out = device_copy(host, N * es);
    void *got = calloc(N, 8), *again = calloc(N, 8), *ref = calloc(N, 8);
    for (int op = 0; op < LOOM_CCL_OP_COUNT; ++op) {
      if (!valid_op(d, op)) continue;
      const loom_ccl_reduction red = {.op = op, .factor = 0.375};
      WORK(comm, CHECK_OK(loom_ccl_allreduce(work, in, out, N, d, &red)));
      host_copy(got, out, N * es);
      /* In place, a second time: the same bits. */
      void *inplace = device_copy(host, N * es);
      WORK(comm, CHECK_OK(loom_ccl_allreduce(work, inplace, inplace, N, d, &red)));
      host_copy(again, inplace, N * es);
      loom_free(inplace);
      for (size_t i = 0; i < N; ++i) reference(ref, d, op, red.factor, world, i);
      CHECK_MSG(test_same_bits(got, ref, N * es), "allreduce dtype %d op %d", (int)d, op);
      CHECK_MSG(test_same_bits(got, again, N * es), "rerun dtype %d op %d", (int)d, op);
    }
    loom_free(in);
    loom_free(out);
    free(host), free(got), free(again), free(ref);
  }
  leave(comm);
}

static void test_allreduce_two_ranks(void) { run_ranks(2, NULL, allreduce_rank); }
static void test_allreduce_three_ranks(void) { run_ranks(3, NULL, allreduce_rank); }

/* Float32 data whose element i of rank r is 1000 r + i / 8 (exact). */
static float tag(int r, size_t i) { return 1000.0f * (float)r + (float)i / 8.0f; }

static float *device_tagged(int r, size_t n) {
  float *host = malloc(n * sizeof *host);
  for (size_t i = 0; i < n; ++i) host[i] = tag(r, i);
  float *dev = device_copy(host, n * sizeof *host);
  free(host);
  return dev;
}

static float *read_back(const float *dev, size_t n) {
  float *host = malloc(n * sizeof *host);
  host_copy(host, dev, n * sizeof *host);
  return host;
}

static void collectives_rank(int rank, int world, const char *job) {
  loom_ccl_comm_t *comm = join(rank, world, job, SMALL_BUFFER, 60000);
  if (!comm) return;
  const size_t n = N;
  float *mine = device_tagged(rank, n);
  float *all = device_tagged(0, n * (size_t)world); /* overwritten */
  void *parts[8];
  for (int p = 0; p < world; ++p) parts[p] = all + (size_t)p * n;

  /* allgather: part p is rank p's data. */
  WORK(comm, CHECK_OK(loom_ccl_allgather(work, mine, (void *const *)parts, n, LOOM_FLOAT32)));
  float *h = read_back(all, n * (size_t)world);
  int ok = 1;
  for (int p = 0; p < world; ++p)
    for (size_t i = 0; i < n; ++i) ok &= h[(size_t)p * n + i] == tag(p, i);
  CHECK_MSG(ok, "allgather");
  free(h);

  /* reduce_scatter (sum): rank r gets the sum over p of rank p's part r. */
  float *src = device_tagged(rank, n * (size_t)world), *dst = device_tagged(0, n);
  const void *sparts[8];
  for (int p = 0; p < world; ++p) sparts[p] = src + (size_t)p * n;
  const loom_ccl_reduction sum = {.op = LOOM_CCL_SUM};
  WORK(comm, CHECK_OK(loom_ccl_reduce_scatter(work, sparts, dst, n, LOOM_FLOAT32, &sum)));
  h = read_back(dst, n);
  ok = 1;
  for (size_t i = 0; i < n; ++i) {
    float acc = tag(0, (size_t)rank * n + i);
    for (int p = 1; p < world; ++p) acc += tag(p, (size_t)rank * n + i);
    ok &= h[i] == acc;
  }
  CHECK_MSG(ok, "reduce_scatter");
  free(h);

  /* broadcast from the last rank. */
  float *b = device_tagged(rank, n);
  WORK(comm, CHECK_OK(loom_ccl_broadcast(work, b, n, LOOM_FLOAT32, world - 1)));
  h = read_back(b, n);
  ok = 1;
  for (size_t i = 0; i < n; ++i) ok &= h[i] == tag(world - 1, i);
  CHECK_MSG(ok, "broadcast");
  free(h);

  /* reduce (max) to rank 1; the others' recv is untouched. */
  float *r = device_tagged(7, n);
  const loom_ccl_reduction max = {.op = LOOM_CCL_MAX};
  WORK(comm, CHECK_OK(loom_ccl_reduce(work, mine, r, n, LOOM_FLOAT32, &max, 1)));
  h = read_back(r, n);
  ok = 1;
  for (size_t i = 0; i < n; ++i) ok &= h[i] == (rank == 1 ? tag(world - 1, i) : tag(7, i));
  CHECK_MSG(ok, "reduce");
  free(h);

  /* gather to rank 0, scatter from rank 1. */
  float *g = device_tagged(9, n * (size_t)world);
  void *gparts[8];
  for (int p = 0; p < world; ++p) gparts[p] = g + (size_t)p * n;
  WORK(comm, CHECK_OK(loom_ccl_gather(work, mine, (void *const *)gparts, n, LOOM_FLOAT32, 0)));
  h = read_back(g, n * (size_t)world);
  ok = 1;
  for (int p = 0; p < world; ++p)
    for (size_t i = 0; i < n; ++i) ok &= h[(size_t)p * n + i] == (rank == 0 ? tag(p, i) : tag(9, (size_t)p * n + i));
  CHECK_MSG(ok, "gather");
  free(h);
  float *s = device_tagged(rank, n);
  const void *scparts[8];
  for (int p = 0; p < world; ++p) scparts[p] = src + (size_t)p * n;
  WORK(comm, CHECK_OK(loom_ccl_scatter(work, scparts, s, n, LOOM_FLOAT32, 1)));
  h = read_back(s, n);
  ok = 1;
  for (size_t i = 0; i < n; ++i) ok &= h[i] == tag(1, (size_t)rank * n + i);
  CHECK_MSG(ok, "scatter");
  free(h);

  /* all_to_all, uneven: rank r sends (r + 1) * (p + 1) * 100 elements to p
   * (some messages take several chunks of a channel). */
  size_t scount[8], soff[8], rcount[8], roff[8], stot = 0, rtot = 0;
  for (int p = 0; p < world; ++p) {
    scount[p] = (size_t)(rank + 1) * (size_t)(p + 1) * 100 + (p == 0 ? 300000 : 0);
    rcount[p] = (size_t)(p + 1) * (size_t)(rank + 1) * 100 + (rank == 0 ? 300000 : 0);
    soff[p] = stot, stot += scount[p];
    roff[p] = rtot, rtot += rcount[p];
  }
  float *a_in = device_tagged(rank, stot), *a_out = device_tagged(0, rtot);
  WORK(comm, CHECK_OK(loom_ccl_all_to_all(work, a_in, scount, soff, a_out, rcount, roff,
                                          LOOM_FLOAT32)));
  h = read_back(a_out, rtot);
  ok = 1;
  for (int p = 0; p < world; ++p) {
    /* p's send offset for this rank. */
    size_t poff = 0;
    for (int q = 0; q < rank; ++q) poff += (size_t)(p + 1) * (size_t)(q + 1) * 100 + (q == 0 ? 300000 : 0);
    for (size_t i = 0; i < rcount[p]; ++i) ok &= h[roff[p] + i] == tag(p, poff + i);
  }
  CHECK_MSG(ok, "all_to_all");
  free(h);

  /* send/recv around the ring, 300000 elements (several channel chunks). */
  const size_t m = 300000;
  float *tx = device_tagged(rank, m), *rx = device_tagged(0, m);
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  WORK(comm, {
    if (rank % 2 == 0) {
      CHECK_OK(loom_ccl_send(work, tx, m, LOOM_FLOAT32, next));
      CHECK_OK(loom_ccl_recv(work, rx, m, LOOM_FLOAT32, prev));
    } else {
      CHECK_OK(loom_ccl_recv(work, rx, m, LOOM_FLOAT32, prev));
      CHECK_OK(loom_ccl_send(work, tx, m, LOOM_FLOAT32, next));
    }
  });
  h = read_back(rx, m);
  ok = 1;
  for (size_t i = 0; i < m; ++i) ok &= h[i] == tag(prev, i);
  CHECK_MSG(ok, "send/recv");
  free(h);

  WORK(comm, CHECK_OK(loom_ccl_barrier(work)));
  void *bufs[] = {mine, all, src, dst, b, r, g, s, a_in, a_out, tx, rx};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) loom_free(bufs[i]);
  leave(comm);
}

static void test_collectives_three_ranks(void) { run_ranks(3, NULL, collectives_rank); }
/* Device memory the host cannot touch: reductions stage through device scratch. */
static void test_collectives_guarded(void) {
  run_ranks(2, "guarded", collectives_rank);
  run_ranks(2, "guarded", allreduce_rank);
}

/* Nothing of a communicator stays in this process: no mapping, no descriptor. */
static int segment_left(void) {
  int found = 0;
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[512];
  while (maps && fgets(line, sizeof line, maps)) found |= strstr(line, "memfd:loomccl") != NULL;
  if (maps) fclose(maps);
  DIR *fds = opendir("/proc/self/fd");
  struct dirent *e;
  while (fds && (e = readdir(fds))) {
    char path[300], target[300];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0) {
      target[n] = 0;
      found |= strstr(target, "memfd:loomccl") != NULL;
    }
  }
  if (fds) closedir(fds);
  return found;
}

static int victim; /* the rank that dies */

static void death_rank(int rank, int world, const char *job) {
  /* A timeout far beyond the test's: only the death can end the wait. */
  loom_ccl_comm_t *comm = join(rank, world, job, 0, 600000);
  if (!comm) return;
  if (rank == victim) {
    /* Die in the middle of the job: the peer is waiting in a collective. */
    usleep(100000);
    raise(SIGKILL);
  }
  CHECK(segment_left());
  loom_stream_t *def = NULL;
  loom_stream_default(0, &def);
  float *x = device_tagged(0, 1000);
  loom_ccl_work_t *work = NULL;
  const loom_ccl_reduction sum = {.op = LOOM_CCL_SUM};
  CHECK_OK(loom_ccl_begin(comm, def, "allreduce", &work));
  CHECK_OK(loom_ccl_allreduce(work, x, x, 1000, LOOM_FLOAT32, &sum));
  CHECK_OK(loom_ccl_end(work));
  CHECK_OK(loom_ccl_work_wait(work, def));
  const loom_status st = loom_stream_synchronize(def);
  CHECK(st == LOOM_ERROR_DEVICE);
  char died[32];
  snprintf(died, sizeof died, "rank %d died", victim);
  CHECK_MSG(strstr(loom_last_error(), died) != NULL, "%s", loom_last_error());
  CHECK(loom_ccl_work_synchronize(work) == LOOM_ERROR_DEVICE);
  loom_ccl_work_release(work);
  /* The communicator is broken: the next collective fails at once. */
  CHECK(loom_ccl_begin(comm, def, "allreduce", &work) == LOOM_ERROR_DEVICE);
  loom_free(x);
  leave(comm);
  CHECK(!segment_left());
}

/* `world` ranks, of which `dead` dies; the others must fail at once. */
static void run_death(int world, int dead) {
  char job[LOOM_CCL_JOB_ID_LEN + 1];
  CHECK_OK(loom_ccl_make_job_id(job));
  victim = dead;
  fflush(NULL);
  pid_t pids[4];
  for (int r = 0; r < world; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(120);
      test_failed = 0;
      death_rank(r, world, job);
      loom_shutdown();
      fflush(NULL);
      exit(test_failed ? 1 : 0);
    }
  }
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (r == dead)
      CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    else
      CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "survivor %d status %d", r, status);
  }
}

static void test_dead_rank_fails_peer(void) { run_death(2, 1); }
/* Ranks 1 and 2 watch rank 0 themselves. */
static void test_dead_root_fails_peers(void) { run_death(3, 0); }
/* Rank 2 learns of rank 1's death from rank 0, which watches everyone. */
static void test_dead_rank_seen_through_root(void) { run_death(3, 1); }

static void mismatch_rank(int rank, int world, const char *job) {
  loom_ccl_comm_t *comm = join(rank, world, job, 0, 60000);
  if (!comm) return;
  float *x = device_tagged(rank, 100);
  loom_ccl_work_t *work = NULL;
  loom_stream_t *def = NULL;
  loom_stream_default(0, &def);
  CHECK_OK(loom_ccl_begin(comm, def, "mismatch", &work));
  const loom_ccl_reduction sum = {.op = LOOM_CCL_SUM};
  if (rank == 0) CHECK_OK(loom_ccl_allreduce(work, x, x, 100, LOOM_FLOAT32, &sum));
  else CHECK_OK(loom_ccl_broadcast(work, x, 100, LOOM_FLOAT32, 0));
  CHECK_OK(loom_ccl_end(work));
  CHECK(loom_ccl_work_synchronize(work) != LOOM_OK);
  CHECK_MSG(strstr(loom_last_error(), "out of step") && strstr(loom_last_error(), "allreduce") &&
                strstr(loom_last_error(), "broadcast"),
            "%s", loom_last_error());
  loom_ccl_work_release(work);
  loom_free(x);
  leave(comm);
}

static void test_mismatch_is_named(void) { run_ranks(2, NULL, mismatch_rank); }

/* A peer that never comes: the wait ends at the timeout, naming it. */
static void timeout_rank(int rank, int world, const char *job) {
  loom_ccl_comm_t *comm = join(rank, world, job, 0, 300);
  if (!comm) return;
  if (rank == 0) {
    float *x = device_tagged(0, 10);
    loom_ccl_work_t *work = NULL;
    const loom_ccl_reduction sum = {.op = LOOM_CCL_SUM};
    CHECK_OK(loom_ccl_begin(comm, NULL, "allreduce", &work));
    CHECK_OK(loom_ccl_allreduce(work, x, x, 10, LOOM_FLOAT32, &sum));
    CHECK_OK(loom_ccl_end(work));
    CHECK(loom_ccl_work_synchronize(work) == LOOM_ERROR_DEVICE);
    CHECK_MSG(strstr(loom_last_error(), "timed out after 300 ms waiting for rank 1") != NULL, "%s",
              loom_last_error());
    loom_ccl_work_release(work);
    loom_free(x);
  } else {
    /* Alive but absent, until rank 0 gave up (it then counts as aborted). */
    while (atomic_load(&comm->gone[0].value) == CCL_ALIVE) usleep(10000);
  }
  leave(comm);
}

static void test_timeout_is_named(void) { run_ranks(2, NULL, timeout_rank); }

static void bad_arguments_rank(int rank, int world, const char *job) {
  loom_ccl_config config = {.rank = 0, .world_size = 1};
  loom_ccl_comm_t *comm = NULL;
  CHECK(loom_ccl_comm_create(&config, &comm) == LOOM_ERROR_INVALID_ARGUMENT); /* no stream */
  CHECK_OK(loom_stream_create(0, 0, &config.stream));
  memcpy(config.job_id, "not-hex", 8);
  CHECK(loom_ccl_comm_create(&config, &comm) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "job id") != NULL);
  memcpy(config.job_id, job, sizeof config.job_id);
  config.rank = 1;
  CHECK(loom_ccl_comm_create(&config, &comm) == LOOM_ERROR_INVALID_ARGUMENT);
  config.rank = 0;
  /* A world of one: reductions still apply their op. */
  CHECK_OK(loom_ccl_comm_create(&config, &comm));
  stream = config.stream;
  float host[4] = {1, 2, 3, 4};
  float *x = device_copy(host, sizeof host);
  const loom_ccl_reduction premul = {.op = LOOM_CCL_PREMUL_SUM, .factor = 0.5};
  WORK(comm, CHECK_OK(loom_ccl_allreduce(work, x, x, 4, LOOM_FLOAT32, &premul)));
  host_copy(host, x, sizeof host);
  CHECK(host[0] == 0.5f && host[3] == 2.0f);
  loom_ccl_work_t *work = NULL;
  loom_stream_t *def = NULL;
  loom_stream_default(0, &def);
  CHECK_OK(loom_ccl_begin(comm, def, "bad", &work));
  float stack[4];
  CHECK(loom_ccl_allreduce(work, stack, stack, 4, LOOM_FLOAT32, &premul) ==
        LOOM_ERROR_INVALID_ARGUMENT); /* not device memory */
  const loom_ccl_reduction int_premul = {.op = LOOM_CCL_PREMUL_SUM};
  CHECK(loom_ccl_allreduce(work, x, x, 4, LOOM_INT32, &int_premul) == LOOM_ERROR_NOT_SUPPORTED);
  CHECK(loom_ccl_broadcast(work, x, 4, LOOM_FLOAT32, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_send(work, x, 4, LOOM_FLOAT32, 0) == LOOM_ERROR_INVALID_ARGUMENT); /* itself */
  CHECK(loom_ccl_allreduce(work, x, x, 4, LOOM_COMPLEX64, &premul) == LOOM_ERROR_NOT_SUPPORTED);
  CHECK_OK(loom_ccl_end(work));
  CHECK(loom_ccl_end(work) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_barrier(work) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_ccl_work_synchronize(work));
  loom_ccl_work_release(work);
  loom_free(x);
  leave(comm);
}

static void test_bad_arguments(void) { run_ranks(1, NULL, bad_arguments_rank); }

/* Once every rank joined, the job's socket name is gone: a late process
 * claiming a rank finds no one to join, and the job goes on. */
static void intruder_rank(int rank, int world, const char *job) {
  if (rank == 2) {
    usleep(200000);
    loom_ccl_comm_t *comm = NULL;
    CHECK(try_join(1, 2, job, 0, 300, &comm) == LOOM_ERROR_UNAVAILABLE);
    CHECK(comm == NULL);
    CHECK(strstr(loom_last_error(), "could not reach rank 0") != NULL);
    loom_stream_release(stream);
    return;
  }
  loom_ccl_comm_t *comm = join(rank, 2, job, 0, 60000);
  if (!comm) return;
  usleep(rank == 0 ? 600000 : 0);
  float *x = device_tagged(rank, 10);
  const loom_ccl_reduction sum = {.op = LOOM_CCL_SUM};
  WORK(comm, CHECK_OK(loom_ccl_allreduce(work, x, x, 10, LOOM_FLOAT32, &sum)));
  float *h = read_back(x, 10);
  CHECK(h[3] == tag(0, 3) + tag(1, 3));
  free(h);
  loom_free(x);
  leave(comm);
}

static void test_no_rendezvous_after_join(void) { run_ranks(3, NULL, intruder_rank); }

/* ---- shared regions (torch.multiprocessing) ---- */

static int shared_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, "loom-shared-") != NULL;
  if (f) fclose(f);
  return n;
}

static void shared_rank(int rank, int world, const char *job) {
  (void)rank, (void)world, (void)job;
  CHECK_OK(loom_stream_create(0, -1, &stream));
  enum { N = 3000 };
  float host[N], back[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i * 0.5f;
  loom_ccl_shared_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(loom_ccl_shared_create(0, sizeof host, &a));
  const int fd = loom_ccl_shared_fd(a);
  struct stat st;
  CHECK(fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK((fcntl(fd, F_GET_SEALS) & (F_SEAL_GROW | F_SEAL_SHRINK)) == (F_SEAL_GROW | F_SEAL_SHRINK));
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  CHECK_OK(loom_memcpy(stream, loom_ccl_shared_ptr(a), host, sizeof host));
  /* A second mapping of the same memory (what a receiving process makes). */
  CHECK_OK(loom_ccl_shared_open(0, fd, sizeof host, &b));
  CHECK(loom_ccl_shared_ptr(b) != loom_ccl_shared_ptr(a) && loom_ccl_shared_fd(b) != fd);
  CHECK(loom_ccl_shared_size(b) == sizeof host && loom_ccl_shared_device(b) == 0);
  CHECK(shared_mapped() == 2);
  loom_ccl_shared_release(a); /* the other holder keeps it */
  CHECK_OK(loom_memcpy(stream, back, loom_ccl_shared_ptr(b), sizeof back));
  CHECK(memcmp(host, back, sizeof host) == 0);
  /* Wrong size, bad arguments, a descriptor that is no sealed memfd. */
  CHECK(loom_ccl_shared_open(0, loom_ccl_shared_fd(b), 4096, &c) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "sealed, private memfd") != NULL);
  CHECK(loom_ccl_shared_open(0, 0, sizeof host, &c) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_shared_open(0, -1, sizeof host, &c) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_shared_create(0, 0, &c) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_shared_create(7, 64, &c) != LOOM_OK && c == NULL);
  loom_ccl_shared_release(b);
  loom_ccl_shared_release(NULL);
  CHECK(shared_mapped() == 0);
  loom_stream_release(stream);
}

static void shared_guarded_rank(int rank, int world, const char *job) {
  (void)rank, (void)world, (void)job;
  loom_ccl_shared_t *s = NULL;
  CHECK(loom_ccl_shared_create(0, 4096, &s) == LOOM_ERROR_NOT_SUPPORTED && s == NULL);
  CHECK(strstr(loom_last_error(), "host can address") != NULL);
}

/* LOOM_SHAREABLE_MEMORY=1: a block alone in its segment becomes a region
 * where it lies; one that shares its segment, or any without the setting,
 * is refused and stays the allocator's. */
static void adopt_rank(int rank, int world, const char *job) {
  (void)rank, (void)world, (void)job;
  loom_stream_t *stream = NULL;
  CHECK_OK(loom_stream_create(0, 0, &stream));
  const size_t big = (size_t)16 << 20;
  float host[4] = {1, 2, 3, 4}, back[4] = {0};
  char *p = NULL, *n1 = NULL, *n2 = NULL;
  loom_ccl_shared_t *s = NULL, *t = NULL;
  CHECK_OK(loom_malloc(0, big, stream, (void **)&p));
  CHECK(loom_ccl_shared_adopt(p, &s) == LOOM_ERROR_NOT_SUPPORTED && s == NULL);
  CHECK_OK(loom_free(p));
  CHECK_OK(loom_memory_empty_cache(0));
  setenv("LOOM_SHAREABLE_MEMORY", "1", 1);
  CHECK_OK(loom_malloc(0, big, stream, (void **)&p));
  CHECK_OK(loom_memcpy(stream, p + 4096, host, sizeof host));
  CHECK_OK(loom_stream_synchronize(stream));
  loom_memory_stats before, after;
  CHECK_OK(loom_memory_stats_get(0, &before));
  CHECK_OK(loom_ccl_shared_adopt(p, &s));
  CHECK(loom_ccl_shared_ptr(s) == p && loom_ccl_shared_size(s) == big);
  CHECK_OK(loom_memory_stats_get(0, &after));
  CHECK(after.allocated_bytes[LOOM_POOL_ALL].current ==
        before.allocated_bytes[LOOM_POOL_ALL].current - (int64_t)big);
  CHECK(after.reserved_bytes[LOOM_POOL_ALL].current ==
        before.reserved_bytes[LOOM_POOL_ALL].current - (int64_t)big);
  /* Another mapping of the same memory: what the first holds. */
  CHECK_OK(loom_ccl_shared_open(0, loom_ccl_shared_fd(s), big, &t));
  CHECK_OK(loom_memcpy(stream, back, (char *)loom_ccl_shared_ptr(t) + 4096, sizeof back));
  CHECK_OK(loom_stream_synchronize(stream));
  CHECK(memcmp(back, host, sizeof host) == 0);
  loom_ccl_shared_release(s);
  loom_ccl_shared_release(t);
  /* Two blocks in one segment: neither is handed over. */
  CHECK_OK(loom_malloc(0, 1024, stream, (void **)&n1));
  CHECK_OK(loom_malloc(0, 1024, stream, (void **)&n2));
  CHECK(loom_ccl_shared_adopt(n2, &s) == LOOM_ERROR_NOT_SUPPORTED && s == NULL);
  CHECK(loom_ccl_shared_adopt(n1 + 8, &s) == LOOM_ERROR_NOT_SUPPORTED && s == NULL);
  CHECK_OK(loom_free(n1));
  CHECK_OK(loom_free(n2));
  unsetenv("LOOM_SHAREABLE_MEMORY");
  loom_stream_release(stream);
}

/* loom_ccl_combine: buffers reduced in the given order, avg by the divisor. */
static void combine_rank(int rank, int world, const char *job) {
  (void)rank, (void)world, (void)job;
  loom_stream_t *stream = NULL;
  CHECK_OK(loom_stream_create(0, 0, &stream));
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3] = {0};
  float *da = NULL, *db = NULL;
  CHECK_OK(loom_malloc(0, sizeof a, stream, (void **)&da));
  CHECK_OK(loom_malloc(0, sizeof b, stream, (void **)&db));
  CHECK_OK(loom_memcpy(stream, da, a, sizeof a));
  CHECK_OK(loom_memcpy(stream, db, b, sizeof b));
  const void *srcs[2] = {da, db};
  loom_ccl_reduction avg = {.op = LOOM_CCL_AVG};
  CHECK_OK(loom_ccl_combine(stream, da, srcs, 2, 3, LOOM_FLOAT32, &avg, 4));
  CHECK_OK(loom_memcpy(stream, out, da, sizeof out));
  CHECK_OK(loom_stream_synchronize(stream));
  CHECK(out[0] == 11.0f / 4 && out[1] == 22.0f / 4 && out[2] == 33.0f / 4);
  CHECK(loom_ccl_combine(stream, da, srcs, 2, 3, LOOM_FLOAT32, &avg, 0) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_ccl_combine(stream, out, srcs, 2, 3, LOOM_FLOAT32, &avg, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK_OK(loom_free(da));
  CHECK_OK(loom_free(db));
  loom_stream_release(stream);
}

static void test_shared_regions(void) {
  run_ranks(1, NULL, shared_rank);
  run_ranks(1, "guarded", shared_guarded_rank);
  run_ranks(1, NULL, adopt_rank);
  run_ranks(1, NULL, combine_rank);
}

int main(void) {
  RUN_TEST(test_bad_arguments);
  RUN_TEST(test_allreduce_two_ranks);
  RUN_TEST(test_allreduce_three_ranks);
  RUN_TEST(test_collectives_three_ranks);
  RUN_TEST(test_collectives_guarded);
  RUN_TEST(test_dead_rank_fails_peer);
  RUN_TEST(test_dead_root_fails_peers);
  RUN_TEST(test_dead_rank_seen_through_root);
  RUN_TEST(test_mismatch_is_named);
  RUN_TEST(test_timeout_is_named);
  RUN_TEST(test_no_rendezvous_after_join);
  RUN_TEST(test_shared_regions);
  TEST_MAIN_END();
}
