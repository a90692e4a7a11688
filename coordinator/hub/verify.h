/* coordinator/hub/verify.h — `deltafin verify DIR`: an offline, read-only check of a model
 * folder.
 *
 * Owns: checking a folder against the manifest `deltafin pull` wrote (every file's size and
 * SHA-256; for stream-mode shards the size and the SHA-256 of every written range), that the
 * pull completed, that config.json parses, that the safetensors headers are valid and agree
 * with config.json (the engine's own loader checks every tensor's presence, dtype and shape),
 * and that tokenizer.json loads when present. Never writes, never opens a network connection.
 * Does not own: repairing anything (`deltafin pull` again resumes and re-fetches).
 */
#ifndef DF_COORD_VERIFY_H
#define DF_COORD_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  DF_VERIFY_OK = 0,      /* a check passed (path, what) */
  DF_VERIFY_NOTE = 1,    /* worth knowing, not a failure (e.g. no manifest, extra files) */
  DF_VERIFY_PROBLEM = 2, /* the folder is not what it should be */
} df_verify_level;

/* Called once per finding; `path` is relative to the folder ("" for the folder itself),
 * `msg` one line. Both valid only during the call. */
typedef void (*df_verify_report)(void *ud, df_verify_level level, const char *path,
                                 const char *msg);

typedef struct df_verify_opts {
  bool skip_hashes;          /* sizes only (fast); default: hash every byte */
  bool deep;                 /* also read every floating-point tensor and report the ones
                                holding NaN or Inf (what the forward refuses at run time) */
  df_verify_report report;   /* may be NULL */
  void *ud;
} df_verify_opts;

typedef struct df_verify_result {
  int problems;              /* DF_VERIFY_PROBLEM findings */
  int notes;
  int files_checked;         /* manifest entries checked */
  uint64_t bytes_hashed;     /* bytes read and hashed */
  bool has_manifest;
} df_verify_result;

/* Check `dir`. Returns 0 when the check ran (res->problems tells the verdict), -1 + message
 * when it could not start (dir missing or not a folder). */
int df_verify_dir(const char *dir, const df_verify_opts *o, df_verify_result *res, char *err,
                  size_t errlen);

#endif
