#pragma once
// The "stream" layouts of the head on the device (Q5_K here; Q4_K, Q6_K and Q8_0 at the end), read
// by the register stream kernels (q5k_stream.cu, q5k_stream_n.cu, q6k_stream.cu, q8_0_stream.cu)
// and q5k_tma.cu: the rows are cut into tiles of 16, and each tile's super-block sb (16 rows x 176 bytes) is one
// contiguous 2,816-byte item, items in (tile, sb) order. Inside an item the words are ordered by
// the thread that reads them, so every warp load is one contiguous run (whole 128-byte lines in
// global memory, no bank conflicts in shared memory) and a whole item is one bulk copy.
//
// Thread (g, q) of a warp (g = lane / 4, q = lane % 4) decodes rows g and g + 8 (r = 0, 1) and owns
// the float lanes k = q and k = q + 4: per row, the sixteen MMA operand words A(a), a = 2j + h, that
// hold the 5-bit levels of elements 32j + 4k .. 32j + 4k + 3 (k = q + 4h), one per byte. Those 320
// bits are stored as ten words W0..W9 that decode with few operations (pack_levels / level_word):
// W0..W9 carry A(0)..A(9) in bits 0-4 of each byte (one AND each); A(10)..A(15) are split into
// 3 + 2 bits over the spare bits 5-7 (four or six operations each), 38 operations per row instead
// of 56 for the file's nibble + high-bit planes. Item sections (lane = 4g + q):
//   W0..W3 [r][lane] 16 B at    0 + 512 r + 16 lane
//   W4..W7 [r][lane] 16 B at 1024 + 512 r + 16 lane
//   W8..W9 [r][lane]  8 B at 2048 + 256 r +  8 lane
//   header [row]     16 B at 2560 + 16 row (row = g + 8 r): d, dmin and the 12 scale bytes, as in the file
// Rows past the vocabulary (the last tile's padding) are zero. Same number of bytes as the file.
#include <cstdint>
#include <cstring>

namespace lmhead::cuda::stream {

constexpr int kTileRows = 16;
constexpr int kBlockBytes = 176;
constexpr int kItemBytes = kTileRows * kBlockBytes;  // 2816
constexpr int kW03 = 0, kW47 = 1024, kW89 = 2048, kHeader = 2560;
constexpr int kActWords = 128;  // one super-block of one token's q8 as per-lane MMA B pairs (zeros between)

// The file's Q5_K block: header (d, dmin, 12 bytes of scales) [0, 16), qh [16, 48), qs [48, 176).
constexpr int kFileQh = 16, kFileQs = 48;

#if defined(__CUDACC__)
#define LMHEAD_STREAM_FN __host__ __device__ __forceinline__
#else
#define LMHEAD_STREAM_FN inline
#endif

// A(a) from the ten stored words (a = 2j + h; constant in the kernel's unrolled loops).
LMHEAD_STREAM_FN uint32_t level_word(const uint32_t (&w)[10], int a) {
  if (a < 10) return w[a] & 0x1F1F1F1Fu;
  const int m = a - 10;
  const uint32_t low3 = (w[m] >> 5) & 0x07070707u;
  if (m < 4) return low3 | ((w[6 + m] >> 2) & 0x18181818u);
  const int b = m == 4 ? 6 : 8;
  return low3 | ((w[b] >> 4) & 0x08080808u) | ((w[b + 1] >> 3) & 0x10101010u);
}

// The inverse: ten words from the sixteen operand words (each byte a level below 32).
inline void pack_levels(const uint32_t (&a)[16], uint32_t (&w)[10]) {
  for (int i = 0; i < 10; ++i) w[i] = a[i];
  for (int m = 0; m < 6; ++m) {
    for (int byte = 0; byte < 4; ++byte) {
      const uint32_t v = (a[10 + m] >> (8 * byte)) & 0x1Fu, p3 = v & 7u, p2 = v >> 3;
      const int s = 8 * byte;
      w[m] |= p3 << (s + 5);
      if (m < 4) {
        w[6 + m] |= p2 << (s + 5);
      } else {
        const int b = m == 4 ? 6 : 8;
        w[b] |= (p2 & 1u) << (s + 7);
        w[b + 1] |= (p2 >> 1) << (s + 7);
      }
    }
  }
}

inline int64_t tiles(int64_t vocab) { return (vocab + kTileRows - 1) / kTileRows; }
inline uint64_t bytes(int64_t vocab, int groups) { return uint64_t(tiles(vocab)) * uint64_t(groups) * kItemBytes; }

// Which sixteen operand words thread q of a quad keeps per row (a = 0..15):
//   lanes:      a = 2j + h holds lane k = q + 4h of sub-block j (the MMA's N = the eight float lanes;
//               q5k_stream.cu, q5k_tma.cu)
//   sub-blocks: a = 2k + h holds lane k of sub-block j = q + 4h (the MMA's K = one lane over all
//               sub-blocks, N = tokens; q5k_stream_n.cu)
enum class Split { lanes, subblocks };

// The sixteen operand words of thread q for one row's block `in` (a Q5_K file block), in the order
// of `split`: each byte the 5-bit level of one element.
inline void operand_words(const uint8_t* in, int q, Split split, uint32_t (&a)[16]) {
  for (int x = 0; x < 8; ++x) {
    for (int h = 0; h < 2; ++h) {
      const int j = split == Split::lanes ? x : q + 4 * h;
      const int k = split == Split::lanes ? q + 4 * h : x;
      uint32_t qs, qh;  // file words: nibbles of sub-blocks 2p, 2p+1 (p = j / 2); high bits of all j
      std::memcpy(&qs, in + kFileQs + 32 * (j / 2) + 4 * k, 4);
      std::memcpy(&qh, in + kFileQh + 4 * k, 4);
      a[2 * x + h] = ((qs >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((qh >> j) & 0x01010101u) << 4);
    }
  }
}

// Re-orders one tile: rows[i] is file row i of the tile (groups Q5_K blocks) or nullptr past the
// vocabulary; dst receives groups * kItemBytes bytes.
inline void transcode_tile(const uint8_t* const (&rows)[kTileRows], int groups, uint8_t* dst,
                           Split split = Split::lanes) {
  std::memset(dst, 0, size_t(groups) * kItemBytes);
  for (int sb = 0; sb < groups; ++sb) {
    uint8_t* item = dst + size_t(sb) * kItemBytes;
    for (int row = 0; row < kTileRows; ++row) {
      if (rows[row] == nullptr) continue;
      const uint8_t* in = rows[row] + size_t(sb) * kBlockBytes;
      const int g = row % 8, r = row / 8;
      for (int q = 0; q < 4; ++q) {
        const int lane = 4 * g + q;
        uint32_t a[16], w[10];
        operand_words(in, q, split, a);
        pack_levels(a, w);
        std::memcpy(item + kW03 + 512 * r + 16 * lane, w, 16);
        std::memcpy(item + kW47 + 512 * r + 16 * lane, w + 4, 16);
        std::memcpy(item + kW89 + 256 * r + 8 * lane, w + 8, 8);
      }
      std::memcpy(item + kHeader + 16 * row, in, 16);
    }
  }
}

// Q4_K (144-byte blocks: the same 16-byte header, then qs [16, 144), no high bits) in the lanes
// split: a thread's sixteen operand words per row hold 4-bit levels, so they pack as eight words
// W_n = A(2n) | A(2n + 1) << 4 (one AND, or a shift and an AND, to decode). Item sections:
//   W0..W3 [r][lane] 16 B at    0 + 512 r + 16 lane
//   W4..W7 [r][lane] 16 B at 1024 + 512 r + 16 lane
//   header [row]     16 B at 2048 + 16 row
constexpr int kQ4BlockBytes = 144;
constexpr int kQ4ItemBytes = kTileRows * kQ4BlockBytes;  // 2304
constexpr int kQ4W03 = 0, kQ4W47 = 1024, kQ4Header = 2048;
constexpr int kQ4FileQs = 16;

LMHEAD_STREAM_FN uint32_t q4_level_word(uint32_t w_n, int h) { return (w_n >> (4 * h)) & 0x0F0F0F0Fu; }

inline uint64_t q4_bytes(int64_t vocab, int groups) {
  return uint64_t(tiles(vocab)) * uint64_t(groups) * kQ4ItemBytes;
}

inline void transcode_tile_q4k(const uint8_t* const (&rows)[kTileRows], int groups, uint8_t* dst) {
  std::memset(dst, 0, size_t(groups) * kQ4ItemBytes);
  for (int sb = 0; sb < groups; ++sb) {
    uint8_t* item = dst + size_t(sb) * kQ4ItemBytes;
    for (int row = 0; row < kTileRows; ++row) {
      if (rows[row] == nullptr) continue;
      const uint8_t* in = rows[row] + size_t(sb) * kQ4BlockBytes;
      const int g = row % 8, r = row / 8;
      for (int q = 0; q < 4; ++q) {
        const int lane = 4 * g + q;
        uint32_t w[8];
        for (int j = 0; j < 8; ++j) {
          uint32_t a[2];
          for (int h = 0; h < 2; ++h) {
            const int k = q + 4 * h;
            uint32_t qs;  // nibbles of sub-blocks 2p, 2p+1 (p = j / 2), elements 4k .. 4k+3
            std::memcpy(&qs, in + kQ4FileQs + 32 * (j / 2) + 4 * k, 4);
            a[h] = (qs >> (4 * (j % 2))) & 0x0F0F0F0Fu;
          }
          w[j] = a[0] | (a[1] << 4);
        }
        std::memcpy(item + kQ4W03 + 512 * r + 16 * lane, w, 16);
        std::memcpy(item + kQ4W47 + 512 * r + 16 * lane, w + 4, 16);
      }
      std::memcpy(item + kQ4Header + 16 * row, in, 16);
    }
  }
}

// Q6_K (210-byte blocks: ql [0, 128), qh [128, 192), 16 signed scales [192, 208), f16 d [208, 210))
// in the lanes split. The operands are the unsigned levels u = q6 + 32 (0..63; the kernel takes
// the offset off per lane from the bsums, numerics.md §5b). A thread's
// sixteen operand words per row (a = 2j + h: lane q + 4h of 32-element chunk j) take 384 bits,
// stored as twelve words: W0..W11 carry A(0)..A(11) in bits 0-5 of each byte (one AND each);
// A(12 + m) is split two bits at a time over the spare bits 6-7 of W(3m), W(3m + 1), W(3m + 2).
// Item sections (3,360 bytes, the file's 16 x 210):
//   W0..W3  [r][lane] 16 B at    0 + 512 r + 16 lane
//   W4..W7  [r][lane] 16 B at 1024 + 512 r + 16 lane
//   W8..W11 [r][lane] 16 B at 2048 + 512 r + 16 lane
//   scales  [row]     16 B at 3072 + 16 row, as in the file
//   d       [g]        4 B at 3328 + 4 g: the f16 d of rows g and g + 8 (one load per thread)
constexpr int kQ6BlockBytes = 210;
constexpr int kQ6ItemBytes = kTileRows * kQ6BlockBytes;  // 3360
constexpr int kQ6Scales = 3072, kQ6D = 3328;
constexpr int kQ6FileQh = 128, kQ6FileScales = 192, kQ6FileD = 208;

LMHEAD_STREAM_FN uint32_t q6_level_word(const uint32_t (&w)[12], int a) {
  if (a < 12) return w[a] & 0x3F3F3F3Fu;
  const int m = a - 12;
  return ((w[3 * m] >> 6) & 0x03030303u) | ((w[3 * m + 1] >> 4) & 0x0C0C0C0Cu) | ((w[3 * m + 2] >> 2) & 0x30303030u);
}

inline void pack_q6_levels(const uint32_t (&a)[16], uint32_t (&w)[12]) {
  for (int i = 0; i < 12; ++i) w[i] = a[i];
  for (int m = 0; m < 4; ++m)
    for (int byte = 0; byte < 4; ++byte) {
      const uint32_t v = (a[12 + m] >> (8 * byte)) & 0x3Fu;
      for (int part = 0; part < 3; ++part) w[3 * m + part] |= ((v >> (2 * part)) & 3u) << (8 * byte + 6);
    }
}

// The unsigned level (0..63) of element e of a file Q6_K block (numerics.md §3).
inline uint32_t q6_file_level(const uint8_t* block, int e) {
  const int n = e / 128, c = (e % 128) / 32, l = e % 32;
  const uint8_t low_byte = block[64 * n + 32 * (c & 1) + l];
  const uint32_t low = c < 2 ? (low_byte & 0x0Fu) : (low_byte >> 4);
  return low | (((uint32_t(block[kQ6FileQh + 32 * n + l]) >> (2 * c)) & 3u) << 4);
}

inline uint64_t q6_bytes(int64_t vocab, int groups) {
  return uint64_t(tiles(vocab)) * uint64_t(groups) * kQ6ItemBytes;
}

inline void transcode_tile_q6k(const uint8_t* const (&rows)[kTileRows], int groups, uint8_t* dst) {
  std::memset(dst, 0, size_t(groups) * kQ6ItemBytes);
  for (int sb = 0; sb < groups; ++sb) {
    uint8_t* item = dst + size_t(sb) * kQ6ItemBytes;
    for (int row = 0; row < kTileRows; ++row) {
      if (rows[row] == nullptr) continue;
      const uint8_t* in = rows[row] + size_t(sb) * kQ6BlockBytes;
      const int g = row % 8, r = row / 8;
      for (int q = 0; q < 4; ++q) {
        const int lane = 4 * g + q;
        uint32_t a[16], w[12];
        for (int j = 0; j < 8; ++j)
          for (int h = 0; h < 2; ++h) {
            const int k = q + 4 * h;
            uint32_t word = 0;
            for (int b = 0; b < 4; ++b) word |= q6_file_level(in, 32 * j + 4 * k + b) << (8 * b);
            a[2 * j + h] = word;
          }
        pack_q6_levels(a, w);
        for (int s = 0; s < 3; ++s) std::memcpy(item + 1024 * s + 512 * r + 16 * lane, w + 4 * s, 16);
      }
      std::memcpy(item + kQ6Scales + 16 * row, in + kQ6FileScales, 16);
      std::memcpy(item + kQ6D + 4 * g + 2 * r, in + kQ6FileD, 2);
    }
  }
}

// Q8_0 (34-byte blocks: f16 d, then 32 signed quants) in the lanes split, eight blocks (256
// elements) per item: block j is the "sub-block" j, and a thread's sixteen operand words per row
// (a = 2j + h: quants 4k .. 4k + 3 of block j, k = q + 4h) are stored as they are. Hidden sizes
// that are not a multiple of 256 keep the generic kernel. Item sections (4,352 bytes, 16 x 8 x 34):
//   W(4s) .. W(4s + 3) [r][lane] 16 B at 1024 s + 512 r + 16 lane (s = 0..3)
//   d [row] 16 B at 4096 + 16 row: the eight blocks' f16 d
constexpr int kQ80FileBlockBytes = 34;
constexpr int kQ80ItemBytes = kTileRows * 8 * kQ80FileBlockBytes;  // 4352
constexpr int kQ80D = 4096;

inline uint64_t q8_0_bytes(int64_t vocab, int groups) {
  return uint64_t(tiles(vocab)) * uint64_t(groups) * kQ80ItemBytes;
}

// rows[i]: file row i of the tile (groups * 8 Q8_0 blocks) or nullptr past the vocabulary.
inline void transcode_tile_q8_0(const uint8_t* const (&rows)[kTileRows], int groups, uint8_t* dst) {
  std::memset(dst, 0, size_t(groups) * kQ80ItemBytes);
  for (int sb = 0; sb < groups; ++sb) {
    uint8_t* item = dst + size_t(sb) * kQ80ItemBytes;
    for (int row = 0; row < kTileRows; ++row) {
      if (rows[row] == nullptr) continue;
      const uint8_t* in = rows[row] + size_t(sb) * 8 * kQ80FileBlockBytes;
      const int g = row % 8, r = row / 8;
      for (int q = 0; q < 4; ++q) {
        const int lane = 4 * g + q;
        uint32_t w[16];
        for (int j = 0; j < 8; ++j)
          for (int h = 0; h < 2; ++h) std::memcpy(&w[2 * j + h], in + kQ80FileBlockBytes * j + 2 + 4 * (q + 4 * h), 4);
        for (int s = 0; s < 4; ++s) std::memcpy(item + 1024 * s + 512 * r + 16 * lane, w + 4 * s, 16);
      }
      for (int j = 0; j < 8; ++j) std::memcpy(item + kQ80D + 16 * row + 2 * j, in + kQ80FileBlockBytes * j, 2);
    }
  }
}

}  // namespace lmhead::cuda::stream
