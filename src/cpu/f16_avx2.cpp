// Float heads (F16, BF16, F32) with AVX2 on both routes: the q8 route meets activations in the
// head's own format (f16 / bf16 / f32, as llama.cpp's vec_dot_type), the f32 route meets the normed
// f32 values. Both are quant/vec_dot.cpp's dot_float_lanes order (float_lanes_avx2.hpp).
#include "cpu/float_lanes_avx2.hpp"
#include "cpu/kernels.hpp"

namespace lmhead::cpu::avx2 {
namespace {

template <RowFormat F, RowFormat A>
void float_head(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  // Converted activations go to the scratch (tokens x hidden f32); the f32 ones are used in place.
  float* converted = static_cast<float*>(scratch);
  const float* xs[kMaxKernelTokens];
  const int tokens = acts.tokens;
  for (int t = 0; t < tokens; ++t) xs[t] = token_f32<A>(acts, t, tile.hidden, converted);
  float_tile<F>(
      tile.count, tokens, tile.hidden, [&](int64_t r) { return tile.rows + r * tile.row_bytes; },
      [&](int t) { return xs[t]; }, out);
}

}  // namespace

void f16_q8(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { float_head<RowFormat::f16, RowFormat::f16>(t, a, o, s); }
void bf16_q8(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { float_head<RowFormat::bf16, RowFormat::bf16>(t, a, o, s); }
void f16_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { float_head<RowFormat::f16, RowFormat::f32>(t, a, o, s); }
void bf16_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { float_head<RowFormat::bf16, RowFormat::f32>(t, a, o, s); }
// F32 heads: the q8 route's activation format is f32 too, so both routes are this one kernel.
void f32_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { float_head<RowFormat::f32, RowFormat::f32>(t, a, o, s); }

}  // namespace lmhead::cpu::avx2
