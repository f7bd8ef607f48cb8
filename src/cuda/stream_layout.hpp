#pragma once
// The Q5_K "stream" layout of the head on the device (read by q5k_stream.cu and q5k_tma.cu): the
// rows are cut into tiles of 16, and each tile's super-block sb (16 rows x 176 bytes) is one
// contiguous 2,816-byte item, items in (tile, sb) order. Inside an item the words are ordered by
// the thread that reads them, so every warp load is one contiguous run (whole 128-byte lines in
// global memory, no bank conflicts in shared memory) and a whole item is one bulk copy.
//
// Thread (g, q) of a warp (g = lane / 4, q = lane % 4) decodes rows g and g + 8 (r = 0, 1) and owns
// the float lanes k = q and k = q + 4, i.e. qs words 8p + q and 8p + q + 4 (p = 0..3) and qh words
// q and q + 4 of the file's block. Item sections (lane = 4g + q):
//   lo     [r][lane] 16 B at    0 + 512 r + 16 lane: qs words (q, q+4, 8+q, 12+q)
//   hi     [r][lane] 16 B at 1024 + 512 r + 16 lane: qs words (16+q, 20+q, 24+q, 28+q)
//   qh     [r][lane]  8 B at 2048 + 256 r +  8 lane: qh words (q, q+4)
//   header [row]     16 B at 2560 + 16 row (row = g + 8 r): d, dmin and the 12 scale bytes
// Rows past the vocabulary (the last tile's padding) are zero. Same bytes as the file, re-ordered.
#include <cstdint>
#include <cstring>

namespace lmhead::cuda::stream {

constexpr int kTileRows = 16;
constexpr int kBlockBytes = 176;
constexpr int kItemBytes = kTileRows * kBlockBytes;  // 2816
constexpr int kLo = 0, kHi = 1024, kQh = 2048, kHeader = 2560;
constexpr int kActWords = 128;  // one super-block of one token's q8 as per-lane MMA B pairs (zeros between)

// The file's Q5_K block: header (d, dmin, 12 bytes of scales) [0, 16), qh [16, 48), qs [48, 176).
constexpr int kFileQh = 16, kFileQs = 48;

inline int64_t tiles(int64_t vocab) { return (vocab + kTileRows - 1) / kTileRows; }
inline uint64_t bytes(int64_t vocab, int groups) { return uint64_t(tiles(vocab)) * uint64_t(groups) * kItemBytes; }

// Re-orders one tile: rows[i] is file row i of the tile (groups Q5_K blocks) or nullptr past the
// vocabulary; dst receives groups * kItemBytes bytes.
inline void transcode_tile(const uint8_t* const (&rows)[kTileRows], int groups, uint8_t* dst) {
  std::memset(dst, 0, size_t(groups) * kItemBytes);
  for (int sb = 0; sb < groups; ++sb) {
    uint8_t* item = dst + size_t(sb) * kItemBytes;
    for (int row = 0; row < kTileRows; ++row) {
      if (rows[row] == nullptr) continue;
      const uint8_t* in = rows[row] + size_t(sb) * kBlockBytes;
      const int g = row % 8, r = row / 8;
      for (int q = 0; q < 4; ++q) {
        const int lane = 4 * g + q;
        uint8_t* lo = item + kLo + 512 * r + 16 * lane;
        uint8_t* hi = item + kHi + 512 * r + 16 * lane;
        uint8_t* qh = item + kQh + 256 * r + 8 * lane;
        for (int i = 0; i < 4; ++i) {
          std::memcpy(lo + 4 * i, in + kFileQs + 4 * (4 * i + q), 4);       // qs words q, q+4, q+8, q+12
          std::memcpy(hi + 4 * i, in + kFileQs + 4 * (16 + 4 * i + q), 4);  // qs words 16+q, .., 28+q
        }
        std::memcpy(qh, in + kFileQh + 4 * q, 4);
        std::memcpy(qh + 4, in + kFileQh + 4 * (q + 4), 4);
      }
      std::memcpy(item + kHeader + 16 * row, in, 16);
    }
  }
}

}  // namespace lmhead::cuda::stream
