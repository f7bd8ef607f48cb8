// libFuzzer target: the .npy reader (magic, version, header dict literal, shape arithmetic, data
// size) on arbitrary bytes, followed by the finite check the CLI applies to hidden states.
#include <string>

#include "fuzz_common.hpp"
#include "io/hidden_input.hpp"
#include "io/npy.hpp"
#include "lmhead/error.hpp"

using namespace lmhead;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    io::HiddenStates states = io::parse_npy_f32({data, size}, "fuzz.npy");
    // An accepted file must describe exactly the floats it returned, all of them taken from the input.
    if (states.tokens <= 0 || states.hidden <= 0) __builtin_trap();
    if (states.values.size() != static_cast<uint64_t>(states.tokens) * static_cast<uint64_t>(states.hidden)) __builtin_trap();
    if (states.values.size() * 4 > size) __builtin_trap();
    fuzzing::consume(states.values.size());
    io::check_finite(states, "fuzz.npy");
  } catch (const Error&) {
  }
  return 0;
}
