#pragma once
// The Q5_K "stream" layout of the head on the device (read by q5k_stream.cu): the same 176 bytes
// per super-block, with the words of each block re-ordered so that a thread's share of a row is
// contiguous and every warp load covers whole 32-byte sectors.
//
// Thread q (0..3) of a quad owns the float lanes k = q and k = q + 4, i.e. qs words 8p + q and
// 8p + q + 4 (p = 0..3) and qh words q and q + 4 of the file's block. Its 16-byte run "lo" holds qs
// words (q, q+4, 8+q, 12+q), "hi" holds (16+q, 20+q, 24+q, 28+q), and its 8-byte run "qh" holds qh
// words (q, q+4). Rows start 32-byte aligned (the stride is rounded up), so an even block starts
// on a sector and an odd block 16 bytes into one; the two parities mirror each other:
//   even block: lo runs [0, 64)   hi runs [64, 128)  qh runs [128, 160)  header [160, 176)
//   odd block:  header [0, 16)    qh runs [16, 48)   hi runs [48, 112)   lo runs [112, 176)
// so that the even block's header and the next odd block's header share one sector.
#include <cstdint>
#include <cstring>

namespace lmhead::cuda::stream {

constexpr int kBlockBytes = 176;
constexpr int kActWords = 64;  // one super-block of one token's q8, in lane runs

constexpr int kEvenLo = 0, kEvenHi = 64, kEvenQh = 128, kEvenHeader = 160;
constexpr int kOddHeader = 0, kOddQh = 16, kOddHi = 48, kOddLo = 112;

// The file's Q5_K block: header (d, dmin, 12 bytes of scales) [0, 16), qh [16, 48), qs [48, 176).
constexpr int kFileQh = 16, kFileQs = 48;

inline int64_t row_stride(int groups) { return (int64_t(groups) * kBlockBytes + 31) / 32 * 32; }

// Re-orders one file row of `groups` Q5_K blocks into `dst` (row_stride(groups) bytes; the
// padding is zero).
inline void transcode_row(const uint8_t* src, int groups, uint8_t* dst) {
  std::memset(dst, 0, size_t(row_stride(groups)));
  for (int b = 0; b < groups; ++b) {
    const uint8_t* in = src + size_t(b) * kBlockBytes;
    uint8_t* out = dst + size_t(b) * kBlockBytes;
    const bool even = b % 2 == 0;
    auto qs_word = [&](int w) { return in + kFileQs + 4 * w; };
    auto qh_word = [&](int w) { return in + kFileQh + 4 * w; };
    for (int q = 0; q < 4; ++q) {
      uint8_t* lo = out + (even ? kEvenLo : kOddLo) + 16 * q;
      uint8_t* hi = out + (even ? kEvenHi : kOddHi) + 16 * q;
      uint8_t* qh = out + (even ? kEvenQh : kOddQh) + 8 * q;
      for (int i = 0; i < 4; ++i) {
        std::memcpy(lo + 4 * i, qs_word(4 * i + q), 4);       // words q, q+4, q+8, q+12
        std::memcpy(hi + 4 * i, qs_word(16 + 4 * i + q), 4);  // words 16+q, .., 28+q
      }
      std::memcpy(qh, qh_word(q), 4);
      std::memcpy(qh + 4, qh_word(q + 4), 4);
    }
    std::memcpy(out + (even ? kEvenHeader : kOddHeader), in, 16);
  }
}

}  // namespace lmhead::cuda::stream
