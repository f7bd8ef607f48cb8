#pragma once
// splitmix64 (Steele, Lea, Flood 2014), the one generator of every synthetic head and hidden state:
// fast enough for the 924 MB Muse head, and seeded streams are cheap, so each row can get its own
// and be produced in any order. Every helper here is part of what a seed means: changing one changes
// the bytes `lmhead make --seed N` writes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lmhead::synth {

struct SplitMix64 {
  uint64_t state;

  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // n bytes, eight (little-endian) per draw; a tail of fewer than eight takes the low bytes of one.
  void fill_bytes(uint8_t* p, size_t n) {
    while (n >= 8) { const uint64_t v = next(); std::memcpy(p, &v, 8); p += 8; n -= 8; }
    if (n) { const uint64_t v = next(); std::memcpy(p, &v, n); }
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1), 53 bits
  float unit24() { return float(next() >> 40) / float(1 << 24); }                  // [0, 1), 24 bits
  float gaussian() {
    // Box-Muller; u1 is kept away from 0 so the log is finite.
    const double u1 = uniform() * (1.0 - 1e-12) + 1e-12, u2 = uniform();
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

}  // namespace lmhead::synth
