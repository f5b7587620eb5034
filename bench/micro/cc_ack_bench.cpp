// Micro-benchmarks of the per-packet cost of congestion control: one Controller::on_ack for each
// controller in a steady state, and the RTO estimator's and the pacer's per-packet calls.
//
//   build/bench/megascale_micro_bench --benchmark_filter='OnAck' --benchmark_repetitions=5
//
// Inputs are what a 100 Gb/s flow of 4096 B segments sees: one ACK per segment every 327.68 ns, RTT
// samples spread +-20% around Swift's delay target (so Swift and the hybrid keep both increasing and
// decreasing), 1-3 us of remote delay, and one ACK in 32 echoing ECN. The same ACK stream goes to every
// controller. The controllers are called through the Controller interface, as the engine calls them.
// Before and during timing, a CNP arrives every 1024 ACKs (~336 us), so DCQCN's rate stays below line
// rate with its alpha and rate-increase timers running, and the timed on_ack calls catch those timers
// up, as they do in production (the rate_gbps counter shows where each controller sat).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "megascale/common/units.h"
#include "megascale/congestion/controller.h"
#include "megascale/congestion/dcqcn.h"
#include "megascale/congestion/fixed_window.h"
#include "megascale/congestion/hybrid.h"
#include "megascale/congestion/pacer.h"
#include "megascale/congestion/params.h"
#include "megascale/congestion/rto.h"
#include "megascale/congestion/swift.h"

namespace megascale::cc {
namespace {

constexpr size_t kTraceLen = 4096;  // a power of two: the loops wrap with a mask
constexpr uint32_t kMss = 4096;
constexpr uint8_t kHops = 3;
constexpr double kLineRateBps = 100e9;

FlowParams bench_flow() {
  FlowParams flow;
  flow.line_rate_bps = kLineRateBps;
  flow.mss_bytes = kMss;
  flow.base_rtt_ns = 10'000;
  flow.hops = kHops;
  return flow;
}

// xorshift64: inputs are the same on every run and every machine.
uint64_t xorshift64(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

double unit_uniform(uint64_t& s) {
  return static_cast<double>(xorshift64(s) >> 11) * 0x1.0p-53;
}

struct AckTrace {
  std::vector<AckSample> acks;
  std::vector<TimeNs> gaps_ns;  // time from the previous ACK
};

const AckTrace& ack_trace() {
  static const AckTrace trace = [] {
    AckTrace t;
    uint64_t s = 0x243F6A8885A308D3ULL;
    // Swift's target for a window near the BDP (100 Gb/s x ~30 us = ~90 segments).
    const double target_ns = swift_target_delay_ns(SwiftParams{}, 90, kHops);
    const double ack_gap_ns = serialize_ns(kMss, kLineRateBps);
    for (size_t i = 0; i < kTraceLen; ++i) {
      AckSample a;
      a.acked_bytes = kMss;
      a.acked_packets = 1;
      a.remote_delay_ns = 1'000 + static_cast<TimeNs>(2'000 * unit_uniform(s));
      a.rtt_ns = a.remote_delay_ns + static_cast<TimeNs>(target_ns * (0.8 + 0.4 * unit_uniform(s)));
      a.ecn_ce = (xorshift64(s) % 32) == 0;
      a.ce_packets = a.ecn_ce ? 1 : 0;
      a.hops = kHops;
      t.acks.push_back(a);
      const auto at = [&](size_t k) { return static_cast<TimeNs>(static_cast<double>(k) * ack_gap_ns); };
      t.gaps_ns.push_back(at(i + 1) - at(i));
    }
    return t;
  }();
  return trace;
}

constexpr size_t kAcksPerCnp = 1024;

// Sends and ACKs until the controller is in its steady state; returns the time reached.
TimeNs warm_up(Controller& cc) {
  const AckTrace& trace = ack_trace();
  TimeNs now = 0;
  for (size_t i = 0; i < 8 * kTraceLen; ++i) {
    const size_t k = i & (kTraceLen - 1);
    now += trace.gaps_ns[k];
    cc.on_send(now, kMss);
    cc.on_ack(now, trace.acks[k]);
    if (i % kAcksPerCnp == 0) cc.on_cnp(now);
  }
  return now;
}

// The timed loop: one on_ack per iteration, the clock advancing one ACK gap each time. CNPs keep
// arriving so DCQCN stays in its congested steady state instead of recovering to line rate over the
// run. The CNP call is inside the timing (PauseTiming would cost far more than it): it adds 1/1024 of
// one on_cnp to each figure.
void run_on_ack(benchmark::State& state, Controller& controller) {
  const AckTrace& trace = ack_trace();
  // Hide the dynamic type: the engine calls through the interface and pays the virtual call.
  Controller* cc = &controller;
  benchmark::DoNotOptimize(cc);
  TimeNs now = warm_up(*cc);
  size_t i = 0;
  for (auto _ : state) {
    const size_t k = i & (kTraceLen - 1);
    now += trace.gaps_ns[k];
    const AckSample* ack = &trace.acks[k];
    benchmark::DoNotOptimize(ack);
    cc->on_ack(now, *ack);
    benchmark::ClobberMemory();
    if (++i % kAcksPerCnp == 0) cc->on_cnp(now);
  }
  state.SetItemsProcessed(state.iterations());
  // Where the steady state sat, to check the inputs were realistic (not pinned at a bound).
  if (cc->cwnd_bytes() < 1e9) state.counters["cwnd_pkts"] = cc->cwnd_bytes() / kMss;
  state.counters["rate_gbps"] = cc->pacing_rate_bps() / 1e9;
}

void BM_OnAck_Fixed(benchmark::State& state) {
  FixedWindowController cc(FixedWindowParams{}, bench_flow());
  run_on_ack(state, cc);
}

void BM_OnAck_Swift(benchmark::State& state) {
  SwiftController cc(SwiftParams{}, bench_flow());
  run_on_ack(state, cc);
}

void BM_OnAck_Dcqcn(benchmark::State& state) {
  DcqcnController cc(DcqcnParams{}, bench_flow());
  run_on_ack(state, cc);
}

void BM_OnAck_Hybrid(benchmark::State& state) {
  HybridController cc(HybridParams{}, bench_flow());
  run_on_ack(state, cc);
}

BENCHMARK(BM_OnAck_Fixed);
BENCHMARK(BM_OnAck_Swift);
BENCHMARK(BM_OnAck_Dcqcn);
BENCHMARK(BM_OnAck_Hybrid);

// One RTT sample into the RTO estimator (every ACK of a segment sent once).
void BM_Rto_OnRttSample(benchmark::State& state) {
  const AckTrace& trace = ack_trace();
  RtoEstimator rto(RtoParams{}, 1);
  size_t k = 0;
  for (auto _ : state) {
    TimeNs rtt_ns = trace.acks[k].rtt_ns;
    benchmark::DoNotOptimize(rtt_ns);
    rto.on_rtt_sample(rtt_ns);
    benchmark::ClobberMemory();
    k = (k + 1) & (kTraceLen - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["base_rto_us"] = static_cast<double>(rto.base_rto_ns()) / 1e3;
}
BENCHMARK(BM_Rto_OnRttSample);

// One Pacer::on_send at 400 Gb/s, the clock advancing one 4096 B serialisation time (81.92 ns).
void BM_Pacer_OnSend(benchmark::State& state) {
  Pacer pacer(PacerParams{}, 400e9);
  const double gap_ns = serialize_ns(kMss, 400e9);
  uint64_t sent = 0;
  for (auto _ : state) {
    auto now = static_cast<TimeNs>(static_cast<double>(sent) * gap_ns);
    benchmark::DoNotOptimize(now);
    pacer.on_send(now, kMss);
    benchmark::ClobberMemory();
    ++sent;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Pacer_OnSend);

// What a paced sender pays per packet: ask when it may leave, then send it then.
void BM_Pacer_NextSendThenOnSend(benchmark::State& state) {
  Pacer pacer(PacerParams{}, 400e9);
  TimeNs now = 0;
  for (auto _ : state) {
    now = pacer.next_send_ns(now, kMss);
    benchmark::DoNotOptimize(now);
    pacer.on_send(now, kMss);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Pacer_NextSendThenOnSend);

}  // namespace
}  // namespace megascale::cc
