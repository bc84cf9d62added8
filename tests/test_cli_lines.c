/* test_cli_lines.c — every error line the program prints reaches stderr in one write(2)
 * (cli/cli_util.h, fg_cli_line), so that another process writing to the same pipe (mpirun's abort
 * banner, the other ranks of a run) cannot land inside it. stderr is made a SOCK_SEQPACKET socket,
 * which keeps the boundary of each write: every message received must be whole lines. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "tests/common.h"

TestSuite(cli_lines, .timeout = 60);

/* Runs `fn(arg)` in a child whose stderr is one end of a SOCK_SEQPACKET pair; returns the messages
 * (each write) received, at most cap of them, into msgs (each NUL-terminated, caller frees). */
static int messages_of(void (*fn)(const void *), const void *arg, char **msgs, int cap) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0, "socketpair: %s", strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        dup2(sv[1], STDERR_FILENO);
        close(sv[1]);
        fn(arg);
        _exit(0);
    }
    close(sv[1]);
    int n = 0;
    for (;;) {
        char buf[8192];
        ssize_t r = recv(sv[0], buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (n < cap) {
            msgs[n] = malloc((size_t)r + 1);
            memcpy(msgs[n], buf, (size_t)r);
            msgs[n][r] = 0;
            n++;
        }
    }
    close(sv[0]);
    int status;
    waitpid(pid, &status, 0);
    return n;
}

static void run_program(const void *arg) {
    const char *const *argv = arg;
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) dup2(nul, STDOUT_FILENO), dup2(nul, STDIN_FILENO);
    if (chdir("/tmp") != 0) _exit(126);
    execv(fgt_bin(), (char *const *)argv);
    _exit(127);
}

/* Every write ends a line, and one of them starts with `head` and holds `needle` (the prefix and the
 * message in the same write). */
static void expect_whole_lines(const char *what, char **msgs, int n, const char *head, const char *needle) {
    int seen = 0;
    for (int k = 0; k < n; k++) {
        const size_t len = strlen(msgs[k]);
        cr_expect(len > 0 && msgs[k][len - 1] == '\n', "%s: write %d of %d is not whole lines: '%s'", what, k + 1, n,
                  msgs[k]);
        if (!strncmp(msgs[k], head, strlen(head)) && strstr(msgs[k], needle)) seen = 1;
        free(msgs[k]);
    }
    cr_expect(seen, "%s: no write starts '%s' and holds '%s' (%d writes)", what, head, needle, n);
}

Test(cli_lines, error_lines_of_the_program_are_one_write_each) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    static const char *const train_die[] = {"flashgrad", "train", "--data", "/nonexistent/fg_x.txt",
                                            "--steps",   "1",     NULL};
    static const char *const bad_flag[] = {"flashgrad", "train", "--lr", "abc", NULL};
    static const char *const attention_usage[] = {"flashgrad", "attention", "--no-such-option", NULL};
    static const struct {
        const char *const *argv;
        const char *head, *needle;
    } cases[] = {
        {train_die, "flashgrad train: ", "/nonexistent/fg_x.txt"},
        {bad_flag, "flashgrad train: --lr", "'abc' is not a finite number"},
        {attention_usage, "flashgrad attention: ", "'--no-such-option' (flashgrad attention --help)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *msgs[16];
        int n = messages_of(run_program, cases[i].argv, msgs, 16);
        expect_whole_lines(cases[i].argv[1], msgs, n, cases[i].head, cases[i].needle);
    }
}

static void long_line(const void *arg) {
    (void)arg;
    char big[6000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    fprintf(stderr, "before ");                   /* stderr is unbuffered: a write of its own */
    fg_cli_line("prefix: ", "%s %d", "short", 7); /* one write */
    fg_cli_line("long: ", "%s", big);             /* past the stack buffer: one write too */
}

Test(cli_lines, fg_cli_line_writes_prefix_text_and_newline_at_once) {
    char *msgs[8];
    int n = messages_of(long_line, NULL, msgs, 8);
    cr_assert_eq(n, 3, "%d writes", n);
    cr_expect_str_eq(msgs[1], "prefix: short 7\n");
    cr_expect_eq(strlen(msgs[2]), strlen("long: ") + 5999 + 1, "the long line is %zu bytes", strlen(msgs[2]));
    cr_expect(!strncmp(msgs[2], "long: xxx", 9) && msgs[2][strlen(msgs[2]) - 1] == '\n');
    for (int k = 0; k < n; k++) free(msgs[k]);
}
