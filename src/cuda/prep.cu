// RMSNorm and activation quantization, one block per token (numerics.md §4, §6).
//
// The reference sums the squares in double strictly left to right: on one GPU thread that chain of
// H dependent double adds is the slowest part of the whole tail (~27 us for H = 6656). It matters
// only through (float)(sum / H), so the block sums in parallel and proves the rounding instead:
// for non-negative terms every summation order lies within (H - 1) * 2^-53 * S of the exact sum S,
// hence the sequential sum lies within (H + 64) * 2^-52 * S_par of the parallel one. If both ends
// of that interval, divided by H with directed rounding, round to the same float, that float is
// the reference's mean (rounding is monotone). Otherwise (about once in 20,000 tokens) one thread
// runs the reference's chain. Both paths give the reference's bytes; the path taken is reported.
//
// LayerNorm (numerics.md §6b) follows ggml's order: the mean is one sequential double chain (its
// terms have both signs, so no bound like the one above holds; one thread runs it), the variance's
// terms are f32 sums of 16 squares each, non-negative, so it takes the same bounded parallel sum.
// With already-normed input (--input normed) the block skips the norm and only quantizes.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/per_device.hpp"
#include "cuda/device_common.cuh"

namespace lmhead::cuda {
namespace {

constexpr int kPrepThreads = 1024;

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// The block's sum of `local` in any order (only bounded_mean reads it, and its bound holds for
// every order), valid in thread 0 only; the caller's next __syncthreads publishes what it derives.
__device__ __forceinline__ double block_sum_any_order(double local, double* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  local = warp_sum_double(local);
  if (lane == 0) warp_sums[warp] = local;
  __syncthreads();
  double s = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < nwarps; ++w) s += warp_sums[w];
  return s;
}

// float(S / H) for the sequential double sum S of `terms` non-negative terms, from their sum s in
// any order (the argument at the top of this file); false when the bound does not decide it.
__device__ bool bounded_mean(double s, int terms, int H, float& out) {
  if (isinf(s)) {
    out = __int_as_float(0x7f800000);
    return true;
  }
  const double delta = double(terms + 64) * 0x1p-52;
  const double lo = __ddiv_rd(__dmul_rd(s, 1.0 - delta), double(H));
  const double hi = __ddiv_ru(__dmul_ru(s, 1.0 + delta), double(H));
  const float flo = __double2float_rn(lo), fhi = __double2float_rn(hi);
  out = flo;
  return flo == fhi;
}

// One variance group of ggml's LayerNorm: 16 squares of (x - mean) in f32, added by the halving
// tree of its 512-bit horizontal add.
__device__ __forceinline__ float layer_group16(const float* x, float mean) {
  float h8[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float a = __fsub_rn(x[j], mean), b = __fsub_rn(x[j + 8], mean);
    h8[j] = __fadd_rn(__fmul_rn(b, b), __fmul_rn(a, a));
  }
  float h4[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) h4[j] = __fadd_rn(h8[j + 4], h8[j]);
  return __fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3]));
}

__device__ __forceinline__ float layer_square(float x, float mean) {
  const float d = __fsub_rn(x, mean);
  return __fmul_rn(d, d);
}

// One 256-element Q8_K block, by one warp: lane l owns elements 8l .. 8l+7.
__device__ void quantize_q8_K_block(const float* x, int8_t* qs_out, float* d_out, uint32_t* bsp_out,
                                    int8_t* frag_out, int8_t* lanes_out, bool positive_amax) {
  const int lane = threadIdx.x & 31;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = x[8 * lane + j];
  // First index reaching the largest magnitude (strict > while scanning in index order).
  float amax = 0.0f;
  int idx = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float ax = fabsf(v[j]);
    if (ax > amax) { amax = ax; idx = 8 * lane + j; }
  }
  for (int m = 16; m > 0; m >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, m);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, m);
    if (oa > amax || (oa == amax && oi < idx)) { amax = oa; idx = oi; }
  }
  uint32_t w0 = 0, w1 = 0;
  int lane_sum = 0;
  float d = 0.0f;
  bool has_positive_amax = false;
#pragma unroll
  for (int j = 0; j < 8; ++j) has_positive_amax |= v[j] == amax;
  has_positive_amax = __any_sync(0xffffffffu, has_positive_amax);
  if (amax != 0.0f) {
    const float max = positive_amax && has_positive_amax ? amax : x[idx];
    const float iscale = __fdiv_rn(-127.0f, max);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int q = nearest_int_dev(__fmul_rn(iscale, v[j]));
      q = q < 127 ? q : 127;
      lane_sum += q;
      const uint32_t byte = uint32_t(q) & 0xFFu;
      if (j < 4) w0 |= byte << (8 * j); else w1 |= byte << (8 * (j - 4));
    }
    d = __fdiv_rn(1.0f, iscale);
  }
  reinterpret_cast<uint2*>(qs_out)[lane] = make_uint2(w0, w1);
  // B-fragment order for the tensor-core head: word m (elements 4m .. 4m+3) goes to q = (m % 32) / 8,
  // pair k = m % 8, half m / 32 (elements below 128 are the "lo" word of the pair).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = 2 * lane + h;
    const int off = ((m & 31) >> 3) * 80 + (m & 7) * 8 + (m >> 5) * 4;
    if (frag_out) *reinterpret_cast<uint32_t*>(frag_out + off) = h ? w1 : w0;
    // The lanes kernel's B (tokens 0, 1): word m = 8j + r is the only nonzero word lane 5r (r < 4,
    // slot b0) or 5r - 4 (r >= 4, slot b1) holds for sub-block j; every other slot stays zero.
    if (lanes_out) {
      const int j = m >> 3, r = m & 7;
      const int L = r < 4 ? 5 * r : 5 * r - 4;
      *reinterpret_cast<uint32_t*>(lanes_out + L * kLanesPitch + j * 8 + (r < 4 ? 0 : 4)) = h ? w1 : w0;
    }
  }
  // Sub-block sums (32 elements = lanes 4j .. 4j+3) equal bsums[2j] + bsums[2j+1] exactly.
  int s = lane_sum;
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  const int s_lo = __shfl_sync(0xffffffffu, s, (lane & 3) * 8);      // sub-block 2w
  const int s_hi = __shfl_sync(0xffffffffu, s, (lane & 3) * 8 + 4);  // sub-block 2w + 1
  if (lane < 4) bsp_out[lane] = (uint32_t(s_lo) & 0xFFFFu) | (uint32_t(s_hi) << 16);
  if (lane == 0) *d_out = d;
}

__global__ void __launch_bounds__(kPrepThreads) prep_kernel(const PrepParams p) {
  extern __shared__ float xs[];
  __shared__ double warp_sums[kPrepThreads / 32];
  __shared__ float s_scale, s_mean;
  pdl_launch_dependents();

  const int t = blockIdx.x, H = p.H;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (p.sample_scratch != nullptr) {
    auto* words = reinterpret_cast<unsigned long long*>(p.sample_scratch + t);
    for (int i = threadIdx.x; i < int(sizeof(SampleScratch) / 8); i += blockDim.x) words[i] = 0;
    if (t == 0 && threadIdx.x == 0) *p.sample_call = *p.sample_call_in;
  }
  const float* x = (p.hidden_at != nullptr ? *p.hidden_at : p.hidden) + size_t(t) * H;
  __shared__ int s_first_bad;
  if (threadIdx.x == 0) s_first_bad = H;

  // The hidden state sits in mapped host memory (or the caller's device memory): issue every load
  // of the token before using any, so the block pays one PCIe round trip, not one per iteration.
  // gamma's lines start towards L2 now, under the PCIe round trip of the hidden state.
  for (int i = 32 * threadIdx.x; i < H; i += 32 * blockDim.x) prefetch_l2(p.gamma + i);
  constexpr int kBatch = 8;
  int first_bad = H;  // this thread's first non-finite index (checked only for device rows)
  for (int base = threadIdx.x; base < H; base += kBatch * blockDim.x) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      // ld.global: x may come from a mapped word (device rows), where the compiler cannot infer the
      // address space and would emit generic loads (measured: 1.5 % slower at T = 16).
      v[u] = i < H ? __ldcg(x + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      if (i < H) {
        xs[i] = v[u];
        if (p.non_finite != nullptr && !isfinite(v[u])) first_bad = min(first_bad, i);
      }
    }
  }
  __syncthreads();
  if (p.non_finite != nullptr) {  // uniform over the block: its barrier is safe
    if (first_bad < H) atomicMin(&s_first_bad, first_bad);
    __syncthreads();
    if (threadIdx.x == 0) p.non_finite[t] = s_first_bad < H ? s_first_bad : -1;
  }
  if (p.input_normed) {
    if (threadIdx.x == 0 && p.norm_path) p.norm_path[t] = 0;
    if (p.normed_out)
      for (int i = threadIdx.x; i < H; i += blockDim.x) p.normed_out[size_t(t) * H + i] = xs[i];
  } else if (p.layer_norm) {
    if (threadIdx.x == 0) {
      double s = 0.0;
      for (int i = 0; i < H; ++i) s = __dadd_rn(s, double(xs[i]));
      s_mean = __fdiv_rn(__double2float_rn(s), float(H));
    }
    __syncthreads();
    const float mean = s_mean;
    const int groups = H / 16, terms = groups + H % 16;
    double local = 0.0;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) local += double(layer_group16(xs + 16 * g, mean));
    for (int i = 16 * groups + threadIdx.x; i < H; i += blockDim.x) local += double(layer_square(xs[i], mean));
    const double s = block_sum_any_order(local, warp_sums);
    if (threadIdx.x == 0) {
      float variance = 0.0f;
      const bool decided = !p.force_sequential && bounded_mean(s, terms, H, variance);
      if (!decided) {
        double seq = 0.0;
        for (int g = 0; g < groups; ++g) seq = __dadd_rn(seq, double(layer_group16(xs + 16 * g, mean)));
        for (int i = 16 * groups; i < H; ++i) seq = __dadd_rn(seq, double(layer_square(xs[i], mean)));
        variance = __double2float_rn(__ddiv_rn(seq, double(H)));
      }
      if (p.norm_path) p.norm_path[t] = decided ? 0 : 1;
      s_scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, p.eps)));
    }
  } else {
    double local = 0.0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) local += double(__fmul_rn(xs[i], xs[i]));
    const double s = block_sum_any_order(local, warp_sums);
    if (threadIdx.x == 0) {
      float mean = 0.0f;
      bool decided = false;
      if (!p.force_sequential) {
        if (isinf(s)) {  // a square overflowed f32: every order sums to +inf
          mean = __int_as_float(0x7f800000);
          decided = true;
        } else {
          const double delta = double(H + 64) * 0x1p-52;
          const double lo = __ddiv_rd(__dmul_rd(s, 1.0 - delta), double(H));
          const double hi = __ddiv_ru(__dmul_ru(s, 1.0 + delta), double(H));
          const float flo = __double2float_rn(lo), fhi = __double2float_rn(hi);
          if (flo == fhi) { mean = flo; decided = true; }
        }
      }
      if (!decided) {
        double seq = 0.0;
        for (int i = 0; i < H; ++i) seq = __dadd_rn(seq, double(__fmul_rn(xs[i], xs[i])));
        mean = __double2float_rn(__ddiv_rn(seq, double(H)));
      }
      if (p.norm_path) p.norm_path[t] = decided ? 0 : 1;
      s_scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
    }
  }
  __syncthreads();
  const float scale = s_scale;
  const float center = p.layer_norm && !p.input_normed ? s_mean : 0.0f;
  // gamma is usually out of L2 (the head streams ~1 GB through it every call): issue a batch of its
  // loads before using any, so the block waits one memory round trip per batch, not per iteration.
  for (int base = threadIdx.x; !p.input_normed && base < H; base += kBatch * blockDim.x) {
    float gv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      gv[u] = i < H ? p.gamma[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      if (i < H) {
        // ggml's norm, mul and add nodes: three f32 roundings (the LayerNorm's x - mean a fourth).
        const float y = __fmul_rn(p.layer_norm ? __fsub_rn(xs[i], center) : xs[i], scale);
        float n = __fmul_rn(y, gv[u]);
        if (p.beta) n = __fadd_rn(n, p.beta[i]);
        xs[i] = n;
        if (p.normed_out) p.normed_out[size_t(t) * H + i] = n;
      }
    }
  }
  __syncthreads();

  switch (p.format) {
    case ActFormat::q8_K: {
      const int nb = H / 256;
      for (int b = warp; b < nb; b += nwarps)
        quantize_q8_K_block(xs + 256 * b, p.act_qs + (size_t(b) * kMaxTokens + t) * kActPitch,
                            p.act_d + size_t(b) * kMaxTokens + t, p.act_bsp + (size_t(b) * kMaxTokens + t) * 4,
                            p.act_frag ? p.act_frag + (size_t(b) * kMaxTokens + t) * kFragPitch : nullptr,
                            p.act_lanes && t < kLanesTokens ? p.act_lanes + (size_t(b) * kLanesTokens + t) * 32 * kLanesPitch
                                                            : nullptr,
                            t < p.positive_amax_tokens);
      break;
    }
    case ActFormat::q8_0: {
      // x86 AVX2 order: d = fp16(amax / 127); q = round-half-even(x * (127 / amax)).
      const int nb = H / 32;
      for (int b = warp; b < nb; b += nwarps) {
        const float v = xs[32 * b + lane];
        float amax = fabsf(v);
        for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
        // A subnormal amax makes id infinite: out-of-range and NaN products become -128, as the
        // CPU reference (llama.cpp's cvtps_epi32 + saturating packs) makes them.
        const float r = __fmul_rn(v, id);
        const int q = fabsf(r) < 2147483648.0f ? max(-128, min(127, __float2int_rn(r))) : -128;
        p.act_qs[(size_t(b / 8) * kMaxTokens + t) * kActPitch + 32 * (b % 8) + lane] = int8_t(q);
        if (lane == 0)
          p.act_d[size_t(b) * kMaxTokens + t] = quant::f16_to_f32(quant::f32_to_f16(__fdiv_rn(amax, 127.0f)));
      }
      break;
    }
    case ActFormat::f16:
    case ActFormat::bf16:
    case ActFormat::f32: {
      const size_t pitch = size_t(H + 255) / 256 * 256;
      for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = xs[i];
        if (p.format == ActFormat::f16) v = quant::f16_to_f32(quant::f32_to_f16(v));
        else if (p.format == ActFormat::bf16) v = quant::bf16_to_f32(quant::f32_to_bf16(v));
        p.act_f[size_t(t) * pitch + i] = v;
      }
      break;
    }
  }
}

}  // namespace

void launch_prep(const PrepParams& p, cudaStream_t stream) {
  const size_t smem = size_t(p.H) * sizeof(float);
  static OncePerDevice configured;
  configured.run([](int) {
    CUDA_CHECK(cudaFuncSetAttribute(prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  });
  if (smem > 200 * 1024) throw Error("the cuda backend's final norm keeps a token in shared memory: hidden size " +
                                     std::to_string(p.H) + " is too large");
  prep_kernel<<<p.T, kPrepThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH("prep_kernel");
}

}  // namespace lmhead::cuda
