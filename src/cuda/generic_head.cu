// Every head type on both routes: one thread per row, rows in warp tiles of 32, groups of the row
// staged through a per-warp ring of shared-memory stages with 16-byte cp.async. Each thread runs
// the reference's float order of src/quant/vec_dot.cpp for its row exactly (eight fma lanes per
// token, the per-type extra lanes, the same final reduction), so the bytes equal the scalar
// backend's. Tokens go in passes of kGenericTokens (each pass reads the weights once): this is the
// path for the heads and routes the tensor-core kernel does not cover, and the reference it is
// measured against.
//
// With a llama.cpp order (GenericOrder, Route::llamacpp) the same walk computes that path's
// roundings (src/quant/llamacpp_route.cpp): the integer sums of a super-block are exact in any
// order, so only where floats round differs.
#include <cuda_runtime.h>

#include <memory>

#include "cuda/bf16_pairs.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/per_device.hpp"
#include "cuda/device_common.cuh"

namespace lmhead::cuda {
namespace {

constexpr int kTC = kGenericTokens;
constexpr int kWarps = 4;
constexpr int kStages = 3;

template <TensorType T> struct Geometry;
template <> struct Geometry<TensorType::Q4_K> { static constexpr int GE = 256, GB = 144; };
template <> struct Geometry<TensorType::Q5_K> { static constexpr int GE = 256, GB = 176; };
template <> struct Geometry<TensorType::Q6_K> { static constexpr int GE = 256, GB = 208; };
template <> struct Geometry<TensorType::Q8_0> { static constexpr int GE = 256, GB = 272; };
template <> struct Geometry<TensorType::F16> { static constexpr int GE = 128, GB = 256; };
template <> struct Geometry<TensorType::BF16> { static constexpr int GE = 128, GB = 256; };
template <> struct Geometry<TensorType::F32> { static constexpr int GE = 64, GB = 256; };

template <TensorType T> constexpr int pitch_of() { return (Geometry<T>::GB / 16) % 2 == 1 ? Geometry<T>::GB : Geometry<T>::GB + 16; }
template <TensorType T> constexpr int stage_bytes() { return 32 * pitch_of<T>(); }

__device__ __forceinline__ uint4 ldg128(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// Packed levels of one 256-element group: lv[j][k] holds elements 32j + 4k .. 32j + 4k + 3.
// Q6_K's are the unsigned u = q + 32 (0..63): its q8 route takes the offset off per lane from the
// bsums (numerics.md §5b), its f32 route per element.
template <TensorType T>
__device__ __forceinline__ void group_levels(const uint8_t* b, uint32_t (&lv)[8][8]) {
  if constexpr (T == TensorType::Q5_K || T == TensorType::Q4_K) {
    const int qs_off = T == TensorType::Q5_K ? 48 : 16;
    uint4 qs[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[i] = lds128(b + qs_off + 16 * i);
    uint4 qh[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if constexpr (T == TensorType::Q5_K) { qh[0] = lds128(b + 16); qh[1] = lds128(b + 32); }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int w = 8 * (j >> 1) + k;
        uint32_t v = (word_of(qs[w >> 2], w & 3) >> (4 * (j & 1))) & 0x0F0F0F0Fu;
        if constexpr (T == TensorType::Q5_K) v |= ((word_of(qh[k >> 2], k & 3) >> j) & 0x01010101u) << 4;
        lv[j][k] = v;
      }
  } else if constexpr (T == TensorType::Q6_K) {
    uint4 ql[8], qh[4];
#pragma unroll
    for (int i = 0; i < 8; ++i) ql[i] = lds128(b + 16 * i);
#pragma unroll
    for (int i = 0; i < 4; ++i) qh[i] = lds128(b + 128 + 16 * i);
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int n = c >> 2, cq = c & 3;
        const int wl = 16 * n + 8 * (cq & 1) + k, wh = 8 * n + k;
        const uint32_t lo = (word_of(ql[wl >> 2], wl & 3) >> (4 * (cq >> 1))) & 0x0F0F0F0Fu;
        const uint32_t hi = ((word_of(qh[wh >> 2], wh & 3) >> (2 * cq)) & 0x03030303u) << 4;
        lv[c][k] = lo | hi;
      }
  } else if constexpr (T == TensorType::Q8_0) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint4 v = lds128(b + 16 + 16 * i);
      lv[i >> 1][4 * (i & 1) + 0] = v.x;
      lv[i >> 1][4 * (i & 1) + 1] = v.y;
      lv[i >> 1][4 * (i & 1) + 2] = v.z;
      lv[i >> 1][4 * (i & 1) + 3] = v.w;
    }
  }
}

// _mm512_reduce_add_ps as GCC expands it (llamacpp_route.cpp's reduce16).
__device__ __forceinline__ float reduce16(const float* a) {
  float h8[8], h4[4];
#pragma unroll
  for (int i = 0; i < 8; ++i) h8[i] = __fadd_rn(a[i + 8], a[i]);
#pragma unroll
  for (int i = 0; i < 4; ++i) h4[i] = __fadd_rn(h8[i + 4], h8[i]);
  return __fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3]));
}

// One step of VDPBF16PS in one lane as Zen 4 rounds it (quant::vdpbf16ps_step, numerics.md "The
// llama.cpp route"): one fused multiply-add, subnormal inputs read as zeros of their sign, a result
// below FLT_MIN after rounding to 24 bits flushed to a zero of its sign.
__device__ __noinline__ float dpbf16_step_exact(float acc, float w, float a) {
  constexpr float kFltMin = 0x1p-126f;
  auto daz = [](float x) { return fabsf(x) < kFltMin ? copysignf(0.0f, x) : x; };
  acc = daz(acc);
  w = daz(w);
  a = daz(a);
  const float r = __fmaf_rn(w, a, acc);
  const float m = fabsf(r);
  if (m < kFltMin) return copysignf(0.0f, r);
  // Rounded up to FLT_MIN only at subnormal precision: the exact value (w * a is exact in double,
  // and so is the sum this close to FLT_MIN) decides.
  if (m == kFltMin && fabs(__dadd_rn(double(acc), __dmul_rn(double(w), double(a)))) < 0x1p-126 - 0x1p-151)
    return copysignf(0.0f, r);
  return r;
}

// The same, with the flush rules' cases taken out of line: acc is 0 or an earlier step's result,
// never subnormal, so with w and a zero or normal and |r| above FLT_MIN the fused multiply-add is
// the answer.
__device__ __forceinline__ float dpbf16_step(float acc, float w, float a) {
  constexpr float kFltMin = 0x1p-126f;
  const float r = __fmaf_rn(w, a, acc);
  const bool plain = fabsf(r) > kFltMin && (w == 0.0f || fabsf(w) >= kFltMin) && (a == 0.0f || fabsf(a) >= kFltMin);
  return plain ? r : dpbf16_step_exact(acc, w, a);
}

// BF16 pairs where every row and token of the warp passed the screen (bf16_pairs.hpp): the steps
// are plain fused multiply-adds, the pair's odd element first. NT tokens of the pass's TCP; the
// group's GE elements (FULL) or its first nend, a multiple of 2 * NL. Lane of group element e:
// (e % (2 * NL)) / 2 (whole groups hold whole blocks of 2 * NL). Weights and activations go in
// whole 16-byte chunks (8 elements, 4 pairs).
template <int NT, bool FULL, int GE, int TCP, int NL>
__device__ __forceinline__ void bf16_pairs_fma(float (&acc)[TCP][NL], const uint8_t* b, const float* xb, size_t f_pitch,
                                               int nend) {
  constexpr int QB = 2 * NL;
  const float* xt[NT];
#pragma unroll
  for (int tj = 0; tj < NT; ++tj) xt[tj] = xb + size_t(tj) * f_pitch;
#pragma unroll
  for (int c = 0; c < GE / 8; ++c) {
    if constexpr (!FULL) {
      if (8 * c % QB == 0 && 8 * c >= nend) break;
    }
    const uint4 v = lds128(b + 16 * c);
    float w[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[2 * k] = __uint_as_float(word_of(v, k) << 16);
      w[2 * k + 1] = __uint_as_float(word_of(v, k) & 0xFFFF0000u);
    }
#pragma unroll
    for (int tj = 0; tj < NT; ++tj) {
      const float4 x0 = __ldg(reinterpret_cast<const float4*>(xt[tj] + 8 * c));
      const float4 x1 = __ldg(reinterpret_cast<const float4*>(xt[tj] + 8 * c + 4));
      const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int k = 0; k < 8; k += 2) {
        float& a = acc[tj][((8 * c + k) & (QB - 1)) >> 1];
        a = __fmaf_rn(w[k], x[k], __fmaf_rn(w[k + 1], x[k + 1], a));
      }
    }
  }
}

template <TensorType T, bool FR, GenericOrder O, int NW, int S>
__global__ void __launch_bounds__(NW * 32, 2) generic_head_kernel(const HeadParams p) {
  constexpr int GE = Geometry<T>::GE, GB = Geometry<T>::GB, PITCH = pitch_of<T>();
  constexpr int CH = GB / 16, STAGE = stage_bytes<T>();
  constexpr bool kIntDot = !FR && (T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K ||
                                   T == TensorType::Q8_0);
  constexpr bool kTiled = O == GenericOrder::llamacpp_tiled, kRepack = O == GenericOrder::llamacpp_repack;
  constexpr bool kVecFloat = O == GenericOrder::llamacpp_float_vec, kSgemmFloat = O == GenericOrder::llamacpp_float_sgemm;
  static_assert(!(kTiled || kRepack) || (kIntDot && T != TensorType::Q8_0), "llama.cpp's K-quant orders");
  static_assert(!kRepack || T == TensorType::Q4_K, "only Q4_K is repacked");
  static_assert(!(kVecFloat || kSgemmFloat) || (FR && (T == TensorType::F16 || T == TensorType::BF16 ||
                                                      T == TensorType::F32)), "llama.cpp's float orders");
  // BF16 heads: vdpbf16ps takes pairs of elements (the odd one first), one lane per pair.
  constexpr bool kPairs = (kVecFloat || kSgemmFloat) && T == TensorType::BF16;
  // vec_dot keeps 64 lanes per output (four 16-lane accumulators; BF16: two of pairs): one token
  // per launch.
  constexpr int TCP = kVecFloat ? 1 : kTC;
  constexpr int NL = kVecFloat ? (kPairs ? 32 : 64) : kSgemmFloat ? 16 : 8;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  __shared__ int s_item_tile[NW][S];
  __shared__ int s_item_g[NW][S];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int V = p.vocab, G = p.groups, H = p.hidden;
  const int ntiles = (V + 31) / 32;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = smem + warp * (S * STAGE);
  const size_t f_pitch = size_t(H + 255) / 256 * 256;

  int itile = blockIdx.x * NW + warp, ig = 0, issued = 0;
  int next_tile = 0;  // lane 0: the tile after itile, requested when itile's first group is issued
  auto issue = [&]() {
    if (ig == 0 && itile < ntiles && lane == 0) next_tile = int(atomicAdd(p.tile_counter, 1u)) + total_warps;
    const int slot = issued % S;
    if (lane == 0) {
      s_item_tile[warp][slot] = itile < ntiles ? itile : -1;
      s_item_g[warp][slot] = ig;
    }
    if (itile < ntiles) {
      uint8_t* dst = stages + slot * STAGE;
      if ((itile + 1) * 32 <= V) {
        // 32-bit offsets from the tile's first row: one 64-bit add per copy.
        const uint8_t* base = p.weights + int64_t(itile) * 32 * p.row_stride + ig * GB;
        const int stride = int(p.row_stride);
#pragma unroll
        for (int i = 0; i < CH; ++i) {
          const int c = lane + 32 * i;
          const int row = c / CH, piece = c - row * CH;
          cp_async16(dst + row * PITCH + piece * 16, base + (row * stride + piece * 16));
        }
      } else {  // the last, partial tile: rows past the vocabulary repeat the last row
        const int64_t r0 = int64_t(itile) * 32;
        for (int c = lane; c < 32 * CH; c += 32) {
          const int row = c / CH, piece = c - row * CH;
          int64_t r = r0 + row;
          if (r >= V) r = V - 1;
          cp_async16(dst + row * PITCH + piece * 16, p.weights + r * p.row_stride + int64_t(ig) * GB + piece * 16);
        }
      }
      if (++ig == G) {
        ig = 0;
        itile = __shfl_sync(0xffffffffu, next_tile, 0);
      }
    }
    cp_async_commit();
    ++issued;
  };
  for (int s = 0; s < S - 1; ++s) issue();
  pdl_wait();

  // BF16 pairs: bit tj set when token tj has an activation the screen turns away (bf16_pairs.hpp)
  // among the elements taken in pairs; its rows then take the exact steps throughout.
  uint32_t act_bad = 0;
  if constexpr (kPairs) {
    const int np = kVecFloat ? H / 64 * 64 : H;
#pragma unroll
    for (int tj = 0; tj < TCP; ++tj) {
      if (tj >= p.tc) break;
      const float* x = p.act_f + size_t(p.t0 + tj) * f_pitch;
      bool bad = false;
      for (int e = 4 * lane; e + 3 < np; e += 128) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(x + e));
        bad |= bf16_pair_act_screened_out(__float_as_uint(v.x)) | bf16_pair_act_screened_out(__float_as_uint(v.y)) |
               bf16_pair_act_screened_out(__float_as_uint(v.z)) | bf16_pair_act_screened_out(__float_as_uint(v.w));
      }
      for (int e = np / 4 * 4 + lane; e < np; e += 32) bad |= bf16_pair_act_screened_out(__float_as_uint(__ldg(x + e)));
      if (__any_sync(0xffffffffu, bad)) act_bad |= 1u << tj;
    }
  }
  uint32_t exact_rt = 0;  // BF16 pairs: bit tj set once this row's token tj has taken the exact steps

  float acc[TCP][NL];
  float extra[TCP][4];
  double tail[TCP];  // vec_dot (F16, BF16): the running total from the row's tail on, in double
  float ftail[TCP];  // vec_dot (F32): the same in f32
  PartialBest best[TCP];
#pragma unroll
  for (int j = 0; j < TCP; ++j) {
    best[j] = best_empty();
#pragma unroll
    for (int k = 0; k < NL; ++k) acc[j][k] = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) extra[j][k] = 0.0f;
    tail[j] = 0.0;
    ftail[j] = 0.0f;
  }

  int slot = 0;
  for (;;) {
    issue();
    cp_async_wait<S - 1>();
    __syncwarp();
    const int tile = s_item_tile[warp][slot];
    const int gi = s_item_g[warp][slot];
    if (tile < 0) break;
    const int row = tile * 32 + lane;
    const int64_t row_c = row < V ? row : V - 1;
    const uint8_t* b = stages + slot * STAGE + lane * PITCH;

    if constexpr (kIntDot) {
      uint32_t lv[8][8];
      group_levels<T>(b, lv);
      const uint4 h = lds128(b);
      KScales ks{};
      float wd = 0.0f, wdmin = 0.0f;
      if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
        ks = k_scales(h);
        wd = f16_exact(h.x);
        wdmin = f16_exact(h.x >> 16);
      } else if constexpr (T == TensorType::Q6_K) {
        wd = f16_exact(__ldg(p.aux + row_c * G + gi));
      }
      const int nblk = T == TensorType::Q8_0 ? min(8, (H - gi * 256) / 32) : 8;
#pragma unroll
      for (int tj = 0; tj < TCP; ++tj) {
        if (tj >= p.tc) break;
        const int t = p.t0 + tj;
        const int8_t* act = p.act_qs + (size_t(gi) * kMaxTokens + t) * kActPitch;
        uint32_t aw[64];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const uint4 v = ldg128(act + 16 * i);
          aw[4 * i] = v.x; aw[4 * i + 1] = v.y; aw[4 * i + 2] = v.z; aw[4 * i + 3] = v.w;
        }
        if constexpr ((kTiled || kRepack) && (T == TensorType::Q4_K || T == TensorType::Q5_K)) {
          // Exact integers per pair of sub-blocks (j = 2m, 2m + 1): the scaled dots and the mins
          // times the sub-block sums.
          const float ad = __ldg(p.act_d + size_t(gi) * kMaxTokens + t);
          const uint4 bs = ldg128(p.act_bsp + (size_t(gi) * kMaxTokens + t) * 4);
          const int imin[4] = {__dp2a_lo(int(bs.x), int(ks.m_lo), 0), __dp2a_hi(int(bs.y), int(ks.m_lo), 0),
                               __dp2a_lo(int(bs.z), int(ks.m_hi), 0), __dp2a_hi(int(bs.w), int(ks.m_hi), 0)};
          int isum[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            int s = 0;
#pragma unroll
            for (int j = 2 * m; j < 2 * m + 2; ++j) {
              int raw = 0;
#pragma unroll
              for (int k = 0; k < 8; ++k) raw = __dp4a(int(lv[j][k]), int(aw[8 * j + k]), raw);
              s += int(sc_of(ks, j)) * raw;
            }
            isum[m] = s;
          }
          const int s1 = isum[0] + isum[1] + isum[2] + isum[3], s2 = imin[0] + imin[1] + imin[2] + imin[3];
          if constexpr (kTiled) {
            // Per slab: r = dmin * s2 taken off float(s1) * d by one fused multiply-add, then
            // out = fma(r, y.d, out) (GCC contracts the source's add of a product).
            const float r = __fmaf_rn(-wdmin, __int2float_rn(s2), __fmul_rn(__int2float_rn(s1), wd));
            acc[tj][0] = __fmaf_rn(r, ad, acc[tj][0]);
          } else {
            // Two accumulators by fma with d * y.d and dmin * y.d rounded first; the gemm (whole
            // groups of 4 tokens) adds per pair of sub-blocks, the gemv once per super-block.
            const float dd = __fmul_rn(wd, ad), dm = __fmul_rn(wdmin, ad);
            if (t < p.T - p.T % 4) {
#pragma unroll
              for (int m = 0; m < 4; ++m) {
                acc[tj][0] = __fmaf_rn(__int2float_rn(isum[m]), dd, acc[tj][0]);
                acc[tj][1] = __fmaf_rn(__int2float_rn(imin[m]), dm, acc[tj][1]);
              }
            } else {
              acc[tj][0] = __fmaf_rn(__int2float_rn(s1), dd, acc[tj][0]);
              acc[tj][1] = __fmaf_rn(__int2float_rn(s2), dm, acc[tj][1]);
            }
          }
        } else if constexpr (kTiled && T == TensorType::Q6_K) {
          // The signed levels' exact dot: the unsigned codes' minus 32 times each 16-element sum.
          const float ad = __ldg(p.act_d + size_t(gi) * kMaxTokens + t);
          const uint4 sc4 = lds128(b + 192);
          auto scale = [&](int si) { return int(int8_t(byte_of(word_of(sc4, si >> 2), si & 3))); };
          int s1 = 0;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
#pragma unroll
            for (int c = 0; c < 8; ++c) s1 += scale(2 * c + (k >= 4 ? 1 : 0)) * __dp4a(int(lv[c][k]), int(aw[8 * c + k]), 0);
            int bs0 = 0, bs1 = 0;
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              bs0 = __dp4a(int(aw[8 * k + w]), 0x01010101, bs0);
              bs1 = __dp4a(int(aw[8 * k + 4 + w]), 0x01010101, bs1);
            }
            s1 -= 32 * (scale(2 * k) * bs0 + scale(2 * k + 1) * bs1);
          }
          acc[tj][0] = __fmaf_rn(__fmul_rn(__int2float_rn(s1), wd), ad, acc[tj][0]);
        } else if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
          // dq = y.d * d; dm = (-y.d) * dmin; the mins' integer sums from the sub-block sums.
          const float ad = __ldg(p.act_d + size_t(gi) * kMaxTokens + t);
          const float dq = __fmul_rn(ad, wd), dm = __fmul_rn(-ad, wdmin);
          const uint4 bs = ldg128(p.act_bsp + (size_t(gi) * kMaxTokens + t) * 4);
          const int i0 = __dp2a_lo(int(bs.x), int(ks.m_lo), 0), i1 = __dp2a_hi(int(bs.y), int(ks.m_lo), 0);
          const int i2 = __dp2a_lo(int(bs.z), int(ks.m_hi), 0), i3 = __dp2a_hi(int(bs.w), int(ks.m_hi), 0);
          if constexpr (T == TensorType::Q5_K) {
            extra[tj][0] = __fmaf_rn(dm, __int2float_rn(i0 + i1 + i2 + i3), extra[tj][0]);
          } else {  // Q4_K: four mins lanes, t' = sub-blocks 2t', 2t'+1
            extra[tj][0] = __fmaf_rn(dm, __int2float_rn(i0), extra[tj][0]);
            extra[tj][1] = __fmaf_rn(dm, __int2float_rn(i1), extra[tj][1]);
            extra[tj][2] = __fmaf_rn(dm, __int2float_rn(i2), extra[tj][2]);
            extra[tj][3] = __fmaf_rn(dm, __int2float_rn(i3), extra[tj][3]);
          }
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            int isum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) isum += int(sc_of(ks, j)) * __dp4a(int(lv[j][k]), int(aw[8 * j + k]), 0);
            acc[tj][k] = __fmaf_rn(dq, __int2float_rn(isum), acc[tj][k]);
          }
        } else if constexpr (T == TensorType::Q6_K) {
          const float ad = __ldg(p.act_d + size_t(gi) * kMaxTokens + t);
          const float dd = __fmul_rn(ad, wd);
          const uint4 sc4 = lds128(b + 192);
          auto scale = [&](int si) { return int(int8_t(byte_of(word_of(sc4, si >> 2), si & 3))); };
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            int isum = 0;
#pragma unroll
            for (int c = 0; c < 8; ++c) isum += scale(2 * c + (k >= 4 ? 1 : 0)) * __dp4a(int(lv[c][k]), int(aw[8 * c + k]), 0);
            // Lane k's share of the offset: 16-element groups 2k and 2k+1 (words 8k .. 8k+7),
            // whatever elements the lane itself holds; that share sets the lane's rounding.
            int bs0 = 0, bs1 = 0;
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              bs0 = __dp4a(int(aw[8 * k + w]), 0x01010101, bs0);
              bs1 = __dp4a(int(aw[8 * k + 4 + w]), 0x01010101, bs1);
            }
            isum -= 32 * (scale(2 * k) * bs0 + scale(2 * k + 1) * bs1);
            acc[tj][k] = __fmaf_rn(dd, __int2float_rn(isum), acc[tj][k]);
          }
        } else {  // Q8_0: eight blocks of 32 per group
#pragma unroll
          for (int bi = 0; bi < 8; ++bi) {
            if (bi >= nblk) break;
            const float ad = __ldg(p.act_d + (size_t(gi) * 8 + bi) * kMaxTokens + t);
            const float dprod = __fmul_rn(f16_exact(word_of(h, bi >> 1) >> (16 * (bi & 1))), ad);
#pragma unroll
            for (int k = 0; k < 8; ++k)
              acc[tj][k] = __fmaf_rn(dprod, __int2float_rn(__dp4a(int(lv[bi][k]), int(aw[8 * bi + k]), 0)), acc[tj][k]);
          }
        }
      }
    } else {
      // Float lanes: element e of the row feeds lane e % 8, in element order (the f32 route
      // dequantizes with §3's roundings first; F16/BF16/F32 heads decode their values).
      const int e0 = gi * GE;
      const int ne = min(GE, H - e0);
      const float* xb = p.act_f + size_t(p.t0) * f_pitch + e0;
      // Lanes: e % 8 (vec_dot route), e % 16 (sgemm), e % 64 (vec_dot: accumulator (e % 64) / 16,
      // lane e % 16); groups are 64 or 128 elements, so the group-local e has the row's residues.
      auto feed = [&](int e, float w) {
#pragma unroll
        for (int tj = 0; tj < TCP; ++tj) {
          if (tj >= p.tc) break;
          const float x = __ldg(xb + size_t(tj) * f_pitch + e);
          acc[tj][e & (NL - 1)] = __fmaf_rn(w, x, acc[tj][e & (NL - 1)]);
        }
      };
      if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K || T == TensorType::Q8_0) {
        uint32_t lv[8][8];
        group_levels<T>(b, lv);
        const uint4 h = lds128(b);
        if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
          const KScales ks = k_scales(h);
          const float d = f16_exact(h.x), dmin = f16_exact(h.x >> 16);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float scale = __fmul_rn(d, float(sc_of(ks, j)));
            const float mn = __fmul_rn(dmin, float(m_of(ks, j)));
#pragma unroll
            for (int k = 0; k < 8; ++k)
#pragma unroll
              for (int bb = 0; bb < 4; ++bb)
                feed(32 * j + 4 * k + bb, __fsub_rn(__fmul_rn(scale, float(byte_of(lv[j][k], bb))), mn));
          }
        } else if constexpr (T == TensorType::Q6_K) {
          const float d = f16_exact(__ldg(p.aux + row_c * G + gi));
          const uint4 sc4 = lds128(b + 192);
#pragma unroll
          for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const int si = 2 * c + (k >= 4 ? 1 : 0);
              const float scale = __fmul_rn(d, float(int(int8_t(byte_of(word_of(sc4, si >> 2), si & 3)))));
#pragma unroll
              for (int bb = 0; bb < 4; ++bb)
                feed(32 * c + 4 * k + bb, __fmul_rn(scale, float(int(byte_of(lv[c][k], bb)) - 32)));
            }
        } else {  // Q8_0
          const int nblk = min(8, ne / 32);
#pragma unroll
          for (int bi = 0; bi < 8; ++bi) {
            if (bi >= nblk) break;
            const float d = f16_exact(word_of(h, bi >> 1) >> (16 * (bi & 1)));
#pragma unroll
            for (int k = 0; k < 8; ++k)
#pragma unroll
              for (int bb = 0; bb < 4; ++bb) feed(32 * bi + 4 * k + bb, __fmul_rn(d, float(int(int8_t(byte_of(lv[bi][k], bb))))));
          }
        }
      } else {
        // Unrolled, so that each element's lane is a register, not a local-memory index.
        constexpr int EPC = T == TensorType::F32 ? 4 : 8;  // elements per 16-byte chunk
        auto weight = [](const uint4& v, int k) -> float {
          if constexpr (T == TensorType::F32) return __uint_as_float(word_of(v, k));
          const uint32_t half = (word_of(v, k >> 1) >> (16 * (k & 1))) & 0xFFFFu;
          return T == TensorType::F16 ? f16_exact(half) : __uint_as_float(half << 16);
        };
        // vec_dot: elements from the last multiple of 64 on (only in the row's last group) are
        // its tail, added one by one after the accumulators' reduction.
        const int vec_end = kVecFloat ? H / 64 * 64 - e0 : ne;
        if constexpr (kPairs) {
          // One vdpbf16ps lane per pair: vec_dot's c1 / c2 lane l holds pairs 64s + 2l / 64s + 32 + 2l
          // (index (e % 64) / 2), the sgemm's lane l pairs 32s + 2l (index (e % 32) / 2).
          const int nend = min(ne, vec_end);
          // The screen of this group's weights (bf16_pairs.hpp), per half-word lane: the least
          // magnitude minus one, a zero wrapping to 0xFFFF. The whole 256-byte group: its zero
          // padding passes, and a tail weight of vec_dot's (not in a pair) can only send the group to
          // the exact steps, which are right for every input.
          uint32_t mmin = 0xFFFFFFFFu;
#pragma unroll
          for (int c = 0; c < GE / EPC; ++c) {
            const uint4 v = lds128(b + 16 * c);
#pragma unroll
            for (int k = 0; k < 4; ++k) mmin = __viaddmin_u16x2(word_of(v, k) & 0x7FFF7FFFu, 0xFFFFFFFFu, mmin);
          }
          const bool w_bad = (mmin & 0xFFFFu) < kBf16PairWeightMin - 1 || (mmin >> 16) < kBf16PairWeightMin - 1;
          const uint32_t live = (1u << min(p.tc, TCP)) - 1u;  // this pass's tokens
          const uint32_t need = (exact_rt | act_bad | (w_bad ? live : 0u)) & live;
          constexpr int QB = 2 * NL;  // elements per block: one pair of each lane
          if (!__any_sync(0xffffffffu, need != 0) && nend % QB == 0) {
            // Every row and token of the warp passed the screen here and before: plain fused
            // multiply-adds, the odd element first; whole 16-byte chunks of weights and activations.
            if constexpr (TCP == 1) {
              if (nend == GE) bf16_pairs_fma<1, true, GE>(acc, b, xb, f_pitch, nend);
              else bf16_pairs_fma<1, false, GE>(acc, b, xb, f_pitch, nend);
            } else {
              static_assert(TCP == 4, "token passes of 4");
              switch (p.tc * 2 + (nend == GE ? 1 : 0)) {
                case 2: bf16_pairs_fma<1, false, GE>(acc, b, xb, f_pitch, nend); break;
                case 3: bf16_pairs_fma<1, true, GE>(acc, b, xb, f_pitch, nend); break;
                case 4: bf16_pairs_fma<2, false, GE>(acc, b, xb, f_pitch, nend); break;
                case 5: bf16_pairs_fma<2, true, GE>(acc, b, xb, f_pitch, nend); break;
                case 6: bf16_pairs_fma<3, false, GE>(acc, b, xb, f_pitch, nend); break;
                case 7: bf16_pairs_fma<3, true, GE>(acc, b, xb, f_pitch, nend); break;
                case 8: bf16_pairs_fma<4, false, GE>(acc, b, xb, f_pitch, nend); break;
                default: bf16_pairs_fma<4, true, GE>(acc, b, xb, f_pitch, nend); break;
              }
            }
          } else {
            // Some row or token of the warp did not pass: every lane takes the emulated step (right
            // for every input), pair by pair; the rows and tokens that did not pass keep to it until
            // the row ends, since their accumulators may now be off the screen's grid.
#pragma unroll 1
            for (int base = 0; base < nend; base += QB) {
#pragma unroll
              for (int l = 0; l < NL; ++l) {
                const int e = base + 2 * l;
                if (e >= nend) break;
                const uint32_t word = *reinterpret_cast<const uint32_t*>(b + 2 * e);
                const float w0 = __uint_as_float(word << 16), w1 = __uint_as_float(word & 0xFFFF0000u);
#pragma unroll
                for (int tj = 0; tj < TCP; ++tj) {
                  if (tj >= p.tc) break;
                  const float* x = xb + size_t(tj) * f_pitch + e;
                  acc[tj][l] = dpbf16_step(dpbf16_step(acc[tj][l], w1, __ldg(x + 1)), w0, __ldg(x));
                }
              }
            }
            exact_rt |= need;
          }
        } else {
#pragma unroll
          for (int c = 0; c < GE / EPC; ++c) {
            if (EPC * c >= min(ne, vec_end)) break;
            const uint4 v = lds128(b + 16 * c);
#pragma unroll
            for (int k = 0; k < EPC; ++k) {
              const int e = EPC * c + k;
              if (e >= min(ne, vec_end)) break;
              feed(e, weight(v, k));
            }
          }
        }
        if constexpr (kVecFloat) {
          if (gi == G - 1) {
            // The row's last group: reduce the accumulators, then the tail in element order (F16,
            // BF16: each f32 product added in double; F32: f32 adds of products for whole groups of
            // 8, fused multiply-adds for the last n % 8, as GCC vectorized the source's loop).
#pragma unroll
            for (int tj = 0; tj < TCP; ++tj) {
              if constexpr (kPairs) {
                tail[tj] = __dadd_rn(__dadd_rn(0.0, double(reduce16(acc[tj]))), double(reduce16(acc[tj] + 16)));
              } else {
                float r[16];
#pragma unroll
                for (int l = 0; l < 16; ++l)
                  r[l] = __fadd_rn(__fadd_rn(acc[tj][l], acc[tj][32 + l]), __fadd_rn(acc[tj][16 + l], acc[tj][48 + l]));
                tail[tj] = double(reduce16(r));
                ftail[tj] = reduce16(r);
              }
            }
            const int unfused = vec_end + (ne - vec_end) / 8 * 8;
            for (int e = max(vec_end, 0); e < ne; ++e) {
              const float w = weight(lds128(b + 16 * (e / EPC)), e % EPC);
              for (int tj = 0; tj < TCP; ++tj) {
                if (tj >= p.tc) break;
                const float x = __ldg(xb + size_t(tj) * f_pitch + e);
                if constexpr (T == TensorType::F32)
                  ftail[tj] = e < unfused ? __fadd_rn(ftail[tj], __fmul_rn(w, x)) : __fmaf_rn(w, x, ftail[tj]);
                else
                  tail[tj] = __dadd_rn(tail[tj], double(__fmul_rn(w, x)));
              }
            }
          }
        }
      }
    }
    __syncwarp();

    if (gi == G - 1) {
#pragma unroll
      for (int tj = 0; tj < TCP; ++tj) {
        if (tj < p.tc) {
          float raw;
          if constexpr (kTiled) {
            raw = acc[tj][0];
          } else if constexpr (kRepack) {
            raw = __fsub_rn(acc[tj][0], acc[tj][1]);
          } else if constexpr (kSgemmFloat) {
            raw = reduce16(acc[tj]);
          } else if constexpr (kVecFloat) {
            raw = T == TensorType::F32 ? ftail[tj] : __double2float_rn(tail[tj]);
          } else {
            float lanes[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) lanes[k] = acc[tj][k];
            raw = reduce_lanes(lanes);
            if constexpr (kIntDot && T == TensorType::Q5_K) raw = __fadd_rn(raw, extra[tj][0]);
            if constexpr (kIntDot && T == TensorType::Q4_K)
              raw = __fadd_rn(raw, __fadd_rn(__fadd_rn(extra[tj][0], extra[tj][2]), __fadd_rn(extra[tj][1], extra[tj][3])));
          }
          const int t = p.t0 + tj;
          PartialBest mine = best_empty();
          if (row < V) {
            const float biased = add_head_bias(raw, p, row);
            const float capped = apply_cap(biased, p);
            p.logits[size_t(t) * V + row] = capped;
            if (p.raw) p.raw[size_t(t) * V + row] = biased;
            mine = best_single(capped, row);
          }
#pragma unroll
          for (int m = 16; m > 0; m >>= 1) mine = best_merge(mine, best_shfl_xor(mine, m));
          best[tj] = best_merge(best[tj], mine);
        }
#pragma unroll
        for (int k = 0; k < NL; ++k) acc[tj][k] = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) extra[tj][k] = 0.0f;
        tail[tj] = 0.0;
        ftail[tj] = 0.0f;
      }
      exact_rt = 0;
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  cp_async_wait_all();

  if (lane == 0)
    for (int tj = 0; tj < TCP; ++tj) s_best[warp][tj] = best[tj];
  merge_warps_and_finalize(p, s_best, NW, TCP);
}

template <TensorType T, bool FR, GenericOrder O = GenericOrder::vec_dot>
void launch_typed(const HeadParams& p, int num_sms, bool pdl, cudaStream_t stream) {
  constexpr auto kernel = generic_head_kernel<T, FR, O, kWarps, kStages>;
  const size_t smem = size_t(kWarps) * kStages * stage_bytes<T>();
  // Configured once per device, on the first (uncaptured) call of the shape.
  allow_max_dynamic_smem<kernel>();
  static OncePerDevice configured;
  static int per_sm_of[OncePerDevice::kMaxDevices] = {};
  const int device = configured.run([&](int dev) {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, smem));
    if (n < 1) throw Error("generic head kernel does not fit on a multiprocessor");
    per_sm_of[dev % OncePerDevice::kMaxDevices] = n > 8 ? 8 : n;  // the partials buffer holds 8 blocks per multiprocessor
  });
  const int per_sm = per_sm_of[device % OncePerDevice::kMaxDevices];
  const int ntiles = (p.vocab + 31) / 32;
  int blocks = num_sms * per_sm;
  const int needed = (ntiles + kWarps - 1) / kWarps;
  if (blocks > needed) blocks = needed;
  launch_head_kernel<kernel>(dim3(blocks), dim3(kWarps * 32), smem, pdl, stream, p);
}

__global__ void dpbf16_lanes_kernel(const float* acc, const float* w0, const float* a0, const float* w1, const float* a1,
                                    int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = dpbf16_step(dpbf16_step(acc[i], w1[i], a1[i]), w0[i], a0[i]);
}

}  // namespace

void dpbf16_lanes_on_device(const float* acc, const float* w0, const float* a0, const float* w1, const float* a1,
                            int64_t n, float* out) {
  if (n <= 0) return;
  const size_t bytes = size_t(n) * sizeof(float);
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 6 * bytes));
  const std::unique_ptr<float, cudaError_t (*)(void*)> owned(d, cudaFree);
  const float* in[5] = {acc, w0, a0, w1, a1};
  for (int i = 0; i < 5; ++i) CUDA_CHECK(cudaMemcpy(d + i * size_t(n), in[i], bytes, cudaMemcpyHostToDevice));
  dpbf16_lanes_kernel<<<256, 256>>>(d, d + size_t(n), d + 2 * size_t(n), d + 3 * size_t(n), d + 4 * size_t(n), n,
                                    d + 5 * size_t(n));
  CUDA_CHECK_LAUNCH("dpbf16_lanes_kernel");
  CUDA_CHECK(cudaMemcpy(out, d + 5 * size_t(n), bytes, cudaMemcpyDeviceToHost));
}

void launch_generic_head(const HeadParams& p, TensorType type, bool float_route, GenericOrder order, int num_sms,
                         bool pdl, cudaStream_t stream) {
  using O = GenericOrder;
  switch (order) {
    case O::vec_dot: break;
    case O::llamacpp_tiled:
      if (type == TensorType::Q4_K) return launch_typed<TensorType::Q4_K, false, O::llamacpp_tiled>(p, num_sms, pdl, stream);
      if (type == TensorType::Q5_K) return launch_typed<TensorType::Q5_K, false, O::llamacpp_tiled>(p, num_sms, pdl, stream);
      if (type == TensorType::Q6_K) return launch_typed<TensorType::Q6_K, false, O::llamacpp_tiled>(p, num_sms, pdl, stream);
      throw Error("llama.cpp's tiled order needs a Q4_K, Q5_K or Q6_K head, not " + std::string(tensor_type_name(type)));
    case O::llamacpp_repack:
      if (type == TensorType::Q4_K) return launch_typed<TensorType::Q4_K, false, O::llamacpp_repack>(p, num_sms, pdl, stream);
      throw Error("llama.cpp's repacked order needs a Q4_K head, not " + std::string(tensor_type_name(type)));
    case O::llamacpp_float_vec:
      if (type == TensorType::F16) return launch_typed<TensorType::F16, true, O::llamacpp_float_vec>(p, num_sms, pdl, stream);
      if (type == TensorType::BF16) return launch_typed<TensorType::BF16, true, O::llamacpp_float_vec>(p, num_sms, pdl, stream);
      if (type == TensorType::F32) return launch_typed<TensorType::F32, true, O::llamacpp_float_vec>(p, num_sms, pdl, stream);
      throw Error("llama.cpp's vec_dot float order needs an F16, BF16 or F32 head, not " + std::string(tensor_type_name(type)));
    case O::llamacpp_float_sgemm:
      if (type == TensorType::F16) return launch_typed<TensorType::F16, true, O::llamacpp_float_sgemm>(p, num_sms, pdl, stream);
      if (type == TensorType::BF16) return launch_typed<TensorType::BF16, true, O::llamacpp_float_sgemm>(p, num_sms, pdl, stream);
      if (type == TensorType::F32) return launch_typed<TensorType::F32, true, O::llamacpp_float_sgemm>(p, num_sms, pdl, stream);
      throw Error("llamafile's sgemm order needs an F16, BF16 or F32 head, not " + std::string(tensor_type_name(type)));
  }
  switch (type) {
    case TensorType::Q4_K:
      return float_route ? launch_typed<TensorType::Q4_K, true>(p, num_sms, pdl, stream)
                         : launch_typed<TensorType::Q4_K, false>(p, num_sms, pdl, stream);
    case TensorType::Q5_K:
      return float_route ? launch_typed<TensorType::Q5_K, true>(p, num_sms, pdl, stream)
                         : launch_typed<TensorType::Q5_K, false>(p, num_sms, pdl, stream);
    case TensorType::Q6_K:
      return float_route ? launch_typed<TensorType::Q6_K, true>(p, num_sms, pdl, stream)
                         : launch_typed<TensorType::Q6_K, false>(p, num_sms, pdl, stream);
    case TensorType::Q8_0:
      return float_route ? launch_typed<TensorType::Q8_0, true>(p, num_sms, pdl, stream)
                         : launch_typed<TensorType::Q8_0, false>(p, num_sms, pdl, stream);
    case TensorType::F16: return launch_typed<TensorType::F16, true>(p, num_sms, pdl, stream);
    case TensorType::BF16: return launch_typed<TensorType::BF16, true>(p, num_sms, pdl, stream);
    case TensorType::F32: return launch_typed<TensorType::F32, true>(p, num_sms, pdl, stream);
    default: break;
  }
  throw Error("the cuda backend has no head kernel for tensor type " + std::string(tensor_type_name(type)));
}

}  // namespace lmhead::cuda
