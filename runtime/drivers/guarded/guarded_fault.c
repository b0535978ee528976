/* The guarded driver's SIGSEGV/SIGBUS handler: a fault at a device address
 * is host code dereferencing device memory, the bug this driver exists to
 * expose; the handler says so before the process dies as it would have.
 *
 * Everything here is async-signal-safe: the watched ranges are atomics, the
 * message is formatted by hand and written with write(2). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "runtime/drivers/guarded/guarded_internal.h"

static _Atomic uintptr_t watched_guard, watched_alias;
static _Atomic size_t watched_size;
static struct sigaction previous_segv, previous_bus;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

void guarded_fault_watch(const void *guard, const void *alias, size_t size) {
  atomic_store(&watched_size, 0);
  atomic_store(&watched_guard, (uintptr_t)guard);
  atomic_store(&watched_alias, (uintptr_t)alias);
  atomic_store(&watched_size, size);
}

static char *append(char *at, const char *text) {
  while (*text) *at++ = *text++;
  return at;
}

static char *append_hex(char *at, uintptr_t v) {
  char digits[2 * sizeof v];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  at = append(at, "0x");
  while (n) *at++ = digits[--n];
  return at;
}

static void say(const char *before, uintptr_t address, const char *after) {
  char line[256];
  char *at = append(line, before);
  at = append_hex(at, address);
  at = append(at, after);
  const char *p = line;
  for (size_t left = (size_t)(at - line); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= (size_t)n;
  }
}

/* Hands the fault on: to the handler that was there before (Python's
 * faulthandler then adds the traceback that locates the culprit), else to
 * the default action, by returning into the faulting instruction (a signal
 * a process sent itself is raised again instead). */
static void pass_on(int sig, siginfo_t *info, void *context) {
  const struct sigaction *prev = sig == SIGBUS ? &previous_bus : &previous_segv;
  if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction) {
    prev->sa_sigaction(sig, info, context);
    return;
  }
  if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler != SIG_DFL &&
      prev->sa_handler != SIG_IGN) {
    prev->sa_handler(sig);
    return;
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (info->si_code <= 0) raise(sig);
}

static void on_fault(int sig, siginfo_t *info, void *context) {
  const int saved_errno = errno;
  const uintptr_t address = (uintptr_t)info->si_addr;
  const size_t size = atomic_load(&watched_size);
  if (size && address - atomic_load(&watched_guard) < size)
    say("loom guarded driver: host code touched device memory at ", address,
        " (a device buffer; read it through a HAL copy)\n");
  else if (size && address - atomic_load(&watched_alias) < size)
    say("loom guarded driver: a command touched device address ",
        address - atomic_load(&watched_alias) + atomic_load(&watched_guard),
        ", which no live segment holds (freed, or out of bounds)\n");
  errno = saved_errno;
  pass_on(sig, info, context);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  /* On the alternate stack where the thread has one: a fault from a
   * stack overflow must still reach the previous handler. */
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
  sigaction(SIGBUS, &sa, &previous_bus);
}

void guarded_fault_install(void) { pthread_once(&install_once, install); }
