/* tests/cuda_decl/cuda_runtime_api.h — a declaration-only stand-in for the CUDA runtime
 * header, with the signatures of the CUDA Runtime API reference (CUDA 11/12) for exactly the
 * calls engine/device/cuda_rt.c makes. Used only by the cuda_rt_typecheck test on machines without
 * the CUDA headers, so the DF_CUDA branch is at least type-checked there; it is never linked.
 * A real build with -DDF_CUDA=ON uses the toolkit's header instead. */
#ifndef DF_TEST_CUDA_DECL_H
#define DF_TEST_CUDA_DECL_H
#include <stddef.h>

typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
typedef enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1 } cudaMemcpyKind;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocDefault 0x00
#define cudaEventDisableTiming 0x02

const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
#endif
