#include "cpu/kernels.hpp"

#include <cpuid.h>

#include <algorithm>

#include "quant/activation.hpp"
#include "quant/llamacpp_route.hpp"
#include "quant/vec_dot.hpp"

namespace lmhead::cpu {
namespace {

// The oracle's own dot products, row by row: the fallback on CPUs without AVX2 and for head types
// that have no SIMD kernel.
template <TensorType Type>
void scalar_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void*) {
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t = 0; t < acts.tokens; ++t)
      out.data[t * out.stride + r] = quant::vec_dot_q8_route(Type, row, acts.data + t * acts.stride, tile.hidden);
  }
}

template <TensorType Type>
void scalar_f32(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t = 0; t < acts.tokens; ++t)
      out.data[t * out.stride + r] = quant::vec_dot_f32_route(
          Type, row, reinterpret_cast<const float*>(acts.data + t * acts.stride), tile.hidden,
          static_cast<float*>(scratch));
  }
}

// Each row unpacked once into the scratch, then every token against it.
template <quant::LlamaCppPath Path, TensorType Type, bool Grouped = false>
void llamacpp_rows(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  for (int64_t r = 0; r < tile.count; ++r) {
    quant::llamacpp_unpack_row(Type, tile.rows + r * tile.row_bytes, tile.hidden, scratch);
    for (int t = 0; t < acts.tokens; ++t)
      out.data[t * out.stride + r] =
          quant::llamacpp_dot_unpacked(Path, Type, scratch, acts.data + t * acts.stride, tile.hidden, Grouped);
  }
}

bool simd_llamacpp(Isa limit) { return limit != Isa::scalar && detect_isa() != Isa::scalar; }

template <TensorType Type>
KernelSet scalar_set() {
  KernelSet k;
  k.q8 = &scalar_q8<Type>;
  k.f32 = &scalar_f32<Type>;
  return k;
}

// F16C through CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

uint64_t weight_prefetch_ahead() {
  static const uint64_t bytes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") ? uint64_t(2048) : uint64_t(4096);
  }();
  return bytes;
}

TileKernel llamacpp_grouped_kernel(quant::LlamaCppPath path, TensorType type, Isa limit) {
  if (path == quant::LlamaCppPath::repack_q4_K_8x8 && type == TensorType::Q4_K)
    return simd_llamacpp(limit) ? &avx2::llamacpp_rows<quant::LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, true>
                                : &llamacpp_rows<quant::LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, true>;
  return llamacpp_kernel(path, type, limit);
}

TileKernel llamacpp_kernel(quant::LlamaCppPath path, TensorType type, Isa limit) {
  using P = quant::LlamaCppPath;
  using T = TensorType;
  const bool simd = simd_llamacpp(limit);
  switch (path) {
    case P::vec_dot:
    case P::sgemm_q8_0:
      return kernels_for(type, limit).q8;  // vec_dot's order: the default route's kernels
    case P::tiled_kquant:
      if (type == T::Q4_K) return simd ? &avx2::q4_K_tiled : &llamacpp_rows<P::tiled_kquant, T::Q4_K>;
      if (type == T::Q5_K) return simd ? &avx2::q5_K_tiled : &llamacpp_rows<P::tiled_kquant, T::Q5_K>;
      if (type == T::Q6_K) return simd ? &avx2::q6_K_tiled : &llamacpp_rows<P::tiled_kquant, T::Q6_K>;
      return nullptr;
    case P::repack_q4_K_8x8:
      if (type != T::Q4_K) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::repack_q4_K_8x8, T::Q4_K, false> : &llamacpp_rows<P::repack_q4_K_8x8, T::Q4_K>;
    case P::vec_dot_f16:
      if (type != T::F16) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::vec_dot_f16, T::F16, false> : &llamacpp_rows<P::vec_dot_f16, T::F16>;
    case P::sgemm_f16:
      if (type != T::F16) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::sgemm_f16, T::F16, false> : &llamacpp_rows<P::sgemm_f16, T::F16>;
    case P::vec_dot_bf16:
      if (type != T::BF16) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::vec_dot_bf16, T::BF16, false> : &llamacpp_rows<P::vec_dot_bf16, T::BF16>;
    case P::sgemm_bf16:
      if (type != T::BF16) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::sgemm_bf16, T::BF16, false> : &llamacpp_rows<P::sgemm_bf16, T::BF16>;
    case P::vec_dot_f32:
      if (type != T::F32) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::vec_dot_f32, T::F32, false> : &llamacpp_rows<P::vec_dot_f32, T::F32>;
    case P::sgemm_f32:
      if (type != T::F32) return nullptr;
      return simd ? &avx2::llamacpp_rows<P::sgemm_f32, T::F32, false> : &llamacpp_rows<P::sgemm_f32, T::F32>;
    case P::unsupported:
      return nullptr;
  }
  return nullptr;
}

size_t kernel_scratch_bytes(int64_t hidden) {
  // The largest of: four rows decoded to f32 plus every token's activations converted to f32 (the
  // float kernels); the K-quant kernels' token-side values (kquant_avx2.hpp's KTokens, 96 B per
  // super-block and group of four tokens; the AVX-512 Q5_K kernel's PairTokens from five tokens,
  // 384 B per super-block for sixteen, plus every token's quants interleaved in pairs, 256 B per
  // super-block and token). Plus slack for alignment.
  const size_t floats = size_t(hidden) * sizeof(float) * (4 + kMaxKernelTokens);
  const size_t kquant = size_t((hidden + 255) / 256) * (96 / 4 + 256) * kMaxKernelTokens + 64;
  return std::max({floats, kquant, quant::llamacpp_unpacked_bytes(hidden)}) + 4096;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

Isa detect_isa() {
  static const Isa isa = cpu_has_avx512() ? Isa::avx512 : cpu_has_avx2() ? Isa::avx2 : Isa::scalar;
  return isa;
}

bool cpu_supports(Isa isa) { return int(isa) <= int(detect_isa()); }

KernelSet kernels_for(TensorType type, Isa limit) {
  KernelSet k;
  switch (type) {
    case TensorType::Q4_K: k = scalar_set<TensorType::Q4_K>(); break;
    case TensorType::Q5_K: k = scalar_set<TensorType::Q5_K>(); break;
    case TensorType::Q6_K: k = scalar_set<TensorType::Q6_K>(); break;
    case TensorType::Q8_0: k = scalar_set<TensorType::Q8_0>(); break;
    case TensorType::F16: k = scalar_set<TensorType::F16>(); break;
    case TensorType::BF16: k = scalar_set<TensorType::BF16>(); break;
    case TensorType::F32: k = scalar_set<TensorType::F32>(); break;
    default: return k;  // not a head type: both entries stay null
  }
  if (limit == Isa::scalar || detect_isa() == Isa::scalar) return k;

  TileKernel q8 = nullptr, f32 = nullptr;
  switch (type) {
    case TensorType::Q4_K: q8 = &avx2::q4_K_q8; f32 = &avx2::q4_K_f32; break;
    case TensorType::Q5_K: q8 = &avx2::q5_K_q8; f32 = &avx2::q5_K_f32; break;
    case TensorType::Q6_K: q8 = &avx2::q6_K_q8; f32 = &avx2::q6_K_f32; break;
    case TensorType::Q8_0: q8 = &avx2::q8_0_q8; f32 = &avx2::q8_0_f32; break;
    case TensorType::F16: q8 = &avx2::f16_q8; f32 = &avx2::f16_f32; break;
    case TensorType::BF16: q8 = &avx2::bf16_q8; f32 = &avx2::bf16_f32; break;
    case TensorType::F32: q8 = &avx2::f32_f32; f32 = &avx2::f32_f32; break;
    default: break;
  }
  if (q8) { k.q8 = q8; k.q8_isa = Isa::avx2; }
  if (f32) { k.f32 = f32; k.f32_isa = Isa::avx2; }
  if (int(limit) < int(Isa::avx512) || detect_isa() != Isa::avx512) return k;

  if (type == TensorType::Q5_K) { k.q8 = &avx512::q5_K_q8; k.q8_isa = Isa::avx512; }
  return k;
}

}  // namespace lmhead::cpu
