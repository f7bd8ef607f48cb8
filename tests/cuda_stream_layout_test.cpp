// The Q5_K stream layout (src/cuda/stream_layout.hpp) on the host: the transcoded row is a
// permutation of the file's bytes, and reading it the way q5k_stream.cu does (thread q's runs,
// sub-block j, lanes q and q + 4) yields every 5-bit level and the header of the file's block.
// Runs without a GPU, so CI checks the layout the kernel depends on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/stream_layout.hpp"

namespace lmhead {
namespace {

namespace st = cuda::stream;

uint32_t word_at(const uint8_t* p) { uint32_t w; std::memcpy(&w, p, 4); return w; }

// The 5-bit level of element e (0..255) of a file block, as numerics.md §3 defines it.
int file_level(const uint8_t* block, int e) {
  const int sub = e / 32, pos = e % 32;
  const uint8_t qs = block[st::kFileQs + 32 * (sub / 2) + pos];
  const int lo = (sub % 2 == 0) ? (qs & 0x0F) : (qs >> 4);
  const int hi = (block[st::kFileQh + pos] >> sub) & 1;
  return lo + 16 * hi;
}

TEST(CudaStreamLayout, RowStrideIsSectorAligned) {
  for (int g = 1; g < 40; ++g) {
    EXPECT_EQ(st::row_stride(g) % 32, 0);
    EXPECT_GE(st::row_stride(g), int64_t(g) * st::kBlockBytes);
    EXPECT_LT(st::row_stride(g), int64_t(g) * st::kBlockBytes + 32);
  }
}

TEST(CudaStreamLayout, KernelReadsRecoverEveryLevel) {
  std::mt19937_64 rng(20261130);
  for (int groups : {1, 2, 3, 26}) {
    std::vector<uint8_t> row(size_t(groups) * st::kBlockBytes);
    for (auto& b : row) b = uint8_t(rng());
    std::vector<uint8_t> out(size_t(st::row_stride(groups)), 0xEE);
    st::transcode_row(row.data(), groups, out.data());

    // A permutation of the bytes within each block, zero padding after the last one.
    for (int b = 0; b < groups; ++b) {
      std::vector<uint8_t> a(row.begin() + b * st::kBlockBytes, row.begin() + (b + 1) * st::kBlockBytes);
      std::vector<uint8_t> t(out.begin() + b * st::kBlockBytes, out.begin() + (b + 1) * st::kBlockBytes);
      std::sort(a.begin(), a.end());
      std::sort(t.begin(), t.end());
      EXPECT_EQ(a, t) << "block " << b;
    }
    for (size_t i = size_t(groups) * st::kBlockBytes; i < out.size(); ++i) EXPECT_EQ(out[i], 0) << "padding byte " << i;

    for (int b = 0; b < groups; ++b) {
      const uint8_t* file = row.data() + size_t(b) * st::kBlockBytes;
      const uint8_t* blk = out.data() + size_t(b) * st::kBlockBytes;
      const bool even = b % 2 == 0;
      EXPECT_EQ(std::memcmp(blk + (even ? st::kEvenHeader : st::kOddHeader), file, 16), 0) << "header of block " << b;
      for (int q = 0; q < 4; ++q) {
        const uint8_t* lo = blk + (even ? st::kEvenLo : st::kOddLo) + 16 * q;
        const uint8_t* hi = blk + (even ? st::kEvenHi : st::kOddHi) + 16 * q;
        const uint8_t* qh = blk + (even ? st::kEvenQh : st::kOddQh) + 8 * q;
        for (int j = 0; j < 8; ++j) {
          const int p = j / 2;
          const uint8_t* src = p < 2 ? lo : hi;
          for (int half = 0; half < 2; ++half) {  // lane q, then lane q + 4
            const uint32_t qs_word = word_at(src + 4 * (2 * (p % 2) + half));
            const uint32_t qh_word = word_at(qh + 4 * half);
            const uint32_t w = ((qs_word >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((qh_word >> j) & 0x01010101u) << 4);
            const int lane = q + 4 * half;
            for (int byte = 0; byte < 4; ++byte) {
              const int e = 32 * j + 4 * lane + byte;
              ASSERT_EQ(int((w >> (8 * byte)) & 0xFF), file_level(file, e))
                  << "groups " << groups << " block " << b << " q " << q << " j " << j << " element " << e;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lmhead
