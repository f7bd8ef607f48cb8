#pragma once
// The CPU backend's kernel table: for each head type and activation route, the function that turns
// a tile of weight rows and T tokens' activations into raw logits. Each entry reproduces the
// scalar reference of quant/vec_dot.cpp byte for byte; the table is chosen once, at run time, from
// the CPU's features (AVX2 + FMA + F16C), with the portable scalar loop as the fallback.
//
// Files named *_avx2.cpp are compiled with -mavx2 -mfma -mf16c. They must not call inline
// functions or templates shared with portable code (the linker may keep the AVX2 copy for
// everyone), so they use only intrinsics, block structs and their own internal helpers.
#include <cstddef>
#include <cstdint>

#include "lmhead/lmhead.hpp"
#include "quant/llamacpp_route.hpp"

namespace lmhead::cpu {

// Rows [0, count) of a head, row r at rows + r * row_bytes; `hidden` elements per row.
struct HeadTile {
  const uint8_t* rows = nullptr;
  uint64_t row_bytes = 0;
  int64_t count = 0;
  int64_t hidden = 0;
};

// Tokens per kernel call: the backend hands larger batches over in slices of this many.
constexpr int kMaxKernelTokens = 16;

// The call's activations: token t's block at data + t * stride (any alignment), 1 <= tokens <=
// kMaxKernelTokens. f32 activations are at least 4-byte aligned.
struct TokenActs {
  const uint8_t* data = nullptr;
  size_t stride = 0;
  int tokens = 0;
  // True when the previous call on the same scratch was the same kernel with these same
  // activations (the next tile of one backend call), so a kernel may reuse the token-side
  // preparation it left there. False: prepare again.
  bool scratch_prepared = false;
};

// raw[t * stride + r] receives the dot of row r with token t.
struct RawOut {
  float* data = nullptr;
  size_t stride = 0;
};

// `scratch` is 64-byte aligned, at least kernel_scratch_bytes(hidden) bytes, private to the thread.
using TileKernel = void (*)(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch);

size_t kernel_scratch_bytes(int64_t hidden);

// Instruction-set levels, each including the ones before it.
enum class Isa {
  scalar,  // portable loops over quant::vec_dot_* (the oracle's own code)
  avx2,    // AVX2 + FMA + F16C
  avx512,  // AVX-512 F, BW, VL and VNNI (Q5_K only; every other kernel is the AVX2 one)
};
const char* isa_name(Isa isa);
// The best instruction set this CPU runs (scalar when AVX2, FMA or F16C is missing).
Isa detect_isa();
// Whether the CPU runs `isa` (scalar always).
bool cpu_supports(Isa isa);
// How far ahead of the current super-block the K-quant kernels (AVX2 and AVX-512) prefetch the
// weights: 2 KiB on Intel, 4 KiB elsewhere (the distance each measured best on; docs/performance.md,
// CPU attempts 8 and 13). Read once per tile.
uint64_t weight_prefetch_ahead();

// Route::llamacpp: the portable kernel for llama.cpp's path `path` on `type` heads (the reference
// dots of quant/llamacpp_route.cpp, row by row); nullptr when the path does not apply to the type.
// At the best level available up to `limit` (AVX2 or the portable loops).
TileKernel llamacpp_kernel(quant::LlamaCppPath path, TensorType type, Isa limit);
// The kernel for the tokens in whole groups of 4 (quant::in_group_of_4): the repacked Q4_K path's
// gemm, another order than its gemv; the same as llamacpp_kernel for every other path.
TileKernel llamacpp_grouped_kernel(quant::LlamaCppPath path, TensorType type, Isa limit);

struct KernelSet {
  TileKernel q8 = nullptr;   // the q8 activation route (activations in quant::activation_format)
  TileKernel f32 = nullptr;  // the f32 route (activations are the normed f32 values)
  Isa q8_isa = Isa::scalar;  // which implementation each entry is, for names and tests
  Isa f32_isa = Isa::scalar;
};
// Kernels for `type` at the best level available up to `limit`; entries without a SIMD version
// at that level fall back to scalar.
KernelSet kernels_for(TensorType type, Isa limit);

// ---- SIMD implementations (one file per head type or order, each compiled for its instruction set;
// the K-quants share one decode: kquant_avx2.hpp) ----
namespace avx2 {
void q5_K_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q4_K_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q6_K_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q8_0_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void f16_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void bf16_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
// f32 route: the row decoded to f32 exactly as quant::dequantize_row does, then the 8-lane dot.
void q5_K_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q4_K_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q6_K_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q8_0_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void f16_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void bf16_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void f32_f32(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
// llama.cpp's tiled K-quant order (tiled_avx2.cpp): quant::llamacpp_dot(LlamaCppPath::tiled_kquant).
void q4_K_tiled(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q5_K_tiled(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
void q6_K_tiled(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
// Route llamacpp's other paths (llamacpp_avx2.cpp; instantiated there for the paths each type takes).
template <quant::LlamaCppPath Path, TensorType Type, bool Grouped>
void llamacpp_rows(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
}  // namespace avx2

namespace avx512 {
void q5_K_q8(const HeadTile&, const TokenActs&, const RawOut&, void* scratch);
}  // namespace avx512

}  // namespace lmhead::cpu
