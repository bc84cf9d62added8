/* stop_signal.h — SIGINT, SIGTERM and SIGHUP during `flashgrad train`: the first one asks the run to
 * stop after the step in flight (the program then checkpoints and exits 128 + the signal); the same
 * signal again aborts at once (the handler restores the default action).
 */
#ifndef FG_STOP_SIGNAL_H
#define FG_STOP_SIGNAL_H

/* Installs the handler for SIGINT, SIGTERM and SIGHUP. */
void fg_stop_signals_install(void);
/* The number of the stop signal that came, 0 while none did (safe to call at any time). */
int fg_stop_requested(void);
/* "SIGINT", "SIGTERM", "SIGHUP" or "a signal". */
const char *fg_stop_signal_name(int sig);

#endif /* FG_STOP_SIGNAL_H */
