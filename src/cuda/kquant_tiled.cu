// Q4_K and Q5_K heads in llama.cpp's tiled K-quant order (route tiled at every T; route llamacpp
// where llama.cpp tiles) on the lanes stream layout (stream_layout.hpp), tokens in the MMA's N
// (tokens_n.cuh's kernel body).
//
// The lanes split gives thread q of a quad, per row and sub-block j, the levels of elements
// 32j + 4q .. 32j + 4q + 3 (A(2j)) and 32j + 16 + 4q .. + 3 (A(2j + 1)): exactly an m16n8k32 A
// fragment whose K is sub-block j. So one MMA per sub-block and token tile gives that sub-block's
// integer dot for 16 rows x 8 tokens, and its 6-bit scale multiplies it in int32: s1 += sc[j] * D
// (exact: |s1| < 2^26). Per item and token tile that is 8 MMAs and 32 multiply-adds, where the
// sub-blocks split (q5k_stream_n.cu, K = one lane over all sub-blocks) folds the scales into two
// planes: 16 MMAs and 64 multiplies of the level words. Then, as there, r = fma(-dmin, s2, s1 * d)
// and out = fma(r, y.d, out) once per super-block (numerics.md, "Route tiled").
//
// B in shared memory: per (super-block, token) a run of 64 words (kRunWords with its padding).
// Thread q's sixteen words, (word (j, q), word (j, q + 4)) for j = 0..7 (word (j, k) = q8 bytes
// 32j + 4k .. + 3), are four 16-byte chunks: chunk i holds j = 2i, 2i + 1 and sits at chunk position
// 4i + q of the run. The eight threads of a 16-byte load phase (tokens g, g + 1; q = 0..3) then read
// chunk positions 4i + q of two runs 80 words apart: eight different bank groups.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"
#include "cuda/tokens_n.cuh"

namespace lmhead::cuda {
namespace {

using tokens_n::Acc;
using tokens_n::kRunWords;
using tokens_n::TokenSmem;

template <bool Q4>
struct LanesTiled {
  static constexpr bool kQ4 = Q4;
  static constexpr int kItemBytes = Q4 ? stream::kQ4ItemBytes : stream::kItemBytes;
  static constexpr int kLanes = 1;
  __device__ static const uint8_t* weights(const HeadParams& p) { return p.stream_weights; }

  template <int TTOT>
  __device__ static void stage_runs(const HeadParams& p, uint32_t* runs, int items) {
    // 16-byte chunk c of a token's q8 holds words (j = c / 2, k = 4 (c % 2) .. + 3); word (j, k) goes
    // to chunk position 4 (j / 2) + k % 4, slot 2 (j % 2) + k / 4. Slots past T get zeros.
    for (int i = threadIdx.x; i < items * 16; i += blockDim.x) {
      const int c = i & 15, it = i >> 4, sb = it / TTOT, t = it - sb * TTOT;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (t < p.T) v = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + t) * kActPitch)[c];
      const int j = c >> 1, k0 = 4 * (c & 1);
      uint32_t* run = runs + size_t(it) * kRunWords;
      const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int k = k0 + u;
        run[4 * (4 * (j >> 1) + (k & 3)) + 2 * (j & 1) + (k >> 2)] = wv[u];
      }
    }
  }

  template <int NT>
  __device__ static void compute(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 1>& a) {
    constexpr int TTOT = 8 * NT;
    const int g = lane >> 2, q = lane & 3;
    const tokens_n::KRowHeaders h(it);

    // bq[nt][i]: (b0, b1) of sub-block 2i, then of 2i + 1, for token 8 nt + g.
    uint4 bq[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t* run = s.runs + (sb * TTOT + 8 * nt + g) * kRunWords + 4 * q;
#pragma unroll
      for (int i = 0; i < 4; ++i) bq[nt][i] = lds128(run + 16 * i);
    }

    uint32_t w[2][10];
    if constexpr (Q4) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        w[r][0] = it.w03[r].x; w[r][1] = it.w03[r].y; w[r][2] = it.w03[r].z; w[r][3] = it.w03[r].w;
        w[r][4] = it.w47[r].x; w[r][5] = it.w47[r].y; w[r][6] = it.w47[r].z; w[r][7] = it.w47[r].w;
      }
    } else {
      item_words(it, w);
    }

    int s1[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s1[nt][e] = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t lo[2], hi[2];  // rows g, g + 8: A(2j) (K 4q ..) and A(2j + 1) (K 16 + 4q ..)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if constexpr (Q4) {
          lo[r] = stream::q4_level_word(w[r][j], 0);
          hi[r] = stream::q4_level_word(w[r][j], 1);
        } else {
          lo[r] = stream::level_word(w[r], 2 * j);
          hi[r] = stream::level_word(w[r], 2 * j + 1);
        }
      }
      const int sc0 = int(__byte_perm(j < 4 ? h.ks[0].sc_lo : h.ks[0].sc_hi, 0u, 0x4440u | unsigned(j & 3)));
      const int sc1 = int(__byte_perm(j < 4 ? h.ks[1].sc_lo : h.ks[1].sc_hi, 0u, 0x4440u | unsigned(j & 3)));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        int d[4];  // d[2r + c]: row g + 8r, token 8 nt + 2q + c
        mma_u8s8(d, lo[0], lo[1], hi[0], hi[1], word_of(bq[nt][j >> 1], 2 * (j & 1)),
                 word_of(bq[nt][j >> 1], 2 * (j & 1) + 1), 0);
        s1[nt][0] += sc0 * d[0];
        s1[nt][1] += sc0 * d[1];
        s1[nt][2] += sc1 * d[2];
        s1[nt][3] += sc1 * d[3];
      }
    }
    tokens_n::tiled_accumulate<NT>(s1, h, sb, s, lane, a);
  }
};

}  // namespace

size_t kquant_tiled_smem(int groups, int tokens) { return tokens_n::smem_bytes(groups, tokens <= 8 ? 8 : 16); }

void launch_kquant_tiled(const HeadParams& p, int warps, bool q4k, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_kquant_tiled: 1 to 16 tokens per call");
  if (q4k) return tokens_n::launch_tiled<LanesTiled<true>>(p, warps, pdl, num_sms, stream);
  return tokens_n::launch_tiled<LanesTiled<false>>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
