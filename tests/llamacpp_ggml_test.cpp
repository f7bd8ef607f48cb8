// Route llamacpp against ggml_mul_mat itself where the end-to-end sets (hidden 256: one super-block,
// four F16 steps, no float tails) cannot reach: tests/data/llamacpp/ggml-mul-mat/ holds ggml's
// outputs for 16-row heads of 512 and 1,024 columns (2 and 4 super-blocks) in every type of the
// route, the Q4_K head both as llama.cpp loads it (CPU_REPACK) and in a plain buffer (the tiled path
// from 8 tokens), and float heads of 1,040 and 1,047 columns (tails past the last 64-element step;
// the sgemm declining rows that are not a multiple of its step), at T = 1, 4, 8, 16. The inputs are
// remade here from the probe's splitmix64 stream (tools/llamacpp/ggml_mul_mat_probe.cpp) and checked
// against the manifest's hashes of the probe's bytes before any output is compared.
//
// Also: lmhead's emulation of VDPBF16PS (quant::vdpbf16ps_step) against the instruction, on CPUs
// that have AVX512-BF16, and on every CPU against results measured on the instruction.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "io/npy.hpp"
#include "quant/activation.hpp"
#include "quant/blocks.hpp"
#include "quant/llamacpp_route.hpp"
#include "quant/quantize.hpp"
#include "synth/splitmix64.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;
using quant::LlamaCppPath;

std::string set_path(const std::string& f) { return data_path("llamacpp/ggml-mul-mat/" + f); }


uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  return h;
}

std::string hex(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

constexpr int kTokens = 16;
constexpr int kTs[] = {1, 4, 8, 16};

// One case of the manifest with its inputs remade: the weight bytes (lmhead's quantizer on the
// probe's floats) and the 16 activation columns.
struct GgmlCase {
  std::string file;
  TensorType type = TensorType::F32;
  bool repack = false;
  int64_t rows = 0, hidden = 0;
  uint64_t row_bytes = 0;
  std::vector<uint8_t> weights;
  std::vector<float> x;     // [16, hidden]
  std::vector<float> want;  // ggml's outputs for T = 1, 4, 8, 16 stacked: [29, rows]
  std::string weights_fnv1a, activations_fnv1a;

  // llama.cpp's path for this head at T tokens: a Q4_K head not in the repack buffer takes the path
  // of one whose rows are not a multiple of 8 (vec_dot, then tiled).
  LlamaCppPath path(int T) const {
    return quant::llamacpp_path(type, repack || type != TensorType::Q4_K ? rows : rows + 1, hidden, T);
  }
  // ggml's output for token t of a T-token call.
  const float* want_at(int T, int t) const {
    int off = 0;
    for (int u : kTs) {
      if (u == T) break;
      off += u;
    }
    return want.data() + size_t(off + t) * rows;
  }
};

std::vector<GgmlCase> load_cases() {
  std::ifstream in(set_path("manifest.json"));
  const auto m = nlohmann::json::parse(in);
  std::vector<GgmlCase> out;
  for (const auto& c : m["cases"]) {
    GgmlCase g;
    g.file = c["file"];
    const std::string type = c["type"];
    EXPECT_TRUE(parse_tensor_type(type, g.type)) << type;
    g.repack = c["repack"];
    g.rows = m["rows"];
    g.hidden = c["hidden"];
    g.weights_fnv1a = c["weights_fnv1a"];
    g.activations_fnv1a = m["activations_fnv1a"][std::to_string(g.hidden)];
    const TensorTypeInfo* info = tensor_type_info(g.type);
    g.row_bytes = uint64_t(g.hidden / info->block_elems * info->block_bytes);
    synth::SplitMix64 s{0x1000 + uint64_t(g.hidden)};
    std::vector<float> wf(size_t(g.rows * g.hidden));
    for (float& v : wf) v = (2 * s.unit24() - 1) / 8;
    g.x.resize(size_t(kTokens * g.hidden));
    for (int t = 0; t < kTokens; ++t)
      for (int64_t k = 0; k < g.hidden; ++k) g.x[size_t(t * g.hidden + k)] = (2 * s.unit24() - 1) * float(1 + t % 5);
    g.weights.resize(size_t(g.rows) * g.row_bytes);
    for (int64_t r = 0; r < g.rows; ++r)
      quant::quantize_row(g.type, wf.data() + r * g.hidden, g.weights.data() + r * g.row_bytes, g.hidden);
    const io::HiddenStates w = io::read_npy_f32(set_path(g.file));
    EXPECT_EQ(w.tokens, 1 + 4 + 8 + 16) << g.file;
    EXPECT_EQ(w.hidden, g.rows) << g.file;
    g.want = w.values;
    out.push_back(std::move(g));
  }
  return out;
}

const std::vector<GgmlCase>& cases() {
  static const std::vector<GgmlCase> c = load_cases();
  return c;
}

// The inputs are the probe's: lmhead's quantizer gives ggml_quantize_chunk's bytes (the manifest's
// hash of them) and the activations are the same floats.
TEST(LlamaCppGgmlMulMat, InputsAreTheProbes) {
  ASSERT_EQ(cases().size(), 22u);
  for (const GgmlCase& g : cases()) {
    EXPECT_EQ(hex(fnv1a(g.weights.data(), g.weights.size())), g.weights_fnv1a) << g.file;
    EXPECT_EQ(hex(fnv1a(g.x.data(), g.x.size() * sizeof(float))), g.activations_fnv1a) << g.file;
  }
}

// The reference dots (quant::llamacpp_dot), token by token, give ggml's bytes for every case and T.
TEST(LlamaCppGgmlMulMat, ReferenceDotsAreGgmlBytes) {
  int64_t compared = 0;
  for (const GgmlCase& g : cases()) {
    for (int T : kTs) {
      const LlamaCppPath path = g.path(T);
      std::vector<uint8_t> act(quant::activation_bytes(quant::llamacpp_activation_format(path, g.type), g.hidden));
      std::vector<float> got(size_t(T * g.rows)), want(size_t(T * g.rows));
      for (int t = 0; t < T; ++t) {
        quant::quantize_llamacpp_activations(path, g.type, g.x.data() + t * g.hidden, g.hidden, t, T, act.data());
        for (int64_t r = 0; r < g.rows; ++r)
          got[size_t(t * g.rows + r)] = quant::llamacpp_dot(path, g.type, g.weights.data() + r * g.row_bytes, act.data(),
                                                            g.hidden, quant::in_group_of_4(path, t, T));
        std::copy(g.want_at(T, t), g.want_at(T, t) + g.rows, want.begin() + t * g.rows);
      }
      EXPECT_TRUE(same_bytes(got, want)) << g.file << " at T = " << T << " (" << quant::path_name(path) << ")";
      compared += int64_t(got.size());
    }
  }
  std::printf("[ info ] %lld outputs of ggml_mul_mat compared\n", static_cast<long long>(compared));
}

// The backends' kernels (scalar; cpu at every instruction-set level) on the same heads, through
// forward() with the rows already normed and neither scale nor cap, so the logits are the raw dots.
TEST(LlamaCppGgmlMulMat, BackendsAreGgmlBytes) {
  for (const GgmlCase& g : cases()) {
    std::vector<float> gamma(size_t(g.hidden), 1.0f);
    HeadView view;
    view.type = g.type;
    view.weights = g.weights.data();
    view.vocab = g.rows;
    view.hidden = g.hidden;
    view.row_bytes = g.row_bytes;
    view.gamma = gamma.data();
    for (int T : kTs) {
      ForwardRequest req;
      req.input_normed = true;
      req.route = Route::llamacpp;
      req.llamacpp_path = g.path(T);
      req.want_logits = true;
      std::vector<float> want(g.want_at(T, 0), g.want_at(T, 0) + T * g.rows);
      ForwardOutput out;
      make_scalar_backend(view)->forward(g.x.data(), T, req, out);
      EXPECT_TRUE(same_bytes(out.logits, want)) << g.file << " at T = " << T << ", scalar";
      for_each_cpu_isa(view, {2}, [&](Backend& backend, const std::string& label) {
        backend.forward(g.x.data(), T, req, out);
        EXPECT_TRUE(same_bytes(out.logits, want)) << g.file << " at T = " << T << ", cpu " << label;
      });
    }
  }
}

// ---- VDPBF16PS ----------------------------------------------------------------------------------

float lane(float acc, float w0, float a0, float w1, float a1) {
  return quant::vdpbf16ps_step(quant::vdpbf16ps_step(acc, w1, a1), w0, a0);
}

float bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Results measured on the instruction (AMD Zen 4; EmulationEqualsTheInstruction checks them there
// too), for every CPU: the pair's odd element goes in first, subnormal inputs are zeros, a result
// below FLT_MIN after rounding to 24 bits is a zero of its sign, one that rounds up to FLT_MIN stays.
struct Measured {
  float acc, w0, a0, w1, a1, want;
};
const Measured kMeasured[] = {
    {1.0f, 0x1p-24f, 1.0f, 0x1.8p-24f, 1.0f, 0x1.000004p+0f},  // (1 + 0.75 ulp) + 0.5 ulp: up, then a tie to even
    {1.0f, 0x1.8p-24f, 1.0f, 0x1p-24f, 1.0f, 0x1.000002p+0f},  // the same pair swapped: a tie to 1 first
    {-0x1.eb6528p-128f, 0x1.26p-104f, -0.0f, 0x1.dp-128f, -0x1.f8p+10f, -0.0f},  // DAZ on acc and w1
    {0x1p-126f, 0.0f, 0.0f, -0x1.7cp-77f, 0x1.5ap-75f, 0.0f},  // FLT_MIN - 1.01 * 2^-151: tiny after rounding
    {0x1p-126f, 0.0f, 0.0f, -0x1p-77f, 0x1p-75f, 0x1p-126f},   // FLT_MIN - 2^-152 rounds to FLT_MIN
    {0.0f, 0x1p-70f, 0x1p-70f, 0.0f, 0.0f, 0.0f},              // a product below FLT_MIN: flushed
    {0.0f, 0x1p-63f, 0x1p-63f, 0.0f, 0.0f, 0x1p-126f},
    {0x1.fep+127f, 0x1p+100f, 0x1p+100f, 0.0f, 0.0f, INFINITY},
};

TEST(LlamaCppVdpbf16ps, MeasuredCases) {
  for (const Measured& c : kMeasured)
    EXPECT_EQ(bits_of(lane(c.acc, c.w0, c.a0, c.w1, c.a1)), bits_of(c.want))
        << std::hexfloat << c.acc << " + " << c.w0 << " * " << c.a0 << " + " << c.w1 << " * " << c.a1;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bf16"))) void dpbf16_16(const float acc[16], const uint16_t w[32],
                                                              const uint16_t a[32], float out[16]) {
  __m512bh wv, av;
  std::memcpy(&wv, w, 64);
  std::memcpy(&av, a, 64);
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), wv, av));
}

// The emulation against the instruction itself, 16 lanes at a time, over inputs that separate the
// candidate orders and flush rules (numerics.md: near exponents, cancellation, any finite bits,
// subnormals, products below FLT_MIN, overflow, results next to FLT_MIN).
TEST(LlamaCppVdpbf16ps, EmulationEqualsTheInstruction) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (const Measured& c : kMeasured) {
    uint16_t w[32] = {}, a[32] = {};
    float acc[16] = {}, got[16];
    w[0] = quant::f32_to_bf16(c.w0), a[0] = quant::f32_to_bf16(c.a0);
    w[1] = quant::f32_to_bf16(c.w1), a[1] = quant::f32_to_bf16(c.a1);
    acc[0] = c.acc;
    dpbf16_16(acc, w, a, got);
    EXPECT_EQ(bits_of(got[0]), bits_of(c.want)) << std::hexfloat << c.acc << ": the table is not this CPU's";
  }
  std::mt19937_64 rng(20260101);
  auto bf = [&](int lo, int hi) {  // a bf16 of biased exponent in [lo, hi], any sign and mantissa
    return uint16_t((rng() & 0x807F) | (uint64_t(lo) + rng() % uint64_t(hi - lo + 1)) << 7);
  };
  auto f32 = [&](int lo, int hi) {
    return bits(uint32_t(rng() & 0x807FFFFF) | uint32_t(lo + int(rng() % uint64_t(hi - lo + 1))) << 23);
  };
  int64_t lanes = 0, differ = 0;
  for (int kind = 0; kind < 7; ++kind) {
    for (int round = 0; round < 20000; ++round) {
      uint16_t w[32], a[32];
      float acc[16], got[16];
      for (int i = 0; i < 32; ++i) {
        switch (kind) {
          case 0: w[i] = bf(120, 134); a[i] = bf(120, 134); break;
          case 1: w[i] = bf(125, 129); a[i] = bf(125, 129); break;
          case 2: do { w[i] = uint16_t(rng()); } while ((w[i] & 0x7F80) == 0x7F80);
                  do { a[i] = uint16_t(rng()); } while ((a[i] & 0x7F80) == 0x7F80); break;
          case 3: w[i] = rng() % 4 == 0 ? uint16_t(rng() & 0x807F) : bf(1, 30);
                  a[i] = rng() % 4 == 0 ? uint16_t(rng() & 0x807F) : bf(100, 140); break;
          case 4: w[i] = bf(1, 70); a[i] = bf(1, 70); break;
          case 5: w[i] = bf(180, 254); a[i] = bf(180, 254); break;
          default: w[i] = i % 2 ? bf(50, 52) : 0; a[i] = i % 2 ? bf(50, 52) : 0; break;
        }
      }
      for (int l = 0; l < 16; ++l) {
        const float p = quant::bf16_to_f32(w[2 * l]) * quant::bf16_to_f32(a[2 * l]) +
                        quant::bf16_to_f32(w[2 * l + 1]) * quant::bf16_to_f32(a[2 * l + 1]);
        switch (kind) {
          case 0: acc[l] = f32(118, 136); break;
          case 1: acc[l] = -p * (1.0f + float(int(rng() % 7) - 3) * 1e-6f); break;
          case 2: do { acc[l] = bits(uint32_t(rng())); } while (!std::isfinite(acc[l])); break;
          case 3: case 4: acc[l] = rng() % 2 ? bits(uint32_t(rng()) & 0x807FFFFF) : f32(1, 20); break;
          case 5: acc[l] = f32(200, 254); break;
          default: acc[l] = bits(0x00800000u + uint32_t(rng() % 3)) * (p > 0 ? -1.0f : 1.0f); break;
        }
      }
      dpbf16_16(acc, w, a, got);
      for (int l = 0; l < 16; ++l) {
        const float want = lane(acc[l], quant::bf16_to_f32(w[2 * l]), quant::bf16_to_f32(a[2 * l]),
                                quant::bf16_to_f32(w[2 * l + 1]), quant::bf16_to_f32(a[2 * l + 1]));
        ++lanes;
        if (bits_of(want) != bits_of(got[l]) && !(std::isnan(want) && std::isnan(got[l]))) {
          if (differ++ < 5)
            ADD_FAILURE() << "kind " << kind << ": acc " << acc[l] << " w " << w[2 * l] << "," << w[2 * l + 1]
                          << " a " << a[2 * l] << "," << a[2 * l + 1] << ": instruction " << got[l]
                          << ", emulation " << want;
        }
      }
    }
  }
  EXPECT_EQ(differ, 0) << "of " << lanes << " lanes";
  std::printf("[ info ] %lld vdpbf16ps lanes compared\n", static_cast<long long>(lanes));
}
#endif

}  // namespace
