// The reference quantizers against ggml's own quantization of the same rows
// (tests/data/quantize-r64-n512.gguf, written by ggml): every byte must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "quant/blocks.hpp"
#include "quant/quantize.hpp"
#include "quant_test_util.hpp"

namespace lmhead::quant {
namespace {

using testing::golden_tensor;
using testing::open_golden;

struct Case {
  const char* tensor;
  TensorType type;
};

class GoldenQuantizer : public ::testing::TestWithParam<Case> {};

TEST_P(GoldenQuantizer, ReproducesGgmlBytes) {
  const Case c = GetParam();
  auto file = open_golden("quantize-r64-n512.gguf");
  const auto source = golden_tensor(file, "source", TensorType::F32);
  const auto golden = golden_tensor(file, c.tensor, c.type);
  ASSERT_EQ(source.cols, 512);
  ASSERT_EQ(source.rows, 64);
  ASSERT_EQ(golden.cols, source.cols);
  ASSERT_EQ(golden.rows, source.rows);
  const TensorTypeInfo* info = tensor_type_info(c.type);
  const int64_t block_bytes = info->block_bytes;
  ASSERT_EQ(int64_t(golden.row_bytes), source.cols / info->block_elems * block_bytes);

  std::vector<uint8_t> row(golden.row_bytes);
  int64_t blocks = 0, equal_blocks = 0, bytes_differ = 0;
  for (int64_t r = 0; r < source.rows; ++r) {
    ASSERT_EQ(quantize_row(c.type, source.f32_row(r), row.data(), source.cols), golden.row_bytes);
    for (uint64_t b = 0; b < golden.row_bytes; b += uint64_t(block_bytes)) {
      int differ = 0;
      for (int64_t k = 0; k < block_bytes; ++k) differ += row[b + k] != golden.row(r)[b + k];
      ++blocks;
      equal_blocks += differ == 0;
      bytes_differ += differ;
      EXPECT_EQ(differ, 0) << c.tensor << " row " << r << " block " << b / block_bytes << ": " << differ
                           << " bytes differ";
    }
  }
  std::printf("[ quant    ] %s: %lld/%lld blocks byte-identical to ggml, %lld of %llu bytes differ\n", c.tensor,
              (long long)equal_blocks, (long long)blocks, (long long)bytes_differ,
              (unsigned long long)(golden.row_bytes * uint64_t(golden.rows)));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GoldenQuantizer,
                         ::testing::Values(Case{"q4_K", TensorType::Q4_K}, Case{"q5_K", TensorType::Q5_K},
                                           Case{"q6_K", TensorType::Q6_K}, Case{"q8_0", TensorType::Q8_0}),
                         [](const auto& info) { return std::string(info.param.tensor); });

TEST(Quantizer, FloatFormatsConvertElementwise) {
  const float x[4] = {1.0f, -2.5f, 65520.0f, 1.0f / 3.0f};
  uint16_t h[4];
  EXPECT_EQ(quantize_row(TensorType::F16, x, h, 4), 8u);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0xC100);
  EXPECT_EQ(h[2], 0x7C00);  // 65520 rounds up to inf in binary16
  EXPECT_EQ(h[3], 0x3555);
  EXPECT_EQ(quantize_row(TensorType::BF16, x, h, 4), 8u);
  EXPECT_EQ(h[0], 0x3F80);
  EXPECT_EQ(h[1], 0xC020);
  EXPECT_EQ(h[3], 0x3EAB);  // 0x3EAAAAAB rounds up
  float f[4];
  EXPECT_EQ(quantize_row(TensorType::F32, x, f, 4), 16u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f[i], x[i]);
}

TEST(Quantizer, AllZeroBlocksAreZeroBytes) {
  std::vector<float> zeros(256, 0.0f);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0}) {
    std::vector<uint8_t> q(1024, 0xEE);
    const size_t n = quantize_row(type, zeros.data(), q.data(), 256);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(q[i], 0) << tensor_type_name(type) << " byte " << i;
    EXPECT_EQ(q[n], 0xEE) << tensor_type_name(type) << " wrote past its blocks";
  }
}

TEST(Quantizer, RejectsPartialBlocksAndNonHeadTypes) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> q(4096);
  try {
    quantize_row(TensorType::Q5_K, x.data(), q.data(), 300);
    FAIL() << "no error for 300 elements of Q5_K";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q5_K"), std::string::npos) << e.what();
  }
  try {
    quantize_row(TensorType::Q4_0, x.data(), q.data(), 32);
    FAIL() << "no error for Q4_0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmhead::quant
