/* engine/device/cuda_rt.h — the few CUDA runtime calls Deltafin makes itself: device memory
 * queries for admission, and expert uploads through pinned host buffers on a copy stream of
 * their own.
 *
 * Owns: the direct use of the CUDA runtime API (libcudart), compiled only with
 * -DDF_CUDA=ON. Every other build gets the same functions as stubs that fail with
 * "no CUDA runtime in this build (configure with -DDF_CUDA=ON)", so callers need no #ifdef.
 * Does not own: tensors or compute on the device (libtorch does, engine/tensor/torch_path.cpp);
 * what to upload (engine/device/admission.h decides).
 * Errors: 0 / -1 with a one-line message in the caller's buffer naming the CUDA call and
 * cudaGetErrorString's text. No function aborts.
 */
#ifndef DF_ENGINE_CUDA_RT_H
#define DF_ENGINE_CUDA_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when this build links the CUDA runtime (DF_CUDA=ON). */
bool df_cuda_compiled(void);

/* Number of CUDA devices the runtime sees (cudaGetDeviceCount). 0 when the build has no
 * runtime or the machine no driver/device; the reason then goes to err (may be NULL). */
int df_cuda_device_count(char *err, size_t errlen);

/* Free and total memory of device `device`, in bytes (cudaSetDevice + cudaMemGetInfo; the
 * figures are the driver's, i.e. what every process together has left). Errors (-1): no
 * runtime in this build, device out of range, a CUDA error. */
int df_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                     size_t errlen);

/* An uploader: two pinned (page-locked, cudaHostAlloc) staging buffers of `chunk` bytes
 * each and a non-blocking stream of its own (cudaStreamCreateWithFlags). Host memory that
 * is not pinned (a safetensors mmap) is copied chunk by chunk into a staging buffer and
 * sent with cudaMemcpyAsync on that stream, while the next chunk is copied into the other
 * buffer (double buffering; an event per buffer says when it may be reused). */
typedef struct df_cuda_uploader df_cuda_uploader;

/* chunk: staging bytes per buffer (0 = 64 MiB). Errors (NULL + message): no runtime in
 * this build, bad device, pinned allocation or stream creation failed. Free with
 * df_cuda_uploader_destroy. */
df_cuda_uploader *df_cuda_uploader_new(int device, size_t chunk, char *err, size_t errlen);

/* Queue a copy of n bytes from host `src` (any host memory; read before this returns
 * only up to the last chunk, which is in flight) to device memory `dst`. The copy is
 * complete only after df_cuda_uploader_sync. Errors (-1): a CUDA error; the uploader must
 * then be destroyed. */
int df_cuda_upload(df_cuda_uploader *u, void *dst, const void *src, size_t n, char *err,
                   size_t errlen);

/* Wait until every queued copy has landed (cudaStreamSynchronize). -1 on a CUDA error. */
int df_cuda_uploader_sync(df_cuda_uploader *u, char *err, size_t errlen);

/* Bytes sent through the uploader so far. */
uint64_t df_cuda_uploader_bytes(const df_cuda_uploader *u);

/* Sync, free the pinned buffers and the stream; NULLs *u; NULL-safe. */
void df_cuda_uploader_destroy(df_cuda_uploader **u);

#ifdef __cplusplus
}
#endif

#endif
