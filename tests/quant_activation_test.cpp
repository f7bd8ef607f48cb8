// Activation quantization (numerics.md §4) against the Q8_K blocks llama.cpp's CPU matvec used for
// the golden tokens (`normed_vec_dot` in the vectors files), and the rules the spec states.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "quant/activation.hpp"
#include "quant_test_util.hpp"

namespace lmhead::quant {
namespace {

using testing::golden_tensor;
using testing::open_golden;

class GoldenActivations : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenActivations, Q8KEqualsGgmlBlocksForEveryToken) {
  auto file = open_golden(GetParam());
  const auto normed = golden_tensor(file, "normed", TensorType::F32);
  const auto golden = golden_tensor(file, "normed_vec_dot", TensorType::Q8_K);
  ASSERT_EQ(golden.cols, normed.cols);
  ASSERT_EQ(golden.rows, normed.rows);
  ASSERT_EQ(activation_bytes(ActivationFormat::q8_K, normed.cols), golden.row_bytes);
  std::vector<uint8_t> ours(golden.row_bytes);
  for (int64_t t = 0; t < normed.rows; ++t) {
    quantize_activations(ActivationFormat::q8_K, normed.f32_row(t), normed.cols, ours.data());
    for (uint64_t i = 0; i < golden.row_bytes; ++i)
      ASSERT_EQ(ours[i], golden.row(t)[i]) << GetParam() << " token " << t << " byte " << i << " (block "
                                           << i / sizeof(block_q8_K) << ")";
  }
  std::printf("[ quant    ] %s: Q8_K of `normed` equals `normed_vec_dot` for all %lld tokens (%llu bytes each)\n",
              GetParam(), (long long)normed.rows, (unsigned long long)golden.row_bytes);
}

INSTANTIATE_TEST_SUITE_P(BothSets, GoldenActivations,
                         ::testing::Values("tail-q5k-v4099-h512.vectors.gguf", "tail-q5k-v4096-h256.vectors.gguf"),
                         [](const auto& info) { return std::string(info.param).substr(9, 10).replace(5, 1, "_"); });

TEST(Q8K, FirstIndexOfTheLargestMagnitudeSetsTheScale) {
  std::vector<float> x(256, 0.25f);
  x[10] = 2.0f;   // first to reach |x| = 2
  x[20] = -2.0f;  // same magnitude, later: must not decide the sign of d
  block_q8_K b;
  quantize_q8_K(x.data(), 256, &b);
  EXPECT_EQ(b.qs[10], -127);
  EXPECT_EQ(b.qs[20], 127);
  EXPECT_EQ(b.d, 1.0f / (-127.0f / 2.0f));
  EXPECT_LT(b.d, 0);
  for (int k = 0; k < 16; ++k) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b.qs[16 * k + j];
    EXPECT_EQ(b.bsums[k], sum) << "bsums[" << k << "]";
  }
}

TEST(Q8K, ZeroBlockIsAllZero) {
  std::vector<float> x(512, 0.0f);
  x[300] = 1.0f;  // the second block is not zero
  block_q8_K b[2];
  std::memset(b, 0x5A, sizeof b);
  quantize_q8_K(x.data(), 512, b);
  EXPECT_EQ(b[0].d, 0.0f);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(b[0].qs[j], 0);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(b[0].bsums[k], 0);
  EXPECT_EQ(b[1].qs[300 - 256], -127);
}

TEST(Q8K, RoundsHalfToEven) {
  // max = -127 gives iscale = 1, so every x quantizes to nearest_int(x) itself.
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  block_q8_K b;
  quantize_q8_K(x.data(), 256, &b);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], -2);
}

TEST(Q80Activations, ScaleFromAmaxAndTiesToEven) {
  float x[32] = {};
  x[0] = 127.0f;  // amax 127: id = 1 exactly, d = fp16(1)
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  x[4] = -126.5f;
  block_q8_0 b;
  quantize_q8_0_activations(x, 32, &b);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);     // roundf would give 3
  EXPECT_EQ(b.qs[2], -4);
  EXPECT_EQ(b.qs[3], 0);     // roundf would give 1
  EXPECT_EQ(b.qs[4], -126);  // roundf would give -127
}

TEST(Q80Activations, IdComesFromAmaxNotFromTheRoundedScale) {
  // amax = 1: d = 1/127 is not a binary16 value; 1 / f32(fp16(d)) is about 127.006, which would
  // push 100.499 / 127 over the .5 boundary to 101. Scaling by 127 / amax keeps it at 100.
  float x[32] = {};
  x[0] = 1.0f;
  x[1] = 100.499f / 127.0f;
  block_q8_0 b;
  quantize_q8_0_activations(x, 32, &b);
  EXPECT_EQ(b.d, f32_to_f16(1.0f / 127.0f));
  EXPECT_NE(1.0f / f16_to_f32(b.d), 127.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 100);
}

TEST(ActivationFormat, FollowsHeadTypeAndRoute) {
  using F = ActivationFormat;
  const ActivationRoute q8 = ActivationRoute::q8, f32 = ActivationRoute::f32;
  EXPECT_EQ(activation_format(TensorType::Q4_K, q8), F::q8_K);
  EXPECT_EQ(activation_format(TensorType::Q5_K, q8), F::q8_K);
  EXPECT_EQ(activation_format(TensorType::Q6_K, q8), F::q8_K);
  EXPECT_EQ(activation_format(TensorType::Q8_0, q8), F::q8_0);
  EXPECT_EQ(activation_format(TensorType::F16, q8), F::f16);
  EXPECT_EQ(activation_format(TensorType::BF16, q8), F::bf16);
  EXPECT_EQ(activation_format(TensorType::F32, q8), F::f32);
  for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16,
                       TensorType::BF16, TensorType::F32})
    EXPECT_EQ(activation_format(t, f32), F::f32) << tensor_type_name(t);
  EXPECT_THROW(activation_format(TensorType::Q4_0, q8), Error);

  EXPECT_EQ(activation_bytes(F::q8_K, 6656), 26u * 292u);
  EXPECT_EQ(activation_bytes(F::q8_0, 6656), 208u * 34u);
  EXPECT_EQ(activation_bytes(F::f16, 6656), 6656u * 2u);
  EXPECT_EQ(activation_bytes(F::bf16, 6656), 6656u * 2u);
  EXPECT_EQ(activation_bytes(F::f32, 6656), 6656u * 4u);
  EXPECT_EQ(activation_bytes(F::f32, 7), 28u);
  EXPECT_THROW(activation_bytes(F::q8_K, 300), Error);
  EXPECT_THROW(activation_bytes(F::q8_0, 48), Error);
}

TEST(ActivationFormat, FloatRoutesRoundEachElement) {
  const float x[3] = {1.0f / 3.0f, -70000.0f, 1e-8f};
  uint16_t h[3];
  quantize_activations(ActivationFormat::f16, x, 3, h);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h[i], f32_to_f16(x[i]));
  EXPECT_EQ(h[1], 0xFC00);  // -inf: the f16 route saturates like llama.cpp's conversion
  quantize_activations(ActivationFormat::bf16, x, 3, h);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h[i], f32_to_bf16(x[i]));
  float f[3];
  quantize_activations(ActivationFormat::f32, x, 3, f);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(testing::same_bits(f[i], x[i]));
}

}  // namespace
}  // namespace lmhead::quant
