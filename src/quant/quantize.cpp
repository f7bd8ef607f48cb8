// llama.cpp's reference quantizers without an importance matrix, written from numerics.md §3b.
// Every float operation is rounded on its own and evaluated left to right as written (the project
// builds with -ffp-contract=off); integers become floats where they meet floats; max/min scans
// keep the first index on ties. docs/quantization.md records what this reproduces byte for byte.
//
// No multiply-add here may be fused: ggml's golden quantizations are the unfused evaluation, and
// fusing e.g. the product inside nearest_int(iscale * (x - lo)) (with nearest_int's + 2^23 * 1.5)
// or the D / scale / min numerators changes 22 of 128 Q4_K and 29 of 128 Q5_K golden blocks.
#include "quant/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "lmhead/error.hpp"
#include "quant/activation.hpp"  // nearest_int
#include "quant/blocks.hpp"

namespace lmhead::quant {
namespace {

// Levels, scale and min of one 32-element group of an asymmetric K-quant (Q4_K, Q5_K): a weighted
// least-squares fit of x ~ scale * L + min over a sweep of candidate inverse scales. Returns the
// scale; `min_out` is the negated min (a non-negative offset), as the block stores it.
float fit_min_scale(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep,
                    uint8_t* L, float& min_out) {
  constexpr int n = 32;
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    min_out = -lo;
    return 0.0f;
  }
  float iscale = float(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float best_err = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - lo));
    L[i] = uint8_t(std::clamp(l, 0, nmax));
    const float diff = scale * float(L[i]) + lo - x[i];
    best_err += w[i] * (diff * diff);
  }
  uint8_t candidate[n];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * float(step) + float(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      candidate[i] = uint8_t(l);
      const float fl = float(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * float(candidate[i]) + this_min - x[i];
        err += w[i] * (diff * diff);
      }
      if (err < best_err) {
        std::copy(candidate, candidate + n, L);
        best_err = err;
        scale = this_scale;
        lo = this_min;  // later candidates measure from this min (numerics.md §3b step 3)
      }
    }
  }
  min_out = -lo;
  return scale;
}

// Symmetric fit of one 16-element Q6_K group with weights x*x: levels stored as l + 32 (0..63).
float fit_symmetric(const float* x, uint8_t* L) {
  constexpr int n = 16, nmax = 32;
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto level = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
  auto sums = [&](float iscale, float& sum_lx, float& sum_l2) {
    sum_lx = 0;
    sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float fl = float(level(iscale, i));
      sum_lx += w * x[i] * fl;
      sum_l2 += w * fl * fl;
    }
  };
  float iscale = -float(nmax) / max;
  float sum_lx, sum_l2;
  sums(iscale, sum_lx, sum_l2);
  for (int i = 0; i < n; ++i) L[i] = uint8_t(level(iscale, i) + nmax);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(step)) / max;
    sums(iscale, sum_lx, sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = uint8_t(level(iscale, i) + nmax);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Inverse of k_scale_min: packs eight 6-bit scales and mins into the 12 bytes of §3.
void pack_scale_min(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = sc[j];
      scales[j + 4] = m[j];
    } else {
      scales[j + 4] = uint8_t((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
      scales[j - 4] |= uint8_t((sc[j] >> 4) << 6);
      scales[j] |= uint8_t((m[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K and Q5_K: fits the eight groups, stores d, dmin and the packed scales, and leaves
// the final levels (0..nmax) of the 256 elements in L.
template <typename Block>
void quantize_k_scales_and_levels(const float* x, int nmax, float rmin, float rdelta, int nstep,
                                  Block& out, uint8_t* L) {
  float group_scale[8], group_min[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    float weights[32];
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
    group_scale[j] = fit_min_scale(xg, weights, nmax, rmin, rdelta, nstep, L + 32 * j, group_min[j]);
    if (group_scale[j] > max_scale) max_scale = group_scale[j];
    if (group_min[j] > max_min) max_min = group_min[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    // llama.cpp stores nearest_int into a uint8_t before taking the min with 63.
    sc[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * group_scale[j])));
    m[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * group_min[j])));
  }
  std::memset(out.scales, 0, sizeof out.scales);
  pack_scale_min(sc, m, out.scales);
  out.d = f32_to_f16(max_scale / 63.0f);
  out.dmin = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(out.d);
  const float dmin = f16_to_f32(out.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t scj, mj;
    k_scale_min(out.scales, j, scj, mj);
    const float dj = d * float(scj);
    if (dj == 0) continue;  // keep the fitted levels
    const float dm = dmin * float(mj);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + dm) / dj), 0, nmax));
  }
}

void quantize_q4_K(const float* x, block_q4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kSuperBlock) {
    uint8_t L[kSuperBlock];
    quantize_k_scales_and_levels(x, 15, -1.0f, 0.1f, 20, y[i], L);
    for (int e = 0; e < 128; ++e) {
      const int p = e / 32, l = e % 32;  // low nibble: group 2p, high nibble: group 2p + 1
      y[i].qs[e] = uint8_t(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
    }
  }
}

void quantize_q5_K(const float* x, block_q5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kSuperBlock) {
    uint8_t L[kSuperBlock];
    quantize_k_scales_and_levels(x, 31, -0.5f, 0.1f, 15, y[i], L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int e = 0; e < kSuperBlock; ++e) {
      const int p = e / 64, h = (e / 32) & 1, l = e % 32;
      const int q = L[e];
      if (h == 0)
        y[i].qs[32 * p + l] = uint8_t(q & 0x0F);
      else
        y[i].qs[32 * p + l] |= uint8_t((q & 0x0F) << 4);
      y[i].qh[l] |= uint8_t((q >> 4) << (2 * p + h));
    }
  }
}

void quantize_q6_K(const float* x, block_q6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kSuperBlock) {
    uint8_t L[kSuperBlock];  // l + 32, 0..63
    float group_scale[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      group_scale[g] = fit_symmetric(x + 16 * g, L + 16 * g);
      const float abs_scale = std::fabs(group_scale[g]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = group_scale[g];
      }
    }
    block_q6_K& b = y[i];
    std::memset(&b, 0, sizeof b);
    if (max_abs_scale < 1e-15f) continue;  // all-zero block: every byte 0 (d = fp16(0) too)
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    for (int g = 0; g < 16; ++g) b.scales[g] = int8_t(std::min(127, nearest_int(iscale * group_scale[g])));
    const float d = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float dj = d * float(b.scales[g]);
      if (dj == 0) continue;  // keep the fitted levels
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = uint8_t(std::clamp(nearest_int(x[16 * g + l] / dj), -32, 31) + 32);
    }
    for (int e = 0; e < kSuperBlock; ++e) {
      const int n = e / 128, c = (e % 128) / 32, l = e % 32;
      const int q = L[e];
      uint8_t& low_byte = b.ql[64 * n + 32 * (c & 1) + l];
      low_byte |= uint8_t(c < 2 ? (q & 0x0F) : ((q & 0x0F) << 4));
      b.qh[32 * n + l] |= uint8_t((q >> 4) << (2 * c));
    }
  }
}

void quantize_q8_0(const float* x, block_q8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQ8_0Block) {
    float amax = 0;
    for (int j = 0; j < kQ8_0Block; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQ8_0Block; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));  // ties away from 0
  }
}

}  // namespace

size_t quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  const TensorTypeInfo* info = tensor_type_info(type);
  if (info == nullptr || !info->head_supported)
    throw Error("quantize_row: tensor type " + std::string(tensor_type_name(type)) + " (id " +
                std::to_string(int(type)) + ") is not a head type");
  if (n < 0 || n % info->block_elems != 0)
    throw Error("quantize_row: " + std::to_string(n) + " elements is not a whole number of " +
                std::string(info->name) + " blocks of " + std::to_string(info->block_elems));
  const int64_t nb = n / info->block_elems;
  switch (type) {
    case TensorType::Q4_K: quantize_q4_K(src, static_cast<block_q4_K*>(dst), nb); break;
    case TensorType::Q5_K: quantize_q5_K(src, static_cast<block_q5_K*>(dst), nb); break;
    case TensorType::Q6_K: quantize_q6_K(src, static_cast<block_q6_K*>(dst), nb); break;
    case TensorType::Q8_0: quantize_q8_0(src, static_cast<block_q8_0*>(dst), nb); break;
    case TensorType::F16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      break;
    }
    case TensorType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      break;
    }
    case TensorType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); break;
    default: throw Error("quantize_row: no quantizer for " + std::string(info->name));
  }
  return size_t(nb * info->block_bytes);
}

}  // namespace lmhead::quant
