#pragma once
// The files a client reads and writes around a run, as the `lmhead` tool does: hidden states from a
// .npy or a GGUF tensor, f32 arrays to .npy, and any output written atomically (complete under its
// name, or absent).
//
//   lmhead::HiddenStates h = lmhead::load_hidden_states("vectors.gguf:hidden", model->config().hidden);
//   lmhead::RunResult r = engine.run(h.values, int(h.tokens), {.want_logits = true});
//   lmhead::write_npy_f32("logits.npy", {r.tokens, model->config().vocab}, r.logits.data());
//
// In the static library (lmhead::lmhead_static), like compare.hpp; not among liblmhead.so's exported
// symbols, and not installed.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmhead {

// T rows of N floats, row-major: row t is values[t * hidden, (t + 1) * hidden).
struct HiddenStates {
  int64_t tokens = 0;
  int64_t hidden = 0;
  std::vector<float> values;
};

// INPUT: a .npy path ([H] or [T, H] little-endian f32), or FILE.gguf:TENSOR naming an F32 tensor of
// ggml dims [H, T] (a golden vectors file's `hidden`; split on the last ':' that follows ".gguf").
// When expected_hidden > 0 the hidden size must match it. Every value must be finite. Throws Error
// naming the file, the tensor, and the token and index at fault.
HiddenStates load_hidden_states(const std::string& input, int64_t expected_hidden = 0);

// A .npy of little-endian f32 in C order: [N] reads as 1 x N, [T, N] as T x N. The file is untrusted:
// throws Error naming it and the problem (dtype, order, rank, a header that lies, truncated data).
HiddenStates read_npy_f32(const std::string& path);
// Writes an f32 .npy of `shape` ([N] or [T, N]) from `data` (product of shape floats), atomically.
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

// Writes `bytes` under a temporary name in path's directory, fsyncs and renames: the file appears
// complete under `path` or not at all.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Installs SIGINT/SIGTERM/SIGHUP handlers that remove the temporaries of unfinished atomic writes
// (these, `lmhead make`'s, `--out`'s), then let the signal take its default action. A program calls
// it once; without it an interrupted write leaves a PATH.tmp-* file behind (never a partial PATH).
void remove_temporaries_on_signals();

}  // namespace lmhead
