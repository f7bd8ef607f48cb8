// Reference dot products. Q5_K and Q6_K x Q8_K must reproduce llama.cpp's golden `logits_raw` bytes; every
// other pairing is held to an f64 oracle with a bound derived from the operands' magnitudes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "quant/activation.hpp"
#include "quant/blocks.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "quant/vec_dot.hpp"
#include "quant_test_util.hpp"

namespace lmhead::quant {
namespace {

using testing::golden_tensor;
using testing::open_golden;
using testing::same_bits;

constexpr double kUnit = 0x1p-24;  // unit roundoff of f32

// ---- golden: Q5_K x Q8_K is numerics.md §5, Q6_K x Q8_K §5b, byte for byte ----------------------

struct GoldenSet {
  const char* model;
  const char* vectors;
  TensorType type = TensorType::Q5_K;
};

class GoldenDot : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenDot, DotsEqualLogitsRawForEveryRowAndToken) {
  auto model = open_golden(GetParam().model);
  auto vectors = open_golden(GetParam().vectors);
  const TensorType type = GetParam().type;
  const auto weight = golden_tensor(model, "output.weight", type);
  const auto act = golden_tensor(vectors, "normed_vec_dot", TensorType::Q8_K);
  const auto normed = golden_tensor(vectors, "normed", TensorType::F32);
  const auto raw = golden_tensor(vectors, "logits_raw", TensorType::F32);
  const int64_t hidden = weight.cols, vocab = weight.rows, tokens = act.rows;
  ASSERT_EQ(act.cols, hidden);
  ASSERT_EQ(raw.cols, vocab);
  ASSERT_EQ(raw.rows, tokens);

  int64_t differ = 0;
  double f32_route_max = 0, f32_route_sum = 0;
  std::vector<float> scratch(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < vocab; ++r) {
      const float ours = vec_dot_q8_route(type, weight.row(r), act.row(t), hidden);
      const float golden = raw.f32_row(t)[r];
      if (!same_bits(ours, golden) && ++differ <= 5)
        ADD_FAILURE() << GetParam().vectors << " token " << t << " row " << r << ": " << ours << " vs golden "
                      << golden;
      // What the f32 route changes: the activation quantization error, not a defect.
      const float f32_route = vec_dot_f32_route(type, weight.row(r), normed.f32_row(t), hidden, scratch.data());
      const double d = std::fabs(double(f32_route) - golden);
      f32_route_max = std::max(f32_route_max, d);
      f32_route_sum += d;
    }
  EXPECT_EQ(differ, 0);
  std::printf("[ quant    ] %s: %s x Q8_K equals logits_raw for %lld of %lld (row, token) pairs\n",
              GetParam().vectors, std::string(tensor_type_name(type)).c_str(), (long long)(vocab * tokens - differ),
              (long long)(vocab * tokens));
  std::printf("[ quant    ] %s: f32 route minus golden q8 logits_raw: max |d| %.3g, mean |d| %.3g\n",
              GetParam().vectors, f32_route_max, f32_route_sum / double(vocab * tokens));
}

INSTANTIATE_TEST_SUITE_P(Sets, GoldenDot,
                         ::testing::Values(GoldenSet{"tail-q5k-v4099-h512.gguf", "tail-q5k-v4099-h512.vectors.gguf"},
                                           GoldenSet{"tail-q5k-v4096-h256.gguf", "tail-q5k-v4096-h256.vectors.gguf"},
                                           GoldenSet{"tail-q6k-v4101-h768.gguf", "tail-q6k-v4101-h768.vectors.gguf",
                                                     TensorType::Q6_K}),
                         [](const auto& info) { return std::string(info.param.model).substr(5, 14).replace(3, 1, "_").replace(9, 1, "_"); });

// ---- f64 oracles ---------------------------------------------------------------------------------

// One weight row in some head format, with what an oracle needs: the decoded values (§3 rounding)
// and, for formats with a min, the decoded min of every element (its magnitude enters the bound
// because the route adds the min term separately and may cancel against it).
struct Row {
  TensorType type;
  int64_t n;
  std::vector<uint8_t> bytes;
};

std::vector<float> decoded(const Row& row) {
  std::vector<float> w(static_cast<size_t>(row.n));
  dequantize_row(row.type, row.bytes.data(), w.data(), row.n);
  return w;
}

// The min of each element: decode a copy with every level cleared (q = 0 leaves -f32(dmin) * m).
std::vector<float> decoded_mins(const Row& row) {
  std::vector<float> mins(size_t(row.n), 0.0f);
  if (row.type != TensorType::Q4_K && row.type != TensorType::Q5_K) return mins;
  Row zero = row;
  for (int64_t b = 0; b < row.n / kSuperBlock; ++b) {
    if (row.type == TensorType::Q4_K) {
      auto* blk = reinterpret_cast<block_q4_K*>(zero.bytes.data()) + b;
      std::memset(blk->qs, 0, sizeof blk->qs);
    } else {
      auto* blk = reinterpret_cast<block_q5_K*>(zero.bytes.data()) + b;
      std::memset(blk->qs, 0, sizeof blk->qs);
      std::memset(blk->qh, 0, sizeof blk->qh);
    }
  }
  return decoded(zero);
}

// The activations as the q8 route sees them, decoded exactly (in double).
std::vector<double> decoded_activations(ActivationFormat fmt, const std::vector<uint8_t>& act, int64_t n) {
  std::vector<double> a(static_cast<size_t>(n));
  switch (fmt) {
    case ActivationFormat::q8_K: {
      auto* b = reinterpret_cast<const block_q8_K*>(act.data());
      for (int64_t e = 0; e < n; ++e) a[size_t(e)] = double(b[e / 256].d) * b[e / 256].qs[e % 256];
      break;
    }
    case ActivationFormat::q8_0: {
      auto* b = reinterpret_cast<const block_q8_0*>(act.data());
      for (int64_t e = 0; e < n; ++e) a[size_t(e)] = double(f16_to_f32(b[e / 32].d)) * b[e / 32].qs[e % 32];
      break;
    }
    case ActivationFormat::f16:
    case ActivationFormat::bf16: {
      auto* h = reinterpret_cast<const uint16_t*>(act.data());
      for (int64_t e = 0; e < n; ++e)
        a[size_t(e)] = fmt == ActivationFormat::f16 ? f16_to_f32(h[e]) : bf16_to_f32(h[e]);
      break;
    }
    case ActivationFormat::f32: {
      auto* f = reinterpret_cast<const float*>(act.data());
      for (int64_t e = 0; e < n; ++e) a[size_t(e)] = f[e];
      break;
    }
  }
  return a;
}

// Longest chain of roundings into one accumulator lane: one per block (or per 8 elements for the
// float formats), plus the lane reduction, the scale products and the final additions.
double chain_length(TensorType type, int64_t n) {
  const int64_t be = tensor_type_info(type)->block_elems;
  return be == 1 ? double((n + 7) / 8) + 3 : double(n / be) + 3;
}

struct ErrorStats {
  double max_abs = 0, sum_abs = 0, worst_ratio = 0;
  int64_t count = 0;
  void add(double err, double bound) {
    max_abs = std::max(max_abs, err);
    sum_abs += err;
    worst_ratio = std::max(worst_ratio, bound > 0 ? err / bound : (err > 0 ? INFINITY : 0));
    ++count;
  }
};

// q8 route: (chain + 8) u * sum (|w| + 2|min|) |a| covers the lane accumulation, the rounded
// y.d * d products, float(isum), and the oracle's own per-element rounding of the decoded weights.
void check_q8_route(const Row& row, const float* x, ErrorStats& stats, const std::string& what) {
  const ActivationFormat fmt = activation_format(row.type, ActivationRoute::q8);
  std::vector<uint8_t> act(activation_bytes(fmt, row.n));
  quantize_activations(fmt, x, row.n, act.data());
  const std::vector<float> w = decoded(row), mins = decoded_mins(row);
  const std::vector<double> a = decoded_activations(fmt, act, row.n);
  double exact = 0, magnitude = 0;
  for (int64_t e = 0; e < row.n; ++e) {
    exact += double(w[size_t(e)]) * a[size_t(e)];
    magnitude += (std::fabs(double(w[size_t(e)])) + 2 * std::fabs(double(mins[size_t(e)]))) * std::fabs(a[size_t(e)]);
  }
  const double bound = (chain_length(row.type, row.n) + 8) * kUnit * magnitude;
  const float got = vec_dot_q8_route(row.type, row.bytes.data(), act.data(), row.n);
  const double err = std::fabs(double(got) - exact);
  stats.add(err, bound);
  EXPECT_LE(err, bound) << what << ": q8 route " << got << ", oracle " << exact;
}

// f32 route: the same decoded weights on both sides, so only the accumulation rounds:
// (ceil(n / 8) + 3) u * sum |w x|.
void check_f32_route(const Row& row, const float* x, ErrorStats& stats, const std::string& what) {
  const std::vector<float> w = decoded(row);
  double exact = 0, magnitude = 0;
  for (int64_t e = 0; e < row.n; ++e) {
    exact += double(w[size_t(e)]) * double(x[e]);
    magnitude += std::fabs(double(w[size_t(e)]) * double(x[e]));
  }
  const double bound = (double((row.n + 7) / 8) + 3) * kUnit * magnitude;
  std::vector<float> scratch(static_cast<size_t>(row.n));
  const float got = vec_dot_f32_route(row.type, row.bytes.data(), x, row.n, scratch.data());
  const double err = std::fabs(double(got) - exact);
  stats.add(err, bound);
  EXPECT_LE(err, bound) << what << ": f32 route " << got << ", oracle " << exact;
}

// Random but valid rows: random level bytes under modest, finite scales (numerics.md §3: any byte
// pattern with finite d / dmin is a valid block).
Row random_row(TensorType type, int64_t n, std::mt19937& rng) {
  const TensorTypeInfo* info = tensor_type_info(type);
  Row row{type, n, std::vector<uint8_t>(size_t(n / info->block_elems * info->block_bytes))};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  std::normal_distribution<float> gauss(0.0f, 0.05f);
  for (uint8_t& b : row.bytes) b = uint8_t(byte(rng));
  for (int64_t b = 0; b < n / info->block_elems; ++b) {
    uint8_t* blk = row.bytes.data() + b * info->block_bytes;
    switch (type) {
      case TensorType::Q4_K: reinterpret_cast<block_q4_K*>(blk)->d = f32_to_f16(scale(rng));
                             reinterpret_cast<block_q4_K*>(blk)->dmin = f32_to_f16(scale(rng)); break;
      case TensorType::Q5_K: reinterpret_cast<block_q5_K*>(blk)->d = f32_to_f16(scale(rng));
                             reinterpret_cast<block_q5_K*>(blk)->dmin = f32_to_f16(scale(rng)); break;
      case TensorType::Q6_K: reinterpret_cast<block_q6_K*>(blk)->d = f32_to_f16(scale(rng)); break;
      case TensorType::Q8_0: reinterpret_cast<block_q8_0*>(blk)->d = f32_to_f16(scale(rng)); break;
      case TensorType::F16: reinterpret_cast<uint16_t*>(blk)[0] = f32_to_f16(gauss(rng)); break;
      case TensorType::BF16: reinterpret_cast<uint16_t*>(blk)[0] = f32_to_bf16(gauss(rng)); break;
      case TensorType::F32: { const float v = gauss(rng); std::memcpy(blk, &v, 4); break; }
      default: break;
    }
  }
  return row;
}

std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = gauss(rng);
  if (n > 5) x[size_t(n / 3)] = 9.5f;  // an outlier, as real hidden states have
  return x;
}

std::vector<int64_t> sizes_for(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return {32, 96, 512, 6656};
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::F32: return {1, 7, 8, 9, 100, 513, 6656};
    default: return {256, 512, 1280, 6656};
  }
}

class OracleDot : public ::testing::TestWithParam<TensorType> {};

TEST_P(OracleDot, BothRoutesWithinTheirBounds) {
  const TensorType type = GetParam();
  const std::string name(tensor_type_name(type));
  ErrorStats q8, f32;

  // ggml's own quantization of the golden rows (K-quants and Q8_0) or this project's float
  // conversion of them, against the golden tokens' normed activations.
  auto qfile = open_golden("quantize-r64-n512.gguf");
  const auto source = golden_tensor(qfile, "source", TensorType::F32);
  auto vectors = open_golden("tail-q5k-v4099-h512.vectors.gguf");
  const auto normed = golden_tensor(vectors, "normed", TensorType::F32);
  ASSERT_EQ(normed.cols, source.cols);
  for (int64_t r = 0; r < source.rows; ++r) {
    Row row{type, source.cols, {}};
    if (qfile->find_tensor(name) != nullptr) {
      const auto q = golden_tensor(qfile, name, type);
      row.bytes.assign(q.row(r), q.row(r) + q.row_bytes);
    } else {
      const TensorTypeInfo* info = tensor_type_info(type);
      row.bytes.resize(size_t(source.cols * info->block_bytes));
      quantize_row(type, source.f32_row(r), row.bytes.data(), source.cols);
    }
    for (int64_t t = 0; t < normed.rows; ++t) {
      const std::string what = name + " golden row " + std::to_string(r) + " token " + std::to_string(t);
      check_q8_route(row, normed.f32_row(t), q8, what);
      check_f32_route(row, normed.f32_row(t), f32, what);
    }
  }

  std::mt19937 rng(20240611u + uint32_t(type));
  for (int64_t n : sizes_for(type))
    for (int trial = 0; trial < 24; ++trial) {
      const Row row = random_row(type, n, rng);
      const std::vector<float> x = random_activations(n, rng);
      const std::string what = name + " random n=" + std::to_string(n) + " trial " + std::to_string(trial);
      check_q8_route(row, x.data(), q8, what);
      check_f32_route(row, x.data(), f32, what);
    }

  std::printf("[ quant    ] %s q8 route vs f64 oracle (%lld dots): max |err| %.3g, mean |err| %.3g, worst err/bound %.3f\n",
              name.c_str(), (long long)q8.count, q8.max_abs, q8.sum_abs / double(q8.count), q8.worst_ratio);
  std::printf("[ quant    ] %s f32 route vs f64 oracle (%lld dots): max |err| %.3g, mean |err| %.3g, worst err/bound %.3f\n",
              name.c_str(), (long long)f32.count, f32.max_abs, f32.sum_abs / double(f32.count), f32.worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(AllHeadTypes, OracleDot,
                         ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0,
                                           TensorType::F16, TensorType::BF16, TensorType::F32),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

// The float formats' documented order: element e feeds lane e % 8, reduced (h0+h2)+(h1+h3). These
// values make every other grouping give a different f32 answer.
TEST(VecDotOrder, FloatLanesAndReduction) {
  std::vector<float> w(16, 0.0f), x(16, 1.0f);
  w[0] = 1.0f;       // lane 0
  w[9] = 0x1p-24f;   // lane 1
  w[10] = -1.0f;     // lane 2
  w[13] = 0x1p-24f;  // lane 5
  // Lanes: h0 = 1, h1 = 2^-23, h2 = -1, h3 = 0, so (h0 + h2) + (h1 + h3) = 2^-23. Summing the
  // elements in order, or the lanes in order, loses the first 2^-24 against 1 and gives 2^-24.
  EXPECT_EQ(vec_dot_q8_route(TensorType::F32, w.data(), x.data(), 16), 0x1p-23f);
  std::vector<float> scratch(16);
  EXPECT_EQ(vec_dot_f32_route(TensorType::F32, w.data(), x.data(), 16, scratch.data()), 0x1p-23f);
}

TEST(VecDotOrder, RejectsPartialBlocksAndNonHeadTypes) {
  std::vector<uint8_t> zeros(4096);
  std::vector<float> scratch(512);
  EXPECT_THROW(vec_dot_q8_route(TensorType::Q5_K, zeros.data(), zeros.data(), 300), Error);
  EXPECT_THROW(vec_dot_q8_route(TensorType::Q4_0, zeros.data(), zeros.data(), 32), Error);
  EXPECT_THROW(vec_dot_f32_route(TensorType::Q8_0, zeros.data(), scratch.data(), 40, scratch.data()), Error);
}

}  // namespace
}  // namespace lmhead::quant
