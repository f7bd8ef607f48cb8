#pragma once
// Synthetic checkpoints and hidden states, as `lmhead make` writes them and `lmhead demo` runs them:
// random but valid blocks (any bytes are a valid K-quant block once its f16 scales are finite,
// numerics.md §3) whose bytes depend only on (seed, shape, type), so a seed names a file.
//
//   lmhead::write_synthetic_checkpoint("small.gguf", {.vocab = 4099, .hidden = 512, .seed = 3});
//
// Not in the library an engine links: in lmhead_synth, a static library of the build tree for the
// tool, the tests and the benchmarks (CMake target lmhead_synth).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lmhead/tensor_type.hpp"

namespace lmhead {

// The defaults are the Muse Glimmer shape: a 202,048 x 6,656 Q5_K head (924.6 MB).
struct SyntheticCheckpoint {
  int64_t vocab = 202048;
  int64_t hidden = 6656;
  TensorType type = TensorType::Q5_K;  // a head type (tensor_type_info(type)->head_supported)
  std::string arch = "muse-glimmer";   // general.architecture
  double logit_scale = 0.196116;       // ARCH.logit_scale
  double softcap = 20.0;               // ARCH.final_logit_softcapping (0: none)
  uint64_t seed = 1;
};

// Writes the checkpoint atomically: metadata with a token table, output_norm.weight and
// output.weight, rows produced as the file is written (the head never sits in memory).
// progress(done, total) in bytes of the file. Throws Error naming the value it cannot write (in
// `lmhead make`'s words: --vocab, --hidden, --logit-scale, --softcap).
void write_synthetic_checkpoint(const std::string& path, const SyntheticCheckpoint& checkpoint,
                                const std::function<void(uint64_t done, uint64_t total)>& progress = {});

// tokens x hidden values, normally distributed, from `seed` (`lmhead demo` uses 42).
std::vector<float> synthetic_hidden_states(int64_t tokens, int64_t hidden, uint64_t seed);

}  // namespace lmhead
