// The pictures of `lmhead compare --plot` (lmhead/compare.hpp): a self-contained SVG, no runtime
// dependency.
#include "lmhead/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace lmhead {
namespace {

constexpr int kWidth = 960, kPanel = 250, kLeft = 80, kRight = 30, kTop = 50, kGap = 70;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else if (ch == '"') out += "&quot;";
    else out += ch;
  }
  return out;
}

int64_t ulp_between(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// Bars with heights on a log10(1 + count) scale: the counts span many decades (most logits sit in
// the first bins), and a linear axis would show one bar.
void bars(std::string& svg, int y0, const std::string& title, const std::vector<int64_t>& counts,
          const std::vector<std::string>& first_last_labels, const std::string& xlabel) {
  const int plot_w = kWidth - kLeft - kRight;
  int64_t top = 1;
  for (int64_t c : counts) top = std::max(top, c);
  const double ltop = std::log10(1.0 + double(top));
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0 - 10) + "\" font-size=\"14\">" +
         escape(title) + "</text>\n";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0) + "\" width=\"" + std::to_string(plot_w) +
         "\" height=\"" + std::to_string(kPanel) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  const double bw = double(plot_w) / double(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    const double h = double(kPanel) * std::log10(1.0 + double(counts[i])) / ltop;
    svg += "<rect x=\"" + fmt("%.2f", kLeft + bw * double(i)) + "\" y=\"" + fmt("%.2f", y0 + kPanel - h) +
           "\" width=\"" + fmt("%.2f", std::max(bw - 1.0, 0.5)) + "\" height=\"" + fmt("%.2f", h) +
           "\" fill=\"#4477aa\"><title>" + std::to_string(counts[i]) + "</title></rect>\n";
  }
  svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + std::to_string(y0 + 10) +
         "\" font-size=\"11\" text-anchor=\"end\">" + std::to_string(top) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + std::to_string(y0 + kPanel) +
         "\" font-size=\"11\" text-anchor=\"end\">0</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft - 40) + "\" y=\"" + std::to_string(y0 + kPanel / 2) +
         "\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 " + std::to_string(kLeft - 40) + " " +
         std::to_string(y0 + kPanel / 2) + ")\">count (log scale)</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0 + kPanel + 16) + "\" font-size=\"11\">" +
         escape(first_last_labels[0]) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kWidth - kRight) + "\" y=\"" + std::to_string(y0 + kPanel + 16) +
         "\" font-size=\"11\" text-anchor=\"end\">" + escape(first_last_labels[1]) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft + plot_w / 2) + "\" y=\"" + std::to_string(y0 + kPanel + 16) +
         "\" font-size=\"11\" text-anchor=\"middle\">" + escape(xlabel) + "</text>\n";
}

}  // namespace

std::string comparison_svg(std::span<const double> a, std::span<const double> b, const std::string& title) {
  const size_t n = std::min(a.size(), b.size());
  double dmax = 0, vmin = 0, vmax = 0;
  int64_t umax = 0;
  for (size_t i = 0; i < n; ++i) {
    dmax = std::max(dmax, std::fabs(a[i] - b[i]));
    umax = std::max(umax, ulp_between(float(a[i]), float(b[i])));
    vmin = i ? std::min(vmin, b[i]) : b[i];
    vmax = i ? std::max(vmax, b[i]) : b[i];
  }
  const double drange = dmax > 0 ? dmax : 1.0, vrange = vmax > vmin ? vmax - vmin : 1.0;

  // |d|: 60 linear bins from 0 to the largest difference.
  constexpr int kBins = 60;
  std::vector<int64_t> dhist(kBins, 0);
  // ulp: bucket 0 holds exact equality, bucket k holds [2^(k-1), 2^k).
  int ubuckets = 1;
  while (ubuckets < 40 && (int64_t(1) << (ubuckets - 1)) <= umax) ++ubuckets;
  std::vector<int64_t> uhist(size_t(ubuckets), 0);
  constexpr int kGx = 160, kGy = 60;
  std::vector<int64_t> grid(size_t(kGx) * kGy, 0);
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(a[i] - b[i]);
    dhist[size_t(std::min(kBins - 1, int(d / drange * kBins)))]++;
    const int64_t u = ulp_between(float(a[i]), float(b[i]));
    int k = 0;
    while (k + 1 < ubuckets && (int64_t(1) << k) <= u) ++k;
    uhist[size_t(k)]++;
    const int gx = std::min(kGx - 1, int((b[i] - vmin) / vrange * kGx));
    const int gy = std::min(kGy - 1, int(d / drange * kGy));
    grid[size_t(gy) * kGx + size_t(gx)]++;
  }

  const int height = kTop + 3 * kPanel + 2 * kGap + 40;
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(kWidth) + "\" height=\"" + std::to_string(height) +
                    "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"22\" font-size=\"16\">" + escape(title) + " (" +
         std::to_string(n) + " logits)</text>\n";
  bars(svg, kTop, "histogram of |a - b|", dhist, {"0", fmt("%.3g", dmax)}, "|a - b|");
  std::vector<std::string> ulabels = {"0 ulp", "< 2^" + std::to_string(ubuckets - 1) + " ulp"};
  bars(svg, kTop + kPanel + kGap, "histogram of the ulp distance (bucket k: [2^(k-1), 2^k), first: equal)", uhist,
       ulabels, "ulp distance, log2 buckets");

  const int y0 = kTop + 2 * (kPanel + kGap), plot_w = kWidth - kLeft - kRight;
  int64_t gtop = 1;
  for (int64_t c : grid) gtop = std::max(gtop, c);
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0 - 10) +
         "\" font-size=\"14\">|a - b| against the logit value of B (density, darker = more logits)</text>\n";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0) + "\" width=\"" + std::to_string(plot_w) +
         "\" height=\"" + std::to_string(kPanel) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  const double cw = double(plot_w) / kGx, ch = double(kPanel) / kGy;
  for (int gy = 0; gy < kGy; ++gy)
    for (int gx = 0; gx < kGx; ++gx) {
      const int64_t c = grid[size_t(gy) * kGx + size_t(gx)];
      if (c == 0) continue;
      const double alpha = 0.15 + 0.85 * std::log1p(double(c)) / std::log1p(double(gtop));
      svg += "<rect x=\"" + fmt("%.2f", kLeft + cw * gx) + "\" y=\"" + fmt("%.2f", y0 + kPanel - ch * (gy + 1)) +
             "\" width=\"" + fmt("%.2f", cw) + "\" height=\"" + fmt("%.2f", ch) + "\" fill=\"#aa3377\" fill-opacity=\"" +
             fmt("%.3f", alpha) + "\"/>\n";
    }
  svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + std::to_string(y0 + 10) +
         "\" font-size=\"11\" text-anchor=\"end\">" + fmt("%.3g", dmax) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + std::to_string(y0 + kPanel) +
         "\" font-size=\"11\" text-anchor=\"end\">0</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y0 + kPanel + 16) + "\" font-size=\"11\">" +
         fmt("%.4g", vmin) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kWidth - kRight) + "\" y=\"" + std::to_string(y0 + kPanel + 16) +
         "\" font-size=\"11\" text-anchor=\"end\">" + fmt("%.4g", vmax) + "</text>\n";
  svg += "<text x=\"" + std::to_string(kLeft + plot_w / 2) + "\" y=\"" + std::to_string(y0 + kPanel + 16) +
         "\" font-size=\"11\" text-anchor=\"middle\">logit value of B</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace lmhead
