// CSV output of the fluid model's time series, for plots and for people.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "megascale/sim/fluid.h"

namespace megascale::sim {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

// Rate-based controllers report an effectively infinite window; an empty field (a gap in the plot)
// says so better than a 300-digit number.
std::string window_kb(double bytes) {
  return std::isfinite(bytes) && bytes < kUnboundedWindowBytes ? fmt::format("{:.3f}", bytes / 1024) : "";
}

}  // namespace

Status write_fluid_csv(const FluidSeries& series, const std::string& path) {
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "w"));
  if (!file) return make_error(fmt::format("cannot write {}", path));
  std::string line = "t_us,queue_kb,queue_delay_us";
  for (size_t f = 0; f < series.flows.size(); ++f)
    line += fmt::format(",f{0}_rate_gbps,f{0}_cwnd_kb,f{0}_inflight_kb,f{0}_pacing_gbps", f);
  line += '\n';
  for (size_t k = 0; k < series.t_us.size(); ++k) {
    line += fmt::format("{:.3f},{:.3f},{:.4f}", series.t_us[k], series.queue_bytes[k] / 1024,
                        series.queue_delay_us[k]);
    for (const FlowSeries& fs : series.flows)
      line += fmt::format(",{:.4f},{},{:.3f},{:.4f}", fs.rate_gbps[k], window_kb(fs.cwnd_bytes[k]),
                          fs.inflight_bytes[k] / 1024, fs.pacing_gbps[k]);
    line += '\n';
    if (line.size() > (1u << 20)) {
      if (std::fwrite(line.data(), 1, line.size(), file.get()) != line.size())
        return make_error(fmt::format("error writing {}", path));
      line.clear();
    }
  }
  if (std::fwrite(line.data(), 1, line.size(), file.get()) != line.size() || std::fflush(file.get()) != 0)
    return make_error(fmt::format("error writing {}", path));
  return {};
}

}  // namespace megascale::sim
