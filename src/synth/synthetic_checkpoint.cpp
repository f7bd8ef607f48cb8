// lmhead/synthetic.hpp: the checkpoints of `lmhead make` and the hidden states of `lmhead demo`.
#include "lmhead/synthetic.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "gguf/gguf.hpp"
#include "lmhead/error.hpp"
#include "quant/blocks.hpp"
#include "quant/quantize.hpp"
#include "synth/splitmix64.hpp"

namespace lmhead {
namespace {

using synth::SplitMix64;

// One random but valid row: any bytes are a valid K-quant block once d/dmin are finite, so the
// scales are set to small f16 values that keep the weights near N(0, 0.02).
void random_row(TensorType type, int64_t hidden, SplitMix64& rng, uint8_t* row) {
  using namespace quant;
  const int64_t nb = hidden / 256;
  auto small_f16 = [&](float base) { return f32_to_f16(base * float(0.5 + rng.uniform())); };
  switch (type) {
    case TensorType::Q5_K: {
      auto* b = reinterpret_cast<block_q5_K*>(row);
      rng.fill_bytes(row, size_t(nb) * sizeof(block_q5_K));
      for (int64_t i = 0; i < nb; ++i) { b[i].d = small_f16(2e-5f); b[i].dmin = small_f16(3e-4f); }
      return;
    }
    case TensorType::Q4_K: {
      auto* b = reinterpret_cast<block_q4_K*>(row);
      rng.fill_bytes(row, size_t(nb) * sizeof(block_q4_K));
      for (int64_t i = 0; i < nb; ++i) { b[i].d = small_f16(4e-5f); b[i].dmin = small_f16(3e-4f); }
      return;
    }
    case TensorType::Q6_K: {
      auto* b = reinterpret_cast<block_q6_K*>(row);
      rng.fill_bytes(row, size_t(nb) * sizeof(block_q6_K));
      for (int64_t i = 0; i < nb; ++i) b[i].d = small_f16(5e-6f);
      return;
    }
    case TensorType::Q8_0: {
      auto* b = reinterpret_cast<block_q8_0*>(row);
      rng.fill_bytes(row, size_t(hidden / 32) * sizeof(block_q8_0));
      for (int64_t i = 0; i < hidden / 32; ++i) b[i].d = small_f16(2e-4f);
      return;
    }
    default: {
      std::vector<float> values(hidden);
      for (float& v : values) v = 0.02f * rng.gaussian();
      quant::quantize_row(type, values.data(), row, hidden);
      return;
    }
  }
}

}  // namespace

std::vector<float> synthetic_hidden_states(int64_t tokens, int64_t hidden, uint64_t seed) {
  SplitMix64 rng{seed * 0x2545F4914F6CDD1Dull + 7};
  std::vector<float> h(size_t(tokens) * hidden);
  for (float& v : h) v = rng.gaussian();
  return h;
}

void write_synthetic_checkpoint(const std::string& path, const SyntheticCheckpoint& o,
                                const std::function<void(uint64_t done, uint64_t total)>& progress) {
  const TensorType type = o.type;
  const TensorTypeInfo* info = tensor_type_info(type);
  if (info == nullptr || !info->head_supported)
    throw Error("lmhead make cannot write a " + std::string(tensor_type_name(type)) + " head");
  if (o.vocab <= 0 || o.vocab > INT32_MAX) throw Error("--vocab must be between 1 and 2^31-1");
  if (o.hidden <= 0 || o.hidden % info->block_elems != 0)
    throw Error("--hidden must be a multiple of " + std::to_string(info->block_elems) + " for " + std::string(info->name));
  if (!std::isfinite(o.logit_scale) || !std::isfinite(o.softcap) || o.softcap < 0)
    throw Error("--logit-scale must be finite and --softcap finite and >= 0");

  const uint64_t row_bytes = uint64_t(o.hidden / info->block_elems * info->block_bytes);
  gguf::Writer w;
  const std::string& a = o.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "lmhead synthetic " + a + " head");
  w.add_u32(a + ".embedding_length", uint32_t(o.hidden));
  w.add_u32(a + ".vocab_size", uint32_t(o.vocab));
  w.add_f32(a + ".logit_scale", float(o.logit_scale));
  w.add_f32(a + ".final_logit_softcapping", float(o.softcap));
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> tokens;
  tokens.reserve(o.vocab);
  const char* specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "\n", "\"", "é", "日本"};
  for (int64_t i = 0; i < o.vocab; ++i)
    tokens.push_back(i < 7 ? specials[i] : "tok" + std::to_string(i));
  w.add_string_array("tokenizer.ggml.tokens", std::move(tokens));

  SplitMix64 gamma_rng{o.seed ^ 0x5bd1e995u};
  std::vector<float> gamma(o.hidden);
  for (float& g : gamma) g = 1.0f + 0.1f * gamma_rng.gaussian();
  std::vector<uint8_t> gamma_bytes(gamma.size() * 4);
  std::memcpy(gamma_bytes.data(), gamma.data(), gamma_bytes.size());
  w.add_tensor("output_norm.weight", TensorType::F32, {o.hidden}, std::move(gamma_bytes));

  std::vector<uint8_t> row(row_bytes);
  int64_t row_in_buffer = -1;
  w.add_tensor("output.weight", type, {o.hidden, o.vocab},
               [&](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
                 while (nbytes > 0) {
                   const int64_t r = int64_t(offset / row_bytes);
                   const uint64_t in_row = offset % row_bytes;
                   if (r != row_in_buffer) {
                     SplitMix64 rng{o.seed * 0x9E3779B97F4A7C15ull ^ uint64_t(r) * 0xD1B54A32D192ED03ull};
                     random_row(type, o.hidden, rng, row.data());
                     row_in_buffer = r;
                   }
                   const uint64_t n = std::min<uint64_t>(nbytes, row_bytes - in_row);
                   std::memcpy(dst, row.data() + in_row, n);
                   dst += n; offset += n; nbytes -= n;
                 }
               });
  w.write(path, progress);
}

}  // namespace lmhead
