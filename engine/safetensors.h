/* engine/safetensors.h — read-only, zero-copy access to a safetensors checkpoint.
 *
 * Owns: parsing and validating safetensors headers (format: an 8-byte little-endian
 * header length N, N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets:[begin,end]},
 * "__metadata__": {str: str}}, then the byte buffer), sharded checkpoints through
 * model.safetensors.index.json, and the read-only mmap of every file. Tensor data pointers
 * point into the mapping; nothing is copied. Does not own: what the tensors mean
 * (engine/model.c checks names, dtypes and shapes against the config).
 */
#ifndef DF_ENGINE_SAFETENSORS_H
#define DF_ENGINE_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DF_ST_MAX_DIMS 8

/* Every dtype name the safetensors format defines is recognised. Only BF16, F16 and F32
 * are computed with today; the rest are parsed so a model loader can refuse them by name.
 * The values after DF_DT_BOOL follow the newer format revisions: F8_E8M0 (MX block scales),
 * C64 (complex64) and the sub-byte MX element types F4 (E2M1), F6_E2M3 and F6_E3M2, packed
 * little-endian; a sub-byte tensor must hold a whole number of bytes. */
typedef enum {
  DF_DT_BF16 = 0,
  DF_DT_F16,
  DF_DT_F32,
  DF_DT_F64,
  DF_DT_F8_E4M3,
  DF_DT_F8_E5M2,
  DF_DT_I8,
  DF_DT_U8,
  DF_DT_I16,
  DF_DT_U16,
  DF_DT_I32,
  DF_DT_U32,
  DF_DT_I64,
  DF_DT_U64,
  DF_DT_BOOL,
  DF_DT_F8_E8M0,
  DF_DT_C64,
  DF_DT_F4,
  DF_DT_F6_E2M3,
  DF_DT_F6_E3M2,
  DF_DT_COUNT
} df_dtype;

/* Bytes per element of a dtype (1 for F8/I8/U8/BOOL, 8 for C64); 0 for the sub-byte dtypes
 * F4, F6_E2M3 and F6_E3M2 (use df_dtype_bits) and for values outside the enum. */
size_t df_dtype_size(df_dtype dt);
/* Bits per element of a dtype (4 for F4, 6 for F6_*, 8 * df_dtype_size otherwise); 0 for
 * values outside the enum. */
int df_dtype_bits(df_dtype dt);
/* The dtype spelled `name` in a safetensors header ("BF16"): 0 and *out set, or -1 when the
 * name is not a safetensors dtype (exact, case-sensitive match). */
int df_dtype_from_name(const char *name, df_dtype *out);
/* Name as spelled in safetensors headers ("BF16"). Never NULL. */
const char *df_dtype_name(df_dtype dt);
/* True for the dtypes the engine computes with (BF16, F16, F32). */
bool df_dtype_is_supported(df_dtype dt);

typedef struct df_st_tensor {
  const char *name;              /* owned by the df_st_model */
  df_dtype dtype;
  int ndim;                      /* 0..DF_ST_MAX_DIMS */
  int64_t shape[DF_ST_MAX_DIMS]; /* row-major, outermost first */
  uint64_t nbytes;               /* = product(shape) * df_dtype_bits(dtype) / 8 */
  uint64_t file_offset;          /* absolute byte offset of the data in its file */
  int file_index;                /* index into the model's file list */
  const void *data;              /* points into the read-only mmap; NULL for the parser-only API */
} df_st_tensor;

typedef struct df_st_model df_st_model;

/* Open a checkpoint folder: DIR/model.safetensors.index.json when present (every file named
 * by its weight_map is opened once, in file-name order, and every mapped tensor must appear
 * in the file the index names; weight_map values must be plain file names in DIR), else
 * DIR/model.safetensors, else the single *.safetensors file in DIR (several without an
 * index is an error). A `dir` that is itself a regular file is opened as df_st_open_file.
 * Tensors a shard holds beyond its weight_map entries are kept.
 * Every file is mmapped read-only (PROT_READ, MAP_SHARED); no tensor bytes are copied.
 * Errors (-1, one line in err naming the file and, where relevant, the tensor): missing
 * files, file shorter than 8 bytes, header length past the end of the file or > 100 MiB,
 * invalid JSON/UTF-8, unknown dtype, shape/offset mismatch (end-begin != numel*size),
 * offsets outside the data area, overlapping tensors, duplicate names across shards.
 * On success *out owns the mappings; free with df_st_close. The files must not be truncated
 * while mapped (reading a page past the new end raises SIGBUS, as with any mmap). */
int df_st_open(const char *dir, df_st_model **out, char *err, size_t errlen);

/* Validation rules (both entry points, and df_st_validate_buffer): header length
 * N <= 100 MiB and 8 + N <= file size; the header is a strict JSON object (UTF-8, no
 * duplicate keys; trailing whitespace padding allowed); "__metadata__", when present, maps
 * strings to strings; every other key is a tensor {dtype, shape, data_offsets} (other keys in
 * the entry are ignored) with shape a list of at most DF_ST_MAX_DIMS non-negative integers
 * whose element count and byte size fit in 64 bits, data_offsets [begin, end] with
 * begin <= end <= data area size (file size - 8 - N) and end - begin == nbytes. Tensors may
 * leave gaps but no two may overlap. Data is not required to be aligned. */

/* Open one .safetensors file (no index). Same errors as df_st_open. */
int df_st_open_file(const char *path, df_st_model **out, char *err, size_t errlen);

/* Unmap everything and free; sets *m to NULL. NULL-safe. */
void df_st_close(df_st_model **m);

/* Tensor by exact name, or NULL. Pointer valid until df_st_close. O(log n). */
const df_st_tensor *df_st_find(const df_st_model *m, const char *name);

/* Number of tensors, and the i-th in name order (strcmp order; NULL when i >= count).
 * All accessors accept a NULL model (0 / NULL). */
size_t df_st_count(const df_st_model *m);
const df_st_tensor *df_st_at(const df_st_model *m, size_t i);

/* Number of files and the path of file i (as opened). */
int df_st_file_count(const df_st_model *m);
const char *df_st_file_path(const df_st_model *m, int i);
/* Total bytes of tensor data across all files. */
uint64_t df_st_total_bytes(const df_st_model *m);
/* The read-only mapping of file i: its first byte (the header length), and in *size_out
 * (when not NULL) the file size in bytes. Every tensor t of that file has
 * t->data == (const uint8_t *)df_st_file_map(m, t->file_index, NULL) + t->file_offset.
 * NULL for i out of range. Valid until df_st_close. */
const void *df_st_file_map(const df_st_model *m, int i, uint64_t *size_out);

/* Ask the kernel to back the weight mapping [p, p + n) (bytes; p from mmap, page-aligned) with
 * 2 MiB pages where it can (madvise MADV_HUGEPAGE: anonymous memory under transparent huge
 * pages, file mappings on file systems with large folios). Weight products stream a matrix
 * once per token: with 4 KiB pages every 4 KiB read is a TLB miss, and on Zen 5 a 2-thread
 * MXFP4 expert product streams ~40 GB/s from 4 KiB pages against ~50 GB/s from 2 MiB ones
 * (docs/PERFORMANCE.md). Advisory only: no error (a kernel without the feature ignores it),
 * nothing changes in the bytes read. Any thread; p is borrowed. */
void df_st_advise_weights(void *p, size_t n);

/* Parser only (used by the fuzzer and tests): validate a complete file image `buf` of
 * `len` bytes and return the number of tensors in *n_out. `name` is used in messages.
 * Same errors as df_st_open. Never reads outside buf. */
int df_st_validate_buffer(const uint8_t *buf, size_t len, const char *name, size_t *n_out,
                          char *err, size_t errlen);

#endif
