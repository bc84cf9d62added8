/* stop_signal.c — the stop signals of `flashgrad train` (see stop_signal.h). */
#include "cli/stop_signal.h"

#include <signal.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested; /* the signal's number, 0 while none came */

static void on_stop_signal(int sig) {
    stop_requested = sig;
    static const char msg[] = "\nflashgrad train: stopping after this step (the same signal again aborts now)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL);
}

void fg_stop_signals_install(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* a system call the signal interrupts (a write to a full pipe) goes on, not EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int fg_stop_requested(void) { return stop_requested; }

const char *fg_stop_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}
