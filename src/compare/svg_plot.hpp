#pragma once
// The pictures of `lmhead compare --plot`: a self-contained SVG (no runtime dependency) with the
// histogram of |a - b|, the histogram of the ulp distance, and |a - b| against B's logit value.
#include <span>
#include <string>

namespace lmhead::compare_plot {

// a and b of equal length (b is the reference whose value is the x axis of the third panel).
// The scatter is drawn as a density grid, so the file stays small at any vocabulary size.
std::string comparison_svg(std::span<const double> a, std::span<const double> b, const std::string& title);

}  // namespace lmhead::compare_plot
