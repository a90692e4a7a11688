/* engine/kernels/kernels_simd.h — the lane helpers every linear kernel shares (kernels.c,
 * kernels_gemm.c), so that each computes an output element with the same operations: the eight
 * fp32 lanes k = l mod 8 are reduced by one fixed tree, and weights widen to fp32 exactly.
 * Header-only (static inline); include after defining DF_HAVE_X86, INLINE and AVX2_FN as
 * kernels.c does.
 */
#ifndef DF_ENGINE_KERNELS_SIMD_H
#define DF_ENGINE_KERNELS_SIMD_H

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"

/* ---- scalar widening -------------------------------------------------------------- */

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: renormalise */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* One weight of a stored dtype widened to fp32 (exact), as df_k_to_f32. */
static inline float k_to_f32(const void *p, df_dtype dt, int64_t i) {
  switch (dt) {
  case DF_DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
  case DF_DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
  case DF_DT_F32: return ((const float *)p)[i];
  default: assert(!"df_k_to_f32: unsupported dtype"); return 0.0f;
  }
}

/* A scratch buffer of at least n floats, 64-byte aligned, in *buf (capacity *cap floats; a
 * thread-local pair for per-thread scratch): reallocated, contents dropped, when too small.
 * NULL, with *cap 0, when the allocation fails. */
static inline float *k_grow(float **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    free(*buf);
    *buf = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    *cap = *buf ? n : 0;
  }
  return *buf;
}

/* The fixed lane reduction: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float lanes_reduce(const float a[8]) {
  float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

/* ---- AVX2 helpers -------------------------------------------------------------------- */
#if DF_HAVE_X86
INLINE AVX2_FN __m256 avx2_ld(const void *base, df_dtype dt, int64_t i) {
  if (dt == DF_DT_BF16) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (dt == DF_DT_F16)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
  return _mm256_loadu_ps((const float *)base + i);
}

INLINE AVX2_FN float avx2_reduce(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* avx2_reduce of 16 outputs at once: z[k] (k < 8) holds output 2k's eight lanes in its low 256
 * bits and output 2k + 1's in its high 256 bits (the 512-bit blocks' accumulators, in output
 * order); o[n] = avx2_reduce(output n's lanes) for n < 16, bit for bit: the three levels of
 * avx2_reduce's tree — l + (l + 4), then (0 + 2) and (1 + 3), then (0 + 1) — each done for 16
 * outputs by two shuffles and one add, with the same operands in the same order (so even a
 * NaN's payload is the same), then one permute into output order. 21 + 2 operations for 16
 * outputs instead of ~7 each: the reduction of a block of short rows (a MoE expert's down
 * projection has K = its width) was a quarter of the block's instructions. AVX-512F; o: 16
 * floats, any alignment. */
INLINE __attribute__((target("avx2,fma,avx512f"))) void avx512_reduce16(const __m512 *z,
                                                                        float *o) {
  __m512 s[4], t[2];
  for (int m = 0; m < 4; m++) /* per output: lanes l + l+4 (l < 4), one 128-bit lane each */
    s[m] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int m = 0; m < 2; m++) /* (0 + 2), (1 + 3) of two outputs per 128-bit lane */
    t[m] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  /* (0 + 1) of four outputs per 128-bit lane: lane 4q + p holds output 4p + q */
  __m512 r = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i to_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(o, _mm512_permutexvar_ps(to_order, r));
}
#endif

#endif
