/* engine/device/cuda_rt.c — cuda_rt.h over the CUDA runtime API (DF_CUDA=ON), or stubs.
 *
 * Owns: cudaMemGetInfo, cudaHostAlloc pinned staging buffers, the copy stream and its
 * events. Plain C over <cuda_runtime_api.h>: no nvcc needed to build it, only the CUDA
 * headers and libcudart (a CUDA toolkit, or the runtime a PyTorch wheel ships).
 */
#include "engine/device/cuda_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DF_CUDA
#include <cuda_runtime_api.h>

#define CU_CHECK(call)                                                                        \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      if (err) snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));                \
      goto fail;                                                                              \
    }                                                                                         \
  } while (0)

struct df_cuda_uploader {
  int device;
  size_t chunk;
  void *pinned[2];        /* cudaHostAlloc'd staging buffers, chunk bytes each */
  cudaEvent_t done[2];    /* recorded after the copy out of pinned[i] */
  bool busy[2];           /* an event is pending on pinned[i] */
  int next;               /* buffer the next chunk goes to */
  cudaStream_t stream;    /* non-blocking copy stream */
  uint64_t bytes;
};

bool df_cuda_compiled(void) { return true; }

int df_cuda_device_count(char *err, size_t errlen) {
  int n = 0;
  CU_CHECK(cudaGetDeviceCount(&n));
  return n;
fail:
  return 0;
}

int df_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                     size_t errlen) {
  size_t f = 0, t = 0;
  if (err && errlen) err[0] = '\0';
  int n = df_cuda_device_count(err, errlen);
  if (device < 0 || device >= n) {
    /* a failed count has said why; a count of 0 or a bad index has not */
    if (err && errlen && !err[0])
      snprintf(err, errlen, "CUDA device %d does not exist (%d found)", device, n);
    return -1;
  }
  CU_CHECK(cudaSetDevice(device));
  CU_CHECK(cudaMemGetInfo(&f, &t));
  *free_bytes = f;
  *total_bytes = t;
  return 0;
fail:
  return -1;
}

df_cuda_uploader *df_cuda_uploader_new(int device, size_t chunk, char *err, size_t errlen) {
  df_cuda_uploader *u = calloc(1, sizeof *u);
  if (!u) {
    if (err) snprintf(err, errlen, "out of memory");
    return NULL;
  }
  u->device = device;
  u->chunk = chunk ? chunk : (size_t)64 << 20;
  CU_CHECK(cudaSetDevice(device));
  CU_CHECK(cudaStreamCreateWithFlags(&u->stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2; i++) {
    CU_CHECK(cudaHostAlloc(&u->pinned[i], u->chunk, cudaHostAllocDefault));
    CU_CHECK(cudaEventCreateWithFlags(&u->done[i], cudaEventDisableTiming));
  }
  return u;
fail:
  df_cuda_uploader_destroy(&u);
  return NULL;
}

int df_cuda_upload(df_cuda_uploader *u, void *dst, const void *src, size_t n, char *err,
                   size_t errlen) {
  CU_CHECK(cudaSetDevice(u->device));
  for (size_t off = 0; off < n;) {
    size_t len = n - off < u->chunk ? n - off : u->chunk;
    int b = u->next;
    if (u->busy[b]) CU_CHECK(cudaEventSynchronize(u->done[b])); /* buffer free again */
    memcpy(u->pinned[b], (const char *)src + off, len);
    CU_CHECK(cudaMemcpyAsync((char *)dst + off, u->pinned[b], len, cudaMemcpyHostToDevice,
                             u->stream));
    CU_CHECK(cudaEventRecord(u->done[b], u->stream));
    u->busy[b] = true;
    u->next = 1 - b;
    off += len;
    u->bytes += len;
  }
  return 0;
fail:
  return -1;
}

int df_cuda_uploader_sync(df_cuda_uploader *u, char *err, size_t errlen) {
  CU_CHECK(cudaStreamSynchronize(u->stream));
  u->busy[0] = u->busy[1] = false;
  return 0;
fail:
  return -1;
}

uint64_t df_cuda_uploader_bytes(const df_cuda_uploader *u) { return u->bytes; }

void df_cuda_uploader_destroy(df_cuda_uploader **up) {
  if (!up || !*up) return;
  df_cuda_uploader *u = *up;
  if (u->stream) cudaStreamSynchronize(u->stream);
  for (int i = 0; i < 2; i++) {
    if (u->done[i]) cudaEventDestroy(u->done[i]);
    if (u->pinned[i]) cudaFreeHost(u->pinned[i]);
  }
  if (u->stream) cudaStreamDestroy(u->stream);
  free(u);
  *up = NULL;
}

#else /* !DF_CUDA: the same API, failing with one clear reason */

static const char k_none[] = "no CUDA runtime in this build (configure with -DDF_CUDA=ON)";

struct df_cuda_uploader {
  int unused;
};

bool df_cuda_compiled(void) { return false; }

int df_cuda_device_count(char *err, size_t errlen) {
  if (err) snprintf(err, errlen, "%s", k_none);
  return 0;
}

int df_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                     size_t errlen) {
  (void)device;
  *free_bytes = *total_bytes = 0;
  if (err) snprintf(err, errlen, "%s", k_none);
  return -1;
}

df_cuda_uploader *df_cuda_uploader_new(int device, size_t chunk, char *err, size_t errlen) {
  (void)device;
  (void)chunk;
  if (err) snprintf(err, errlen, "%s", k_none);
  return NULL;
}

int df_cuda_upload(df_cuda_uploader *u, void *dst, const void *src, size_t n, char *err,
                   size_t errlen) {
  (void)u, (void)dst, (void)src, (void)n;
  if (err) snprintf(err, errlen, "%s", k_none);
  return -1;
}

int df_cuda_uploader_sync(df_cuda_uploader *u, char *err, size_t errlen) {
  (void)u;
  if (err) snprintf(err, errlen, "%s", k_none);
  return -1;
}

uint64_t df_cuda_uploader_bytes(const df_cuda_uploader *u) {
  (void)u;
  return 0;
}

void df_cuda_uploader_destroy(df_cuda_uploader **u) {
  if (u) *u = NULL;
}

#endif
