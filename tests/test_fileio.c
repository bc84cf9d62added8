/* test_fileio.c — atomic writes, bounded reads and XXH64 (tensor/fileio.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tests/common.h"

static char g_dir[64];

static void make_dir(void) {
    strcpy(g_dir, "/tmp/fg_fileio_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
}
/* The test folders are flat: remove their files, then the folder. */
static void remove_dir(void) {
    chmod(g_dir, 0700);
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

/* Names in the test folder, joined by ' ' in readdir order (sorted by the caller if needed). */
static int count_entries(const char *dir, char *names, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    names[0] = '\0';
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        strncat(names, e->d_name, cap - strlen(names) - 2);
        strncat(names, " ", cap - strlen(names) - 1);
    }
    closedir(d);
    return n;
}

static void write_plain(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *path, size_t *n) {
    void *buf;
    fg_status st = fg_read_file(path, 0, &buf, n);
    cr_assert_eq(st, FG_OK, "read %s: %s", path, fg_last_error());
    return buf;
}

TestSuite(fileio, .init = make_dir, .fini = remove_dir, .timeout = 30);

Test(fileio, atomic_write_joins_parts_and_leaves_no_temp_files) {
    char path[128];
    snprintf(path, sizeof path, "%s/out.bin", g_dir);
    const char *a = "hello, ", *b = "", *c = "world";
    const void *parts[4] = {a, b, NULL, c};
    size_t sizes[4] = {7, 0, 0, 5};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 4);
    cr_assert_eq(st, FG_OK, "write: %s", fg_last_error());
    size_t n;
    char *got = slurp(path, &n);
    cr_expect_eq(n, 12, "size %zu", n);
    cr_expect_str_eq(got, "hello, world");
    free(got);
    char names[512];
    int k = count_entries(g_dir, names, sizeof names);
    cr_expect_eq(k, 1, "folder holds %d entries: %s", k, names);
}

Test(fileio, atomic_write_replaces_target_and_keeps_its_mode) {
    char path[128];
    snprintf(path, sizeof path, "%s/ckpt", g_dir);
    write_plain(path, "old contents, longer than the new ones");
    cr_assert_eq(chmod(path, 0640), 0);
    const void *parts[1] = {"new"};
    size_t sizes[1] = {3};
    cr_assert_eq(fg_write_file_atomic(path, parts, sizes, 1), FG_OK, "%s", fg_last_error());
    size_t n;
    char *got = slurp(path, &n);
    cr_expect_str_eq(got, "new");
    free(got);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0640, "mode %o", (unsigned)(st.st_mode & 0777));
    char names[512];
    cr_expect_eq(count_entries(g_dir, names, sizeof names), 1, "entries: %s", names);
}

Test(fileio, atomic_write_new_file_follows_umask) {
    char path[128];
    snprintf(path, sizeof path, "%s/fresh", g_dir);
    mode_t old = umask(027);
    const void *parts[1] = {"x"};
    size_t sizes[1] = {1};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    umask(old);
    cr_assert_eq(st, FG_OK, "%s", fg_last_error());
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0640, "mode %o", (unsigned)(sb.st_mode & 0777));
}

/* A write that fails half-way (file size limit hit: EFBIG) must keep the old file and remove the
 * temporary one. This works as root too, unlike a permission test. */
Test(fileio, failed_write_keeps_old_target_and_removes_temp) {
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", g_dir);
    write_plain(path, "precious");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0, "setrlimit: %s", strerror(errno));
    size_t big = 1 << 20;
    char *data = calloc(big, 1);
    const void *parts[1] = {data};
    size_t sizes[1] = {big};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    setrlimit(RLIMIT_FSIZE, &old);
    free(data);
    cr_expect_eq(st, FG_ERR_IO, "status %d (%s)", st, fg_last_error());
    cr_expect(strstr(fg_last_error(), path) != NULL, "message lacks the path: %s", fg_last_error());
    cr_expect(strstr(fg_last_error(), strerror(EFBIG)) != NULL, "message lacks the reason: %s", fg_last_error());
    size_t n;
    char *got = slurp(path, &n);
    cr_expect_str_eq(got, "precious");
    free(got);
    char names[512];
    int k = count_entries(g_dir, names, sizeof names);
    cr_expect_eq(k, 1, "folder holds %d entries (temp file left?): %s", k, names);
}

Test(fileio, unwritable_dir_reports_io_error_and_keeps_target) {
    char path[128];
    snprintf(path, sizeof path, "%s/keep.npy", g_dir);
    write_plain(path, "old");
    cr_assert_eq(chmod(g_dir, 0555), 0);
    if (geteuid() == 0 && access(g_dir, W_OK) == 0) {
        remove_dir(); /* .fini does not run after a skip */
        cr_skip_test("running as root: folder permissions are not enforced "
                     "(failed_write_keeps_old_target_and_removes_temp covers the failure path)");
    }
    const void *parts[1] = {"new"};
    size_t sizes[1] = {3};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    chmod(g_dir, 0700);
    cr_expect_eq(st, FG_ERR_IO, "status %d", st);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), strerror(EACCES)), "message: %s",
              fg_last_error());
    size_t n;
    char *got = slurp(path, &n);
    cr_expect_str_eq(got, "old");
    free(got);
}

Test(fileio, write_into_missing_dir_reports_path_and_reason) {
    char path[160];
    snprintf(path, sizeof path, "%s/no/such/dir/x.bin", g_dir);
    const void *parts[1] = {"x"};
    size_t sizes[1] = {1};
    cr_expect_eq(fg_write_file_atomic(path, parts, sizes, 1), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), strerror(ENOENT)), "message: %s",
              fg_last_error());
    cr_expect_eq(fg_write_file_atomic(g_dir, parts, sizes, 1), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), "is a directory"), "message: %s", fg_last_error());
}

Test(fileio, read_file_reports_missing_directory_and_too_large) {
    void *buf = (void *)1;
    size_t n = 7;
    char path[128];
    snprintf(path, sizeof path, "%s/absent", g_dir);
    cr_expect_eq(fg_read_file(path, 0, &buf, &n), FG_ERR_IO);
    cr_expect(buf == NULL && n == 0);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), strerror(ENOENT)), "message: %s",
              fg_last_error());

    cr_expect_eq(fg_read_file(g_dir, 0, &buf, &n), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), "is a directory"), "message: %s", fg_last_error());

    snprintf(path, sizeof path, "%s/ten", g_dir);
    write_plain(path, "0123456789");
    cr_expect_eq(fg_read_file(path, 9, &buf, &n), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), "too large"), "message: %s", fg_last_error());
    cr_expect_eq(fg_read_file(path, 10, &buf, &n), FG_OK, "%s", fg_last_error());
    cr_expect_eq(n, 10);
    cr_expect_eq(((char *)buf)[10], '\0', "no terminating NUL");
    free(buf);

    snprintf(path, sizeof path, "%s/empty", g_dir);
    write_plain(path, "");
    cr_expect_eq(fg_read_file(path, 0, &buf, &n), FG_OK, "%s", fg_last_error());
    cr_expect_eq(n, 0);
    free(buf);
}

/* Devices are refused whatever the limit: /dev/zero never ends, a terminal waits for a person. */
Test(fileio, read_file_refuses_devices_without_reading) {
    const char *devs[] = {"/dev/zero", "/dev/null", "/dev/urandom"};
    for (int i = 0; i < 3; i++) {
        void *buf = (void *)1;
        size_t n = 7;
        cr_expect_eq(fg_read_file(devs[i], (size_t)1 << 20, &buf, &n), FG_ERR_IO, "%s was read", devs[i]);
        cr_expect(buf == NULL && n == 0);
        cr_expect(strstr(fg_last_error(), devs[i]) && strstr(fg_last_error(), "character device"), "%s: %s", devs[i],
                  fg_last_error());
        /* the same with no limit, which regular files allow: still refused, not read until memory runs out */
        cr_expect_eq(fg_read_file(devs[i], 0, &buf, &n), FG_ERR_IO, "%s was read without a limit", devs[i]);
        cr_expect(strstr(fg_last_error(), "character device"), "%s: %s", devs[i], fg_last_error());
    }
}

/* A stream read the way a caller that accepts one reads it: fg_open_read with allow_stream, then
 * fg_read_fd. */
static fg_status read_stream(const char *path, size_t max_bytes, void **buf, size_t *n) {
    int fd;
    int64_t size;
    *buf = NULL;
    *n = 0;
    fg_status st = fg_open_read(path, 1, &fd, &size);
    if (st != FG_OK) return st;
    st = fg_read_fd(fd, path, max_bytes, buf, n);
    close(fd);
    return st;
}

/* A FIFO, without a writer or with one, is no input for fg_read_file at any limit: refused at once,
 * unread (the suite's timeout catches a hang). A caller that asks for a stream gets the FIFO's
 * emptiness reported instead. */
Test(fileio, read_file_refuses_a_fifo_at_once) {
    char path[128];
    snprintf(path, sizeof path, "%s/fifo", g_dir);
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
    void *buf = (void *)1;
    size_t n = 7;
    const size_t limits[] = {0, 1024};
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(fg_read_file(path, limits[i], &buf, &n), FG_ERR_IO);
        cr_expect(buf == NULL && n == 0);
        cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), "FIFO/pipe, not a regular file"),
                  "limit %zu: %s", limits[i], fg_last_error());
    }
    int fd;
    int64_t size;
    cr_expect_eq(fg_open_read(path, 0, &fd, &size), FG_ERR_IO);
    cr_expect_eq(fd, -1);
    cr_expect_eq(read_stream(path, 1024, &buf, &n), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), "open for writing"), "message: %s",
              fg_last_error());
    /* a pipe with a writer holding it open and never writing: refused before any read would wait */
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    char pp[64];
    snprintf(pp, sizeof pp, "/dev/fd/%d", pfd[0]);
    cr_expect_eq(fg_read_file(pp, 1024, &buf, &n), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), "FIFO/pipe, not a regular file"), "message: %s", fg_last_error());
    close(pfd[0]);
    close(pfd[1]);
}

Test(fileio, a_stream_is_read_up_to_its_limit_where_asked_for) {
    char path[64];
    int fd = fgt_pipe_with("hello pipe", 10, path, sizeof path);
    void *buf;
    size_t n;
    cr_expect_eq(fg_read_file(path, 64, &buf, &n), FG_ERR_IO, "fg_read_file read a pipe");
    cr_expect_eq(read_stream(path, 64, &buf, &n), FG_OK, "%s", fg_last_error());
    cr_expect(n == 10 && !memcmp(buf, "hello pipe", 11), "read %zu bytes", n);
    free(buf);
    close(fd);

    fd = fgt_pipe_with("0123456789", 10, path, sizeof path);
    cr_expect_eq(read_stream(path, 10, &buf, &n), FG_OK, "exactly the limit: %s", fg_last_error());
    free(buf);
    close(fd);

    fd = fgt_pipe_with("0123456789", 10, path, sizeof path);
    cr_expect_eq(read_stream(path, 9, &buf, &n), FG_ERR_IO);
    cr_expect(buf == NULL && strstr(fg_last_error(), "too large"), "message: %s", fg_last_error());
    close(fd);

    fd = fgt_pipe_with("", 0, path, sizeof path);
    cr_expect_eq(read_stream(path, 64, &buf, &n), FG_ERR_IO, "an empty pipe is no file");
    cr_expect(strstr(fg_last_error(), "gave no data"), "message: %s", fg_last_error());
    close(fd);
}

/* A stream larger than a pipe's buffer, from a writer process: read whole, through the growth path;
 * the same stream with a smaller limit stops at the limit. */
Test(fileio, a_long_stream_from_a_writer_is_read_whole) {
    const size_t total = 300000;
    for (int pass = 0; pass < 2; pass++) {
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            signal(SIGPIPE, SIG_IGN);
            unsigned char chunk[1000];
            for (size_t off = 0; off < total; off += sizeof chunk) {
                for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (unsigned char)((off + i) * 7 % 251);
                if (write(fds[1], chunk, sizeof chunk) != (ssize_t)sizeof chunk) _exit(0);
            }
            _exit(0);
        }
        close(fds[1]);
        char path[64];
        snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
        void *buf;
        size_t n;
        if (pass == 0) {
            cr_expect_eq(read_stream(path, (size_t)1 << 20, &buf, &n), FG_OK, "%s", fg_last_error());
            cr_expect_eq(n, total);
            size_t bad = 0;
            while (bad < n && ((unsigned char *)buf)[bad] == (unsigned char)(bad * 7 % 251)) bad++;
            cr_expect_eq(bad, total, "first wrong byte at %zu", bad);
            free(buf);
        } else {
            cr_expect_eq(read_stream(path, 100000, &buf, &n), FG_ERR_IO);
            cr_expect(strstr(fg_last_error(), "more than 100000 bytes"), "message: %s", fg_last_error());
        }
        close(fds[0]);
        waitpid(pid, NULL, 0);
    }
}

Test(fileio, open_read_gives_size_or_stream_and_read_fd_reads_to_the_end) {
    char path[128];
    snprintf(path, sizeof path, "%s/ten", g_dir);
    write_plain(path, "0123456789");
    int fd;
    int64_t size;
    cr_assert_eq(fg_open_read(path, 0, &fd, &size), FG_OK, "%s", fg_last_error());
    cr_expect_eq(size, 10);
    cr_assert_eq(lseek(fd, 4, SEEK_SET), 4);
    void *buf;
    size_t n;
    cr_expect_eq(fg_read_fd(fd, path, 0, &buf, &n), FG_OK, "%s", fg_last_error());
    cr_expect(n == 6 && !memcmp(buf, "456789", 7), "read %zu bytes from offset 4", n);
    free(buf);
    close(fd);

    char ppath[64];
    int pfd = fgt_pipe_with("abc", 3, ppath, sizeof ppath);
    cr_assert_eq(fg_open_read(ppath, 1, &fd, &size), FG_OK, "%s", fg_last_error());
    cr_expect_eq(size, -1, "a pipe has no size");
    cr_expect_eq(fg_read_fd(fd, ppath, 0, &buf, &n), FG_ERR_ARG, "a stream read without a limit");
    cr_expect_eq(fg_read_fd(fd, ppath, 8, &buf, &n), FG_OK, "%s", fg_last_error());
    cr_expect(n == 3 && !memcmp(buf, "abc", 4));
    free(buf);
    close(fd);
    close(pfd);
}

/* Values from the reference implementation (libxxhash 0.8.1, XXH64(data, n, seed); the seeded ones
 * from Python's xxhash.xxh64(data, seed=...) too). */
Test(fileio, xxh64_matches_reference_values) {
    static const struct {
        const char *s;
        uint64_t seed, want;
    } cases[] = {
        {"", 0, 0xef46db3751d8e999ULL},
        {"a", 0, 0xd24ec4f1a98c6e5bULL},
        {"abc", 0, 0x44bc2cf5ad770999ULL},
        {"0123456789abcdef0123456789abcdef0123456789", 0, 0xa76190c3acf08a1cULL},
        {"", 0x9E3779B97F4A7C15ULL, 0xc4349fc93c010000ULL},
        {"abc", 0x9E3779B97F4A7C15ULL, 0x2ed0f59d6b43ac8bULL},
        {"0123456789abcdef0123456789abcdef0123456789", 0x9E3779B97F4A7C15ULL, 0x38627fea513ea7a4ULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = fg_xxh64(cases[i].s, strlen(cases[i].s), cases[i].seed);
        cr_expect_eq(got, cases[i].want, "case %zu ('%s'): got %016llx, expected %016llx", i, cases[i].s,
                     (unsigned long long)got, (unsigned long long)cases[i].want);
    }
    /* 256 bytes 0..255 three times, then "xyz" (771 bytes) */
    unsigned char buf[771];
    for (int i = 0; i < 768; i++) buf[i] = (unsigned char)i;
    memcpy(buf + 768, "xyz", 3);
    cr_expect_eq(fg_xxh64(buf, sizeof buf, 0), 0xe921a1b45bd779f8ULL);
    cr_expect_eq(fg_xxh64(buf, sizeof buf, 0x9E3779B97F4A7C15ULL), 0x179ca0201a65d20eULL);
}

/* Known answers from an independent implementation: Debian's `xxhsum -H1` (the xxhash package, run
 * here) over files of every length up to 80 bytes (each tail path of the algorithm: 8-, 4- and
 * 1-byte steps, below and above one 32-byte stripe) and some long ones, one-shot and streamed. */
Test(fileio, xxh64_matches_the_xxhsum_tool) {
    if (system("command -v xxhsum >/dev/null 2>&1") != 0)
        cr_assert_fail("xxhsum not found (Debian's xxhash package; make test installs it when root)");
    static const size_t lens[] = {81, 127, 128, 255, 256, 1000, 4099, (1u << 20) + 7};
    enum { NSHORT = 81, NLONG = sizeof lens / sizeof lens[0], NFILES = NSHORT + NLONG };
    const size_t maxn = (1u << 20) + 7;
    unsigned char *buf = malloc(maxn);
    cr_assert_not_null(buf);
    for (size_t i = 0; i < maxn; i++) buf[i] = (unsigned char)((i * 2654435761u) >> 13);
    char dir[64], cmd[160], p[128];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_xxhsum_XXXXXX");
    size_t len[NFILES];
    for (int f = 0; f < NFILES; f++) {
        len[f] = f < NSHORT ? (size_t)f : lens[f - NSHORT];
        snprintf(p, sizeof p, "%s/%03d", dir, f);
        FILE *fp = fopen(p, "wb");
        cr_assert_not_null(fp);
        cr_assert_eq(fwrite(buf, 1, len[f], fp), len[f]);
        cr_assert_eq(fclose(fp), 0);
    }
    snprintf(cmd, sizeof cmd, "cd %s && xxhsum -H1 [0-9]*", dir);
    FILE *pp = popen(cmd, "r");
    cr_assert_not_null(pp);
    int seen = 0;
    char line[256];
    while (fgets(line, sizeof line, pp)) {
        unsigned long long want;
        int f;
        cr_assert_eq(sscanf(line, "%16llx %d", &want, &f), 2, "xxhsum printed '%s'", line);
        cr_assert(f >= 0 && f < NFILES);
        uint64_t got = fg_xxh64(buf, len[f], 0);
        cr_expect_eq(got, want, "%zu bytes: fg_xxh64 %016llx, xxhsum %016llx", len[f], (unsigned long long)got, want);
        fg_xxh64_state s;
        fg_xxh64_init(&s, 0);
        for (size_t o = 0; o < len[f]; o += 13) fg_xxh64_update(&s, buf + o, len[f] - o < 13 ? len[f] - o : 13);
        cr_expect_eq(fg_xxh64_digest(&s), want, "%zu bytes streamed in pieces of 13", len[f]);
        seen++;
    }
    cr_expect_eq(pclose(pp), 0, "xxhsum failed");
    cr_expect_eq(seen, NFILES, "xxhsum gave %d digests for %d files", seen, (int)NFILES);
    fgt_remove_tmpdir(dir);
    free(buf);
}

#ifndef FG_XXH64_COMPAT
/* The stand-in the build uses where libxxhash-dev cannot be installed (tensor/compat/xxhash.h)
 * gives the library's digests: every length up to 1 KiB with four seeds, and streamed with every
 * piece size up to 40 (a checkpoint written on either kind of machine loads on the other). */
#define FG_XXH_COMPAT_PREFIXED_ONLY
#include "tensor/compat/xxhash.h"

Test(fileio, xxh64_stand_in_equals_libxxhash) {
    static const uint64_t seeds[] = {0, 1, 0x9E3779B97F4A7C15ULL, UINT64_MAX};
    unsigned char buf[1024];
    for (int i = 0; i < 1024; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t si = 0; si < 4; si++)
        for (size_t n = 0; n <= sizeof buf; n++) {
            uint64_t lib = fg_xxh64(buf, n, seeds[si]), alt = fg_compat_xxh64(buf, n, seeds[si]);
            cr_assert_eq(lib, alt, "%zu bytes, seed %016llx: libxxhash %016llx, stand-in %016llx", n,
                         (unsigned long long)seeds[si], (unsigned long long)lib, (unsigned long long)alt);
        }
    for (size_t n = 0; n <= 200; n += 3)
        for (size_t cut = 1; cut <= 40; cut++) {
            fg_compat_xxh64_state s;
            fg_compat_xxh64_reset(&s, 5);
            for (size_t o = 0; o < n; o += cut) fg_compat_xxh64_update(&s, buf + o, n - o < cut ? n - o : cut);
            cr_assert_eq(fg_compat_xxh64_digest(&s), fg_xxh64(buf, n, 5), "n %zu, pieces of %zu", n, cut);
        }
}
#endif

Test(fileio, xxh64_streaming_equals_one_shot_for_any_split) {
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (size_t n = 0; n <= sizeof buf; n += 7) {
        uint64_t want = fg_xxh64(buf, n, 5);
        for (size_t cut = 1; cut < 40; cut += 3) {
            fg_xxh64_state s;
            fg_xxh64_init(&s, 5);
            for (size_t o = 0; o < n; o += cut) fg_xxh64_update(&s, buf + o, n - o < cut ? n - o : cut);
            uint64_t got = fg_xxh64_digest(&s);
            cr_assert_eq(got, want, "n %zu, pieces of %zu: %016llx vs %016llx", n, cut, (unsigned long long)got,
                         (unsigned long long)want);
        }
    }
}

/* ---- what a write-by-rename may replace ---- */

/* A FIFO, a character device (made here when the process may: as root) and a socket where a file
 * goes are refused by every writer, before anything is made and with the special file left as it
 * was; no temporary file remains. */
Test(fileio, writers_refuse_special_files_and_leave_them_as_they_were) {
    char fifo[128], dev[128], names[512];
    snprintf(fifo, sizeof fifo, "%s/out.csv", g_dir);
    snprintf(dev, sizeof dev, "%s/null", g_dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
    int have_dev = mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0;
    const char *paths[2] = {fifo, dev};
    for (int i = 0; i < (have_dev ? 2 : 1); i++) {
        const void *parts[1] = {"x"};
        size_t sizes[1] = {1};
        cr_expect_eq(fg_write_file_atomic(paths[i], parts, sizes, 1), FG_ERR_IO, "%s was written", paths[i]);
        cr_expect(strstr(fg_last_error(), i ? "character device" : "FIFO") && strstr(fg_last_error(), "nothing"),
                  "message: %s", fg_last_error());
        fg_atomic_file af;
        cr_expect_eq(fg_atomic_begin(&af, paths[i]), FG_ERR_IO, "a stream onto %s was begun", paths[i]);
        struct stat st;
        cr_expect(lstat(paths[i], &st) == 0 && (i ? S_ISCHR(st.st_mode) : S_ISFIFO(st.st_mode)),
                  "%s is no longer the special file", paths[i]);
    }
    if (!have_dev) cr_log_warn("no character device test (mknod: %s)", strerror(errno));
    /* a special file put there while a stream was being written is refused at the commit */
    char late[128];
    snprintf(late, sizeof late, "%s/late.bin", g_dir);
    fg_atomic_file af;
    cr_assert_eq(fg_atomic_begin(&af, late), FG_OK, "%s", fg_last_error());
    cr_assert_eq(write(af.fd, "abc", 3), 3);
    cr_assert_eq(mkfifo(late, 0600), 0);
    cr_expect_eq(fg_atomic_commit(&af), FG_ERR_IO, "a FIFO made during the write was replaced");
    struct stat st;
    cr_expect(lstat(late, &st) == 0 && S_ISFIFO(st.st_mode), "the late FIFO was replaced");
    int n = count_entries(g_dir, names, sizeof names);
    cr_expect_eq(n, have_dev ? 3 : 2, "entries: %s", names);
    cr_expect(!strstr(names, FG_TMP_MARK), "temporary files left: %s", names);
}

/* A name that is one of several hard links gets the new file; the other names keep the old bytes:
 * nothing is written into a file that exists. */
Test(fileio, replacing_a_hard_link_leaves_the_other_name_as_it_was) {
    char user[128], lnk[128];
    snprintf(user, sizeof user, "%s/users_file.csv", g_dir);
    snprintf(lnk, sizeof lnk, "%s/out.csv", g_dir);
    write_plain(user, "the user's own data\n");
    cr_assert_eq(link(user, lnk), 0, "link: %s", strerror(errno));
    const void *parts[1] = {"new\n"};
    size_t sizes[1] = {4};
    cr_assert_eq(fg_write_file_atomic(lnk, parts, sizes, 1), FG_OK, "%s", fg_last_error());
    size_t n;
    char *a = slurp(user, &n);
    cr_expect(n == 20 && !memcmp(a, "the user's own data\n", 20), "the user's file changed: '%s'", a);
    free(a);
    a = slurp(lnk, &n);
    cr_expect(n == 4 && !memcmp(a, "new\n", 4), "the new file: '%s'", a);
    free(a);
}
