/* engine/kernels/kernels_mxfp4.c — linear over MXFP4 weights (E2M1 + E8M0 per 32); see kernels.h.
 *
 * Owns: the de-quantisation of MXFP4 weights inside the matmul (OCP Microscaling Formats (MX)
 * Specification v1.0, MXFP4; stored as compressed-tensors' "mxfp4-pack-quantized" packer
 * writes it: `weight_packed` U8 [N, K/2], low nibble = even column, and `weight_scale` U8
 * [N, K/32]; Kimi K3's routed experts, docs/K3.md §4), in an AVX-512 (VBMI) path, an AVX2
 * path and a scalar path that agree bit for bit. No widened copy of a weight exists: each
 * weight is decoded into a register and fed to a fused multiply-add.
 *
 * Order (kernels.h): each output is 32 chains, chain c = column c of every scale group, each
 * a fused multiply-add chain over the groups in order, folded as fold32 below. 32 chains, not
 * df_k_linear's 8 lanes, because one AVX-512 register then holds 16 chains of one output and
 * the 16 weights feeding it come from two shuffles (decode16_512); in the 8-lane order a
 * 512-bit register must hold two outputs and each eight weights cost three operations. On
 * Zen 5 one core decodes ~18 GB/s of packed bytes for one row this way, against ~10.5 in the
 * 8-lane order (docs/ENGINE.md).
 *
 * Decoding: the magnitude of a weight is the fp32 product T[c & 7] * 2^(s - 127), one IEEE
 * multiplication (exact whenever the value is representable: T has at most two significant
 * bits, so for s <= 252 every product is the value itself, subnormals down to 2^-128
 * included); the sign bit 3 of the nibble is then copied into bit 31, so code 8 gives -0.0.
 * The power of two is built from its bits: s << 23 for s >= 1, and 0x00400000 (2^-127, a
 * subnormal) for s = 0. The vector paths look the products up in tables made once per process
 * by the same multiplications (g_tabx, g_tab16), one table per scale byte, loaded once per 32
 * columns. Every path therefore sees identical weight values in the same chains, so they
 * agree bit for bit.
 *
 * Tiles: the unit shared among threads is 4 weight rows (df_k_linear_mxfp4_cols); inside it
 * the micro-kernels hold rb x wb outputs' chains in registers (AVX-512: rb <= 3 activation
 * rows x wb <= 4 weight rows, the group's activations loaded once for all wb; AVX2: rb * wb
 * <= 3), so each decoded vector feeds rb fused multiply-adds and a tile's packed bytes come
 * from memory once (later row blocks reread them from L1). While a tile runs, the same bytes
 * of the next tile (MX_NR rows further) are prefetched into L1: rows of an expert are short
 * (K / 2 bytes), so the hardware prefetcher alone leaves a decode waiting on memory at every
 * tile (measured: twice the bytes per second with the hint).
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
#define AVX512_FN __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512vbmi")))
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

/* The reduction of the 32 chains s[c] (c = column within its scale group; kernels.h):
 * r_l = s_l + s_(l+16), t_l = r_l + r_(l+8), then the 8-lane tree of df_k_linear. */
static float fold32(const float s[32]) {
  float t[8];
  for (int l = 0; l < 8; l++) t[l] = (s[l] + s[l + 16]) + (s[l + 8] + s[l + 24]);
  float a0 = t[0] + t[4], a1 = t[1] + t[5], a2 = t[2] + t[6], a3 = t[3] + t[7];
  return (a0 + a2) + (a1 + a3);
}

/* One output: weight row (wr, sr) against x in the 32-chain order. */
static float dot_row_scalar(const float *x, const uint8_t *wr, const uint8_t *sr, int64_t K) {
  float acc[32] = {0};
  for (int64_t g = 0; g < K / MX_GROUP; g++) {
    float sc = e8m0_f32(sr[g]);
    const uint8_t *p = wr + g * (MX_GROUP / 2);
    const float *xg = x + g * MX_GROUP;
    for (int i = 0; i < MX_GROUP / 2; i++) { /* byte i: columns 2i, 2i+1 of the group */
      acc[2 * i] = fmaf(xg[2 * i], e2m1_scaled(p[i] & 15u, sc), acc[2 * i]);
      acc[2 * i + 1] = fmaf(xg[2 * i + 1], e2m1_scaled((unsigned)p[i] >> 4, sc), acc[2 * i + 1]);
    }
  }
  return fold32(acc);
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
 * scale byte (8 KiB, L1-resident), so a group's table is one load (the AVX2 path).
 * g_tab16[s][c] = the signed weight of nibble c under scale byte s, e2m1_scaled(c,
 * e8m0_f32(s)) (16 KiB; the AVX-512 path). Filled once. */
static uint32_t g_tabx[256][8] __attribute__((aligned(32)));
static float g_tab16[256][16] __attribute__((aligned(64)));
static pthread_once_t g_tabx_once = PTHREAD_ONCE_INIT;
static bool g_vbmi;

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
  __builtin_cpu_init();
  g_vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
}

/* The eight weights of the four packed bytes at p (columns 8q .. 8q+7 of a group, lane l =
 * column 8q + l) under the group's table tabx[m] = bits(T[m] * scale) ^ (m << 28). Lane l of
 * idx holds nibble c = column l in bits 0-3 (higher nibbles above it): vpermps reads c & 7 =
 * m, and idx << 28 is c << 28 (the bits above shifted out), so the xor removes the m << 28
 * again and leaves the sign bit 3 of c in bit 31: the result is bits(T[m] * scale) with the
 * nibble's sign, as e2m1_scaled. */
INLINE AVX2_FN __m256 decode8(const uint8_t *p, __m256 tabx, __m256i shifts) {
  int32_t v;
  memcpy(&v, p, 4);
  __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(v), shifts);
  __m256 mag = _mm256_permutevar8x32_ps(tabx, idx);
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* rb activation rows x wb weight rows; each output's 32 chains live in four registers (q =
 * 0..3: chains 8q .. 8q+7), rb * wb <= 3 so the 12 accumulators stay in registers (both are
 * compile-time constants at each call site of the switch below). pf: bytes from a weight row
 * to the same position of the row the next tile starts with (MX_NR rows on); prefetching past
 * the matrix's end is harmless (a hint never faults). */
INLINE AVX2_FN void micro_avx2(const int rb, const int wb, const float *x, int64_t ldx,
                               const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                               int64_t pf, float *y, int64_t ldy) {
  __m256 acc[3][3][4];
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < wb; j++)
      for (int q = 0; q < 4; q++) acc[i][j][q] = _mm256_setzero_ps();
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  int64_t G = K / MX_GROUP;
  for (int64_t g = 0; g < G; g++) {
    const float *xg = x + g * MX_GROUP;
    for (int j = 0; j < wb; j++) {
      __m256 tabx = _mm256_load_ps((const float *)g_tabx[sr[j][g]]);
      const uint8_t *p = wr[j] + g * (MX_GROUP / 2);
      _mm_prefetch((const char *)(p + pf), _MM_HINT_T0);
      for (int q = 0; q < 4; q++) {
        __m256 w = decode8(p + 4 * q, tabx, shifts);
        for (int i = 0; i < rb; i++)
          acc[i][j][q] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + i * ldx + 8 * q), w, acc[i][j][q]);
      }
    }
  }
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < wb; j++) /* fold32: (chains l + l+16) + (chains l+8 + l+24) */
      y[i * ldy + j] = reduce8(_mm256_add_ps(_mm256_add_ps(acc[i][j][0], acc[i][j][2]),
                                             _mm256_add_ps(acc[i][j][1], acc[i][j][3])));
}

/* ---- AVX-512 (VBMI) --------------------------------------------------------------------
 * One 512-bit register holds 16 chains: a group's columns 0-15 in Z0, 16-31 in Z1. The 16
 * weights of eight packed bytes come from one vpmultishiftqb (the bytes broadcast to every
 * quadword; dword lane l takes the 8 bits from bit 4l, so its bits 0-3 are column l's
 * nibble) and one vpermps into the group's 16-entry signed table g_tab16[s] (vpermps reads
 * only the index's low four bits): two shuffles per 16 weights, where the AVX2 path needs
 * eight operations. Chains, lanes and the fold are the AVX2 path's (Z0 = its q 0,1; Z1 = q
 * 2,3), so the two agree bit for bit. rb <= 3, wb <= 4: 24 accumulators and the group's 2 rb
 * activation registers. A machine with AVX-512F but not VBMI runs the AVX2 path. */
/* vpmultishiftqb control: byte b of dword lane l takes the 8 bits from bit (4l + 8b) mod 64
 * of its quadword (only byte 0 is used: bits 0-3 of lane l = the nibble of column l). */
static const uint8_t k_shift_ctl[64] __attribute__((aligned(64))) = {
     0,  8, 16, 24,    4, 12, 20, 28,    8, 16, 24, 32,   12, 20, 28, 36,
    16, 24, 32, 40,   20, 28, 36, 44,   24, 32, 40, 48,   28, 36, 44, 52,
    32, 40, 48, 56,   36, 44, 52, 60,   40, 48, 56,  0,   44, 52, 60,  4,
    48, 56,  0,  8,   52, 60,  4, 12,   56,  0,  8, 16,   60,  4, 12, 20,
};

INLINE AVX512_FN __m512 decode16_512(const uint8_t *p, __m512 tab, __m512i ctl) {
  int64_t v;
  memcpy(&v, p, 8);
  return _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(ctl, _mm512_set1_epi64(v)), tab);
}

INLINE AVX512_FN void micro_512(const int rb, const int wb, const float *x, int64_t ldx,
                                const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                                int64_t pf, float *y, int64_t ldy) {
  __m512 acc[3][4][2];
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < wb; j++) acc[i][j][0] = acc[i][j][1] = _mm512_setzero_ps();
  const __m512i ctl = _mm512_load_si512(k_shift_ctl);
  int64_t G = K / MX_GROUP;
  for (int64_t g = 0; g < G; g++) {
    const float *xg = x + g * MX_GROUP;
    __m512 xr[3][2]; /* the group's activations, loaded once for all wb weight rows */
    for (int i = 0; i < rb; i++)
      for (int h = 0; h < 2; h++) xr[i][h] = _mm512_loadu_ps(xg + i * ldx + 16 * h);
    for (int j = 0; j < wb; j++) {
      __m512 tab = _mm512_load_ps(g_tab16[sr[j][g]]);
      const uint8_t *p = wr[j] + g * (MX_GROUP / 2);
      _mm_prefetch((const char *)(p + pf), _MM_HINT_T0);
      for (int h = 0; h < 2; h++) {
        __m512 w = decode16_512(p + 8 * h, tab, ctl);
        for (int i = 0; i < rb; i++) acc[i][j][h] = _mm512_fmadd_ps(xr[i][h], w, acc[i][j][h]);
      }
    }
  }
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < wb; j++) {
      __m512 r = _mm512_add_ps(acc[i][j][0], acc[i][j][1]); /* lane l: chains l + l+16 */
      __m256 lo = _mm512_castps512_ps256(r);
      __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1));
      y[i * ldy + j] = reduce8(_mm256_add_ps(lo, hi));
    }
}

/* The switch over the micro-kernel shapes, one function per ISA: FN(rb, wb) runs that shape. */
static AVX2_FN void micro_dispatch(int rb, int wb, const float *x, int64_t ldx,
                                   const uint8_t *const *wr, const uint8_t *const *sr, int64_t K,
                                   int64_t pf, float *y, int64_t ldy) {
#define MICRO2(r, w) micro_avx2(r, w, x, ldx, wr, sr, K, pf, y, ldy)
  switch (rb * 8 + wb) {
  case 1 * 8 + 1: MICRO2(1, 1); break;
  case 1 * 8 + 2: MICRO2(1, 2); break;
  case 1 * 8 + 3: MICRO2(1, 3); break;
  case 2 * 8 + 1: MICRO2(2, 1); break;
  case 3 * 8 + 1: MICRO2(3, 1); break;
  default: assert(!"mxfp4 micro-kernel shape");
  }
#undef MICRO2
}

static AVX512_FN void micro_dispatch_512(int rb, int wb, const float *x, int64_t ldx,
                                         const uint8_t *const *wr, const uint8_t *const *sr,
                                         int64_t K, int64_t pf, float *y, int64_t ldy) {
#define MICRO512(r, w) micro_512(r, w, x, ldx, wr, sr, K, pf, y, ldy)
  switch (rb * 8 + wb) {
  case 1 * 8 + 1: MICRO512(1, 1); break;
  case 1 * 8 + 2: MICRO512(1, 2); break;
  case 1 * 8 + 3: MICRO512(1, 3); break;
  case 1 * 8 + 4: MICRO512(1, 4); break;
  case 2 * 8 + 1: MICRO512(2, 1); break;
  case 2 * 8 + 2: MICRO512(2, 2); break;
  case 2 * 8 + 3: MICRO512(2, 3); break;
  case 2 * 8 + 4: MICRO512(2, 4); break;
  case 3 * 8 + 1: MICRO512(3, 1); break;
  case 3 * 8 + 2: MICRO512(3, 2); break;
  case 3 * 8 + 3: MICRO512(3, 3); break;
  case 3 * 8 + 4: MICRO512(3, 4); break;
  default: assert(!"mxfp4 micro-kernel shape");
  }
#undef MICRO512
}
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
    bool z = isa >= DF_ISA_AVX512 && g_vbmi;
    const int rmax = 3;
    for (int64_t m0 = 0; m0 < M; m0 += rmax) {
      int rb = (int)(M - m0 < rmax ? M - m0 : rmax);
      int wmax = z ? 4 : rb == 1 ? 3 : 1;
      for (int j0 = 0; j0 < nr; j0 += wmax) {
        int wb = nr - j0 < wmax ? nr - j0 : wmax;
        if (z)
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
