// Row decoders against blocks built field by field from numerics.md §3: each test writes the
// fields a spec sentence names (a scale, a nibble, a high bit) and checks that exactly the
// elements that sentence talks about change, with the spec's per-element rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "quant_test_util.hpp"

namespace lmhead::quant {
namespace {

// Writes the 6-bit scale and min of sub-block j exactly as §3's decoding reads them.
void set_scale_min(uint8_t* scales, int j, uint8_t sc, uint8_t m) {
  if (j < 4) {
    scales[j] = uint8_t((scales[j] & 0xC0) | sc);
    scales[j + 4] = uint8_t((scales[j + 4] & 0xC0) | m);
  } else {
    scales[j + 4] = uint8_t((sc & 0x0F) | ((m & 0x0F) << 4));
    scales[j - 4] = uint8_t((scales[j - 4] & 0x3F) | ((sc >> 4) << 6));
    scales[j] = uint8_t((scales[j] & 0x3F) | ((m >> 4) << 6));
  }
}

constexpr uint8_t kSc[8] = {1, 17, 33, 63, 5, 40, 22, 58};  // distinct, some above 15 and 31
constexpr uint8_t kM[8] = {3, 62, 9, 31, 48, 7, 16, 35};

// The value §3 gives an element: (f32(d) * sc) * q - (f32(dmin) * m), each product rounded.
float k_value(uint16_t d, uint16_t dmin, int sc, int m, int q) {
  const float scale = f16_to_f32(d) * float(sc);
  const float min = f16_to_f32(dmin) * float(m);
  const float prod = scale * float(q);
  return prod - min;
}

TEST(Dequantize, Q4KElementLayout) {
  block_q4_K b;
  std::memset(&b, 0, sizeof b);
  b.d = f32_to_f16(0.0123f);
  b.dmin = f32_to_f16(0.0456f);
  for (int j = 0; j < 8; ++j) set_scale_min(b.scales, j, kSc[j], kM[j]);
  float y[256];
  for (int e = 0; e < 256; ++e) {
    // Element e = 64p + 32h + l lives in qs[32p + l], low nibble for h = 0, high for h = 1.
    const int p = e / 64, h = (e / 32) & 1, l = e % 32;
    block_q4_K probe = b;
    const int q = 1 + e % 15;
    probe.qs[32 * p + l] = uint8_t(h ? q << 4 : q);
    dequantize_row(TensorType::Q4_K, &probe, y, 256);
    for (int i = 0; i < 256; ++i) {
      const int j = i / 32;
      const float expect = k_value(b.d, b.dmin, kSc[j], kM[j], i == e ? q : 0);
      ASSERT_TRUE(testing::same_bits(y[i], expect)) << "probe " << e << " element " << i << ": " << y[i] << " vs " << expect;
    }
  }
}

TEST(Dequantize, Q5KElementLayout) {
  block_q5_K b;
  std::memset(&b, 0, sizeof b);
  b.d = f32_to_f16(0.0071f);
  b.dmin = f32_to_f16(0.0193f);
  for (int j = 0; j < 8; ++j) set_scale_min(b.scales, j, kSc[j], kM[j]);
  float y[256];
  for (int e = 0; e < 256; ++e) {
    // Low 4 bits as Q4_K; the fifth bit is bit 2p + h of qh[l].
    const int p = e / 64, h = (e / 32) & 1, l = e % 32;
    for (int high : {0, 1}) {
      block_q5_K probe = b;
      const int low = 1 + e % 15;
      probe.qs[32 * p + l] = uint8_t(h ? low << 4 : low);
      if (high) probe.qh[l] = uint8_t(1 << (2 * p + h));
      dequantize_row(TensorType::Q5_K, &probe, y, 256);
      for (int i = 0; i < 256; ++i) {
        const int j = i / 32;
        const float expect = k_value(b.d, b.dmin, kSc[j], kM[j], i == e ? low + 16 * high : 0);
        ASSERT_TRUE(testing::same_bits(y[i], expect)) << "probe " << e << " high " << high << " element " << i;
      }
    }
  }
}

TEST(Dequantize, Q6KElementLayout) {
  block_q6_K b;
  std::memset(&b, 0, sizeof b);
  b.d = f32_to_f16(0.0037f);
  for (int g = 0; g < 16; ++g) b.scales[g] = int8_t(g % 2 ? -7 * g - 3 : 8 * g + 1);
  // All-zero low and high bits decode to q = -32 everywhere.
  float y[256];
  for (int e = 0; e < 256; ++e) {
    // Half n = e / 128, l = e % 32, quarter c = (e % 128) / 32: low nibble of ql[64n + l] (c = 0),
    // of ql[64n + 32 + l] (c = 1), high nibbles of the same (c = 2, 3); bits 2c..2c+1 of qh[32n + l].
    const int n = e / 128, c = (e % 128) / 32, l = e % 32;
    block_q6_K probe = b;
    const int nibble = 1 + e % 15, top = 1 + e % 3;
    const int byte = 64 * n + (c == 1 || c == 3 ? 32 : 0) + l;
    probe.ql[byte] = uint8_t(c < 2 ? nibble : nibble << 4);
    probe.qh[32 * n + l] = uint8_t(top << (2 * c));
    dequantize_row(TensorType::Q6_K, &probe, y, 256);
    for (int i = 0; i < 256; ++i) {
      const int q = i == e ? (nibble | top << 4) - 32 : -32;
      const float scale = f16_to_f32(b.d) * float(b.scales[i / 16]);
      const float expect = scale * float(q);
      ASSERT_TRUE(testing::same_bits(y[i], expect)) << "probe " << e << " element " << i;
    }
  }
}

TEST(Dequantize, Q80AndFloatFormats) {
  block_q8_0 b[2];
  b[0].d = f32_to_f16(0.25f);
  b[1].d = f32_to_f16(-1.5f);
  for (int j = 0; j < 32; ++j) {
    b[0].qs[j] = int8_t(j * 8 - 128);
    b[1].qs[j] = int8_t(127 - j);
  }
  float y[64];
  dequantize_row(TensorType::Q8_0, b, y, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], 0.25f * float(j * 8 - 128));
    EXPECT_EQ(y[32 + j], -1.5f * float(127 - j));
  }
  const uint16_t h[3] = {0x3C00, 0xC000, 0x0001};  // 1, -2, the smallest subnormal
  dequantize_row(TensorType::F16, h, y, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  const uint16_t bf[2] = {0x3F80, 0xC0A0};
  dequantize_row(TensorType::BF16, bf, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -5.0f);
  const float f[2] = {3.25f, -0.0f};
  dequantize_row(TensorType::F32, f, y, 2);
  EXPECT_TRUE(testing::same_bits(y[0], 3.25f));
  EXPECT_TRUE(testing::same_bits(y[1], -0.0f));
}

// ggml's own quantized bytes decode to within one level step of the f32 rows they came from: the
// layout agrees with the writer of the golden file, not only with this project's quantizer.
TEST(Dequantize, GgmlQuantizedRowsDecodeNearTheirSource) {
  auto file = testing::open_golden("quantize-r64-n512.gguf");
  const auto source = testing::golden_tensor(file, "source", TensorType::F32);
  struct Case { const char* name; TensorType type; double steps; };
  for (const Case c : {Case{"q4_K", TensorType::Q4_K, 15}, Case{"q5_K", TensorType::Q5_K, 31},
                       Case{"q6_K", TensorType::Q6_K, 63}, Case{"q8_0", TensorType::Q8_0, 254}}) {
    const auto q = testing::golden_tensor(file, c.name, c.type);
    const int64_t be = tensor_type_info(c.type)->block_elems;
    std::vector<float> y(static_cast<size_t>(source.cols));
    double worst = 0;
    for (int64_t r = 0; r < source.rows; ++r) {
      dequantize_row(c.type, q.row(r), y.data(), source.cols);
      const float* x = source.f32_row(r);
      for (int64_t b = 0; b < source.cols; b += be) {
        float lo = 0, hi = 0;
        for (int64_t e = b; e < b + be; ++e) lo = std::min(lo, x[e]), hi = std::max(hi, x[e]);
        const double step = double(hi - lo) / c.steps;
        for (int64_t e = b; e < b + be; ++e) {
          const double err = std::fabs(double(y[size_t(e)]) - x[e]);
          if (step > 0) worst = std::max(worst, err / step);
          ASSERT_LE(err, step == 0 ? 0.0 : 4 * step) << c.name << " row " << r << " element " << e;
        }
      }
    }
    std::printf("[ quant    ] ggml %s decodes within %.3f ideal level steps of its source\n", c.name, worst);
  }
}

TEST(Dequantize, RejectsPartialBlocksAndNonHeadTypes) {
  float y[512];
  const uint8_t zeros[512] = {};
  EXPECT_THROW(dequantize_row(TensorType::Q6_K, zeros, y, 100), Error);
  EXPECT_THROW(dequantize_row(TensorType::Q8_0, zeros, y, 33), Error);
  EXPECT_THROW(dequantize_row(TensorType::Q8_K, zeros, y, 256), Error);
  try {
    dequantize_row(TensorType::Q2_K, zeros, y, 256);
    FAIL() << "no error for Q2_K";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q2_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmhead::quant
