// Q4_K head x Q8_K activations with AVX2, in the float order of quant/vec_dot.cpp's dot_q4_K_q8_K:
// per super-block dq = y.d * f32(d), dm = (-y.d) * f32(dmin); acc[k] = fma(dq, float(isum[k]), acc[k]);
// the mins in four float lanes acc_m[t] = fma(dm, float(imin[t]), acc_m[t]); result =
// reduce(acc) + ((acc_m0 + acc_m2) + (acc_m1 + acc_m3)). The machinery is kquant_avx2.hpp's.
#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"

namespace lmhead::cpu::avx2 {

void q4_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  kquant_tile<KQuant::q4_K>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
