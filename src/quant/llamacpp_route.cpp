// The llama.cpp route's paths and orders (see llamacpp_route.hpp). Integer sums are exact and formed
// in any order; the comments say where llama.cpp rounds floats, which is all that fixes the bytes.
#include "quant/llamacpp_route.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "lmhead/error.hpp"
#include "quant/blocks.hpp"
#include "quant/vec_dot.hpp"

namespace lmhead::quant {

std::string_view path_name(LlamaCppPath p) {
  switch (p) {
    case LlamaCppPath::vec_dot: return "vec_dot";
    case LlamaCppPath::sgemm_q8_0: return "llamafile_sgemm_q8_0";
    case LlamaCppPath::tiled_kquant: return "tiled_kquant";
    case LlamaCppPath::repack_q4_K_8x8: return "repack_q4_K_8x8";
    case LlamaCppPath::vec_dot_f16: return "vec_dot_f16";
    case LlamaCppPath::sgemm_f16: return "llamafile_sgemm_f16";
    case LlamaCppPath::vec_dot_bf16: return "vec_dot_bf16";
    case LlamaCppPath::sgemm_bf16: return "llamafile_sgemm_bf16";
    case LlamaCppPath::vec_dot_f32: return "vec_dot_f32";
    case LlamaCppPath::sgemm_f32: return "llamafile_sgemm_f32";
    case LlamaCppPath::unsupported: return "unsupported";
  }
  return "unknown";
}

LlamaCppPath llamacpp_path(TensorType type, int64_t vocab, int64_t hidden, int tokens, std::string_view* why) {
  auto say = [&](std::string_view w) { if (why) *why = w; };
  switch (type) {
    case TensorType::Q4_K:
      // The CPU_REPACK buffer takes a Q4_K weight whose row count is a multiple of 8 on any AVX2
      // CPU (repack.cpp, ggml_repack_get_optimal_repack_type); the tiled path then declines it
      // (its weight has `extra` set) and the repack kernels run at every T.
      if (vocab % 8 == 0) {
        say("Q4_K with rows % 8 == 0 is repacked at load (q4_K_8x8): gemv below 4 tokens, gemm per 4");
        return LlamaCppPath::repack_q4_K_8x8;
      }
      [[fallthrough]];
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      if (tokens >= 8) {
        say("tiled K-quant matmul: tried first in ggml_compute_forward_mul_mat, taken from 8 tokens on");
        return LlamaCppPath::tiled_kquant;
      }
      say("vec_dot: the tiled matmul's batch floor is 8 tokens; llamafile's sgemm has no K-quant kernel on x86");
      return LlamaCppPath::vec_dot;
    case TensorType::Q8_0:
      if (tokens >= 2) {
        say("llamafile's sgemm (tinyBLAS_Q0_AVX) on the Q8_0-quantized activations, from 2 tokens on");
        return LlamaCppPath::sgemm_q8_0;
      }
      say("vec_dot: llamafile's sgemm declines a single token");
      return LlamaCppPath::vec_dot;
    case TensorType::F16:
      if (tokens >= 2 && hidden % 16 == 0 && vocab % 4 == 0) {
        say("llamafile's sgemm (tinyBLAS<16, __m512>) on f16 activations, from 2 tokens on");
        return LlamaCppPath::sgemm_f16;
      }
      say("ggml_vec_dot_f16: llamafile's sgemm declines a single token (or hidden % 16 / rows % 4)");
      return LlamaCppPath::vec_dot_f16;
    case TensorType::BF16:
      // The f32 activations are first offered to the sgemm as they are (declined: its BF16 kernel
      // wants BF16 activations), then converted with ggml_cpu_fp32_to_bf16 and offered again.
      if (tokens >= 2 && hidden % 32 == 0 && vocab % 4 == 0) {
        say("llamafile's sgemm (tinyBLAS<32, __m512, __m512bh>, vdpbf16ps) on bf16 activations, from 2 tokens on");
        return LlamaCppPath::sgemm_bf16;
      }
      say("ggml_vec_dot_bf16 (vdpbf16ps): llamafile's sgemm declines a single token (or hidden % 32 / rows % 4)");
      return LlamaCppPath::vec_dot_bf16;
    case TensorType::F32:
      if (tokens >= 2 && hidden % 16 == 0 && vocab % 4 == 0) {
        say("llamafile's sgemm (tinyBLAS<16, __m512>) on the f32 activations, from 2 tokens on");
        return LlamaCppPath::sgemm_f32;
      }
      say("ggml_vec_dot_f32: llamafile's sgemm declines a single token (or hidden % 16 / rows % 4)");
      return LlamaCppPath::vec_dot_f32;
    default:
      say("not a head type of llama.cpp's route");
      return LlamaCppPath::unsupported;
  }
}

ActivationFormat llamacpp_activation_format(LlamaCppPath path, TensorType type) {
  switch (path) {
    case LlamaCppPath::vec_dot:
      return activation_format(type, ActivationRoute::q8);
    case LlamaCppPath::tiled_kquant:
    case LlamaCppPath::repack_q4_K_8x8:
      return ActivationFormat::q8_K;
    case LlamaCppPath::sgemm_q8_0:
      return ActivationFormat::q8_0;
    case LlamaCppPath::vec_dot_f16:
    case LlamaCppPath::sgemm_f16:
      return ActivationFormat::f16;
    case LlamaCppPath::vec_dot_bf16:
    case LlamaCppPath::sgemm_bf16:
      return ActivationFormat::bf16;  // ggml_cpu_fp32_to_bf16: round to nearest even, NaN made quiet
    case LlamaCppPath::vec_dot_f32:
    case LlamaCppPath::sgemm_f32:
      return ActivationFormat::f32;
    case LlamaCppPath::unsupported:
      break;
  }
  throw Error("llama.cpp route: no activation format for path " + std::string(path_name(path)));
}

float vdpbf16ps_step(float acc, float w, float a) {
  constexpr float kFltMin = 0x1p-126f;
  auto daz = [](float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; };
  acc = daz(acc);
  w = daz(w);
  a = daz(a);
  const float r = std::fma(w, a, acc);
  const float m = std::fabs(r);
  if (m < kFltMin) return std::copysign(0.0f, r);  // below FLT_MIN at subnormal precision: tiny either way
  // fma rounds an exact value in [FLT_MIN - 2^-150, FLT_MIN - 2^-151) up to FLT_MIN at subnormal
  // precision; rounded to 24 bits it stays below FLT_MIN, so the instruction flushes it. The exact
  // value in double decides: w * a is exact there, and so is the sum wherever it is this close to
  // FLT_MIN (acc is zero or at least FLT_MIN after DAZ).
  if (m == kFltMin && std::fabs(double(acc) + double(w) * double(a)) < 0x1p-126 - 0x1p-151) return std::copysign(0.0f, r);
  return r;
}

namespace {

// _mm512_reduce_add_ps as GCC expands it: halves of 8, then of 4, then [0]+[2], [1]+[3], then the two.
float reduce16(const float a[16]) {
  float h8[8], h4[4];
  for (int i = 0; i < 8; ++i) h8[i] = a[i + 8] + a[i];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i + 4] + h8[i];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// Tiled K-quant matmul, AVX-512 VNNI microkernel (tiled-kernel.cpp), per 256-element slab: the
// slab's integer sums are exact (s1 = sum over sub-blocks of scale * (codes . q8), Q6_K's 32-offset
// taken off per sub-block through the bsums; s2 = sum of min * bsums), converted once, scaled by the
// row's d (and its dmin by one fused negative multiply-add), and accumulated slab after slab as
// out = fma(r, y.d, out), r = float(s1) * d [- dmin * float(s2)]. The source writes the accumulate as
// _mm512_add_ps(load, _mm512_mul_ps(r, y.d)), but GCC contracts it (ggml is built -std=gnu++17, so
// -ffp-contract=fast): the 0c1e570 build's libggml-cpu.so has one vfmadd213ps from memory per row in
// every tiled_run_micro_vnni_8x16 instance, and ggml_mul_mat at 2 and 4 slabs agrees only with the
// fused form (numerics.md, "The llama.cpp route"). On one slab both forms round r * y.d once.
float dot_tiled_q4_q5(TensorType type, const void* row, const block_q8_K* y, int64_t nb) {
  float out = 0;
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t dh, dminh;
    const uint8_t* scales;
    if (type == TensorType::Q5_K) {
      const block_q5_K& x = static_cast<const block_q5_K*>(row)[i];
      dh = x.d; dminh = x.dmin; scales = x.scales;
    } else {
      const block_q4_K& x = static_cast<const block_q4_K*>(row)[i];
      dh = x.d; dminh = x.dmin; scales = x.scales;
    }
    int32_t s1 = 0, s2 = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(scales, j, sc, m);
      int32_t raw = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) {
        const int level = type == TensorType::Q5_K ? q5k_level(static_cast<const block_q5_K*>(row)[i], e)
                                                   : q4k_level(static_cast<const block_q4_K*>(row)[i], e);
        raw += level * y[i].qs[e];
      }
      s1 += int32_t(sc) * raw;
      s2 += int32_t(m) * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float r = std::fma(-f16_to_f32(dminh), float(s2), float(s1) * f16_to_f32(dh));
    out = std::fma(r, y[i].d, out);
  }
  return out;
}

float dot_tiled_q6(const block_q6_K* x, const block_q8_K* y, int64_t nb) {
  float out = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t s1 = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t raw = 0;  // signed levels: the unsigned codes' dot minus 32 * bsum, exactly
      for (int e = 16 * s; e < 16 * s + 16; ++e) raw += q6k_level(x[i], e) * y[i].qs[e];
      s1 += int32_t(x[i].scales[s]) * raw;
    }
    out = std::fma(float(s1) * f16_to_f32(x[i].d), y[i].d, out);
  }
  return out;
}

// Repacked Q4_K (q4_K_8x8, x86). The row's exact scaled sums and exact min sums go into two
// accumulators by FMA, with the products d * y.d and dmin * y.d rounded first; the result is their
// difference. The gemv (tokens outside whole groups of 4) adds once per super-block; the gemm (whole
// groups of 4, AVX-512 and AVX2 variants alike) once per pair of 32-element sub-blocks (its sb loop),
// so four roundings per super-block instead of one.
float dot_repack_q4(const block_q4_K* x, const block_q8_K* y, int64_t nb, bool gemm) {
  float acc = 0, acc_min = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const float dd = f16_to_f32(x[i].d) * y[i].d, dm = f16_to_f32(x[i].dmin) * y[i].d;
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(x[i].scales, j, sc, m);
      int32_t raw = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) raw += q4k_level(x[i], e) * y[i].qs[e];
      isum += int32_t(sc) * raw;
      imin += int32_t(m) * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      if (gemm && j % 2 == 1) {
        acc = std::fma(float(isum), dd, acc);
        acc_min = std::fma(float(imin), dm, acc_min);
        isum = imin = 0;
      }
    }
    if (!gemm) {
      acc = std::fma(float(isum), dd, acc);
      acc_min = std::fma(float(imin), dm, acc_min);
    }
  }
  return acc - acc_min;
}

// The float paths, over element accessors (w(e), a(e): the row's and the token's element e as
// f32, widened exactly), so that the packed rows (llamacpp_dot) and the unpacked ones
// (llamacpp_dot_unpacked) share one statement of each order.

// ggml_vec_dot_f16 / ggml_vec_dot_f32 in an AVX-512 build (no FP16 arithmetic): four 16-lane
// accumulators over 64-element steps (accumulator j, lane l: elements 64s + 16j + l), fused
// multiply-adds; then s0 + s2, s1 + s3, their sum, reduce16. Elements past the last whole step are
// the callers' (np = n / 64 * 64); with none, the sum is +0.
template <class W, class A>
float four_accumulators(W w, A a, int64_t np) {
  float sum[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) sum[j][l] = std::fma(w(i + 16 * j + l), a(i + 16 * j + l), sum[j][l]);
  float r[16];
  for (int l = 0; l < 16; ++l) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
  return reduce16(r);
}

// llamafile's tinyBLAS<16, __m512> (F16 and F32 weights): one 16-lane accumulator per output, lane l
// holding elements 16s + l by fused multiply-add, then reduce16. The tile shapes only group outputs.
template <class W, class A>
float one_accumulator(W w, A a, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w(i + l), a(i + l), acc[l]);
  return reduce16(acc);
}

// One vdpbf16ps lane over the pair (e, e + 1): the odd element first.
template <class W, class A>
float dpbf16_pair(float acc, W w, A a, int64_t e) {
  return vdpbf16ps_step(vdpbf16ps_step(acc, w(e + 1), a(e + 1)), w(e), a(e));
}

template <class W, class A>
float float_path_dot(LlamaCppPath path, W w, A a, int64_t n) {
  switch (path) {
    case LlamaCppPath::vec_dot_f16: {
      // ggml_float (double) total; the tail beyond a multiple of 64 adds each f32-rounded product.
      const int64_t np = n / 64 * 64;
      double total = four_accumulators(w, a, np);
      for (int64_t e = np; e < n; ++e) total += double(w(e) * a(e));
      return float(total);
    }
    case LlamaCppPath::vec_dot_f32: {
      // The sum stays f32. The source's tail `sumf += x[i]*y[i]` is what GCC 12 -O3 made of it in
      // the 0c1e570 build (libggml-cpu.so): whole groups of 8 (and 16) products vectorized as a
      // multiply then in-order adds, the last n % 8 elements contracted to fused multiply-adds.
      const int64_t np = n / 64 * 64, unfused = np + (n - np) / 8 * 8;
      float sum = four_accumulators(w, a, np);
      for (int64_t e = np; e < unfused; ++e) sum = sum + w(e) * a(e);
      for (int64_t e = unfused; e < n; ++e) sum = std::fma(w(e), a(e), sum);
      return sum;
    }
    case LlamaCppPath::sgemm_f16:
    case LlamaCppPath::sgemm_f32:
      return one_accumulator(w, a, n);
    case LlamaCppPath::vec_dot_bf16: {
      // Two 16-lane vdpbf16ps accumulators over 64-element steps (c1 lane l: pair 64s + 2l, c2 lane
      // l: pair 64s + 32 + 2l); each reduced by reduce16 and added in double (c1 first), then the
      // tail's f32 products in double.
      float c1[16] = {}, c2[16] = {};
      int64_t i = 0;
      for (; i + 64 <= n; i += 64)
        for (int l = 0; l < 16; ++l) {
          c1[l] = dpbf16_pair(c1[l], w, a, i + 2 * l);
          c2[l] = dpbf16_pair(c2[l], w, a, i + 32 + 2 * l);
        }
      double total = 0;
      total += reduce16(c1);
      total += reduce16(c2);
      for (; i < n; ++i) total += double(w(i) * a(i));
      return float(total);
    }
    case LlamaCppPath::sgemm_bf16: {
      // tinyBLAS<32, __m512, __m512bh>: one 16-lane vdpbf16ps accumulator per output, lane l holding
      // the pairs 32s + 2l; then reduce16 (its hsum).
      float acc[16] = {};
      for (int64_t i = 0; i < n; i += 32)
        for (int l = 0; l < 16; ++l) acc[l] = dpbf16_pair(acc[l], w, a, i + 2 * l);
      return reduce16(acc);
    }
    default:
      break;
  }
  throw Error("llama.cpp route: path " + std::string(path_name(path)) + " is not a float path");
}

// Which head type each float path multiplies.
bool float_path_of(LlamaCppPath path, TensorType type) {
  switch (path) {
    case LlamaCppPath::vec_dot_f16:
    case LlamaCppPath::sgemm_f16: return type == TensorType::F16;
    case LlamaCppPath::vec_dot_bf16:
    case LlamaCppPath::sgemm_bf16: return type == TensorType::BF16;
    case LlamaCppPath::vec_dot_f32:
    case LlamaCppPath::sgemm_f32: return type == TensorType::F32;
    default: return false;
  }
}

// A float path against the token's activations in the head type's format, weights from `w`.
template <class W>
float float_dot(LlamaCppPath path, TensorType type, W w, const void* act, int64_t n) {
  switch (type) {
    case TensorType::F16: {
      const uint16_t* a = static_cast<const uint16_t*>(act);
      return float_path_dot(path, w, [a](int64_t e) { return f16_to_f32(a[e]); }, n);
    }
    case TensorType::BF16: {
      const uint16_t* a = static_cast<const uint16_t*>(act);
      return float_path_dot(path, w, [a](int64_t e) { return bf16_to_f32(a[e]); }, n);
    }
    default: {
      const float* a = static_cast<const float*>(act);
      return float_path_dot(path, w, [a](int64_t e) { return a[e]; }, n);
    }
  }
}

}  // namespace

void quantize_llamacpp_activations(LlamaCppPath path, TensorType type, const float* x, int64_t n, int t, int tokens,
                                   void* dst) {
  const ActivationFormat fmt = llamacpp_activation_format(path, type);
  // Whole groups of 4 tokens go through ggml_quantize_mat_q8_K_4x8; the rest through
  // quantize_row_q8_K (repack.cpp, forward_mul_mat).
  if (in_group_of_4(path, t, tokens)) {
    quantize_q8_K(x, n, static_cast<block_q8_K*>(dst), Q8KScaleSign::positive_if_any);
    return;
  }
  quantize_activations(fmt, x, n, dst);
}

bool in_group_of_4(LlamaCppPath path, int t, int tokens) {
  return path == LlamaCppPath::repack_q4_K_8x8 && t < tokens - tokens % 4;
}

float llamacpp_dot(LlamaCppPath path, TensorType type, const void* row, const void* act, int64_t n, bool grouped) {
  switch (path) {
    case LlamaCppPath::vec_dot:
    case LlamaCppPath::sgemm_q8_0:  // tinyBLAS_Q0_AVX: the same eight FMA lanes and hsum as vec_dot
      return vec_dot_q8_route(type, row, act, n);
    case LlamaCppPath::tiled_kquant:
      if (type == TensorType::Q6_K)
        return dot_tiled_q6(static_cast<const block_q6_K*>(row), static_cast<const block_q8_K*>(act), n / kSuperBlock);
      if (type == TensorType::Q5_K || type == TensorType::Q4_K)
        return dot_tiled_q4_q5(type, row, static_cast<const block_q8_K*>(act), n / kSuperBlock);
      break;
    case LlamaCppPath::repack_q4_K_8x8:
      if (type == TensorType::Q4_K)
        return dot_repack_q4(static_cast<const block_q4_K*>(row), static_cast<const block_q8_K*>(act), n / kSuperBlock,
                             grouped);
      break;
    case LlamaCppPath::vec_dot_f16:
    case LlamaCppPath::sgemm_f16:
    case LlamaCppPath::vec_dot_bf16:
    case LlamaCppPath::sgemm_bf16:
    case LlamaCppPath::vec_dot_f32:
    case LlamaCppPath::sgemm_f32: {
      if (!float_path_of(path, type)) break;
      if (type == TensorType::F32) {
        const float* w = static_cast<const float*>(row);
        return float_dot(path, type, [w](int64_t e) { return w[e]; }, act, n);
      }
      const uint16_t* w = static_cast<const uint16_t*>(row);
      if (type == TensorType::F16) return float_dot(path, type, [w](int64_t e) { return f16_to_f32(w[e]); }, act, n);
      return float_dot(path, type, [w](int64_t e) { return bf16_to_f32(w[e]); }, act, n);
    }
    case LlamaCppPath::unsupported:
      break;
  }
  throw Error("llama.cpp route: path " + std::string(path_name(path)) + " does not apply to " +
              std::string(tensor_type_name(type)) + " heads");
}

namespace {

// Layout of an unpacked K-quant row of nb super-blocks: levels[256 nb] (Q4_K/Q5_K unsigned, Q6_K
// signed, i.e. already minus 32), then scales[16 nb] and mins[8 nb] as int32, then d[nb], dmin[nb].
struct UnpackedK {
  const int8_t* levels;
  const int32_t* scales;  // Q6_K: 16 per block; Q4_K/Q5_K: 8 per block
  const int32_t* mins;
  const float* d;
  const float* dmin;
};

UnpackedK view_unpacked(const void* p, int64_t nb) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  UnpackedK u;
  u.levels = reinterpret_cast<const int8_t*>(b);
  u.scales = reinterpret_cast<const int32_t*>(b + 256 * nb);
  u.mins = u.scales + 16 * nb;
  u.d = reinterpret_cast<const float*>(u.mins + 8 * nb);
  u.dmin = u.d + nb;
  return u;
}

// Rows sit at any byte offset inside a GGUF tensor or a shard (block sizes are 144/176/210 bytes),
// so blocks are read through a copy rather than a reference into the row.
template <class Block>
Block load_block(const void* row, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(row) + i * int64_t(sizeof(Block)), sizeof(Block));
  return b;
}

int32_t byte_dot(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int e = 0; e < n; ++e) s += int32_t(a[e]) * int32_t(b[e]);
  return s;
}

}  // namespace

size_t llamacpp_unpacked_bytes(int64_t n) {
  const size_t nb = size_t((n + kSuperBlock - 1) / kSuperBlock);
  return std::max(size_t(n) * sizeof(float), nb * (256 + 4 * (16 + 8) + 8));
}

void llamacpp_unpack_row(TensorType type, const void* row, int64_t n, void* unpacked) {
  if (type == TensorType::F16 || type == TensorType::BF16) {
    const uint8_t* w = static_cast<const uint8_t*>(row);
    float* out = static_cast<float*>(unpacked);
    for (int64_t e = 0; e < n; ++e) {
      uint16_t h;
      std::memcpy(&h, w + 2 * e, 2);
      out[e] = type == TensorType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    return;
  }
  if (type == TensorType::F32) {
    std::memcpy(unpacked, row, size_t(n) * sizeof(float));
    return;
  }
  const int64_t nb = n / kSuperBlock;
  uint8_t* b = static_cast<uint8_t*>(unpacked);
  int8_t* levels = reinterpret_cast<int8_t*>(b);
  int32_t* scales = reinterpret_cast<int32_t*>(b + 256 * nb);
  int32_t* mins = scales + 16 * nb;
  float* d = reinterpret_cast<float*>(mins + 8 * nb);
  float* dmin = d + nb;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t* lv = levels + 256 * i;
    if (type == TensorType::Q6_K) {
      const block_q6_K x = load_block<block_q6_K>(row, i);
      // §3's element order, a whole 128-element half at a time.
      for (int n = 0; n < 2; ++n)
        for (int l = 0; l < 32; ++l) {
          const uint8_t a = x.ql[64 * n + l], b = x.ql[64 * n + 32 + l], h = x.qh[32 * n + l];
          lv[128 * n + l] = int8_t(((a & 15) | ((h & 3) << 4)) - 32);
          lv[128 * n + 32 + l] = int8_t(((b & 15) | (((h >> 2) & 3) << 4)) - 32);
          lv[128 * n + 64 + l] = int8_t(((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
          lv[128 * n + 96 + l] = int8_t(((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
        }
      for (int s = 0; s < 16; ++s) scales[16 * i + s] = x.scales[s];
      d[i] = f16_to_f32(x.d);
      dmin[i] = 0;
      continue;
    }
    uint8_t sc_bytes[12];  // the packed scales and mins, copied out of the block (whose copy ends with its branch)
    if (type == TensorType::Q5_K) {
      const block_q5_K x = load_block<block_q5_K>(row, i);
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
          const uint8_t q = x.qs[32 * p + l], h = x.qh[l];
          lv[64 * p + l] = int8_t((q & 15) | (((h >> (2 * p)) & 1) << 4));
          lv[64 * p + 32 + l] = int8_t((q >> 4) | (((h >> (2 * p + 1)) & 1) << 4));
        }
      std::memcpy(sc_bytes, x.scales, sizeof sc_bytes); d[i] = f16_to_f32(x.d); dmin[i] = f16_to_f32(x.dmin);
    } else if (type == TensorType::Q4_K) {
      const block_q4_K x = load_block<block_q4_K>(row, i);
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
          lv[64 * p + l] = int8_t(x.qs[32 * p + l] & 15);
          lv[64 * p + 32 + l] = int8_t(x.qs[32 * p + l] >> 4);
        }
      std::memcpy(sc_bytes, x.scales, sizeof sc_bytes); d[i] = f16_to_f32(x.d); dmin[i] = f16_to_f32(x.dmin);
    } else {
      throw Error("llama.cpp route: no unpacked form for " + std::string(tensor_type_name(type)) + " rows");
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(sc_bytes, j, sc, m);
      scales[16 * i + j] = sc;
      mins[8 * i + j] = m;
    }
  }
}

float llamacpp_dot_unpacked(LlamaCppPath path, TensorType type, const void* unpacked, const void* act, int64_t n,
                            bool grouped) {
  if (float_path_of(path, type)) {
    // The weights are exact f32 images of the row's values.
    const float* w = static_cast<const float*>(unpacked);
    return float_dot(path, type, [w](int64_t e) { return w[e]; }, act, n);
  }
  const int64_t nb = n / kSuperBlock;
  const UnpackedK u = view_unpacked(unpacked, nb);
  if (path == LlamaCppPath::tiled_kquant && type == TensorType::Q6_K) {
    float out = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const block_q8_K y = load_block<block_q8_K>(act, i);  // tokens sit at any byte offset
      int32_t s1 = 0;
      for (int s = 0; s < 16; ++s) s1 += u.scales[16 * i + s] * byte_dot(u.levels + 256 * i + 16 * s, y.qs + 16 * s, 16);
      out = std::fma(float(s1) * u.d[i], y.d, out);
    }
    return out;
  }
  if (path == LlamaCppPath::tiled_kquant && (type == TensorType::Q5_K || type == TensorType::Q4_K)) {
    float out = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const block_q8_K y = load_block<block_q8_K>(act, i);  // tokens sit at any byte offset
      int32_t s1 = 0, s2 = 0;
      for (int j = 0; j < 8; ++j) {
        s1 += u.scales[16 * i + j] * byte_dot(u.levels + 256 * i + 32 * j, y.qs + 32 * j, 32);
        s2 += u.mins[8 * i + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
      }
      out = std::fma(std::fma(-u.dmin[i], float(s2), float(s1) * u.d[i]), y.d, out);
    }
    return out;
  }
  if (path == LlamaCppPath::repack_q4_K_8x8 && type == TensorType::Q4_K) {
    float acc = 0, acc_min = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const block_q8_K y = load_block<block_q8_K>(act, i);  // tokens sit at any byte offset
      const float dd = u.d[i] * y.d, dm = u.dmin[i] * y.d;
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        isum += u.scales[16 * i + j] * byte_dot(u.levels + 256 * i + 32 * j, y.qs + 32 * j, 32);
        imin += u.mins[8 * i + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        if (grouped && j % 2 == 1) {
          acc = std::fma(float(isum), dd, acc);
          acc_min = std::fma(float(imin), dm, acc_min);
          isum = imin = 0;
        }
      }
      if (!grouped) {
        acc = std::fma(float(isum), dd, acc);
        acc_min = std::fma(float(imin), dm, acc_min);
      }
    }
    return acc - acc_min;
  }
  throw Error("llama.cpp route: path " + std::string(path_name(path)) + " has no unpacked dot for " +
              std::string(tensor_type_name(type)) + " heads");
}

}  // namespace lmhead::quant
