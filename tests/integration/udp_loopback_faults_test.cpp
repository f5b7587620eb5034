// The UDP wire end to end on loopback, two wires in one process. Fault injection (drop, reorder, duplicate,
// corrupt, delay on both directions): every byte arrives exactly once and intact.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

struct FaultCase {
  const char* host;
  double drop;
  uint64_t message_bytes;
  int messages;
  uint32_t io_threads = 0;  // UdpConfig::io_threads on both sides
};

void PrintTo(const FaultCase& c, std::ostream* os) {
  *os << c.host << " drop " << c.drop << ", " << c.messages << " x " << c.message_bytes << " B, io_threads "
      << c.io_threads;
}

class UdpLoopbackFaults : public ::testing::TestWithParam<FaultCase> {};

TEST_P(UdpLoopbackFaults, EveryByteArrivesExactlyOnceAndIntact) {
  const FaultCase fc = GetParam();
  if (std::string(fc.host) == "::1" && !ipv6_loopback_available()) GTEST_SKIP() << "no IPv6 loopback";
  UdpConfig sender_config =
      wire_config(fc.host, faults(fc.drop, 1000 + static_cast<uint64_t>(fc.drop * 1e4)));
  UdpConfig receiver_config =
      wire_config(fc.host, faults(fc.drop, 2000 + static_cast<uint64_t>(fc.drop * 1e4)));
  sender_config.io_threads = receiver_config.io_threads = fc.io_threads;
  Pair p = connect_pair(sender_config, receiver_config);
  ASSERT_TRUE(p.recv_conn);
  std::vector<uint64_t> sizes = {1, 8192, 100'000, kMiB + 5};
  for (int i = 0; i < fc.messages; ++i) sizes.push_back(fc.message_bytes);
  TransferResult r;
  ASSERT_NO_FATAL_FAILURE(transfer(p, sizes, sec(60), r));
  char what[64];
  std::snprintf(what, sizeof what, "%s drop %.1f%%", fc.host, fc.drop * 100);
  report(what, r, p);
  // The injector ran with the configured probabilities: each fault expected >= 20 times happened
  // (fault_test checks the rates themselves).
  const UdpWireStats rx = p.receiver->stats();
  const FaultConfig f = faults(fc.drop, 0);
  auto expect_seen = [&](uint64_t count, double probability, const char* fault) {
    if (static_cast<double>(rx.fault.datagrams) * probability >= 20) {
      EXPECT_GT(count, 0u) << fault;
    }
  };
  expect_seen(rx.fault.dropped, f.drop, "drop");
  expect_seen(rx.fault.reordered, f.reorder, "reorder");
  expect_seen(rx.fault.duplicated, f.duplicate, "duplicate");
  expect_seen(rx.fault.corrupted, f.corrupt, "corrupt");
  expect_seen(rx.fault.delayed, f.delay, "delay");
  EXPECT_EQ(rx.fault.datagrams, rx.datagrams_received);
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopbackFaults,
                         ::testing::Values(FaultCase{"127.0.0.1", 0.001, 256 * kMiB, 8},
                                           FaultCase{"127.0.0.1", 0.01, 256 * kMiB, 8},
                                           FaultCase{"127.0.0.1", 0.1, 16 * kMiB, 4},
                                           FaultCase{"::1", 0.01, 16 * kMiB, 1},
                                           // Faults (corruption included) after the I/O threads' CRC check:
                                           // the engine must check again.
                                           FaultCase{"127.0.0.1", 0.01, 64 * kMiB, 4, 2}),
                         [](const auto& param_info) {
                           const FaultCase& c = param_info.param;
                           return std::string(std::string(c.host) == "::1" ? "ipv6" : "ipv4") + "_drop_" +
                                  std::to_string(static_cast<int>(c.drop * 1000)) + "permille" +
                                  (c.io_threads ? "_io_threads_" + std::to_string(c.io_threads) : "");
                         });

}  // namespace
}  // namespace megascale::wire
