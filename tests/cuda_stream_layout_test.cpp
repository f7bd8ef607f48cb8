// The Q5_K stream layout (src/cuda/stream_layout.hpp) on the host: the packed level words decode
// back to every level, and reading an item the way the stream kernels do (thread (g, q), rows g and
// g + 8, sub-block j, lanes q and q + 4) yields every 5-bit level and header of the file, with zeros
// for rows past the vocabulary. Runs without a GPU, so CI checks the layout the kernels depend on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/stream_layout.hpp"
#include "quant/blocks.hpp"

namespace lmhead {
namespace {

namespace st = cuda::stream;

// The 5-bit level of element e (0..255) of a file block, as numerics.md §3 defines it.
int file_level(const uint8_t* block, int e) {
  const int sub = e / 32, pos = e % 32;
  const uint8_t qs = block[st::kFileQs + 32 * (sub / 2) + pos];
  const int lo = (sub % 2 == 0) ? (qs & 0x0F) : (qs >> 4);
  const int hi = (block[st::kFileQh + pos] >> sub) & 1;
  return lo + 16 * hi;
}

TEST(CudaStreamLayout, SizesPadTheLastTile) {
  EXPECT_EQ(st::tiles(1), 1);
  EXPECT_EQ(st::tiles(16), 1);
  EXPECT_EQ(st::tiles(17), 2);
  EXPECT_EQ(st::bytes(202048, 26), uint64_t(12628) * 26 * 2816);  // the Muse head: no padding
  EXPECT_EQ(st::kItemBytes % 128, 0);
}

TEST(CudaStreamLayout, PackedWordsRoundTrip) {
  std::mt19937_64 rng(7);
  for (int rep = 0; rep < 20000; ++rep) {
    uint32_t a[16], w[10];
    for (auto& x : a) x = uint32_t(rng()) & 0x1F1F1F1Fu;
    if (rep == 0) for (auto& x : a) x = 0x1F1F1F1Fu;
    if (rep == 1) for (auto& x : a) x = 0;
    st::pack_levels(a, w);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(st::level_word(w, i), a[i]) << "word " << i << " rep " << rep;
  }
}

TEST(CudaStreamLayout, KernelReadsRecoverEveryLevel) {
  std::mt19937_64 rng(20261130);
  for (int groups : {1, 2, 3}) {
    for (int present : {16, 9, 1}) {  // rows of the tile inside the vocabulary
      std::vector<uint8_t> file(size_t(present) * groups * st::kBlockBytes);
      for (auto& b : file) b = uint8_t(rng());
      const uint8_t* rows[st::kTileRows] = {};
      for (int i = 0; i < present; ++i) rows[i] = file.data() + size_t(i) * groups * st::kBlockBytes;
      for (st::Split split : {st::Split::lanes, st::Split::subblocks}) {
      std::vector<uint8_t> out(size_t(groups) * st::kItemBytes, 0xEE);
      st::transcode_tile(rows, groups, out.data(), split);

      for (int sb = 0; sb < groups; ++sb) {
        const uint8_t* item = out.data() + size_t(sb) * st::kItemBytes;

        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4;
          for (int r = 0; r < 2; ++r) {
            const int row = g + 8 * r;
            uint32_t words[10];
            std::memcpy(words, item + st::kW03 + 512 * r + 16 * lane, 16);
            std::memcpy(words + 4, item + st::kW47 + 512 * r + 16 * lane, 16);
            std::memcpy(words + 8, item + st::kW89 + 256 * r + 8 * lane, 8);
            const uint8_t* file_block = rows[row] ? rows[row] + sb * st::kBlockBytes : nullptr;
            const uint8_t zeros[16] = {};
            EXPECT_EQ(std::memcmp(item + st::kHeader + 16 * row, file_block ? file_block : zeros, 16), 0)
                << "header of row " << row;
            for (int x = 0; x < 8; ++x) {
              for (int half = 0; half < 2; ++half) {
                // lanes: sub-block x, lane q + 4 half; sub-blocks: sub-block q + 4 half, lane x.
                const int j = split == st::Split::lanes ? x : q + 4 * half;
                const int k = split == st::Split::lanes ? q + 4 * half : x;
                const uint32_t w = st::level_word(words, 2 * x + half);
                for (int byte = 0; byte < 4; ++byte) {
                  const int e = 32 * j + 4 * k + byte;
                  const int want = file_block ? file_level(file_block, e) : 0;
                  ASSERT_EQ(int((w >> (8 * byte)) & 0xFF), want)
                      << "groups " << groups << " item " << sb << " row " << row << " j " << j << " element " << e;
                }
              }
            }
          }
        }
      }
      }
    }
  }
}

// The 4-bit level of element e of a file Q4_K block.
int file_level_q4(const uint8_t* block, int e) {
  const int sub = e / 32, pos = e % 32;
  const uint8_t qs = block[st::kQ4FileQs + 32 * (sub / 2) + pos];
  return (sub % 2 == 0) ? (qs & 0x0F) : (qs >> 4);
}

TEST(CudaStreamLayout, Q4KReadsRecoverEveryLevel) {
  std::mt19937_64 rng(11);
  for (int groups : {1, 3}) {
    for (int present : {16, 5}) {
      std::vector<uint8_t> file(size_t(present) * groups * st::kQ4BlockBytes);
      for (auto& b : file) b = uint8_t(rng());
      const uint8_t* rows[st::kTileRows] = {};
      for (int i = 0; i < present; ++i) rows[i] = file.data() + size_t(i) * groups * st::kQ4BlockBytes;
      std::vector<uint8_t> out(size_t(groups) * st::kQ4ItemBytes, 0xEE);
      st::transcode_tile_q4k(rows, groups, out.data());
      EXPECT_EQ(st::q4_bytes(202048, 26), uint64_t(202048) * 26 * 144);
      for (int sb = 0; sb < groups; ++sb) {
        const uint8_t* item = out.data() + size_t(sb) * st::kQ4ItemBytes;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4;
          for (int r = 0; r < 2; ++r) {
            const int row = g + 8 * r;
            uint32_t words[8];
            std::memcpy(words, item + st::kQ4W03 + 512 * r + 16 * lane, 16);
            std::memcpy(words + 4, item + st::kQ4W47 + 512 * r + 16 * lane, 16);
            const uint8_t* file_block = rows[row] ? rows[row] + sb * st::kQ4BlockBytes : nullptr;
            const uint8_t zeros[16] = {};
            EXPECT_EQ(std::memcmp(item + st::kQ4Header + 16 * row, file_block ? file_block : zeros, 16), 0);
            for (int j = 0; j < 8; ++j) {
              for (int h = 0; h < 2; ++h) {
                const uint32_t w = st::q4_level_word(words[j], h);
                for (int byte = 0; byte < 4; ++byte) {
                  const int e = 32 * j + 4 * (q + 4 * h) + byte;
                  ASSERT_EQ(int((w >> (8 * byte)) & 0xFF), file_block ? file_level_q4(file_block, e) : 0)
                      << "groups " << groups << " item " << sb << " row " << row << " element " << e;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(CudaStreamLayout, Q6KPackedWordsRoundTrip) {
  std::mt19937_64 rng(13);
  for (int rep = 0; rep < 20000; ++rep) {
    uint32_t a[16], w[12];
    for (auto& x : a) x = uint32_t(rng()) & 0x3F3F3F3Fu;
    if (rep == 0) for (auto& x : a) x = 0x3F3F3F3Fu;
    st::pack_q6_levels(a, w);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(st::q6_level_word(w, i), a[i]) << "word " << i << " rep " << rep;
  }
}

// Reading a Q6_K item as q6k_stream.cu does gives quant::q6k_level + 32 of every element, the
// file's scales and d, and zeros past the vocabulary.
TEST(CudaStreamLayout, Q6KReadsRecoverEveryLevel) {
  std::mt19937_64 rng(17);
  EXPECT_EQ(st::q6_bytes(202048, 26), uint64_t(202048) * 26 * 210);
  for (int groups : {1, 3}) {
    for (int present : {16, 7}) {
      std::vector<uint8_t> file(size_t(present) * groups * st::kQ6BlockBytes);
      for (auto& b : file) b = uint8_t(rng());
      const uint8_t* rows[st::kTileRows] = {};
      for (int i = 0; i < present; ++i) rows[i] = file.data() + size_t(i) * groups * st::kQ6BlockBytes;
      std::vector<uint8_t> out(size_t(groups) * st::kQ6ItemBytes, 0xEE);
      st::transcode_tile_q6k(rows, groups, out.data());
      for (int sb = 0; sb < groups; ++sb) {
        const uint8_t* item = out.data() + size_t(sb) * st::kQ6ItemBytes;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4;
          uint16_t d_pair[2];
          std::memcpy(d_pair, item + st::kQ6D + 4 * g, 4);
          for (int r = 0; r < 2; ++r) {
            const int row = g + 8 * r;
            uint32_t words[12];
            for (int s = 0; s < 3; ++s) std::memcpy(words + 4 * s, item + 1024 * s + 512 * r + 16 * lane, 16);
            const uint8_t* block = rows[row] ? rows[row] + sb * st::kQ6BlockBytes : nullptr;
            quant::block_q6_K b{};
            if (block) std::memcpy(&b, block, sizeof b);
            EXPECT_EQ(std::memcmp(item + st::kQ6Scales + 16 * row, b.scales, 16), 0) << "scales of row " << row;
            EXPECT_EQ(d_pair[r], b.d) << "d of row " << row;
            for (int a = 0; a < 16; ++a) {
              const int j = a / 2, k = q + 4 * (a % 2);
              const uint32_t w = st::q6_level_word(words, a);
              for (int byte = 0; byte < 4; ++byte) {
                const int e = 32 * j + 4 * k + byte;
                ASSERT_EQ(int((w >> (8 * byte)) & 0xFF), block ? quant::q6k_level(b, e) + 32 : 0)
                    << "groups " << groups << " item " << sb << " row " << row << " element " << e;
              }
            }
          }
        }
      }
    }
  }
}

// Reading a Q8_0 item as q8_0_stream.cu does gives every quant and d of the file's blocks.
TEST(CudaStreamLayout, Q80ReadsRecoverEveryQuant) {
  std::mt19937_64 rng(19);
  EXPECT_EQ(st::q8_0_bytes(202048, 26), uint64_t(202048) * 208 * 34);
  for (int groups : {1, 2}) {
    for (int present : {16, 3}) {
      const int blocks = 8 * groups;
      std::vector<uint8_t> file(size_t(present) * blocks * st::kQ80FileBlockBytes);
      for (auto& b : file) b = uint8_t(rng());
      const uint8_t* rows[st::kTileRows] = {};
      for (int i = 0; i < present; ++i) rows[i] = file.data() + size_t(i) * blocks * st::kQ80FileBlockBytes;
      std::vector<uint8_t> out(size_t(groups) * st::kQ80ItemBytes, 0xEE);
      st::transcode_tile_q8_0(rows, groups, out.data());
      for (int sb = 0; sb < groups; ++sb) {
        const uint8_t* item = out.data() + size_t(sb) * st::kQ80ItemBytes;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4;
          for (int r = 0; r < 2; ++r) {
            const int row = g + 8 * r;
            uint32_t words[16];
            for (int s = 0; s < 4; ++s) std::memcpy(words + 4 * s, item + 1024 * s + 512 * r + 16 * lane, 16);
            for (int j = 0; j < 8; ++j) {
              quant::block_q8_0 b{};
              if (rows[row]) std::memcpy(&b, rows[row] + size_t(8 * sb + j) * st::kQ80FileBlockBytes, sizeof b);
              uint16_t d;
              std::memcpy(&d, item + st::kQ80D + 16 * row + 2 * j, 2);
              EXPECT_EQ(d, b.d) << "d of row " << row << " block " << j;
              for (int h = 0; h < 2; ++h)
                for (int byte = 0; byte < 4; ++byte) {
                  const int e = 4 * (q + 4 * h) + byte;
                  ASSERT_EQ(int8_t((words[2 * j + h] >> (8 * byte)) & 0xFF), b.qs[e])
                      << "groups " << groups << " item " << sb << " row " << row << " block " << j << " quant " << e;
                }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lmhead
