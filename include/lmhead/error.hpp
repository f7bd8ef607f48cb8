#pragma once
#include <stdexcept>
#include <string>

namespace lmhead {

// Every failure the library reports (bad file, bad input, unsupported type, device error) is an
// Error whose message names the problem; callers never see a crash for bad input.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An Error that is the caller's values, not the file or the machine: a NaN or an infinity in the
// hidden states (found on the host, or on the GPU for rows in device memory). The C API returns
// LMHEAD_ERR_INPUT for it, Python raises lmhead.InputError.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

}  // namespace lmhead
