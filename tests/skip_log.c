/* skip_log.c — every skipped Criterion test, one line each, into $FG_SKIP_LOG for the summary that
 * `make test` prints after the runner (tests/skip_summary.sh groups them by what enables them).
 *
 * A skip is otherwise one "[skip]" line among hundreds, and Criterion's closing synthesis does not
 * count skips at all, so a run without torch or transformers would read as "everything checked".
 * The hook runs in the runner's own process as each result arrives, whichever test skipped and
 * however (fgt_skip or cr_skip_test): no test needs to remember to log its skip. Line format:
 *   c<TAB>suite/test<TAB>the skip's message (tabs and newlines as spaces)
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>

ReportHook(POST_TEST)(struct criterion_test_stats *st) {
    const char *path = getenv("FG_SKIP_LOG");
    if (!path || !*path || !st || st->test_status != CR_STATUS_SKIPPED) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "c\t%s/%s\t", st->test->category, st->test->name);
    /* the message is one line in the log: a script's multi-line reason is flattened */
    for (const char *p = st->message ? st->message : ""; *p; p++) fputc(*p == '\t' || *p == '\n' ? ' ' : *p, f);
    fputc('\n', f);
    fclose(f);
}
