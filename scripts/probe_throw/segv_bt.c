/* LD_PRELOAD shim (plain C, no libstdc++): on SIGSEGV/SIGBUS/SIGILL/SIGABRT print the signal,
 * si_code (SIGSEGV si_code 10 = SEGV_CPERR, a CET shadow-stack / control-protection fault)
 * and a native backtrace to stderr, then die with the same signal. glibc 2.35+ has no
 * catchsegv/libSegFault any more, and the device machine has no gdb.
 * Build: gcc -O1 -g -fPIC -shared segv_bt.c -o segv_bt.so
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void put(const char* s) { ssize_t r = write(2, s, strlen(s)); (void)r; }

static void handler(int sig, siginfo_t* si, void* uc) {
  (void)uc;
  char buf[256];
  snprintf(buf, sizeof buf,
           "\n[segv_bt] signal %d (%s) si_code=%d si_addr=%p%s\n[segv_bt] native backtrace:\n",
           sig, strsignal(sig), si ? si->si_code : -1, si ? si->si_addr : NULL,
           (sig == SIGSEGV && si && si->si_code == 10) ? " (SEGV_CPERR: shadow stack!)" : "");
  put(buf);
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  put("[segv_bt] end\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  static char altstack[1 << 16];
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
