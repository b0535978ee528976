/* The thread-local error message behind loom_last_error(). */
#include <stdarg.h>
#include <stdio.h>

#include "loom/status.h"

#define LOOM_MESSAGE_CAPACITY 1024

static _Thread_local char last_message[LOOM_MESSAGE_CAPACITY];

const char *loom_status_name(loom_status status) {
  switch (status) {
    case LOOM_OK: return "LOOM_OK";
    case LOOM_ERROR_INVALID_ARGUMENT: return "LOOM_ERROR_INVALID_ARGUMENT";
    case LOOM_ERROR_OUT_OF_MEMORY: return "LOOM_ERROR_OUT_OF_MEMORY";
    case LOOM_ERROR_NOT_SUPPORTED: return "LOOM_ERROR_NOT_SUPPORTED";
    case LOOM_ERROR_NOT_READY: return "LOOM_ERROR_NOT_READY";
    case LOOM_ERROR_DEVICE: return "LOOM_ERROR_DEVICE";
    case LOOM_ERROR_UNAVAILABLE: return "LOOM_ERROR_UNAVAILABLE";
    case LOOM_ERROR_INTERNAL: return "LOOM_ERROR_INTERNAL";
    case LOOM_ERROR_INDEX_OUT_OF_RANGE: return "LOOM_ERROR_INDEX_OUT_OF_RANGE";
    case LOOM_ERROR_NOT_PERMITTED: return "LOOM_ERROR_NOT_PERMITTED";
    case LOOM_STATUS_COUNT: break;
  }
  return "LOOM_ERROR_UNKNOWN";
}

const char *loom_last_error(void) { return last_message; }

loom_status loom_error(loom_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return status;
}

void loom_clear_error(void) { last_message[0] = '\0'; }
