// Every CPU kernel against the scalar reference dots of quant/vec_dot.cpp, byte for byte: many
// shapes, 1..16 tokens, activations at odd addresses and strides, and sentinels around every output
// cell the kernel must not touch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "quant/activation.hpp"
#include "quant/llamacpp_route.hpp"
#include "quant/vec_dot.hpp"
#include "synth/synthetic_head.hpp"

namespace lmhead::cpu {
namespace {

using synth::fill_synthetic_rows;
using synth::row_bytes_of;

constexpr uint32_t kSentinel = 0x7fc0dead;  // a NaN no kernel computes

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

struct AlignedScratch {
  explicit AlignedScratch(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
  ~AlignedScratch() { std::free(p); }
  uint8_t* p;
};

std::vector<float> random_normed(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  // A few large entries so some Q8_K blocks are dominated by one value, and a zero block.
  x[rng() % n] = 40.0f;
  if (n >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  return x;
}

struct KernelCase {
  TensorType type;
  ActivationRoute route;
  int64_t rows, hidden;
  int tokens;
};

std::string describe(const KernelCase& c) {
  return std::string(tensor_type_name(c.type)) + (c.route == ActivationRoute::q8 ? " q8" : " f32") +
         " rows " + std::to_string(c.rows) + " hidden " + std::to_string(c.hidden) + " tokens " +
         std::to_string(c.tokens);
}

// Runs the kernels of every instruction-set level this CPU has (each level's own entry) and
// compares every output with the reference dot.
void check_kernel_at(const KernelCase& c, uint64_t seed, Isa isa);
void check_kernel(const KernelCase& c, uint64_t seed) {
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!cpu_supports(isa)) continue;
    const KernelSet ks = kernels_for(c.type, isa);
    const Isa used = c.route == ActivationRoute::q8 ? ks.q8_isa : ks.f32_isa;
    if (used != isa) continue;  // this level has no kernel of its own here: checked at its own level
    check_kernel_at(c, seed, isa);
  }
}

// The reference dot of one row and one token (aligned copies; x: the token's f32 activations, for
// the f32 route; deq: scratch of `hidden` floats).
using ReferenceDot = std::function<float(const void* row, const void* act, const float* x, float* deq)>;

// Token t's activations: random normals, or (when `extremes` and t % 4 == 3) every element the
// same positive value, so that every q8 is 127 and a super-block's integer sums reach past 2^24
// (where their conversion to float rounds).
std::vector<float> token_values(int64_t n, int t, bool extremes, std::mt19937& rng) {
  std::vector<float> x = random_normed(n, rng);
  if (extremes && t % 4 == 3) std::fill(x.begin(), x.end(), 0.75f);
  return x;
}

// Runs `kernel` on c.rows rows and c.tokens tokens in activation format `fmt` and compares every
// output with `reference`, byte for byte.
void check_tile(const KernelCase& c, uint64_t seed, TileKernel kernel, quant::ActivationFormat fmt,
                const ReferenceDot& reference, bool extremes = false) {
  std::mt19937 rng{uint32_t(seed)};
  const uint64_t row_bytes = row_bytes_of(c.type, c.hidden);
  // The weights start one byte past an aligned address: kernels must not assume alignment of rows.
  std::vector<uint8_t> weight_store(row_bytes * c.rows + 64);
  uint8_t* weights = weight_store.data() + 1;
  fill_synthetic_rows(c.type, c.rows, c.hidden, seed, weights);

  const bool q8 = c.route == ActivationRoute::q8;
  // q8 blocks at odd byte offsets with an odd stride; f32 activations one float off 32-byte
  // alignment with a stride of hidden + 3 floats.
  const size_t stride = q8 ? quant::activation_bytes(fmt, c.hidden) + 3 : size_t(c.hidden + 3) * 4;
  const size_t lead = q8 ? 5 : 4;
  // The reference functions take aligned blocks (they read through block structs): they get
  // aligned copies of the same bytes the kernel reads at odd addresses.
  std::vector<uint8_t> act_store(lead + stride * c.tokens + 64);
  const size_t act_bytes = q8 ? quant::activation_bytes(fmt, c.hidden) : size_t(c.hidden) * 4;
  std::vector<std::vector<uint32_t>> aligned_acts(c.tokens, std::vector<uint32_t>((act_bytes + 3) / 4));
  for (int t = 0; t < c.tokens; ++t) {
    const std::vector<float> normed = token_values(c.hidden, t, extremes, rng);
    if (q8) quant::quantize_activations(fmt, normed.data(), c.hidden, aligned_acts[t].data());
    else std::memcpy(aligned_acts[t].data(), normed.data(), act_bytes);
    std::memcpy(act_store.data() + lead + t * stride, aligned_acts[t].data(), act_bytes);
  }

  const size_t out_stride = size_t(c.rows) + 7;
  std::vector<float> out(out_stride * c.tokens + 9);
  float* out0 = out.data() + 3;

  AlignedScratch scratch(kernel_scratch_bytes(c.hidden));
  ASSERT_NE(kernel, nullptr);
  // Twice on one scratch: fresh, then as a backend's next tile of the same call, which may read
  // the token side the first call left in the scratch (TokenActs::scratch_prepared).
  for (bool prepared : {false, true}) {
    SCOPED_TRACE(prepared ? "second call, scratch prepared" : "first call");
    for (float& v : out) std::memcpy(&v, &kSentinel, 4);
    TokenActs acts{act_store.data() + lead, stride, c.tokens};
    acts.scratch_prepared = prepared;
    kernel(HeadTile{weights, row_bytes, c.rows, c.hidden}, acts, RawOut{out0, out_stride}, scratch.p);

    std::vector<float> deq(c.hidden);
    std::vector<uint32_t> aligned_row((row_bytes + 3) / 4);
    int64_t wrong = 0;
    for (int t = 0; t < c.tokens; ++t) {
      const void* act = aligned_acts[t].data();
      const float* x = reinterpret_cast<const float*>(aligned_acts[t].data());
      for (int64_t r = 0; r < c.rows; ++r) {
        std::memcpy(aligned_row.data(), weights + r * row_bytes, row_bytes);
        const float want = reference(aligned_row.data(), act, x, deq.data());
        const float got = out0[t * out_stride + r];
        if (bits(got) != bits(want) && wrong++ < 5)
          ADD_FAILURE() << "token " << t << " row " << r << ": got " << got << " want " << want;
      }
    }
    EXPECT_EQ(wrong, 0);
    // Nothing outside [t][0, rows) was written.
    for (size_t i = 0; i < out.size(); ++i) {
      const bool inside = i >= 3 && (i - 3) % out_stride < size_t(c.rows) && (i - 3) / out_stride < size_t(c.tokens);
      if (!inside) {
        ASSERT_EQ(bits(out[i]), kSentinel) << "out-of-bounds write at cell " << i;
      }
    }
  }
}

void check_kernel_at(const KernelCase& c, uint64_t seed, Isa isa) {
  SCOPED_TRACE(describe(c) + " " + isa_name(isa));
  const bool q8 = c.route == ActivationRoute::q8;
  const KernelSet ks = kernels_for(c.type, isa);
  check_tile(c, seed, q8 ? ks.q8 : ks.f32, quant::activation_format(c.type, c.route),
             [&](const void* row, const void* act, const float* x, float* deq) {
               return q8 ? quant::vec_dot_q8_route(c.type, row, act, c.hidden)
                         : quant::vec_dot_f32_route(c.type, row, x, c.hidden, deq);
             });
}

const TensorType kHeadTypes[] = {TensorType::Q5_K, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0,
                                 TensorType::F16,  TensorType::BF16, TensorType::F32};

TEST(CpuKernels, ReportsInstructionSet) {
  // Not an assertion of a fixed answer: the run's log says which kernels the other tests checked.
  const Isa isa = detect_isa();
  std::printf("cpu kernels: %s\n", isa_name(isa));
  for (TensorType t : kHeadTypes) {
    const KernelSet k = kernels_for(t, isa);
    ASSERT_NE(k.q8, nullptr);
    ASSERT_NE(k.f32, nullptr);
    std::printf("  %-5s q8 route: %-6s f32 route: %s\n", std::string(tensor_type_name(t)).c_str(),
                isa_name(k.q8_isa), isa_name(k.f32_isa));
  }
}

TEST(CpuKernels, MatchScalarReferenceOverShapesAndTokens) {
  // hidden from one super-block to 8,192; row counts that are not a multiple of anything.
  const int64_t hiddens[] = {256, 512, 768, 1280, 2304, 8192};
  const int64_t rows[] = {1, 7, 37, 64, 101};
  uint64_t seed = 1;
  for (TensorType type : kHeadTypes)
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32})
      for (int64_t h : hiddens) {
        // Token counts cycle through 1..16 across the shapes so each count meets each path.
        const int tokens = int(1 + (seed * 5) % 16);
        const int64_t r = rows[seed % 5];
        check_kernel({type, route, h > 2304 ? std::min<int64_t>(r, 9) : r, h, tokens}, seed);
        ++seed;
      }
}

TEST(CpuKernels, EveryTokenCountOnQ5K) {
  for (int tokens = 1; tokens <= 16; ++tokens)
    check_kernel({TensorType::Q5_K, ActivationRoute::q8, 19, 1024, tokens}, 100 + tokens);
}

TEST(CpuKernels, EveryTokenCountOnEachType) {
  for (TensorType type : kHeadTypes)
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32})
      for (int tokens : {1, 2, 3, 4, 5, 8, 13, 16})
        check_kernel({type, route, 11, 512, tokens}, 1000 + tokens + 17 * int(type));
}

// llama.cpp's tiled K-quant order (route tiled; route llamacpp from 8 tokens): the kernel at each
// instruction-set level against quant::llamacpp_dot's tiled dots, every token count 1..16 (so
// every tail of the groups of four), odd row counts, one to nine super-blocks, and tokens whose
// super-block integers pass 2^24.
TEST(CpuKernels, TiledOrderMatchesLlamaCppDots) {
  const auto path = quant::LlamaCppPath::tiled_kquant;
  const int64_t rows[] = {1, 3, 7, 13};
  const int64_t hiddens[] = {256, 768, 2304};
  for (Isa isa : {Isa::scalar, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K})
      for (int tokens = 1; tokens <= kMaxKernelTokens; ++tokens) {
        const KernelCase c{type, ActivationRoute::q8, rows[tokens % 4], hiddens[tokens % 3], tokens};
        SCOPED_TRACE(describe(c) + " tiled " + isa_name(isa));
        check_tile(c, 500 + tokens + 31 * int(type), llamacpp_kernel(path, type, isa),
                   quant::llamacpp_activation_format(path, type),
                   [&](const void* row, const void* act, const float*, float*) {
                     return quant::llamacpp_dot(path, type, row, act, c.hidden, false);
                   },
                   /*extremes=*/true);
      }
  }
}

// The K-quant kernels' int16 stages at their bounds: every fourth token's q8 all 127, so the
// largest levels meet full-scale activations (maddubs pairs up to 2 * 63 * 127, the AVX-512 Q5_K
// kernel's word-packed sums up to 4 * 31 * 127) and a super-block's sums pass 2^24.
TEST(CpuKernels, KQuantsAtFullScaleActivations) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K})
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
      if (!cpu_supports(isa)) continue;
      const KernelSet ks = kernels_for(type, isa);
      if (ks.q8_isa != isa) continue;
      for (int tokens : {1, 4, 5, 16}) {
        const KernelCase c{type, ActivationRoute::q8, 13, 1024, tokens};
        SCOPED_TRACE(describe(c) + " " + isa_name(isa));
        check_tile(c, 900 + tokens + 7 * int(type), ks.q8, quant::activation_format(type, ActivationRoute::q8),
                   [&](const void* row, const void* act, const float*, float*) {
                     return quant::vec_dot_q8_route(type, row, act, c.hidden);
                   },
                   /*extremes=*/true);
      }
    }
}

}  // namespace
}  // namespace lmhead::cpu
