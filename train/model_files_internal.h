/* model_files_internal.h — what the model-file readers and writers share (model_files.c,
 * hf_files.c, llmc_files.c). Module-internal: nothing outside those three files includes it.
 */
#ifndef FG_MODEL_FILES_INTERNAL_H
#define FG_MODEL_FILES_INTERNAL_H

#include "train/model_files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The first int32 of an llm.c model file. */
#define FG__LLMC_MAGIC 20240326

/* 1 when something is at p (following links): whatever it is, its reader then opens it through
 * fg_read_file / fg_open_read, which refuses a FIFO, a device or a folder by name. */
int fg__file_is_there(const char *p);
/* The parameter values of g as float32 in a new host buffer of g->num_elements (caller frees);
 * NULL + fg_last_error() on failure. */
float *fg__model_host_f32(const fg_gpt *g);

/* The first option of c that GPT-2 (GPT2LMHeadModel, llm.c) lacks, as "name value" in why, or
 * NULL when c is GPT-2's architecture. */
const char *fg__gpt2_cannot(const fg_gpt_config *c, char *why, size_t cap);

/* OUT may be written: absent, or (with overwrite) a folder flashgrad's export wrote, holding
 * nothing else (fg_folder_check_ours). FG_ERR_ARG otherwise, FG_ERR_IO when OUT cannot be read. */
fg_status fg__export_check_out(const char *out, int overwrite);
/* Removes what an export to out killed midway left beside it (only temporaries no live writer
 * holds; dirs: also its half-built folders). */
void fg__export_remove_leftovers(const char *out, int dirs);
/* fsyncs the folder that holds path (after a rename into it); a failure loses nothing more. */
void fg__fsync_dir_of(const char *path);

/* A Hugging Face folder dir, or its .safetensors file `file` (NULL: the folder's own), with the
 * tokenizer files beside it when flashgrad reads them. NULL + fg_last_error(). */
fg_model_file *fg__hf_load(const char *dir, const char *file);
/* An llm.c model file. NULL + fg_last_error(). */
fg_model_file *fg__llmc_load(const char *path);
/* 1 when path is a regular file starting with FG__LLMC_MAGIC (errors are cleared, never set). */
int fg__llmc_file_magic(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* FG_MODEL_FILES_INTERNAL_H */
