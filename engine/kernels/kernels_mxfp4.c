/* engine/kernels/kernels_mxfp4.c — linear over MXFP4 weights (E2M1 + E8M0 per 32); see kernels.h.
 *
 * Owns: the de-quantisation of MXFP4 weights inside the matmul (OCP Microscaling Formats (MX)
 * Specification v1.0, MXFP4; stored as compressed-tensors' "mxfp4-pack-quantized" packer
 * writes it: `weight_packed` U8 [N, K/2], low nibble = even column, and `weight_scale` U8
 * [N, K/32]; Kimi K3's routed experts, docs/K3.md §4), in an AVX2 path and a scalar path that
 * agree bit for bit. No widened copy of a weight exists: each weight is decoded into a
 * register and fed to the fused multiply-add lane order of df_k_linear (eight lanes k = l mod
 * 8, lane tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); K % 32 == 0 leaves no K % 8 tail).
 *
 * Decoding: the magnitude of a weight is the fp32 product T[c & 7] * 2^(s - 127), one IEEE
 * multiplication (exact whenever the value is representable: T has at most two significant
 * bits, so for s <= 252 every product is the value itself, subnormals down to 2^-128
 * included); the sign bit 3 of the nibble is then copied into bit 31, so code 8 gives -0.0.
 * The power of two is built from its bits: s << 23 for s >= 1, and 0x00400000 (2^-127, a
 * subnormal) for s = 0. The AVX2 path loads the eight products T[m] * 2^(s - 127) of the
 * group's scale byte from a table made once per process (the same multiplications), once per
 * 32 columns, and picks entries with vpermps, whose index is the nibble (only its low three
 * bits count); the nibbles of four packed bytes reach the eight lanes of a vector through one
 * broadcast and a per-lane variable shift (lane l: bits 4l .. 4l+3 = column l), and the sign
 * goes in with one shift and one xor against the table pre-xored with m << 28 (decode8). The
 * AVX-512 path (AVX-512VL on 256-bit registers, so the lanes and their order are the AVX2
 * path's) looks the whole nibble up in a 16-entry signed table, the group's two halves held in
 * two registers, with one vpermt2ps (decode8_512): one shift, one permute and the fused
 * multiply-add per eight weights. Every path therefore sees identical weight values in the
 * same lane order, so they agree bit for bit and equal df_k_linear over the de-quantised F32
 * matrix.
 *
 * Tiles: the unit shared among threads is 4 weight rows (df_k_linear_mxfp4_cols); inside it
 * the AVX2 micro-kernels hold rb x wb accumulators in registers (rb <= 8 activation rows,
 * wb <= 4 weight rows, rb * wb <= 8) so each decoded vector feeds rb fused multiply-adds and
 * a tile's packed bytes come from memory once (later row blocks reread them from L1/L2). While
 * a tile runs, the same bytes of the next tile (MX_NR rows further) are prefetched into L1:
 * rows of an expert are short (K / 2 bytes), so the hardware prefetcher alone leaves a decode
 * waiting on memory at every tile (measured: twice the bytes per second with the hint).
 */
#include "engine/kernels/kernels.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DF_HAVE_X86 1
#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX512_FN __attribute__((target("avx2,fma,avx512f,avx512vl")))
#else
#define DF_HAVE_X86 0
#endif

#define INLINE static inline __attribute__((always_inline))

#define MX_NR 4     /* weight rows of a column tile (the unit of work) */
#define MX_GROUP 32 /* columns per E8M0 scale */

static const float k_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* 2^(s - 127) as fp32, exact: s = 0 is the subnormal 2^-127; s = 255 gives +inf (NaN in MX,
 * refused before a weight is used). */
static inline float e8m0_f32(uint8_t s) {
  uint32_t u = s ? (uint32_t)s << 23 : 0x00400000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The weight of nibble c (0..15) under scale sc = e8m0_f32(s). */
static inline float e2m1_scaled(unsigned c, float sc) {
  float m = k_e2m1[c & 7] * sc;
  uint32_t u;
  memcpy(&u, &m, 4);
  u ^= (uint32_t)(c & 8) << 28;
  memcpy(&m, &u, 4);
  return m;
}

float df_k_mxfp4_weight(const uint8_t *packed, const uint8_t *scale, int64_t scale_ld, int64_t K,
                        int64_t n, int64_t k) {
  assert(K % MX_GROUP == 0 && k >= 0 && k < K && scale_ld >= K / MX_GROUP);
  uint8_t b = packed[n * (K / 2) + k / 2];
  unsigned c = (k & 1) ? (unsigned)(b >> 4) : (unsigned)(b & 15);
  return e2m1_scaled(c, e8m0_f32(scale[n * scale_ld + k / MX_GROUP]));
}

int64_t df_k_mxfp4_find_nan_scale(const uint8_t *scale, int64_t n) {
  if (n <= 0) return -1;
  const uint8_t *p = memchr(scale, 255, (size_t)n);
  return p ? (int64_t)(p - scale) : -1;
}

/* ---- scalar ------------------------------------------------------------------------- */

/* One output: weight row (wr, sr) against x, the df_k_linear lane order (K % 8 == 0). */
static float dot_row_scalar(const float *x, const uint8_t *wr, const uint8_t *sr, int64_t K) {
  float acc[8] = {0};
  for (int64_t g = 0; g < K / MX_GROUP; g++) {
    float sc = e8m0_f32(sr[g]);
    const uint8_t *p = wr + g * (MX_GROUP / 2);
    const float *xg = x + g * MX_GROUP;
    for (int i = 0; i < MX_GROUP / 2; i++) { /* byte i: columns 2i (lane 2i % 8), 2i+1 */
      int l = (2 * i) & 7;
      acc[l] = fmaf(xg[2 * i], e2m1_scaled(p[i] & 15u, sc), acc[l]);
      acc[l + 1] = fmaf(xg[2 * i + 1], e2m1_scaled((unsigned)p[i] >> 4, sc), acc[l + 1]);
    }
  }
  float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
  return (a0 + a2) + (a1 + a3);
}

/* ---- AVX2 --------------------------------------------------------------------------- */
#if DF_HAVE_X86
INLINE AVX2_FN float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* g_tabx[s][m] = bits(T[m] * 2^(s - 127)) ^ (m << 28): the scaled, pre-xored table of every
 * scale byte (8 KiB, L1-resident), so a group's table is one load. g_tab16[s][c] = the signed
 * weight of nibble c under scale byte s, e2m1_scaled(c, e8m0_f32(s)) (16 KiB; the AVX-512
 * path). Filled once. */
static uint32_t g_tabx[256][8] __attribute__((aligned(32)));
static float g_tab16[256][16] __attribute__((aligned(64)));
static pthread_once_t g_tabx_once = PTHREAD_ONCE_INIT;

static void tabx_init(void) {
  for (int s = 0; s < 256; s++) {
    for (uint32_t m = 0; m < 8; m++) {
      float v = k_e2m1[m] * e8m0_f32((uint8_t)s);
      uint32_t u;
      memcpy(&u, &v, 4);
      g_tabx[s][m] = u ^ (m << 28);
    }
    for (unsigned c = 0; c < 16; c++) g_tab16[s][c] = e2m1_scaled(c, e8m0_f32((uint8_t)s));
  }
}

/* The eight weights of the four packed bytes at p under the group's table
 * tabx[m] = bits(T[m] * scale) ^ (m << 28). Lane l of idx holds nibble c = column l in bits
 * 0-3 (higher nibbles above it): vpermps reads c & 7 = m, and idx << 28 is c << 28 (the bits
 * above shifted out), so the xor removes the m << 28 again and leaves the sign bit 3 of c in
 * bit 31: the result is bits(T[m] * scale) with the nibble's sign, as e2m1_scaled. */
INLINE AVX2_FN __m256 decode8(const uint8_t *p, __m256 tabx, __m256i shifts) {
  int32_t v;
  memcpy(&v, p, 4);
  __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(v), shifts);
  __m256 mag = _mm256_permutevar8x32_ps(tabx, idx);
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* decode8 on AVX-512VL: lane l's nibble (bits 0-3 after the shift; vpermt2ps reads only them)
 * picks g_tab16[s][c], whose entries 0-7 are in lo and 8-15 in hi. */
INLINE AVX512_FN __m256 decode8_512(const uint8_t *p, __m256 lo, __m256 hi, __m256i shifts) {
  int32_t v;
  memcpy(&v, p, 4);
  __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(v), shifts);
  return _mm256_permutex2var_ps(lo, idx, hi);
}

/* rb activation rows x wb weight rows, every accumulator in a register (rb * wb <= 8; both
 * are compile-time constants at each call site of the switch below). Shapes used, measured
 * best on Zen 4 for K = 3584 (fewer accumulators leave the FMA latency exposed, more spill):
 * 1 x 4 for one row, 2 x 2 and 3-4 x 2 for small batches, up to 8 x 1 above. pf: bytes from a
 * weight row to the same position of the row the next tile starts with (MX_NR rows on);
 * prefetching past the matrix's end is harmless (a hint never faults). MICRO_BODY is the
 * body of both ISAs' micro-kernels: TABLE(s) declares the group's table of scale byte s, and
 * DECODE(p) gives the eight weights of the packed bytes at p. */
#define MICRO_BODY(TABLE, DECODE)                                                              \
  __m256 acc[8][4];                                                                            \
  for (int i = 0; i < rb; i++)                                                                 \
    for (int j = 0; j < wb; j++) acc[i][j] = _mm256_setzero_ps();                              \
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);                       \
  int64_t G = K / MX_GROUP;                                                                    \
  for (int64_t g = 0; g < G; g++) {                                                            \
    const float *xg = x + g * MX_GROUP;                                                        \
    for (int j = 0; j < wb; j++) {                                                             \
      TABLE(sr[j][g]);                                                                         \
      const uint8_t *p = wr[j] + g * (MX_GROUP / 2);                                           \
      _mm_prefetch((const char *)(p + pf), _MM_HINT_T0);                                       \
      for (int q = 0; q < 4; q++) {                                                            \
        __m256 w = DECODE(p + 4 * q);                                                          \
        for (int i = 0; i < rb; i++)                                                           \
          acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + i * ldx + 8 * q), w, acc[i][j]);    \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  for (int i = 0; i < rb; i++)                                                                 \
    for (int j = 0; j < wb; j++) y[i * ldy + j] = reduce8(acc[i][j]);

#define TABLE_AVX2(s) __m256 tabx = _mm256_load_ps((const float *)g_tabx[s])
#define DECODE_AVX2(p) decode8(p, tabx, shifts)
#define TABLE_512(s)                                                                           \
  __m256 tlo = _mm256_load_ps(g_tab16[s]), thi = _mm256_load_ps(g_tab16[s] + 8)
#define DECODE_512(p) decode8_512(p, tlo, thi, shifts)

INLINE AVX2_FN void micro_avx2(const int rb, const int wb, const float *x, int64_t ldx,
                               const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                               int64_t pf, float *y, int64_t ldy) {
  MICRO_BODY(TABLE_AVX2, DECODE_AVX2)
}

INLINE AVX512_FN void micro_512(const int rb, const int wb, const float *x, int64_t ldx,
                                const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                                int64_t pf, float *y, int64_t ldy) {
  MICRO_BODY(TABLE_512, DECODE_512)
}

/* The switch over the micro-kernel shapes, one function per ISA: FN(rb, wb) runs that shape. */
#define MICRO_SWITCH(FN)                                                                       \
  switch (rb * 8 + wb) {                                                                       \
  case 1 * 8 + 1: FN(1, 1); break;                                                             \
  case 1 * 8 + 2: FN(1, 2); break;                                                             \
  case 1 * 8 + 3: FN(1, 3); break;                                                             \
  case 1 * 8 + 4: FN(1, 4); break;                                                             \
  case 2 * 8 + 1: FN(2, 1); break;                                                             \
  case 2 * 8 + 2: FN(2, 2); break;                                                             \
  case 3 * 8 + 1: FN(3, 1); break;                                                             \
  case 3 * 8 + 2: FN(3, 2); break;                                                             \
  case 4 * 8 + 1: FN(4, 1); break;                                                             \
  case 4 * 8 + 2: FN(4, 2); break;                                                             \
  case 5 * 8 + 1: FN(5, 1); break;                                                             \
  case 6 * 8 + 1: FN(6, 1); break;                                                             \
  case 7 * 8 + 1: FN(7, 1); break;                                                             \
  case 8 * 8 + 1: FN(8, 1); break;                                                             \
  default: assert(!"mxfp4 micro-kernel shape");                                                \
  }

#define MICRO2(rb, wb) micro_avx2(rb, wb, x, ldx, wr, sr, K, pf, y, ldy)
#define MICRO512(rb, wb) micro_512(rb, wb, x, ldx, wr, sr, K, pf, y, ldy)

static AVX2_FN void micro_dispatch(int rb, int wb, const float *x, int64_t ldx,
                                   const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                                   int64_t pf, float *y, int64_t ldy) {
  MICRO_SWITCH(MICRO2)
}

static AVX512_FN void micro_dispatch_512(int rb, int wb, const float *x, int64_t ldx,
                                         const uint8_t *const *wr, const uint8_t *const *sr,
                                         int64_t K, int64_t pf, float *y, int64_t ldy) {
  MICRO_SWITCH(MICRO512)
}
#undef MICRO2
#undef MICRO512
#undef MICRO
#endif

void df_k_linear_mxfp4_cols(const float *x, int64_t M, int64_t K, int64_t ldx,
                            const uint8_t *packed, const uint8_t *scale, int64_t scale_ld,
                            int64_t n0, int nr, float *y, int64_t ldy) {
  assert(nr >= 1 && nr <= MX_NR && K % MX_GROUP == 0);
  const uint8_t *wr[MX_NR], *sr[MX_NR];
  for (int j = 0; j < nr; j++) {
    wr[j] = packed + (n0 + j) * (K / 2);
    sr[j] = scale + (n0 + j) * scale_ld;
  }
#if DF_HAVE_X86
  df_isa isa = df_k_isa();
  if (isa >= DF_ISA_AVX2) {
    pthread_once(&g_tabx_once, tabx_init);
    int64_t pf = MX_NR * (K / 2);
    _mm_prefetch((const char *)(sr[0] + MX_NR * scale_ld), _MM_HINT_T0);
    for (int64_t m0 = 0; m0 < M; m0 += 8) {
      int rb = (int)(M - m0 < 8 ? M - m0 : 8), wmax = rb == 1 ? 4 : rb <= 4 ? 2 : 1;
      for (int j0 = 0; j0 < nr; j0 += wmax) {
        int wb = nr - j0 < wmax ? nr - j0 : wmax;
        if (isa >= DF_ISA_AVX512)
          micro_dispatch_512(rb, wb, x + m0 * ldx, ldx, wr + j0, sr + j0, K, pf,
                             y + m0 * ldy + j0, ldy);
        else
          micro_dispatch(rb, wb, x + m0 * ldx, ldx, wr + j0, sr + j0, K, pf, y + m0 * ldy + j0,
                         ldy);
      }
    }
    return;
  }
#endif
  for (int j = 0; j < nr; j++)
    for (int64_t m = 0; m < M; m++) y[m * ldy + j] = dot_row_scalar(x + m * ldx, wr[j], sr[j], K);
}

void df_k_linear_mxfp4(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *packed,
                       const uint8_t *scale, int64_t scale_ld, int64_t n0, int64_t N, float *y,
                       int64_t ldy) {
  assert(M >= 0 && K > 0 && K % MX_GROUP == 0 && N > 0 && n0 >= 0 && ldx >= K && ldy >= N);
  assert(scale_ld >= K / MX_GROUP);
  if (M == 0) return;
  bool par = M * N * K >= 65536;
  int64_t n_tiles = (N + MX_NR - 1) / MX_NR;
#pragma omp parallel for schedule(static) if (par) num_threads(df_k_max_threads())
  for (int64_t t = 0; t < n_tiles; t++) {
    int64_t j0 = t * MX_NR;
    int nr = (int)(N - j0 < MX_NR ? N - j0 : MX_NR);
    df_k_linear_mxfp4_cols(x, M, K, ldx, packed, scale, scale_ld, n0 + j0, nr, y + j0, ldy);
  }
}
