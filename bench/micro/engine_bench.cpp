// The transport engine's per-segment cost: two endpoints wired back to back in memory, one thread,
// small segments, every segment encoded, checksummed, decoded, placed and acknowledged, every ACK
// decoded and fed to the lane's controller. The figure is data segments per second through both
// endpoints together (one core does the sender's and the receiver's work).
//
//   build/bench/megascale_micro_bench --benchmark_filter=Engine --benchmark_repetitions=5
//
// Arguments: payload bytes per segment, controller (0 fixed window, 1 hybrid, 2 swift, 3 DCQCN),
// ACK every N segments, and the batch: packets handed from sender to receiver before the receiver's
// answers go back (1 = one ACK per segment, each processed before the next segment leaves; 32 = a
// recvmmsg-sized batch, so ACKs coalesce as they would on a busy wire). Time is virtual and advances 10 ns
// per round; pacing is out of the way (line rate 10 Tb/s), so what is measured is the engine's own work per
// segment.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "megascale/engine/endpoint.h"

namespace megascale::engine {
namespace {

constexpr uint64_t kMessageBytes = 1 << 20;

cc::ControllerKind kind_of(int64_t v) {
  switch (v) {
    case 1:
      return cc::ControllerKind::kHybrid;
    case 2:
      return cc::ControllerKind::kSwift;
    case 3:
      return cc::ControllerKind::kDcqcn;
    default:
      return cc::ControllerKind::kFixedWindow;
  }
}

void BM_EngineBackToBack(benchmark::State& state) {
  EngineConfig cfg;
  cfg.segment_bytes = static_cast<uint32_t>(state.range(0));
  cfg.lanes = 4;
  cfg.window_segments = 1024;
  cfg.cc.kind = kind_of(state.range(1));
  cfg.cc.fixed.window_packets = 256;
  cfg.cc.flow.line_rate_bps = 1e13;
  cfg.ack_every_segments = static_cast<uint32_t>(state.range(2));
  cfg.ack_delay_ns = 1'000;
  auto ea = Endpoint::create(cfg);
  auto eb = Endpoint::create(cfg);
  if (!ea.ok() || !eb.ok()) {
    state.SkipWithError("engine config rejected");
    return;
  }
  Endpoint& A = **ea;
  Endpoint& B = **eb;
  std::vector<uint8_t> src(kMessageBytes), dst(kMessageBytes);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> wire(kMaxHeaderBytes + kMaxSegmentPayload);

  TimeNs now = 1'000'000;
  TxPacket tx;
  // Moves at most `limit` packets; returns how many moved.
  auto move = [&](Endpoint& from, Endpoint& to, uint32_t peer, uint64_t limit) {
    uint64_t n = 0;
    while (n < limit && from.poll_tx(now, tx)) {
      std::memcpy(wire.data(), tx.header, tx.header_len);
      if (tx.payload_len > 0) std::memcpy(wire.data() + tx.header_len, tx.payload, tx.payload_len);
      to.on_packet(now, peer, wire.data(), tx.header_len + tx.payload_len, false);
      ++n;
    }
    return n;
  };
  // One round: A's packets reach B in batches of `batch` (as a wire's recvmmsg hands them over); after
  // each batch B answers (its ACKs reach A) before A sends more. batch = 1: every segment is acked
  // and the ACK processed before the next segment leaves.
  const auto batch = static_cast<uint64_t>(state.range(3));
  auto round = [&] {
    while (move(A, B, 1, batch) > 0) move(B, A, 2, ~uint64_t{0});
    move(B, A, 2, ~uint64_t{0});
    now += 10;
    if (A.next_deadline() <= now) A.on_timer(now);
    if (B.next_deadline() <= now) B.on_timer(now);
  };

  Connection* a = A.connection(*A.connect(now, 2));
  std::optional<ConnId> bid;
  while (!bid) {
    round();
    bid = B.accept();
  }
  Connection* b = B.connection(*bid);

  // Keep two messages in flight so the pipe never drains between messages.
  RequestId sends[2] = {}, recvs[2] = {};
  auto post = [&](int i) {
    recvs[i] = *b->post_recv(dst.data(), dst.size(), 0);
    sends[i] = *a->post_send(src.data(), src.size(), 0);
  };
  post(0);
  post(1);
  int next = 0;
  const uint64_t segs0 = a->stats().segments_sent;
  const uint64_t acks0 = b->stats().acks_sent;
  for (auto _ : state) {
    round();
    if (a->test(sends[next]).done) {
      while (!b->test(recvs[next]).done) round();
      post(next);
      next ^= 1;
    }
  }
  const uint64_t segs = a->stats().segments_sent - segs0;
  state.counters["segments/s"] = benchmark::Counter(static_cast<double>(segs), benchmark::Counter::kIsRate);
  state.counters["segs/round"] = static_cast<double>(segs) / static_cast<double>(state.iterations());
  state.counters["acks/seg"] = static_cast<double>(b->stats().acks_sent - acks0) / static_cast<double>(segs);
  state.counters["retx"] = static_cast<double>(a->stats().retransmits());
  state.SetBytesProcessed(static_cast<int64_t>(a->stats().bytes_acked));
}

BENCHMARK(BM_EngineBackToBack)
    ->ArgNames({"payload", "cc", "ack_every", "batch"})
    ->Args({64, 0, 1, 1})
    ->Args({64, 1, 1, 1})
    ->Args({64, 2, 1, 1})
    ->Args({64, 3, 1, 1})
    ->Args({64, 0, 1, 32})
    ->Args({64, 1, 1, 32})
    ->Args({64, 1, 4, 32})
    ->Args({1024, 1, 1, 32})
    ->Args({4096, 1, 1, 32});

}  // namespace
}  // namespace megascale::engine
