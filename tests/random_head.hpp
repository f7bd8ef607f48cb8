#pragma once
// Random heads and hidden states for the backend tests: blocks of any bytes with finite scales
// (numerics.md §3), hidden states of very different magnitudes per token.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "lmhead/tensor_type.hpp"
#include "quant/blocks.hpp"

namespace lmhead::testing {

// A random head whose blocks are any bytes with finite scales (numerics.md §3).
struct RandomHead {
  std::vector<uint8_t> weights;
  std::vector<float> gamma;
  HeadView view;
};

inline uint16_t finite_f16(std::mt19937_64& rng, bool wild) {
  if (wild) {
    for (;;) {
      const uint16_t h = uint16_t(rng());
      if (((h >> 10) & 0x1F) != 0x1F) return h;
    }
  }
  std::uniform_real_distribution<float> u(0.0005f, 0.02f);
  return quant::f32_to_f16((rng() & 1) ? u(rng) : -u(rng) * 0.25f);
}

inline RandomHead random_head(TensorType type, int64_t V, int64_t H, std::mt19937_64& rng, float logit_scale = 0.196116f,
                       float cap = 20.0f, bool wild = false) {
  RandomHead h;
  const TensorTypeInfo* info = tensor_type_info(type);
  const uint64_t row_bytes = uint64_t(H / info->block_elems * info->block_bytes);
  h.weights.resize(size_t(V) * row_bytes);
  for (auto& b : h.weights) b = uint8_t(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t r = 0; r < V; ++r) {
    uint8_t* row = h.weights.data() + size_t(r) * row_bytes;
    const int64_t nb = H / info->block_elems;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + size_t(b) * info->block_bytes;
      auto put16 = [&](size_t off, uint16_t v) { std::memcpy(blk + off, &v, 2); };
      switch (type) {
        case TensorType::Q4_K:
        case TensorType::Q5_K: put16(0, finite_f16(rng, wild)); put16(2, finite_f16(rng, wild)); break;
        case TensorType::Q6_K: put16(208, finite_f16(rng, wild)); break;
        case TensorType::Q8_0: put16(0, finite_f16(rng, wild)); break;
        case TensorType::F16: put16(0, quant::f32_to_f16(u(rng))); break;
        case TensorType::BF16: put16(0, quant::f32_to_bf16(u(rng))); break;
        case TensorType::F32: { const float f = u(rng); std::memcpy(blk, &f, 4); break; }
        default: break;
      }
    }
  }
  h.gamma.resize(size_t(H));
  std::uniform_real_distribution<float> g(0.5f, 1.5f);
  for (auto& x : h.gamma) x = g(rng);
  h.view.type = type;
  h.view.weights = h.weights.data();
  h.view.vocab = V;
  h.view.hidden = H;
  h.view.row_bytes = row_bytes;
  h.view.gamma = h.gamma.data();
  h.view.eps = 1e-5f;
  h.view.logit_scale = logit_scale;
  h.view.softcap = cap;
  return h;
}

// Hidden states of very different magnitudes per token, with exact zeros and tiny values.
inline std::vector<float> random_hidden(int T, int64_t H, std::mt19937_64& rng) {
  std::vector<float> x(size_t(T) * H);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> e(-3.0f, 2.0f);
  for (int t = 0; t < T; ++t) {
    const float scale = std::pow(10.0f, e(rng));
    for (int64_t i = 0; i < H; ++i) {
      float v = n(rng) * scale;
      const uint64_t r = rng() % 64;
      if (r == 0) v = 0.0f;
      if (r == 1) v *= 1e-20f;
      x[size_t(t) * H + i] = v;
    }
  }
  return x;
}

}  // namespace lmhead::testing
