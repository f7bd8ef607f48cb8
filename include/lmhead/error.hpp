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

}  // namespace lmhead
