/* seeded_case.h — one case of an emulator program's seeded-bug checks, run in a child process:
 * the code with the bug must be stopped by the emulator (an abort whose report holds `expect`),
 * the same code without it must run clean. Shared by fg_emu_detectors, fg_mma_emu and
 * fg_attn_bf16_emu. Header-only: each program includes it once. */
#ifndef FG_EMU_SEEDED_CASE_H
#define FG_EMU_SEEDED_CASE_H

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

struct detector_case {
    const char *name;
    int (*fn)();
    bool aborts;        /* the child must die by SIGABRT (else exit 0) */
    const char *expect; /* a substring of its stderr; NULL: stderr must be empty */
};

/* Runs c in a child with its stderr captured, prints "ok" or "FAIL" with the report's first line
 * that names the problem, and returns 0 when the child behaved as c expects. */
static int run_case(const detector_case &c) {
    int fd[2];
    if (pipe(fd) != 0) return 1;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        signal(SIGABRT, SIG_DFL);
        const int r = c.fn();
        fflush(NULL);
        _exit(r);
    }
    close(fd[1]);
    std::string err;
    char buf[4096];
    ssize_t k;
    while ((k = read(fd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)k);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    const bool aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
    const bool exited0 = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    const bool ok =
        (c.aborts ? aborted : exited0) && (c.expect ? err.find(c.expect) != std::string::npos : err.empty());
    std::string line;
    const size_t p = c.expect ? err.find(c.expect) : std::string::npos;
    if (p != std::string::npos) {
        const size_t b = err.rfind('\n', p), e = err.find('\n', p);
        line = err.substr(b == std::string::npos ? 0 : b + 1, e == std::string::npos ? std::string::npos : e - b - 1);
        while (!line.empty() && line[0] == ' ') line.erase(0, 1);
        if (line.size() > 220) line = line.substr(0, 217) + "...";
    }
    printf("  %s %s%s%s\n", ok ? "ok  " : "FAIL", c.name, line.empty() ? "" : ": ", line.c_str());
    if (!ok)
        printf("       expected %s%s%s%s; got %s, stderr:\n%s\n", c.aborts ? "an abort" : "exit 0",
               c.expect ? " with \"" : " and no message", c.expect ? c.expect : "", c.expect ? "\"" : "",
               aborted         ? "an abort"
               : WIFEXITED(st) ? ("exit " + std::to_string(WEXITSTATUS(st))).c_str()
                               : "a signal",
               err.c_str());
    return ok ? 0 : 1;
}

#endif /* FG_EMU_SEEDED_CASE_H */
