/* meta_pkl.h — nanoGPT's meta.pkl, read by a strict reader of the few pickle opcodes it uses.
 *
 * nanoGPT's data/shakespeare_char/prepare.py writes `pickle.dump({'vocab_size': V, 'itos': itos,
 * 'stoi': stoi}, f)` beside train.bin and val.bin, where chars = sorted(set(text)),
 * itos = {i: ch}, stoi = {ch: i}. Python (protocols 2 to 5) encodes that dict with these opcodes
 * only: PROTO, FRAME, EMPTY_DICT, MARK, SETITEM, SETITEMS, BININT1, BININT2, BININT,
 * SHORT_BINUNICODE, BINUNICODE, MEMOIZE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET, STOP (the
 * strings of stoi are memo references to itos's), and LONG1/LONG4 for an int outside 32 bits (read
 * as pickle defines them, little-endian two's complement; a value outside int64 is refused). This reader is a stack machine over exactly that
 * set: every other opcode (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, ...) is refused
 * with one line naming it, so no pickle can make it import or call anything, and every count and
 * length is checked against the bytes left (it is a fuzz target).
 *
 * The result must be nanoGPT's dict exactly: the three keys and no other, itos the ids 0..V-1 each
 * mapped to a one-character string, stoi its inverse, the characters in strictly increasing order
 * (sorted, as prepare.py writes them). Characters are bytes of flashgrad's character-level
 * tokenizer, so each must be ASCII (code point < 128: one UTF-8 byte); other characters are refused
 * by name (the ids of such a vocabulary would not map to bytes).
 */
#ifndef FG_META_PKL_H
#define FG_META_PKL_H

#include <stddef.h>

#include "datasets/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The character-level tokenizer of meta.pkl's bytes buf[0..n) (`label` names them in messages).
 * Caller frees; NULL + fg_last_error() (FG_ERR_FORMAT) otherwise. */
fg_tokenizer *fg_meta_pkl_parse(const void *buf, size_t n, const char *label);
/* The same from a file (at most 64 MiB). FG_ERR_IO when it cannot be read. */
fg_tokenizer *fg_meta_pkl_load(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* FG_META_PKL_H */
