// The progress round's sending half: packets the engine releases go out in batches, from this thread
// (sendmmsg, GSO) or handed to the I/O threads that own their sockets (progress_loop.h).
#include <bit>
#include <span>
#include <vector>

#include "megascale/engine/packet.h"
#include "progress_loop.h"

namespace megascale::wire::detail {

void ProgressLoop::transmit(TimeNs now, bool read_clock) {
  Io& io = *io_;
  if (io.port) {
    transmit_port(now, read_clock);
    return;
  }
  if (!io.threads.empty()) {
    transmit_to_threads(now, read_clock);
    return;
  }
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    // Each segment's send time is the RTT sample's start: a round stamped with the clock read before
    // the previous round's send calls would add their time (hundreds of microseconds for a batch of
    // 60 KiB datagrams, a scheduling quantum when the thread is preempted) to the fabric delay.
    if (read_clock && round > 0) now = clock();
    size_t n = 0;
    while (n < config_.batch && endpoint_->poll_tx(now, io.tx[n])) ++n;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      engine::TxPacket& p = io.tx[i];
      engine::seal_seg_payload_crc(p);  // no-op unless the engine left the CRC to the wire
      if (!io.peers.contains(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      io.items[k++] =
          TxItem{p.header, p.header_len, p.payload, p.payload_len, socket_for(p, now), p.peer, p.ect};
    }
    // The payload pointers stay valid until the next engine call other than poll_tx: send now.
    if (k > 0) note_io(now);
    if (k > 0) {
      const uint64_t errors_before = io.sender.counters().error_retries;
      io.sender.send(std::span(io.items.data(), k), io.sockets, io.peers.addresses(), io.gso);
      // A send that failed may have failed on a queued ICMP error (a peer's closed port): the next
      // round reports it.
      if (io.sender.counters().error_retries != errors_before) {
        for (const UdpSocket& s : io.sockets) read_port_unreachable(s.fd, io.unreachable);
      }
    }
    if (n < config_.batch) {
      more_tx_ = false;
      return;
    }
    if (read_clock) now = clock();
  }
  more_tx_ = true;
}

void ProgressLoop::transmit_port(TimeNs now, bool read_clock) {
  Io& io = *io_;
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    if (read_clock && round > 0) now = clock();
    size_t n = 0;
    while (n < config_.batch && endpoint_->poll_tx(now, io.tx[n])) ++n;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      engine::TxPacket& p = io.tx[i];
      engine::seal_seg_payload_crc(p);
      if (!io.port->has_peer(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      io.port_tx[k++] = PortPacket{p.header,  static_cast<uint32_t>(p.header_len),
                                   p.payload, static_cast<uint32_t>(p.payload_len),
                                   p.peer,    socket_for(p, now),
                                   p.lane,    p.ect};
    }
    if (k > 0) {
      note_io(now);
      if (Status s = io.port->send(std::span<const PortPacket>(io.port_tx.data(), k)); !s) {
        port_error_ = s.error().message;
        return;
      }
    }
    if (n < config_.batch) {
      more_tx_ = false;
      return;
    }
  }
  more_tx_ = true;
}

uint32_t ProgressLoop::socket_for(const engine::TxPacket& p, TimeNs now) {
  // Packets without a lane (SYN, endpoint RSTs) leave from socket 0, the address peers know: the
  // receiving engine matches them by (peer, connection id of ours).
  return p.path_id == engine::kHomePathId ? 0 : io_->paths.socket_for(p.path_id, p.conn_id, p.lane, now);
}

void ProgressLoop::transmit_to_threads(TimeNs now, bool read_clock) {
  Io& io = *io_;
  const size_t n_threads = io.threads.size();
  std::vector<TxBatch*>& open = io.tx_open;
  // Threads that stalled (UdpConfig::stall_ns) get nothing new: their sockets' packets go to the others.
  // If all did, the one that came round last is taken as the one most likely back first.
  // One bit per thread (validate_udp_config allows at most 64).
  uint64_t stalled = 0;
  if (config_.stall_ns > 0 && n_threads > 1) {
    const TimeNs t_now = clock();
    size_t latest = 0;
    for (size_t t = 0; t < n_threads; ++t) {
      if (io.threads[t]->stalled(t_now, config_.stall_ns)) stalled |= uint64_t{1} << t;
      if (io.threads[t]->heartbeat() > io.threads[latest]->heartbeat()) latest = t;
    }
    // All of them (a host this busy): the one seen last takes everything.
    if (std::popcount(stalled) == static_cast<int>(n_threads)) stalled &= ~(uint64_t{1} << latest);
  }
  for (int round = 0; round < kTxRoundsPerProgress; ++round) {
    // A batch per thread must be free before polling: a packet taken from the engine has to go somewhere.
    for (size_t t = 0; t < n_threads; ++t) {
      if ((stalled >> t) & 1) {
        open[t] = nullptr;
        continue;
      }
      open[t] = io.threads[t]->tx().producer_slot();
      if (open[t] == nullptr) {
        more_tx_ = true;  // that thread is behind; try again next round
        return;
      }
      open[t]->count = 0;
      open[t]->peers.clear();
      open[t]->peer_ids.clear();
      open[t]->polled_ns = now;
    }
    size_t polled = 0;
    bool full = false;
    while (!full) {
      // Poll into a scratch packet, then copy it to its thread's batch (headers are small).
      engine::TxPacket& p = io.tx[0];
      if (!endpoint_->poll_tx(now, p)) break;
      ++polled;
      if (!io.peers.contains(p.peer)) {
        ++io.tx_bad_peer;
        continue;
      }
      const uint32_t socket = socket_for(p, now);
      size_t t = socket % n_threads;
      if (open[t] == nullptr) {
        // Its thread stalled: the next one that did not (any thread may send on any socket).
        do t = (t + 1) % n_threads;
        while (open[t] == nullptr);
        ++io.tx_rerouted;
      }
      TxBatch& b = *open[t];
      // The open batch is the next one published: the send's fence on this thread.
      if (p.request != 0) io.tx_marks.set(p.conn_id, p.request, t, io.threads[t]->tx().published() + 1);
      uint32_t local_peer = 0;
      while (local_peer < b.peer_ids.size() && b.peer_ids[local_peer] != p.peer) ++local_peer;
      if (local_peer == b.peer_ids.size()) {
        b.peer_ids.push_back(p.peer);
        b.peers.push_back(io.peers.address(p.peer));
      }
      engine::TxPacket& kept = b.packets[b.count];
      kept = p;
      b.items[b.count] =
          TxItem{kept.header, kept.header_len, kept.payload, kept.payload_len, socket, local_peer, kept.ect};
      ++b.count;
      full = b.count == config_.batch;
    }
    if (polled > 0) note_io(now);
    for (size_t t = 0; t < n_threads; ++t) {
      if (open[t] == nullptr || open[t]->count == 0) continue;
      io.threads[t]->tx().publish();
      io.threads[t]->wake();
    }
    if (!full) {
      more_tx_ = false;
      return;
    }
    if (read_clock) now = clock();
  }
  more_tx_ = true;
}

}  // namespace megascale::wire::detail
