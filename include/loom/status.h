/* loom/status.h — the one error type of the C runtime.
 *
 * Every fallible call returns a loom_status; LOOM_OK is 0. A failing call
 * leaves a human-readable message in a thread-local slot, read with
 * loom_last_error(). Library code never aborts and never prints. */
#ifndef LOOM_STATUS_H
#define LOOM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_ERROR_INVALID_ARGUMENT = 1, /* bad handle, index, size or pointer */
  LOOM_ERROR_OUT_OF_MEMORY = 2,    /* device memory exhausted (after cache flush) */
  LOOM_ERROR_NOT_SUPPORTED = 3,    /* the driver or the dtype lacks the feature */
  LOOM_ERROR_NOT_READY = 4,        /* query: work is still pending (not a failure) */
  LOOM_ERROR_DEVICE = 5,           /* a command failed during asynchronous execution */
  LOOM_ERROR_UNAVAILABLE = 6,      /* no driver, or the runtime failed to start */
  LOOM_ERROR_INTERNAL = 7,         /* an invariant of the runtime broke */
  LOOM_ERROR_INDEX_OUT_OF_RANGE = 8, /* a kernel met an index outside its bounds */
  LOOM_ERROR_NOT_PERMITTED = 9,    /* not in this state: e.g. a synchronization
                                      while the stream captures a graph */
  /* Not a status: one past the last code, so that range checks follow when
   * a code is added (always before this line). */
  LOOM_STATUS_COUNT
} loom_status;

/* Static name of a status, e.g. "LOOM_ERROR_OUT_OF_MEMORY". */
const char *loom_status_name(loom_status status);

/* Message of the last failing call on this thread ("" if none). The pointer
 * stays valid until the next runtime call on this thread. */
const char *loom_last_error(void);

/* Sets this thread's message (printf format) and returns `status`, so that
 * `return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "bad size %zu", n);`.
 * A kernel may do the same to give the reason of its failure: the runtime
 * records the message of the failing chunk with the stream's error. */
loom_status loom_error(loom_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clears this thread's message. */
void loom_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_STATUS_H */
