/* commands.h — the subcommands of the flashgrad program, one file each (cli/cmd_<name>.c; the
 * benchmarks' `bench` is bench/bench.c).
 *
 * Each takes the arguments after its name (argv[0] is the subcommand name) and returns the process
 * exit status: 0 success, 1 runtime error (bad file, non-finite loss, failed check), 2 usage error
 * (unknown flag, bad value). Each prints one clear line on stderr for an error.
 */
#ifndef FG_COMMANDS_H
#define FG_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

int fg_cmd_train(int argc, char **argv);
int fg_cmd_sample(int argc, char **argv);
int fg_cmd_export(int argc, char **argv);
int fg_cmd_eval(int argc, char **argv);
int fg_cmd_attention(int argc, char **argv);
int fg_cmd_gradcheck(int argc, char **argv);
int fg_cmd_bench(int argc, char **argv);
int fg_cmd_plot(int argc, char **argv);
/* The PNG that gnuplot draws from `script` (slen bytes; data inline, its output on stdout:
 * `set terminal pngcairo` / `png` with no `set output`), written to `out` as `flashgrad plot` does
 * (cli/cmd_plot.c): gnuplot run without a shell or files, bounded by timeout_s, its output checked to
 * be a whole PNG, `out` replaced only when absent or a PNG, written atomically. 0, or 1 after one
 * line on stderr starting with prefix ("flashgrad bench recompute: ") that names the option `flag`
 * ("--png") for a refused path. */
int fg_plot_png(const char *script, size_t slen, const char *out, const char *flag, double timeout_s,
                const char *prefix);
/* Writes s to g as the body of a gnuplot single-quoted string (the quotes are the caller's): ''
 * for a quote, every byte outside printable ASCII as \xNN text. */
void fg_plot_quote(FILE *g, const char *s);
int fg_cmd_tokenizer(int argc, char **argv);
int fg_cmd_prepare(int argc, char **argv);

#endif /* FG_COMMANDS_H */
