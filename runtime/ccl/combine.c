/* loom_ccl_combine: the collectives' reduction of buffers a process
 * already holds, for the parts of a collective that run outside the
 * communicator (the hosts' partial results that the c10d backend gathers
 * between machines): the same "ccl.reduce" kernel, in the order given. */
#include "runtime/ccl/ccl_internal.h"

loom_status loom_ccl_combine(loom_stream_t *stream, void *dst, const void *const *srcs, int n,
                             size_t count, loom_dtype dtype, const loom_ccl_reduction *reduction,
                             int divisor) {
  const char *what = "loom_ccl_combine";
  if (!stream || !srcs || n < 1 || n > CCL_MAX_WORLD)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s", what,
                      !stream ? "no stream" : !srcs ? "srcs is NULL" : "n out of [1, 256]");
  if (divisor < 1)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: divisor %d must be >= 1", what, divisor);
  loom_status st = ccl_check_dtype(what, dtype);
  if (st == LOOM_OK) st = ccl_check_reduction(what, dtype, reduction);
  if (st != LOOM_OK || count == 0) return st;
  const int device = loom_stream_device(stream);
  if (!dst || loom_pointer_device(dst) != device)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "%s: the destination is not memory of loom:%d (the stream's device)", what,
                      device);
  for (int k = 0; k < n; ++k)
    if (!srcs[k] || loom_pointer_device(srcs[k]) != device)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "%s: source %d is not memory of loom:%d (the stream's device)", what, k,
                        device);
  const loom_kernel_t *kernel = NULL;
  if ((st = loom_kernel_lookup("ccl.reduce", &kernel)) != LOOM_OK) return st;
  return ccl_launch_reduce(stream, kernel, dst, srcs, n, count, dtype, reduction, divisor);
}
