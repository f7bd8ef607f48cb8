// Q6_K head x Q8_K activations with AVX2, in the float order of quant/vec_dot.cpp's dot_q6_K_q8_K:
// per super-block d = y.d * f32(d); acc[k] = fma(d, float(isum[k]), acc[k]); result = reduce(acc),
// with isum[k] the unsigned-level lane sum less lane k's share of the offset (numerics.md §5b; see
// kquant_avx2.hpp), since that share decides each lane's rounding.
#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"

namespace lmhead::cpu::avx2 {

void q6_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  kquant_tile<KQuant::q6_K>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
