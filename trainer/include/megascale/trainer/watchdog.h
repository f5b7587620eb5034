// A training job's hang detector. NCCL's collectives never time out on their own: a rank whose peer
// vanished (its host down, its process killed, a link gone) waits in the collective for ever. A watchdog
// thread checks every period: the communicators' asynchronous errors (through `probe`), and how long the
// step in progress has run. On either it calls `on_fail` once, with a message naming what happened; the
// caller aborts the communicators and exits (train_main.cpp), so the job ends with an error instead of
// hanging (PyTorch's NCCL watchdog does the same).
//
//   Watchdog dog({.step_timeout_s = 600}, [&] { return async_errors(comms); },
//                [&](const std::string& why) { abort_and_exit(why); });
//   for (...) { dog.step_begin(step); ...; dog.step_end(); }
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "megascale/common/units.h"

namespace megascale::trainer {

class Watchdog {
 public:
  struct Options {
    double step_timeout_s = 600;  // a step running longer fails the job; 0: no step deadline
    double period_s = 0.1;        // how often the thread checks
  };
  using Probe = std::function<std::string()>;            // "" when all is well, else the problem
  using Fail = std::function<void(const std::string&)>;  // called once, from the watchdog's thread

  // Starts the thread (none when both checks are off: step_timeout_s 0 and no probe).
  Watchdog(Options options, Probe probe, Fail on_fail);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void step_begin(int64_t step);  // the step's deadline starts now
  void step_end();                // no step in progress: only the probe is checked

  // One check at time `now` (steady clock, ns): the failure message, if any. The thread calls it; tests
  // call it with their own times.
  std::optional<std::string> check(TimeNs now) const;

  static TimeNs now_ns();

 private:
  void run();

  Options options_;
  Probe probe_;
  Fail on_fail_;
  std::atomic<int64_t> step_{-1};  // the step in progress, -1: none
  std::atomic<TimeNs> step_start_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace megascale::trainer
