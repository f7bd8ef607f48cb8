// What VDPBF16PS (_mm512_dpbf16_ps, llama.cpp's BF16 dot products in AVX512-BF16 builds) computes on
// this CPU, against candidate emulations: which product of a lane's pair goes in first, one rounding
// or two, denormals read as zero (DAZ) and flushed (FTZ), and where tininess is detected. Eight
// kinds of input, ROUNDS x 16 lanes each; prints each candidate's mismatches per kind. The one that
// matched every lane on Zen 4 is quant::vdpbf16ps_step (numerics.md, "The llama.cpp route").
// Build: g++ -O2 -std=c++17 -mavx512f -mavx512bf16 -ffp-contract=off vdpbf16ps_probe.cpp -o vdpbf16ps_probe
// Usage: vdpbf16ps_probe [ROUNDS (default 200000)] [x: print the first mismatches] [N: only the first N candidates]
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float bf(uint16_t h) { return bits_f(uint32_t(h) << 16); }

static float daz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
static float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// ---- exact sum of up to three terms m * 2^e, rounded once to float (RNE) ----
struct Big {  // two's complement fixed point, bit 0 = 2^-320
  static constexpr int L = 12, OFF = 320;
  uint64_t w[L] = {};
  void add_term(float f) {  // f exact as float (or f = product given as two floats, see add_prod)
    if (f == 0) return;
    int e; float m = std::frexp(f, &e);  // f = m * 2^e, 0.5 <= |m| < 1
    int64_t mi = int64_t(std::ldexp(m, 24)); e -= 24;  // f = mi * 2^e exactly
    add_int(mi, e);
  }
  void add_prod(float a, float b) {  // bf16 * bf16: exact as int mantissas
    if (a == 0 || b == 0) return;
    int ea, eb; float ma = std::frexp(a, &ea), mb = std::frexp(b, &eb);
    int64_t ia = int64_t(std::ldexp(ma, 24)), ib = int64_t(std::ldexp(mb, 24));
    // ia, ib have their low 16 bits zero (bf16) but subnormals: frexp normalizes, still exact in 24 bits
    __int128 p = (__int128)ia * ib;  // up to 48 bits
    add_int128(p, ea - 24 + eb - 24);
  }
  void add_int(int64_t v, int e) { add_int128((__int128)v, e); }
  void add_int128(__int128 v, int e) {
    bool neg = v < 0; unsigned __int128 u = neg ? (unsigned __int128)(-v) : (unsigned __int128)v;
    int pos = e + OFF;  // bit position of u's bit 0
    uint64_t t[L] = {};
    // place u (<= 64 significant bits here) at pos
    for (int b = 0; b < 128; ++b)
      if ((u >> b) & 1) { int p = pos + b; t[p / 64] |= 1ull << (p % 64); }
    if (neg) {  // two's complement of t
      unsigned __int128 carry = 1;
      for (int i = 0; i < L; ++i) { unsigned __int128 s = (unsigned __int128)(~t[i]) + carry; t[i] = uint64_t(s); carry = s >> 64; }
    }
    unsigned __int128 carry = 0;
    for (int i = 0; i < L; ++i) { unsigned __int128 s = (unsigned __int128)w[i] + t[i] + carry; w[i] = uint64_t(s); carry = s >> 64; }
  }
  // round to float, RNE; ftz: flush results below FLT_MIN (tininess after rounding to 24 bits, unbounded exponent)
  float round(bool ftz_out) const {
    uint64_t a[L]; std::memcpy(a, w, sizeof a);
    bool neg = (a[L - 1] >> 63) & 1;
    if (neg) { unsigned __int128 carry = 1; for (int i = 0; i < L; ++i) { unsigned __int128 s = (unsigned __int128)(~a[i]) + carry; a[i] = uint64_t(s); carry = s >> 64; } }
    int top = -1;
    for (int i = L - 1; i >= 0 && top < 0; --i) if (a[i]) top = i * 64 + 63 - __builtin_clzll(a[i]);
    if (top < 0) return neg ? -0.0f : 0.0f;
    auto bit = [&](int p) -> int { return p < 0 ? 0 : int((a[p / 64] >> (p % 64)) & 1); };
    int exp2 = top - OFF;  // value in [2^exp2, 2^(exp2+1))
    int lsb = top - 23;    // 24-bit precision
    if (!ftz_out && exp2 < -126) lsb = -149 + OFF;  // subnormal precision
    // mantissa bits [lsb, top]
    uint64_t m = 0;
    for (int p = top; p >= lsb; --p) m = (m << 1) | uint64_t(bit(p));
    int g = bit(lsb - 1); bool sticky = false;
    for (int p = lsb - 2; p >= 0 && !sticky; --p) sticky = bit(p);
    if (g && (sticky || (m & 1))) ++m;
    double v = std::ldexp(double(m), lsb - OFF);
    if (ftz_out && v < std::ldexp(1.0, -126)) v = 0;
    float f = v > 3.4028234663852886e38 ? INFINITY : float(v);
    return neg ? -f : f;
  }
};

static float cand_exact_once(float c, float a0, float b0, float a1, float b1, bool daz_in, bool ftz_out) {
  if (daz_in) { c = daz(c); a0 = daz(a0); b0 = daz(b0); a1 = daz(a1); b1 = daz(b1); }
  // infinities / NaN: leave to the plain formula
  if (!std::isfinite(c) || !std::isfinite(a0 * b0) || !std::isfinite(a1 * b1)) return c + a0 * b0 + a1 * b1;
  Big s; s.add_term(c); s.add_prod(a0, b0); s.add_prod(a1, b1);
  float r = s.round(ftz_out);
  return r;
}

static float step(float c, float a, float b, bool daz_in, bool ftz_out) {
  if (daz_in) { c = daz(c); a = daz(a); b = daz(b); }
  float r = std::fma(a, b, c);
  if (ftz_out) {
    // tininess after rounding (x86): recompute with the exact value at 24 bits unbounded exponent
    if (std::fabs(r) < 1.1754943508222875e-38f && r != 0) {
      Big s; s.add_term(c); s.add_prod(a, b);
      r = s.round(true);
    }
  }
  return r;
}

// FTZ with tininess detected after rounding to 24 bits (unbounded exponent): flushes an exact value in
// [FLT_MIN - 2^-150, FLT_MIN - 2^-151) that the subnormal rounding of fmaf takes up to FLT_MIN.
static float step_after(float c, float a, float b) {
  c = daz(c); a = daz(a); b = daz(b);
  if (std::fma(a, b, c) == 0) return std::fma(a, b, c);  // exact zero: IEEE's signed zero
  Big s; s.add_term(c); s.add_prod(a, b);
  if (!std::isfinite(c) || !std::isfinite(a * b)) return std::fma(a, b, c);
  return s.round(true);
}
struct Cand { const char* name; float (*f)(float, float, float, float, float); };
// argument order: c, a0, b0, a1, b1 (pair element 0 = even = low bf16)
static float c_odd_even_daz_ftz(float c, float a0, float b0, float a1, float b1) { return step(step(c, a1, b1, true, true), a0, b0, true, true); }
static float c_even_odd_daz_ftz(float c, float a0, float b0, float a1, float b1) { return step(step(c, a0, b0, true, true), a1, b1, true, true); }
static float c_odd_even_plain(float c, float a0, float b0, float a1, float b1) { return std::fma(a0, b0, std::fma(a1, b1, c)); }
static float c_even_odd_plain(float c, float a0, float b0, float a1, float b1) { return std::fma(a1, b1, std::fma(a0, b0, c)); }
static float c_once_daz_ftz(float c, float a0, float b0, float a1, float b1) { return cand_exact_once(c, a0, b0, a1, b1, true, true); }
static float c_once_plain(float c, float a0, float b0, float a1, float b1) { return cand_exact_once(c, a0, b0, a1, b1, false, false); }
static float c_pairsum_first(float c, float a0, float b0, float a1, float b1) {
  c = daz(c); a0 = daz(a0); b0 = daz(b0); a1 = daz(a1); b1 = daz(b1);
  return ftz(c + ftz(std::fma(a0, b0, a1 * b1)));
}
// DAZ on the bf16 inputs only; c not DAZed, FTZ out (per step)
static float c_odd_even_dazab_ftz(float c, float a0, float b0, float a1, float b1) {
  a0 = daz(a0); b0 = daz(b0); a1 = daz(a1); b1 = daz(b1);
  float t = std::fma(a1, b1, c); t = ftz(t);
  return ftz(std::fma(a0, b0, t));
}

// The portable emulation proposed for lmhead: fmaf on DAZ'ed inputs; the result flushed to a signed
// zero when the exact value, computed in double (exact wherever it matters), is below
// FLT_MIN - 2^-151 (x86's tininess after rounding).
static float emul_step(float c, float a, float b) {
  c = daz(c); a = daz(a); b = daz(b);
  const float r = std::fma(a, b, c);
  const double v = double(c) + double(a) * double(b);
  if (std::fabs(v) < 0x1p-126 - 0x1p-151) return std::copysign(0.0f, r);
  return r;
}
static float c_emul(float c, float a0, float b0, float a1, float b1) { return emul_step(emul_step(c, a1, b1), a0, b0); }
static float c_after(float c, float a0, float b0, float a1, float b1) { return step_after(step_after(c, a1, b1), a0, b0); }
static const Cand kCands[] = {
    {"emulation (quant::vdpbf16ps_step's rule)", c_emul},
    {"odd->even, DAZ, FTZ tiny-after-rounding", c_after},
    {"odd->even fma, DAZ in, FTZ of fmaf's subnormals", c_odd_even_daz_ftz},
    {"even->odd fma, DAZ in, FTZ out", c_even_odd_daz_ftz},
    {"odd->even fma, no DAZ/FTZ", c_odd_even_plain},
    {"even->odd fma, no DAZ/FTZ", c_even_odd_plain},
    {"exact c+p0+p1 rounded once, DAZ/FTZ", c_once_daz_ftz},
    {"exact c+p0+p1 rounded once, plain", c_once_plain},
    {"(p0+p1) rounded, then + c, DAZ/FTZ", c_pairsum_first},
    {"odd->even, DAZ a,b only, FTZ after rounding subnormal", c_odd_even_dazab_ftz},
};
constexpr int kN = sizeof(kCands) / sizeof(kCands[0]);

static bool same(float x, float y) { return f_bits(x) == f_bits(y) || (std::isnan(x) && std::isnan(y)); }

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 200000;  // x 16 lanes per distribution
  std::mt19937_64 rng(12345);
  auto u32 = [&] { return uint32_t(rng()); };
  // bf16 generators
  auto bf_exp = [&](int lo, int hi) -> uint16_t {  // biased exponent in [lo, hi]
    uint16_t s = uint16_t(u32() & 1) << 15, m = uint16_t(u32() & 0x7F);
    int e = lo + int(u32() % uint32_t(hi - lo + 1));
    return uint16_t(s | (e << 7) | m);
  };
  auto f_exp = [&](int lo, int hi) -> float {
    uint32_t s = (u32() & 1) << 31, m = u32() & 0x7FFFFF;
    int e = lo + int(u32() % uint32_t(hi - lo + 1));
    return bits_f(s | (uint32_t(e) << 23) | m);
  };
  const char* dist_names[] = {"narrow exponents (order/rounding)", "cancellation", "random bits (finite)",
                              "subnormal bf16 / c", "tiny products (underflow)", "large (overflow)", "ties", "FLT_MIN boundary"};
  const int ndist = 8;
  const int ncand = argc > 3 ? atoi(argv[3]) : kN;
  long mism[ndist][kN] = {}, total[ndist] = {};
  for (int d = 0; d < ndist; ++d) {
    for (long r = 0; r < rounds; ++r) {
      alignas(64) uint16_t A[32], B[32];
      alignas(64) float C[16], out[16];
      for (int l = 0; l < 16; ++l) {
        for (int k = 0; k < 2; ++k) {
          uint16_t a, b;
          switch (d) {
            case 0: a = bf_exp(120, 134); b = bf_exp(120, 134); break;
            case 1: a = bf_exp(125, 129); b = bf_exp(125, 129); break;
            case 2: do { a = uint16_t(u32()); } while (((a >> 7) & 0xFF) == 0xFF);
                    do { b = uint16_t(u32()); } while (((b >> 7) & 0xFF) == 0xFF); break;
            case 3: a = (u32() & 3) == 0 ? uint16_t((u32() & 0x807F)) : bf_exp(1, 30);
                    b = (u32() & 3) == 0 ? uint16_t((u32() & 0x807F)) : bf_exp(100, 140); break;
            case 4: a = bf_exp(1, 70); b = bf_exp(1, 70); break;
            case 5: a = bf_exp(180, 254); b = bf_exp(180, 254); break;
            case 7: if (k == 1) { a = bf_exp(50, 52); b = bf_exp(50, 52); } else { a = 0; b = 0; } break;
            default: a = bf_exp(125, 129); b = bf_exp(125, 129); break;
          }
          A[2 * l + k] = a; B[2 * l + k] = b;
        }
        float p0 = bf(A[2 * l]) * bf(B[2 * l]), p1 = bf(A[2 * l + 1]) * bf(B[2 * l + 1]);
        switch (d) {
          case 0: C[l] = f_exp(118, 136); break;
          case 1: C[l] = -(p0 + p1) * (1.0f + float(int(u32() % 7) - 3) * 1e-6f); break;
          case 2: do { C[l] = bits_f(u32()); } while (!std::isfinite(C[l])); break;
          case 3: C[l] = (u32() & 1) ? bits_f(u32() & 0x807FFFFF) : f_exp(1, 20); break;
          case 4: C[l] = (u32() & 1) ? bits_f(u32() & 0x807FFFFF) : f_exp(1, 10); break;
          case 5: C[l] = f_exp(200, 254); break;
          case 7: {
            const float p = bf(A[2 * l + 1]) * bf(B[2 * l + 1]);  // ~2^-152..2^-148
            C[l] = bits_f(0x00800000u + (u32() % 3)) * ((u32() & 1) ? 1 : -1);
            if ((C[l] > 0) == (p > 0)) C[l] = -C[l];
            break;
          }
          default: {  // c such that c + p1 lands near a tie: c a power of two, p1 tiny
            C[l] = std::ldexp(1.0f, int(u32() % 8)) * ((u32() & 1) ? 1 : -1);
            break;
          }
        }
      }
      __m512 c = _mm512_load_ps(C);
      __m512bh a = (__m512bh)_mm512_load_si512(A), b = (__m512bh)_mm512_load_si512(B);
      _mm512_store_ps(out, _mm512_dpbf16_ps(c, a, b));
      for (int l = 0; l < 16; ++l) {
        const float a0 = bf(A[2 * l]), b0 = bf(B[2 * l]), a1 = bf(A[2 * l + 1]), b1 = bf(B[2 * l + 1]);
        ++total[d];
        for (int k = 0; k < ncand; ++k)
          if (!same(kCands[k].f(C[l], a0, b0, a1, b1), out[l])) {
            if (mism[d][k] < 3 && k <= 1 && argc > 2)
              printf("  [%s] c=%a a0=%a b0=%a a1=%a b1=%a hw=%a cand=%a\n", dist_names[d], C[l], a0, b0, a1, b1,
                     out[l], kCands[k].f(C[l], a0, b0, a1, b1));
            ++mism[d][k];
          }
      }
    }
  }
  for (int d = 0; d < ndist; ++d) {
    printf("%-36s %9ld lanes:\n", dist_names[d], total[d]);
    for (int k = 0; k < ncand; ++k) printf("    %-55s mismatches %ld\n", kCands[k].name, mism[d][k]);
  }
}
