// One many-to-one transfer through a NetnsTopology: a netns_peer receiver in the receiver namespace,
// N netns_peer senders in the senders namespace, all starting at the same instant, and their JSON
// results parsed (netns_peer.cpp documents the fields).
//
//   TransferSpec spec;  spec.cc = preset_path("hybrid-1g");  spec.bytes_per_sender = 128 << 20;
//   TransferOutcome out = run_transfer(topo, spec, [&](TimeNs start_ns) { /* during the transfer */ });
//   EXPECT_TRUE(out.receiver["ok"]);  double gbps = out.aggregate_goodput_bps() / 1e9;
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/source_path.h"
#include "netns_topology.h"

namespace megascale::netns_test {

using json = nlohmann::json;

// A preset YAML of tests/integration/netns/.
inline std::string preset_path(const std::string& name) {
  return megascale::test::source_path("tests/integration/netns/") + name + ".yaml";
}

struct TransferSpec {
  std::string cc;        // preset name or file (both ends use it)
  uint32_t senders = 4;  // sender processes, ids 0..senders-1
  uint64_t bytes_per_sender = 64 << 20;
  uint64_t msg_bytes = 1 << 20;
  uint32_t window = 8;              // messages in flight per sender, receives posted per connection
  double sender_deadline_s = 30;    // each sender ends by then, whatever happens
  double receiver_deadline_s = 40;  // and the receiver by then
  double start_delay_s = 1.0;       // senders connect, then all start this long after launch
};

// The host's CPU time since boot from /proc/stat's first line, in clock ticks: busy (user, nice,
// system, steal: time the hypervisor gave to another guest counts as taken) and total.
struct HostCpuSample {
  double busy = 0, total = 0;
  static HostCpuSample now() {
    HostCpuSample h;
    std::ifstream in("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu") {
      h.busy = user + nice + system + steal;
      h.total = h.busy + idle + iowait + irq + softirq;
    }
    return h;
  }
};

struct TransferOutcome {
  std::string error;    // setup problems (a peer did not start, bad JSON)
  TimeNs start_ns = 0;  // when the senders were told to start (CLOCK_MONOTONIC)
  json receiver;
  std::vector<json> senders;
  int receiver_status = -1;
  std::vector<int> sender_status;
  // CPUs' worth of work the host did during the run besides the transfer's own processes (their user and
  // system time; the kernel's forwarding runs in softirq, not counted): load from outside the test.
  // -1 when /proc/stat cannot be read.
  double foreign_cpus = -1;

  // Bytes all senders completed, over the span from the first start to the last completion.
  double aggregate_goodput_bps() const {
    TimeNs first = kNever, last = 0;
    double bytes = 0;
    for (const json& s : senders) {
      first = std::min<TimeNs>(first, s.value("start_ns", kNever));
      last = std::max<TimeNs>(last, s.value("end_ns", TimeNs{0}));
      bytes += s.value("bytes", 0.0);
    }
    return last > first ? bytes * 8 / (static_cast<double>(last - first) / 1e9) : 0.0;
  }

  // Mean over senders of the queueing delay each measured (RTT p50 - min RTT), ns.
  double mean_queueing_delay_ns() const {
    double sum = 0;
    for (const json& s : senders) sum += s["connection"].value("queueing_delay_ns", 0.0);
    return senders.empty() ? 0 : sum / static_cast<double>(senders.size());
  }
};

inline TransferOutcome run_transfer(const NetnsTopology& topo, const TransferSpec& spec,
                                    const std::function<void(TimeNs start_ns)>& during = {}) {
  TransferOutcome out;
  const HostCpuSample cpu_before = HostCpuSample::now();
  const std::string peer = MEGASCALE_NETNS_PEER;
  const std::vector<std::string> common = {"--port",   "17000",
                                           "--bytes",  std::to_string(spec.bytes_per_sender),
                                           "--msg",    std::to_string(spec.msg_bytes),
                                           "--window", std::to_string(spec.window),
                                           "--cc",     spec.cc};
  std::vector<std::string> rx_args = {peer,           "recv",
                                      "--bind",       NetnsTopology::kReceiverAddr,
                                      "--conns",      std::to_string(spec.senders),
                                      "--deadline-s", std::to_string(spec.receiver_deadline_s)};
  rx_args.insert(rx_args.end(), common.begin(), common.end());
  Child rx = Child::spawn(topo.receiver_ns(), rx_args);
  if (!rx.wait_for_line("\"ready\"", wire::UdpWire::now() + sec(10))) {
    out.error = "receiver did not start: " + rx.output();
    return out;
  }
  out.start_ns = wire::UdpWire::now() + sec(spec.start_delay_s);
  std::vector<Child> tx;
  for (uint32_t i = 0; i < spec.senders; ++i) {
    std::vector<std::string> args = {peer,
                                     "send",
                                     "--bind",
                                     NetnsTopology::kSenderAddr,
                                     "--host",
                                     NetnsTopology::kReceiverAddr,
                                     "--id",
                                     std::to_string(i),
                                     "--start-at-ns",
                                     std::to_string(out.start_ns),
                                     "--deadline-s",
                                     std::to_string(spec.sender_deadline_s)};
    args.insert(args.end(), common.begin(), common.end());
    // MEGASCALE_NETNS_TIMELINE_MS=100: each sender prints its window, rate and counters to stderr.
    if (const char* ms = std::getenv("MEGASCALE_NETNS_TIMELINE_MS"))
      args.insert(args.end(), {"--timeline-ms", ms});
    tx.push_back(Child::spawn(topo.senders_ns(), args));
  }
  if (during) during(out.start_ns);
  // Each process has its own deadline; these are the test's, a little later, after which it kills.
  const TimeNs launched = wire::UdpWire::now();
  for (Child& c : tx) {
    out.sender_status.push_back(c.wait(launched + sec(spec.sender_deadline_s + 10)));
    const std::string line = c.last_line();
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      out.error += "sender output is not JSON: '" + line + "'; ";
      j = json::object();
    }
    out.senders.push_back(j);
  }
  out.receiver_status = rx.wait(launched + sec(spec.receiver_deadline_s + 10));
  out.receiver = json::parse(rx.last_line(), nullptr, false);
  if (out.receiver.is_discarded() || !out.receiver.is_object()) {
    out.error += "receiver output is not JSON: '" + rx.last_line() + "'";
    out.receiver = json::object();
  }
  const HostCpuSample cpu_after = HostCpuSample::now();
  if (cpu_after.total > cpu_before.total) {
    const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double cpus = static_cast<double>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1));
    const double wall_s = (cpu_after.total - cpu_before.total) / ticks_per_s / cpus;
    double own_s = out.receiver.value("cpu_user_s", 0.0) + out.receiver.value("cpu_sys_s", 0.0);
    for (const json& j : out.senders) own_s += j.value("cpu_user_s", 0.0) + j.value("cpu_sys_s", 0.0);
    out.foreign_cpus = std::max((cpu_after.busy - cpu_before.busy) / ticks_per_s - own_s, 0.0) / wall_s;
  }
  return out;
}

}  // namespace megascale::netns_test
