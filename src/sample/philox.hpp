#pragma once
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so the random number of a (seed, position, purpose) triple is a pure
// function of that triple. Nothing about threads, blocks, shards or how a call was split can
// reach it, which is what lets every backend and every split draw the same token.
// Integer arithmetic only: host and device compute the same bits.
#include <cstdint>

#include "quant/blocks.hpp"  // LMHEAD_HD

namespace lmhead::sample {

// What a uniform is for; part of the counter, so the streams never overlap.
enum class Stream : uint32_t {
  draw = 0,      // the token drawn at a position
  accept = 1,    // speculative verification: accept the draft token at a position?
  residual = 2,  // speculative verification: the token drawn from max(0, p - q) after a rejection
};

struct Philox4 {
  uint32_t v[4];
};

LMHEAD_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * ctr.v[0];
    const uint64_t p1 = uint64_t(kM1) * ctr.v[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// A double uniform on the open interval (0, 1): 52 random bits plus one half, times 2^-52 (exact:
// the sum needs 53 bits). Both ends are excluded so that a draw never lands on a weight-0 id.
LMHEAD_HD double uniform(uint64_t seed, int64_t position, Stream stream) {
  const uint64_t pos = uint64_t(position);
  const Philox4 r = philox4x32_10(Philox4{{uint32_t(pos), uint32_t(pos >> 32), uint32_t(stream), 0u}},
                                  uint32_t(seed), uint32_t(seed >> 32));
  const uint64_t bits = (uint64_t(r.v[0]) << 20) | (uint64_t(r.v[1]) >> 12);  // 52 bits
  return (double(bits) + 0.5) * 0x1p-52;
}

}  // namespace lmhead::sample
