// The training job's hang detector (watchdog.h).
#include "megascale/trainer/watchdog.h"

#include <fmt/format.h>

#include <chrono>

namespace megascale::trainer {

Watchdog::Watchdog(Options options, Probe probe, Fail on_fail)
    : options_(options), probe_(std::move(probe)), on_fail_(std::move(on_fail)) {
  if (options_.step_timeout_s > 0 || probe_) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

TimeNs Watchdog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::step_begin(int64_t step) {
  step_start_ns_.store(now_ns());
  step_.store(step);
}

void Watchdog::step_end() {
  step_.store(-1);
}

std::optional<std::string> Watchdog::check(TimeNs now) const {
  if (probe_) {
    if (std::string problem = probe_(); !problem.empty()) return problem;
  }
  const int64_t step = step_.load();
  if (step < 0 || options_.step_timeout_s <= 0) return std::nullopt;
  const double ran_s = static_cast<double>(now - step_start_ns_.load()) / 1e9;
  if (ran_s <= options_.step_timeout_s) return std::nullopt;
  return fmt::format(
      "step {} has run {:.0f} s, past --step-timeout {:g} s: a collective is waiting for a rank that stopped "
      "or vanished",
      step, ran_s, options_.step_timeout_s);
}

void Watchdog::run() {
  const auto period = std::chrono::duration<double>(options_.period_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    if (std::optional<std::string> problem = check(now_ns())) {
      lock.unlock();
      on_fail_(*problem);
      return;
    }
  }
}

}  // namespace megascale::trainer
