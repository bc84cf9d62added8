/* run_folder.h — a training run's folder (`flashgrad train --out DIR`) and what is promised about it.
 *
 * The files of a run: FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE
 * (train/checkpoint.h) and FG_RUN_LOG_FILE, every one replaced atomically (tensor/fileio.h), so a
 * reader that takes no lock always sees whole files; and the folder FG_RUN_RESUME_DIR (a checkpoint
 * of its own, see below). The promises:
 *   - one writer at a time: DIR/FG_RUN_LOCK_FILE is flock'ed for the whole run (the kernel releases
 *     it when the process dies, however it dies); a second writer refuses at start;
 *   - a fresh run never replaces another run's files unless asked to (--overwrite), and even then
 *     the earlier files stay as they were until the new run's first checkpoint is down (the
 *     set-aside below); --overwrite replaces a flashgrad run and nothing else (fg_folder_check_ours);
 *   - the log always belongs to the checkpoint beside it: it is written just before each
 *     checkpoint (the caller's order), and its rows are kept only up to the checkpoint's step;
 *   - the only files removed are the run's own leftovers: temporaries named
 *     "<run file>" FG_TMP_MARK "XXXXXX" left by a writer that was killed.
 *
 * The set-aside of --overwrite: at the new run's first checkpoint the earlier run's files move
 * (rename: no space needed) into DIR/FG_RUN_ASIDE_MOVING, which is renamed to DIR/FG_RUN_ASIDE_DONE
 * once all are there; then the new run writes its log and checkpoint (the model last); only then
 * is the set-aside folder removed. If that checkpoint cannot be written, the earlier files move
 * back. A kill anywhere leaves a state that the next writer resolves, under the lock, before
 * anything else (fg_run_folder_recover):
 *   FG_RUN_ASIDE_MOVING present: the move was cut short and the new run had written nothing: move back;
 *   FG_RUN_ASIDE_DONE present and the model present (in DIR or FG_RUN_RESUME_DIR): the new run's
 *     checkpoint is complete: the earlier run goes;
 *   FG_RUN_ASIDE_DONE present, no model: the new checkpoint is incomplete: its files go, the
 *     earlier run's move back.
 * Only the run files are ever moved or removed. Readers, which take no lock, resolve the same states
 * when the writer is dead and the folder holds nothing of the new run, and otherwise read the
 * set-aside run where it is (fg_run_folder_for_reading).
 *
 * Errors: FG_ERR_ARG where the folder refuses what was asked as asked (another run is there; a path
 * too long) — a usage error for the program; FG_ERR_IO or FG_ERR_STATE otherwise. Each message is
 * one line that starts with the flag it concerns ("--out: ...", "--overwrite: ...").
 */
#ifndef FG_RUN_FOLDER_H
#define FG_RUN_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_RUN_LOG_FILE "log.csv"
#define FG_RUN_LOCK_FILE "train.lock"
#define FG_RUN_ASIDE_MOVING ".flashgrad-overwrite-moving"
#define FG_RUN_ASIDE_DONE ".flashgrad-overwritten"
/* A checkpoint of the state a stop signal interrupted, when the save policy keeps another one in
 * DIR (nanoGPT's always_save_checkpoint = False keeps the best val loss's): a checkpoint folder of
 * its own, always at a later step than DIR's; the next checkpoint in DIR removes it. */
#define FG_RUN_RESUME_DIR "interrupted"

/* The log's header; those of logs written before the val_bpb, peak_gflops and mfu columns, whose
 * rows a resumed run keeps with those columns empty. */
#define FG_RUN_LOG_HEADER "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb"
#define FG_RUN_LOG_HEADER_NO_BPB "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops"
#define FG_RUN_LOG_HEADER_NO_PEAK "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu"
#define FG_RUN_LOG_HEADER_NO_MFU "step,loss,lr,grad_norm,tokens_per_s,val_loss"

typedef struct {
    const char *dir; /* the folder (borrowed) */
    int lock_fd;     /* the lock's descriptor, -1 while not locked */
    int made_lock;   /* fg_run_folder_lock created the lock file (it was not there before) */
    /* Called with a line worth telling the user (no newline) when recovery or clean-up did something
     * or could not; NULL: nothing is said. */
    void (*note)(const char *line);
} fg_run_folder;

/* What a folder that flashgrad would replace may hold. */
typedef enum {
    FG_FOLDER_RUN,       /* a training run: the run files (model and optimizer files that carry flashgrad's
                          * metadata, log.csv with flashgrad's header), FG_RUN_RESUME_DIR, the lock, the
                          * set-aside folders and the run files' temporaries */
    FG_FOLDER_HF_EXPORT, /* a Hugging Face export written by flashgrad: config.json, the tokenizer files,
                          * the model's safetensors files (model.safetensors or its shards, each
                          * carrying the "fg_export" metadata key), model.safetensors.index.json and
                          * their temporaries */
} fg_folder_kind;

/* The one rule for replacing a folder (train --overwrite, export --overwrite): FG_OK when every entry
 * of dir is one that flashgrad writes in a folder of that kind; else FG_ERR_ARG, naming the first
 * entry that is not (what --overwrite would otherwise delete or leave beside the new files), its
 * message starting with `flag`. FG_ERR_IO when dir cannot be read. */
fg_status fg_folder_check_ours(const char *dir, fg_folder_kind kind, const char *flag);
/* 1 when n is the name of one of a sharded Hugging Face folder's weight files,
 * "model-00001-of-00002.safetensors" (five digits each, as transformers writes them). */
int fg_is_hf_shard_name(const char *n);

/* A handle on dir (not locked yet); nothing is touched. */
fg_run_folder fg_run_folder_at(const char *dir, void (*note)(const char *line));

/* Creates dir (with its parents) if missing and checks that it is a writable folder. */
fg_status fg_run_folder_make(const char *dir);

/* Takes the folder's writer lock until fg_run_folder_close (or the process ends). The lock file
 * holds the owner's pid, for the message of a second writer, which is refused (FG_ERR_STATE). A lock
 * file that is not a regular file of its own (a FIFO, a device, a hard link) is refused. */
fg_status fg_run_folder_lock(fg_run_folder *rf);
/* Drops the lock (closes its descriptor); the lock file stays. */
void fg_run_folder_close(fg_run_folder *rf);
/* A run refused at its start: drops the lock, and removes the lock file when the lock made it, so
 * that a folder the run may not use (a user's) is left as it was. */
void fg_run_folder_refused(fg_run_folder *rf);

/* With the lock held, before anything reads the folder: finishes what an --overwrite killed midway
 * left (see above), saying what it did through rf->note. */
fg_status fg_run_folder_recover(fg_run_folder *rf);

/* A fresh run's folder: does it hold another run's files? *step = -1: none (or only a log without
 * rows); 0: a log, or a checkpoint that does not load; > 0: a checkpoint at that step. Without
 * overwrite, another run's files are refused (FG_ERR_ARG, naming them). */
fg_status fg_run_folder_other_run(const fg_run_folder *rf, int overwrite, int64_t *step);

/* 1 when name is a temporary of a run file: exactly "<run file>" FG_TMP_MARK and mkstemp's six
 * letters or digits; else 0. */
int fg_run_folder_is_temporary(const char *name);
/* 1 when name is exactly base FG_TMP_MARK and mkstemp's six letters or digits. */
int fg_is_temporary_of(const char *name, const char *base);
/* Removes what writers killed midway left in dir: the entries that is_ours(name, ctx) names as
 * temporaries, only when no live writer holds them (fg_tmp_abandoned), and only regular files and
 * (with dirs_ok) folders built by a writer, whose own entries are all temporaries or files that
 * dirs_ok(name) accepts. A user's file with a similar name, a link, or anything else is left. */
void fg_remove_leftovers(const char *dir, int (*is_ours)(const char *name, const void *ctx), const void *ctx,
                         int (*dirs_ok)(const char *name));
/* Removes the temporaries of the run files from dir and its FG_RUN_RESUME_DIR (fg_remove_leftovers). */
void fg_run_folder_remove_temporaries(const char *dir);

/* The checkpoint `train --resume` continues: dir, or dir/FG_RUN_RESUME_DIR when that holds a
 * checkpoint at a later step (or dir holds none), into path[0..n). With the lock held. */
void fg_run_folder_resume_from(const char *dir, char *path, size_t n);

/* Where a reader (sample, eval, export, plot, --init-from: every fg_ckpt_open of a folder) finds the
 * run in dir, into path[0..n): dir itself when it holds a model file. Otherwise:
 *   - an --overwrite that was interrupted (or is still running) set the run aside: when its writer
 *     is dead and the folder holds nothing of the new run, the earlier run is put back where it was
 *     (fg_run_folder_recover, under the lock; a note on stderr says so); else the set-aside folder
 *     is read as it is (with a note naming it and the command that puts it back when the writer is
 *     dead); a set-aside under way right now is FG_ERR_STATE ("try again");
 *   - a run interrupted before any checkpoint in dir: dir/FG_RUN_RESUME_DIR.
 * Anything else: dir (the caller says what is missing). */
fg_status fg_run_folder_for_reading(const char *dir, char *path, size_t n);
/* The same for a model file given by its path: a missing DIR/model.safetensors is looked for where
 * fg_run_folder_for_reading(DIR) finds the run; any other path is left as it is. */
fg_status fg_run_folder_file_for_reading(const char *file, char *path, size_t n);

/* --overwrite, at the new run's first checkpoint: the earlier run's files move into
 * FG_RUN_ASIDE_DONE. On failure they are moved back where that works (the message says where they
 * are). */
fg_status fg_run_folder_set_aside(fg_run_folder *rf);
/* The new checkpoint failed: the new run's files are removed and the earlier run's move back. */
fg_status fg_run_folder_restore_aside(fg_run_folder *rf);
/* The new checkpoint is down: the earlier run's files go (a failure to remove the folder is a note). */
void fg_run_folder_discard_aside(fg_run_folder *rf);
/* A checkpoint in dir is down: an older interrupted state (FG_RUN_RESUME_DIR) goes. */
void fg_run_folder_remove_resume(fg_run_folder *rf);

/* ---- the log: its rows kept in memory, the file rewritten atomically ---- */
typedef struct {
    char **rows; /* "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb" values, no newline */
    int64_t n, cap;
} fg_run_log;

/* Appends a copy of row. 0, or -1 when out of memory. */
int fg_run_log_add(fg_run_log *l, const char *row);
void fg_run_log_free(fg_run_log *l);
/* The whole log, header and rows, replaced atomically at path. */
fg_status fg_run_log_write(const fg_run_log *l, const char *path);
/* On resume: appends the rows of steps 1 .. step of the log at path (an older header's rows get
 * the missing columns empty); a missing file or another file's header adds nothing. */
void fg_run_log_load(fg_run_log *l, const char *path, int64_t step);
/* The lowest val_loss (the sixth column) in the rows, or INFINITY. */
double fg_run_log_best_val(const fg_run_log *l);

#ifdef __cplusplus
}
#endif
#endif /* FG_RUN_FOLDER_H */
