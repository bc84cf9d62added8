/* test_run_folder.c — the run folder's promises (train/run_folder.h), in process: one writer at a
 * time (the lock, and what it refuses to write into), a fresh run never takes another run's folder
 * unless told to, --overwrite's set-aside and its recovery after a kill at each stage, only the run
 * files' own temporaries are removed, and the log's rows (write, reload up to a step, older headers,
 * best val loss). The whole program's side is in test_runs.c and tests/kill_test.sh. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/run_folder.h"

static char g_dir[64];
static char g_notes[4096];
static int g_n_notes;

static void make_dir(void) {
    fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_run_folder_XXXXXX");
    g_notes[0] = '\0';
    g_n_notes = 0;
}
static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) { /* a folder left in /tmp is only untidy */
    }
}

TestSuite(run_folder, .init = make_dir, .fini = remove_dir, .timeout = 60);

static void take_note(const char *line) {
    g_n_notes++;
    strncat(g_notes, line, sizeof g_notes - strlen(g_notes) - 2);
    strcat(g_notes, "\n");
}

static void path_in(char *p, size_t n, const char *dir, const char *name) { snprintf(p, n, "%s/%s", dir, name); }

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot create %s", p);
    fputs(text, f);
    fclose(f);
}

/* The file's text ("" into buf when missing; returns 0 then). */
static int get(const char *dir, const char *name, char *buf, size_t n) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    buf[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
    return 1;
}

static int exists(const char *dir, const char *name) {
    char p[512];
    struct stat sb;
    path_in(p, sizeof p, dir, name);
    return lstat(p, &sb) == 0;
}

/* An earlier run's files: a model and an optimizer that are not real checkpoints, and a log. */
static void earlier_run(const char *dir) {
    put(dir, FG_CKPT_MODEL_FILE, "earlier model");
    put(dir, FG_CKPT_OPTIM_FILE, "earlier optimizer");
    put(dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER "\n1,2.0,0.001,1.0,100.0,,,\n");
}

Test(run_folder, temporaries_are_named_exactly) {
    const struct {
        const char *name;
        int ours;
    } cases[] = {
        {FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3xY9", 1},
        {FG_RUN_LOG_FILE FG_TMP_MARK "000000", 1},
        {FG_CKPT_OPTIM_PREV_FILE FG_TMP_MARK "zzzzzz", 1},
        {FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3xY", 0},   /* five letters */
        {FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3xY9z", 0}, /* seven */
        {FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3-Y9", 0},  /* not a letter or digit */
        {"notes.txt" FG_TMP_MARK "aB3xY9", 0},         /* not a run file */
        {FG_CKPT_MODEL_FILE, 0},
        {FG_RUN_LOCK_FILE FG_TMP_MARK "aB3xY9", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(fg_run_folder_is_temporary(cases[i].name), cases[i].ours, "'%s': %d, expected %d", cases[i].name,
                     fg_run_folder_is_temporary(cases[i].name), cases[i].ours);
}

Test(run_folder, only_the_run_files_temporaries_are_removed) {
    put(g_dir, FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3xY9", "half a model");
    put(g_dir, FG_RUN_LOG_FILE FG_TMP_MARK "Q1w2E3", "half a log");
    put(g_dir, "notes.txt" FG_TMP_MARK "aB3xY9", "someone's");
    put(g_dir, FG_CKPT_MODEL_FILE, "the model");
    char p[512], target[512];
    path_in(p, sizeof p, g_dir, FG_CKPT_OPTIM_FILE FG_TMP_MARK "linkk1");
    path_in(target, sizeof target, g_dir, "notes.txt" FG_TMP_MARK "aB3xY9");
    cr_assert_eq(symlink(target, p), 0);
    path_in(p, sizeof p, g_dir, FG_RUN_LOG_FILE FG_TMP_MARK "dirdir");
    cr_assert_eq(mkdir(p, 0700), 0);
    fg_run_folder_remove_temporaries(g_dir);
    cr_expect(!exists(g_dir, FG_CKPT_MODEL_FILE FG_TMP_MARK "aB3xY9"), "a model temporary is left");
    cr_expect(!exists(g_dir, FG_RUN_LOG_FILE FG_TMP_MARK "Q1w2E3"), "a log temporary is left");
    cr_expect(exists(g_dir, "notes.txt" FG_TMP_MARK "aB3xY9"), "a file that is not a run file's was removed");
    cr_expect(exists(g_dir, FG_CKPT_MODEL_FILE), "the model was removed");
    cr_expect(exists(g_dir, FG_CKPT_OPTIM_FILE FG_TMP_MARK "linkk1"), "a symbolic link was removed");
    cr_expect(exists(g_dir, FG_RUN_LOG_FILE FG_TMP_MARK "dirdir"), "a folder was removed");
}

Test(run_folder, make_creates_parents_and_refuses_a_file) {
    char d[256];
    snprintf(d, sizeof d, "%s/a/b/c", g_dir);
    cr_assert_eq(fg_run_folder_make(d), FG_OK, "%s", fg_last_error());
    struct stat sb;
    cr_expect(stat(d, &sb) == 0 && S_ISDIR(sb.st_mode), "%s was not created", d);
    put(g_dir, "plain", "x");
    snprintf(d, sizeof d, "%s/plain", g_dir);
    cr_expect_neq(fg_run_folder_make(d), FG_OK);
    cr_expect(strstr(fg_last_error(), "is not a folder"), "message: %s", fg_last_error());
}

Test(run_folder, one_writer_at_a_time) {
    fg_run_folder a = fg_run_folder_at(g_dir, take_note), b = fg_run_folder_at(g_dir, take_note);
    cr_assert_eq(fg_run_folder_lock(&a), FG_OK, "%s", fg_last_error());
    char pid[64], want[64];
    get(g_dir, FG_RUN_LOCK_FILE, pid, sizeof pid);
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    cr_expect_str_eq(pid, want, "the lock file holds '%s', not the owner's pid", pid);
    /* flock belongs to the open file: a second open, even in this process, is a second writer */
    cr_expect_eq(fg_run_folder_lock(&b), FG_ERR_STATE);
    snprintf(want, sizeof want, "(pid %ld)", (long)getpid());
    cr_expect(strstr(fg_last_error(), "another `flashgrad train`") && strstr(fg_last_error(), want), "message: %s",
              fg_last_error());
    cr_expect_eq(b.lock_fd, -1, "a refused lock keeps a descriptor");
    fg_run_folder_close(&a);
    cr_expect_eq(fg_run_folder_lock(&b), FG_OK, "after the first writer ends: %s", fg_last_error());
    fg_run_folder_close(&b);
}

Test(run_folder, the_lock_is_written_only_into_a_file_of_its_own) {
    char p[512], other[512];
    path_in(p, sizeof p, g_dir, FG_RUN_LOCK_FILE);
    cr_assert_eq(mkfifo(p, 0600), 0);
    fg_run_folder rf = fg_run_folder_at(g_dir, NULL);
    cr_expect_neq(fg_run_folder_lock(&rf), FG_OK, "a FIFO as the lock file was taken");
    cr_expect(strstr(fg_last_error(), "not a regular file"), "message: %s", fg_last_error());
    unlink(p);
    put(g_dir, "someones_file", "precious\n");
    path_in(other, sizeof other, g_dir, "someones_file");
    cr_assert_eq(link(other, p), 0);
    cr_expect_neq(fg_run_folder_lock(&rf), FG_OK, "a hard link as the lock file was taken");
    cr_expect(strstr(fg_last_error(), "a hard link"), "message: %s", fg_last_error());
    char text[64];
    get(g_dir, "someones_file", text, sizeof text);
    cr_expect_str_eq(text, "precious\n", "the linked file was written: '%s'", text);
}

Test(run_folder, a_fresh_run_refuses_another_runs_folder) {
    fg_run_folder rf = fg_run_folder_at(g_dir, NULL);
    int64_t step = 99;
    cr_expect_eq(fg_run_folder_other_run(&rf, 0, &step), FG_OK, "an empty folder: %s", fg_last_error());
    cr_expect_eq(step, -1);
    put(g_dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER_NO_MFU "\n"); /* a header alone records no step */
    cr_expect_eq(fg_run_folder_other_run(&rf, 0, &step), FG_OK, "%s", fg_last_error());
    cr_expect_eq(step, -1);
    put(g_dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER "\n1,2.0,0.001,1.0,100.0,,,\n");
    cr_expect_eq(fg_run_folder_other_run(&rf, 0, &step), FG_ERR_ARG, "a log with a row was taken");
    cr_expect(strstr(fg_last_error(), "the log.csv of an earlier run"), "message: %s", fg_last_error());
    cr_expect_eq(fg_run_folder_other_run(&rf, 1, &step), FG_OK, "%s", fg_last_error());
    cr_expect_eq(step, 0);
    /* a flashgrad checkpoint that does not load (its metadata says flashgrad, of another kind) */
    static const char tagged[] = "\x24\0\0\0\0\0\0\0{\"__metadata__\":{\"fg_kind\":\"other\"}}";
    char mp[512];
    path_in(mp, sizeof mp, g_dir, FG_CKPT_MODEL_FILE);
    FILE *f = fopen(mp, "wb");
    cr_assert(f);
    fwrite(tagged, 1, sizeof tagged - 1, f);
    fclose(f);
    cr_expect_eq(fg_run_folder_other_run(&rf, 0, &step), FG_ERR_ARG, "a model file was taken");
    cr_expect(strstr(fg_last_error(), "a checkpoint that does not load") && strstr(fg_last_error(), "--resume"),
              "message: %s", fg_last_error());
    cr_expect_eq(fg_run_folder_other_run(&rf, 1, &step), FG_OK, "%s", fg_last_error());
    cr_expect_eq(step, 0);
    /* a model.safetensors without flashgrad's metadata is not a run's: refused by name, even with --overwrite */
    put(g_dir, FG_CKPT_MODEL_FILE, "not a checkpoint");
    cr_expect_eq(fg_run_folder_other_run(&rf, 0, &step), FG_ERR_ARG, "a foreign model file was taken");
    cr_expect(strstr(fg_last_error(), "not a flashgrad checkpoint") && !strstr(fg_last_error(), "--overwrite"),
              "message: %s", fg_last_error());
    cr_expect_eq(fg_run_folder_other_run(&rf, 1, &step), FG_ERR_ARG, "--overwrite took a foreign model file");
    cr_expect(strstr(fg_last_error(), "'model.safetensors'") && strstr(fg_last_error(), "no flashgrad metadata"),
              "message: %s", fg_last_error());
}

Test(run_folder, overwrite_sets_aside_then_restores_or_discards) {
    earlier_run(g_dir);
    fg_run_folder rf = fg_run_folder_at(g_dir, take_note);
    cr_assert_eq(fg_run_folder_set_aside(&rf), FG_OK, "%s", fg_last_error());
    cr_expect(!exists(g_dir, FG_CKPT_MODEL_FILE) && !exists(g_dir, FG_RUN_LOG_FILE), "files left in place");
    char aside[256], text[256];
    snprintf(aside, sizeof aside, "%s/%s", g_dir, FG_RUN_ASIDE_DONE);
    cr_expect(get(aside, FG_CKPT_MODEL_FILE, text, sizeof text) && !strcmp(text, "earlier model"), "aside: '%s'",
              text);
    /* the new checkpoint fails halfway: its files go, the earlier ones come back as they were */
    put(g_dir, FG_CKPT_OPTIM_FILE, "new optimizer");
    put(g_dir, FG_RUN_LOG_FILE, "new log");
    cr_assert_eq(fg_run_folder_restore_aside(&rf), FG_OK, "%s", fg_last_error());
    get(g_dir, FG_CKPT_OPTIM_FILE, text, sizeof text);
    cr_expect_str_eq(text, "earlier optimizer");
    get(g_dir, FG_RUN_LOG_FILE, text, sizeof text);
    cr_expect_str_eq(text, FG_RUN_LOG_HEADER "\n1,2.0,0.001,1.0,100.0,,,\n");
    cr_expect(!exists(g_dir, FG_RUN_ASIDE_DONE), "the set-aside folder stays");
    /* the new checkpoint is down: the earlier run goes */
    cr_assert_eq(fg_run_folder_set_aside(&rf), FG_OK, "%s", fg_last_error());
    put(g_dir, FG_CKPT_MODEL_FILE, "new model");
    fg_run_folder_discard_aside(&rf);
    cr_expect(!exists(g_dir, FG_RUN_ASIDE_DONE), "the set-aside folder stays");
    get(g_dir, FG_CKPT_MODEL_FILE, text, sizeof text);
    cr_expect_str_eq(text, "new model");
    cr_expect_eq(g_n_notes, 0, "notes: %s", g_notes);
}

/* A kill at each stage of --overwrite, then the next writer's recovery. */
Test(run_folder, recovery_after_a_kill_during_the_move) {
    earlier_run(g_dir);
    char moving[256], text[256];
    snprintf(moving, sizeof moving, "%s/%s", g_dir, FG_RUN_ASIDE_MOVING);
    cr_assert_eq(mkdir(moving, 0700), 0);
    char a[512], b[512];
    path_in(a, sizeof a, g_dir, FG_CKPT_MODEL_FILE);
    path_in(b, sizeof b, moving, FG_CKPT_MODEL_FILE);
    cr_assert_eq(rename(a, b), 0); /* killed after the first file moved */
    fg_run_folder rf = fg_run_folder_at(g_dir, take_note);
    cr_assert_eq(fg_run_folder_recover(&rf), FG_OK, "%s", fg_last_error());
    cr_expect(!exists(g_dir, FG_RUN_ASIDE_MOVING), "the moving folder stays");
    get(g_dir, FG_CKPT_MODEL_FILE, text, sizeof text);
    cr_expect_str_eq(text, "earlier model");
    cr_expect(strstr(g_notes, "put back the earlier run's files"), "notes: %s", g_notes);
}

Test(run_folder, recovery_after_a_kill_before_the_new_model) {
    earlier_run(g_dir);
    fg_run_folder rf = fg_run_folder_at(g_dir, take_note);
    cr_assert_eq(fg_run_folder_set_aside(&rf), FG_OK, "%s", fg_last_error());
    put(g_dir, FG_RUN_LOG_FILE, "new log"); /* killed before the model, which is written last */
    cr_assert_eq(fg_run_folder_recover(&rf), FG_OK, "%s", fg_last_error());
    char text[256];
    get(g_dir, FG_RUN_LOG_FILE, text, sizeof text);
    cr_expect_str_eq(text, FG_RUN_LOG_HEADER "\n1,2.0,0.001,1.0,100.0,,,\n");
    get(g_dir, FG_CKPT_MODEL_FILE, text, sizeof text);
    cr_expect_str_eq(text, "earlier model");
    cr_expect(!exists(g_dir, FG_RUN_ASIDE_DONE), "the set-aside folder stays");
    cr_expect(strstr(g_notes, "the earlier run is back"), "notes: %s", g_notes);
}

Test(run_folder, recovery_after_a_kill_after_the_new_model) {
    earlier_run(g_dir);
    fg_run_folder rf = fg_run_folder_at(g_dir, take_note);
    cr_assert_eq(fg_run_folder_set_aside(&rf), FG_OK, "%s", fg_last_error());
    put(g_dir, FG_RUN_LOG_FILE, "new log");
    put(g_dir, FG_CKPT_MODEL_FILE, "new model");
    cr_assert_eq(fg_run_folder_recover(&rf), FG_OK, "%s", fg_last_error());
    char text[256];
    get(g_dir, FG_CKPT_MODEL_FILE, text, sizeof text);
    cr_expect_str_eq(text, "new model");
    cr_expect(!exists(g_dir, FG_RUN_ASIDE_DONE), "the set-aside folder stays");
    cr_expect(!exists(g_dir, FG_CKPT_OPTIM_FILE), "the earlier optimizer came back beside the new model");
    cr_expect(strstr(g_notes, "removed the run that an --overwrite killed"), "notes: %s", g_notes);
}

Test(run_folder, the_log_round_trips_and_keeps_rows_up_to_a_step) {
    fg_run_log l = {0};
    const char *rows[] = {"1,3.0,0.001,1.0,10.0,,0.01,100.0", "2,2.5,0.001,1.0,10.0,2.700000,0.01,100.0",
                          "3,2.0,0.001,1.0,10.0,2.400000,0.01,100.0", "4,1.9,0.001,1.0,10.0,,0.01,100.0"};
    for (int i = 0; i < 4; i++) cr_assert_eq(fg_run_log_add(&l, rows[i]), 0);
    cr_expect_eq(fg_run_log_best_val(&l), 2.4, "best val %g", fg_run_log_best_val(&l));
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, FG_RUN_LOG_FILE);
    cr_assert_eq(fg_run_log_write(&l, path), FG_OK, "%s", fg_last_error());
    char text[1024], want[1024];
    get(g_dir, FG_RUN_LOG_FILE, text, sizeof text);
    snprintf(want, sizeof want, "%s\n%s\n%s\n%s\n%s\n", FG_RUN_LOG_HEADER, rows[0], rows[1], rows[2], rows[3]);
    cr_expect_str_eq(text, want);
    fg_run_log back = {0};
    fg_run_log_load(&back, path, 2); /* a resume from step 2 drops the later rows */
    cr_assert_eq(back.n, 2, "%lld rows", (long long)back.n);
    cr_expect_str_eq(back.rows[0], rows[0]);
    cr_expect_str_eq(back.rows[1], rows[1]);
    fg_run_log_free(&back);
    fg_run_log_free(&l);
    fg_run_log empty = {0};
    cr_expect(isinf(fg_run_log_best_val(&empty)), "no rows: %g", fg_run_log_best_val(&empty));
}

Test(run_folder, older_logs_get_their_missing_columns_and_other_files_nothing) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, FG_RUN_LOG_FILE);
    put(g_dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER_NO_MFU "\n1,3.0,0.001,1.0,10.0,\n2,2.0,0.001,1.0,10.0,2.5\n");
    fg_run_log l = {0};
    fg_run_log_load(&l, path, 10);
    cr_assert_eq(l.n, 2);
    cr_expect_str_eq(l.rows[0], "1,3.0,0.001,1.0,10.0,,,,");
    cr_expect_str_eq(l.rows[1], "2,2.0,0.001,1.0,10.0,2.5,,,");
    fg_run_log_free(&l);
    put(g_dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER_NO_PEAK "\n1,3.0,0.001,1.0,10.0,,0.5\n");
    fg_run_log_load(&l, path, 10);
    cr_assert_eq(l.n, 1);
    cr_expect_str_eq(l.rows[0], "1,3.0,0.001,1.0,10.0,,0.5,,");
    fg_run_log_free(&l);
    put(g_dir, FG_RUN_LOG_FILE, FG_RUN_LOG_HEADER_NO_BPB "\n1,3.0,0.001,1.0,10.0,2.5,0.5,100.0\n");
    fg_run_log_load(&l, path, 10);
    cr_assert_eq(l.n, 1);
    cr_expect_str_eq(l.rows[0], "1,3.0,0.001,1.0,10.0,2.5,0.5,100.0,");
    fg_run_log_free(&l);
    put(g_dir, FG_RUN_LOG_FILE, "a,b,c\n1,2,3\n");
    fg_run_log_load(&l, path, 10);
    cr_expect_eq(l.n, 0, "rows of someone else's CSV: %lld", (long long)l.n);
    fg_run_log_free(&l);
}

/* A writer still at work holds its temporary: clean-up removes only what dead writers left. */
Test(run_folder, clean_up_leaves_a_live_writers_temporary) {
    char target[512];
    snprintf(target, sizeof target, "%s/%s", g_dir, FG_RUN_LOG_FILE);
    fg_atomic_file af;
    cr_assert_eq(fg_atomic_begin(&af, target), FG_OK, "%s", fg_last_error());
    put(g_dir, FG_CKPT_MODEL_FILE FG_TMP_MARK "Ab12Cd", "a dead writer's half file");
    fg_run_folder_remove_temporaries(g_dir);
    cr_expect_eq(access(af.tmp, F_OK), 0, "the live writer's temporary %s was removed", af.tmp);
    cr_expect(!exists(g_dir, FG_CKPT_MODEL_FILE FG_TMP_MARK "Ab12Cd"), "the dead writer's temporary was left");
    fg_atomic_abort(&af);
}
