// Route llamacpp on BF16 heads, where the generic CUDA kernel takes plain fused multiply-adds for
// vdpbf16ps's steps: the screen that allows it (src/cuda/bf16_pairs.hpp), the kernel's exact step
// on the device, and heads built to hit every flush rule, subnormal inputs and the screen's edges,
// whose logits every backend must give as the scalar backend does (quant::vdpbf16ps_step).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/bf16_pairs.hpp"
#include "quant/blocks.hpp"
#include "quant/llamacpp_route.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;
using quant::LlamaCppPath;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float step(float acc, float w, float a) { return quant::vdpbf16ps_step(acc, w, a); }

// The note of llamacpp_route_test.cpp: a missing GPU is said without gtest's skip marker, so that
// ctest reports the CPU half.
void note_no_gpu(const std::string& why) { std::printf("[ no GPU   ] the cuda half of this test did not run: %s\n", why.c_str()); }

// The screen's bounds as numbers, on every bf16 value and on the f32 values around the bound.
TEST(LlamaCppBf16Screen, BoundsAreTwoToTheMinus48And47) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float w = quant::bf16_to_f32(uint16_t(h));
    const bool out = w != 0.0f && std::fabs(w) < 0x1p-48f;  // NaN: not out
    EXPECT_EQ(cuda::bf16_pair_weight_screened_out(uint16_t(h)), out) << std::hex << h;
  }
  for (float a : {0x1p-47f, 0x1.000002p-47f, 0x1.fffffep-48f, 0x1p-149f, 0.0f, 1.0f, INFINITY}) {
    for (float s : {1.0f, -1.0f}) {
      const float v = s * a;
      const bool out = v != 0.0f && std::fabs(v) < 0x1p-47f;
      EXPECT_EQ(cuda::bf16_pair_act_screened_out(bits_of(v)), out) << std::hexfloat << v;
    }
  }
  EXPECT_FALSE(cuda::bf16_pair_act_screened_out(bits_of(NAN)));
}

// The screen's claim (bf16_pairs.hpp): on weights and activations it lets through, every step of a
// lane from +0 is fma(w, a, acc), and every result is 0, non-finite or at least 2^-125. Chains of
// 64 steps whose products sit near the smallest the screen allows (2^-95) and cancel, near
// ordinary sizes, and anywhere; activations with all 24 bits (the claim does not need bf16 ones).
TEST(LlamaCppBf16Screen, PlainFmaIsTheStepOnScreenedInputs) {
  std::mt19937_64 rng(20261203);
  auto weight = [&](int lo, int hi) {  // a bf16 of unbiased exponent in [lo, hi] (>= -48), or a zero
    if (rng() % 16 == 0) return rng() % 2 ? 0.0f : -0.0f;
    const int e = lo + int(rng() % uint64_t(hi - lo + 1));
    const uint16_t h = uint16_t((rng() & 0x807F) | uint32_t(e + 127) << 7);
    return quant::bf16_to_f32(h);
  };
  auto act = [&](int lo, int hi) {  // an f32 of unbiased exponent in [lo, hi] (>= -47), or a zero
    if (rng() % 16 == 0) return rng() % 2 ? 0.0f : -0.0f;
    const int e = lo + int(rng() % uint64_t(hi - lo + 1));
    return from_bits(uint32_t(rng() & 0x807FFFFF) | uint32_t(e + 127) << 23);
  };
  int64_t steps = 0, tiny = 0, zeros = 0;
  for (int kind = 0; kind < 4; ++kind) {
    for (int chain = 0; chain < 40000; ++chain) {
      float acc = 0.0f;
      for (int s = 0; s < 64; ++s) {
        float w, a;
        switch (kind) {
          case 0: w = weight(-48, -46); a = act(-47, -45); break;  // products 2^-95 .. 2^-89
          case 1: {  // the previous product's negative, off by a little: cancellation to tiny sums
            w = weight(-48, -47);
            a = act(-47, -46);
            if (s % 2 == 1 && acc != 0.0f && w != 0.0f) {
              const float t = -acc / w;  // a near -acc / w, kept on the screen's side
              if (std::isfinite(t) && std::fabs(t) >= 0x1p-47f) a = from_bits(bits_of(t) + uint32_t(int(rng() % 5) - 2));
            }
            break;
          }
          case 2: w = weight(-20, 10); a = act(-20, 10); break;
          default: w = weight(-48, 120); a = act(-47, 120); break;
        }
        ASSERT_FALSE(cuda::bf16_pair_weight_screened_out(quant::f32_to_bf16(w)));
        ASSERT_FALSE(cuda::bf16_pair_act_screened_out(bits_of(a)));
        const float want = step(acc, w, a), got = std::fma(w, a, acc);
        ++steps;
        if (bits_of(want) != bits_of(got)) {
          ADD_FAILURE() << "kind " << kind << std::hexfloat << ": acc " << acc << " w " << w << " a " << a << ": step "
                        << want << ", fma " << got;
          return;
        }
        if (std::isfinite(got)) {
          ASSERT_TRUE(got == 0.0f || std::fabs(got) >= 0x1p-125f) << std::hexfloat << got;
          if (got == 0.0f) ++zeros;
          if (got != 0.0f && std::fabs(got) < 0x1p-100f) ++tiny;
        }
        acc = got;
      }
    }
  }
  EXPECT_GT(tiny, 1000) << "the chains should reach sums below 2^-100";
  std::printf("[ info ] %lld steps, %lld results below 2^-100, %lld zeros\n", static_cast<long long>(steps),
              static_cast<long long>(tiny), static_cast<long long>(zeros));
}

// The generic kernel's exact step (the path of rows and tokens the screen turns away) on the
// device against quant::vdpbf16ps_step, lane by lane: the kinds of LlamaCppVdpbf16ps (any bits,
// subnormal inputs, products below FLT_MIN, cancellation, overflow) and results at FLT_MIN and in
// the rounding window below it, signed zeros. The accumulator is never subnormal there.
TEST(CudaLlamaCppBf16Step, DeviceStepIsTheEmulation) {
  std::mt19937_64 rng(20261204);
  auto bf = [&](int lo, int hi) {  // bf16 of biased exponent in [lo, hi], any sign and mantissa
    return quant::bf16_to_f32(uint16_t((rng() & 0x807F) | (uint64_t(lo) + rng() % uint64_t(hi - lo + 1)) << 7));
  };
  auto f32 = [&](int lo, int hi) {
    return from_bits(uint32_t(rng() & 0x807FFFFF) | uint32_t(lo + int(rng() % uint64_t(hi - lo + 1))) << 23);
  };
  auto no_subnormal = [](float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; };
  std::vector<float> acc, w0, a0, w1, a1;
  auto add = [&](float c, float x0, float y0, float x1, float y1) {
    acc.push_back(no_subnormal(c)), w0.push_back(x0), a0.push_back(y0), w1.push_back(x1), a1.push_back(y1);
  };
  const float zs[] = {0.0f, -0.0f};
  for (float c : zs)
    for (float x0 : zs)
      for (float y0 : zs)
        for (float x1 : zs)
          for (float y1 : zs) add(c, x0, y0, x1, y1);
  for (int kind = 0; kind < 10; ++kind) {
    for (int i = 0; i < 200000; ++i) {
      float c = 0, x0 = 0, y0 = 0, x1 = 0, y1 = 0;
      switch (kind) {
        case 0: x0 = bf(120, 134), y0 = bf(120, 134), x1 = bf(120, 134), y1 = bf(120, 134), c = f32(118, 136); break;
        case 1: {
          x0 = bf(125, 129), y0 = bf(125, 129), x1 = bf(125, 129), y1 = bf(125, 129);
          c = -(x0 * y0 + x1 * y1) * (1.0f + float(int(rng() % 7) - 3) * 1e-6f);
          break;
        }
        case 2: {
          auto any = [&] { for (;;) { const uint16_t h = uint16_t(rng()); if ((h & 0x7F80) != 0x7F80) return quant::bf16_to_f32(h); } };
          x0 = any(), y0 = any(), x1 = any(), y1 = any();
          do c = from_bits(uint32_t(rng())); while (!std::isfinite(c));
          break;
        }
        case 3: {  // subnormal weights and activations among normal ones
          auto sub = [&](int lo, int hi) { return rng() % 4 == 0 ? quant::bf16_to_f32(uint16_t(rng() & 0x807F)) : bf(lo, hi); };
          x0 = sub(1, 30), y0 = sub(100, 140), x1 = sub(1, 30), y1 = sub(100, 140), c = f32(1, 20);
          break;
        }
        case 4: x0 = bf(1, 70), y0 = bf(1, 70), x1 = bf(1, 70), y1 = bf(1, 70), c = rng() % 2 ? 0.0f : f32(1, 20); break;
        case 5: x0 = bf(180, 254), y0 = bf(180, 254), x1 = bf(180, 254), y1 = bf(180, 254), c = f32(200, 254); break;
        case 6: {  // acc one to three ulps from FLT_MIN against a product just below it
          x1 = bf(50, 52), y1 = bf(50, 52);
          c = from_bits(0x00800000u + uint32_t(rng() % 3)) * (x1 * y1 > 0 ? -1.0f : 1.0f);
          if (rng() % 2) x0 = bf(50, 52), y0 = bf(50, 52);
          break;
        }
        case 7: {  // a product alone in [FLT_MIN / 2, 2 FLT_MIN): the window below FLT_MIN and FLT_MIN itself
          x1 = bf(60, 66), y1 = bf(60, 66);
          if (rng() % 2) x0 = bf(60, 66), y0 = bf(60, 66);
          break;
        }
        case 8: {  // FLT_MIN + d: the exact sum in [FLT_MIN - 2^-149, FLT_MIN + 2^-149]
          c = (rng() % 2 ? 1.0f : -1.0f) * 0x1p-126f;
          const int e = -151 - int(rng() % 6);  // |w1 * a1| = 2^e (times a mantissa near 1)
          x1 = (rng() % 2 ? 1.0f : -1.0f) * std::ldexp(1.0f + float(rng() % 4) / 128.0f, e / 2);
          y1 = (rng() % 2 ? 1.0f : -1.0f) * std::ldexp(1.0f, e - e / 2);
          x1 = quant::bf16_to_f32(quant::f32_to_bf16(x1));
          y1 = quant::bf16_to_f32(quant::f32_to_bf16(y1));
          break;
        }
        default: {  // ordinary values with a signed-zero partner
          x0 = rng() % 2 ? 0.0f : -0.0f, y0 = bf(120, 134), x1 = bf(120, 134), y1 = rng() % 2 ? 0.0f : -0.0f;
          c = rng() % 3 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : f32(118, 136);
          break;
        }
      }
      add(c, x0, y0, x1, y1);
    }
  }
  const size_t n = acc.size();
  std::vector<float> want(n);
  int64_t flushed = 0, window = 0;
  for (size_t i = 0; i < n; ++i) {
    want[i] = step(step(acc[i], w1[i], a1[i]), w0[i], a0[i]);
    const float plain = std::fma(w0[i], a0[i], std::fma(w1[i], a1[i], acc[i]));
    if (want[i] == 0.0f && plain != 0.0f) ++flushed;
    if (std::fabs(plain) == 0x1p-126f && want[i] == 0.0f) ++window;  // fma rounded up to FLT_MIN, the step flushed
  }
  EXPECT_GT(flushed, 1000) << "the cases should reach the flush rules";
  EXPECT_GT(window, 10) << "the cases should reach the rounding window below FLT_MIN";
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  std::vector<float> got(n, 0.0f);
  cuda::dpbf16_lanes_on_device(acc.data(), w0.data(), a0.data(), w1.data(), a1.data(), int64_t(n), got.data());
  int64_t differ = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bits_of(want[i]) != bits_of(got[i]) && !(std::isnan(want[i]) && std::isnan(got[i]))) {
      if (differ++ < 5)
        ADD_FAILURE() << "lane " << i << std::hexfloat << ": acc " << acc[i] << " + " << w0[i] << " * " << a0[i] << " + "
                      << w1[i] << " * " << a1[i] << ": emulation " << want[i] << ", device " << got[i];
    }
  }
  EXPECT_EQ(differ, 0) << "of " << n << " lanes";
  std::printf("[ info ] %zu lanes compared, %lld flushed to zero where plain fmas are not, %lld in the window below FLT_MIN\n",
              n, static_cast<long long>(flushed), static_cast<long long>(window));
}

// ---- heads built against the screen ------------------------------------------------------------

uint16_t bf16_of(float f) { return quant::f32_to_bf16(f); }

// A BF16 head of V rows whose 32-row tiles (the kernel's warps) differ: tiles of ordinary weights
// only, tiles with one row holding one weight the screen turns away (below 2^-48, or subnormal) in
// some group, and tiles mixing rows of tiny weights (products near FLT_MIN against tiny
// activations), weights at the screen's bound, zeros of both signs and cancelling pairs.
std::vector<uint16_t> edge_head(int64_t V, int64_t H, std::mt19937_64& rng) {
  std::vector<uint16_t> w(size_t(V * H));
  std::normal_distribution<float> n(0.0f, 0.05f);
  auto sign = [&] { return rng() % 2 ? 1.0f : -1.0f; };
  auto pow2 = [&](int lo, int hi) { return sign() * std::ldexp(1.0f + float(rng() % 128) / 128.0f, lo + int(rng() % uint64_t(hi - lo + 1))); };
  for (int64_t r = 0; r < V; ++r) {
    uint16_t* row = w.data() + r * H;
    const int64_t tile = r / 32;
    int kind = 0;  // 0 ordinary, 1 one screened-out weight, 2 one subnormal weight, 3 tiny, 4 at the bound, 5 zeros, 6 cancelling
    if (tile % 4 == 1 && r % 32 == int64_t(tile % 32)) kind = 1 + int(tile / 4 % 2);
    if (tile % 4 == 2) kind = int(r % 7);
    if (tile % 4 == 3) kind = r % 3 == 0 ? 4 : r % 3 == 1 ? 6 : 0;
    for (int64_t e = 0; e < H; ++e) {
      float v = n(rng);
      switch (kind) {
        case 3: v = pow2(-70, -55); break;
        case 4: v = rng() % 3 == 0 ? sign() * 0x1p-48f : rng() % 3 == 0 ? pow2(-48, -46) : v; break;
        case 5: v = rng() % 2 ? 0.0f : -0.0f; break;
        case 6: if (e % 2 == 1) v = -quant::bf16_to_f32(row[e - 1]); break;
        default: break;
      }
      row[e] = bf16_of(v);
    }
    if (kind == 1) row[rng() % uint64_t(H)] = bf16_of(pow2(-80, -49));
    if (kind == 2) row[rng() % uint64_t(H)] = uint16_t((rng() & 0x807F) | 1);
  }
  return w;
}

// Tokens of kinds: 0 ordinary, 1 with some activations the screen turns away, 2 with values at the
// bound and zeros of both signs, 3 tiny throughout (against tiny rows: products near FLT_MIN), 4
// with one subnormal activation. Finite everywhere.
std::vector<float> edge_tokens(const std::vector<int>& kinds, int64_t H, std::mt19937_64& rng) {
  std::vector<float> x(kinds.size() * size_t(H));
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto sign = [&] { return rng() % 2 ? 1.0f : -1.0f; };
  for (size_t t = 0; t < kinds.size(); ++t) {
    float* row = x.data() + t * size_t(H);
    for (int64_t e = 0; e < H; ++e) {
      float v = n(rng);
      switch (kinds[t]) {
        case 1: if (rng() % 100 == 0) v = sign() * std::ldexp(1.0f, -48 - int(rng() % 30)); break;
        case 2: v = rng() % 4 == 0 ? sign() * 0x1p-47f : rng() % 4 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : v; break;
        case 3: v = sign() * std::ldexp(1.0f + float(rng() % 128) / 128.0f, -75 + int(rng() % 20)); break;
        default: break;
      }
      row[e] = v;
    }
    if (kinds[t] == 4) row[rng() % uint64_t(H)] = sign() * 0x1p-130f;  // a bf16 subnormal
  }
  return x;
}

// The sgemm's lanes with plain fused multiply-adds (no flush, no DAZ): how many outputs the
// emulation's rules change, so that the heads are known to reach them.
int64_t outputs_the_rules_change(const std::vector<uint16_t>& w, const std::vector<float>& x, int T, int64_t V,
                                 int64_t H, const std::vector<float>& want) {
  int64_t changed = 0;
  for (int t = 0; t < T; ++t)
    for (int64_t r = 0; r < V; ++r) {
      float acc[16] = {};
      for (int64_t i = 0; i + 32 <= H; i += 32)
        for (int l = 0; l < 16; ++l) {
          const int64_t e = i + 2 * l;
          auto wv = [&](int64_t k) { return quant::bf16_to_f32(w[size_t(r * H + k)]); };
          auto av = [&](int64_t k) { return quant::bf16_to_f32(quant::f32_to_bf16(x[size_t(t * H + k)])); };
          acc[l] = std::fma(wv(e), av(e), std::fma(wv(e + 1), av(e + 1), acc[l]));
        }
      float h8[8], h4[4];
      for (int i = 0; i < 8; ++i) h8[i] = acc[i + 8] + acc[i];
      for (int i = 0; i < 4; ++i) h4[i] = h8[i + 4] + h8[i];
      const float plain = (h4[0] + h4[2]) + (h4[1] + h4[3]);
      if (bits_of(plain) != bits_of(want[size_t(t) * size_t(V) + size_t(r)])) ++changed;
    }
  return changed;
}

// Every backend against the scalar one (quant::vdpbf16ps_step) on those heads: both BF16 paths,
// passes of 1 to 4 tokens with and without tokens the screen turns away, a hidden size of whole
// 128-element groups and one with a last group of 32 (vec_dot: a tail of 32), a last tile of 8 rows.
TEST(LlamaCppBf16Edges, EveryBackendGivesTheScalarBytes) {
  std::string why;
  const bool gpu = cuda_available(&why);
  if (!gpu) note_no_gpu(why);
  std::mt19937_64 rng(20261205);
  int64_t changed_total = 0;
  for (int64_t H : {1024, 1056}) {
    const int64_t V = 1000;
    const std::vector<uint16_t> w = edge_head(V, H, rng);
    std::vector<float> gamma(size_t(H), 1.0f);
    HeadView view;
    view.type = TensorType::BF16;
    view.weights = reinterpret_cast<const uint8_t*>(w.data());
    view.vocab = V;
    view.hidden = H;
    view.row_bytes = uint64_t(H) * 2;
    view.gamma = gamma.data();
    auto scalar = make_scalar_backend(view);
    auto cpu = make_cpu_backend(view, 2);
    std::unique_ptr<Backend> cuda;
    if (gpu) cuda = make_cuda_backend(view, 1);
    // Calls: first T tokens of each list. Passes of 4: tokens 0-3 pass the screen, 4-7 do not.
    const std::vector<std::vector<int>> calls = {{0, 2, 0, 2, 1, 3, 4, 0, 2}, {3, 0, 2, 3, 3}, {1}, {3}, {4}, {2}};
    for (LlamaCppPath path : {LlamaCppPath::sgemm_bf16, LlamaCppPath::vec_dot_bf16}) {
      for (size_t ci = 0; ci < calls.size(); ++ci) {
        for (int T = 1; T <= int(calls[ci].size()); ++T) {
          if (ci == 0 && T != 1 && T != 2 && T != 3 && T != 4 && T != 5 && T != 9) continue;
          const std::vector<int> kinds(calls[ci].begin(), calls[ci].begin() + T);
          const std::vector<float> x = edge_tokens(kinds, H, rng);
          ForwardRequest req;
          req.input_normed = true;
          req.route = Route::llamacpp;
          req.llamacpp_path = path;
          req.want_logits = true;
          ForwardOutput want;
          scalar->forward(x.data(), T, req, want);
          const std::string what = std::string(quant::path_name(path)) + ", H = " + std::to_string(H) + ", call " +
                                   std::to_string(ci) + ", T = " + std::to_string(T);
          ForwardOutput got_cpu;
          cpu->forward(x.data(), T, req, got_cpu);
          EXPECT_TRUE(same_bytes(got_cpu.logits, want.logits)) << what << ", cpu";
          if (cuda) {
            ForwardOutput got_cuda;
            cuda->forward(x.data(), T, req, got_cuda);
            EXPECT_TRUE(same_bytes(got_cuda.logits, want.logits)) << what << ", cuda";
          }
          if (path == LlamaCppPath::sgemm_bf16 && H % 32 == 0) changed_total += outputs_the_rules_change(w, x, T, V, H, want.logits);
        }
      }
    }
  }
  EXPECT_GT(changed_total, 100) << "the heads should reach the flush and DAZ rules";
  std::printf("[ info ] %lld sgemm outputs differ from plain fused multiply-adds\n", static_cast<long long>(changed_total));
}

}  // namespace
