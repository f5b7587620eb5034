#include "megascale/congestion/controller.h"

namespace megascale::cc {

std::string_view to_string(ControllerKind kind) {
  switch (kind) {
    case ControllerKind::kFixedWindow: return "fixed";
    case ControllerKind::kSwift: return "swift";
    case ControllerKind::kDcqcn: return "dcqcn";
    case ControllerKind::kHybrid: return "hybrid";
  }
  return "unknown";
}

double jain_index(const double* rates, int n) {
  if (n <= 0) return 1.0;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    sum += rates[i];
    sum_sq += rates[i] * rates[i];
  }
  if (sum_sq == 0) return 1.0;  // all idle: trivially fair
  return sum * sum / (n * sum_sq);
}

}  // namespace megascale::cc
