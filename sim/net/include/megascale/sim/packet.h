// Simulated packets: the engine's header bytes and a payload length, no payload bytes. They come from
// a pool's free list and go back to it when delivered or dropped, so a run allocates only while the
// number of packets alive grows (htsim's PacketDB free lists).
//
//   PacketPool pool;
//   Packet* p = pool.alloc();
//   p->flow = FiveTuple{.src_addr = 1, .dst_addr = 2, .src_port = 50'000, .dst_port = kSimUdpPort};
//   p->wire_bytes = 4096 + 72 + kFrameOverheadBytes;
//   sink->receive(p);            // ownership moves with the pointer; the last holder calls release()
//   ...
//   pool.release(p);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "megascale/engine/packet.h"

namespace megascale::sim {

// Bytes a frame takes on an Ethernet wire beyond the engine's header and payload: preamble + SFD (8),
// Ethernet header (14), IPv4 (20), UDP (8), FCS (4), inter-frame gap (12).
inline constexpr uint32_t kFrameOverheadBytes = 66;
// The UDP destination port of every engine packet (RoCEv2's; only the source port varies per lane).
inline constexpr uint16_t kSimUdpPort = 4791;

struct FiveTuple {
  uint32_t src_addr = 0;
  uint32_t dst_addr = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t protocol = 17;  // UDP
};

class SwitchIngress;

// Traffic classes (802.1p priorities as switches map them). With two priorities (QueueConfig::
// priorities = 2) control frames (ACKs, CNPs, credits, handshakes: every frame without payload) are
// served strictly before data and are not paused by PFC, as RoCE fabrics put CNPs in a high class
// apart from the lossless RDMA class; with one (the default) every frame shares one FIFO.
inline constexpr uint8_t kPriorityData = 0;     // the lossless (PFC) class
inline constexpr uint8_t kPriorityControl = 1;  // strict high priority, lossy
inline constexpr uint8_t kMaxPriorities = 2;

struct Packet {
  Packet* next = nullptr;  // intrusive link for the queue holding it
  // The switch ingress whose buffer accounting holds this frame (PFC, pfc.h); set when it enters a
  // switch, cleared when it leaves that switch's output queue or is dropped there.
  SwitchIngress* ingress = nullptr;
  FiveTuple flow;            // addresses are host ids
  uint32_t wire_bytes = 0;   // what serialises: header + payload + kFrameOverheadBytes
  uint32_t payload_len = 0;  // the engine's payload bytes (absent here)
  uint16_t header_len = 0;
  bool ect = false;                  // ECN-capable transport: RED marks it instead of leaving it
  bool ce = false;                   // congestion experienced, set by a queue
  uint8_t priority = kPriorityData;  // traffic class, set by the sending host
  alignas(8) uint8_t header[engine::kMaxHeaderBytes];
};

// Where packets go: a queue, a link, a switch, a host. receive() takes ownership.
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void receive(Packet* pkt) = 0;
};

// A free list of packets. Packets are allocated in chunks and never returned to the heap until the
// pool dies, so pointers stay valid for the pool's life.
class PacketPool {
 public:
  PacketPool() = default;
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  Packet* alloc() {
    if (free_.empty()) grow();
    Packet* p = free_.back();
    free_.pop_back();
    ++in_use_;
    p->next = nullptr;
    p->ingress = nullptr;
    p->ce = false;
    p->priority = kPriorityData;
    return p;
  }
  void release(Packet* p) {
    free_.push_back(p);
    --in_use_;
  }
  size_t in_use() const { return in_use_; }
  size_t allocated() const { return chunks_.size() * kChunk; }

 private:
  static constexpr size_t kChunk = 1024;
  void grow() {
    chunks_.push_back(std::make_unique<Packet[]>(kChunk));
    Packet* c = chunks_.back().get();
    free_.reserve(free_.size() + kChunk);
    for (size_t i = kChunk; i > 0; --i) free_.push_back(&c[i - 1]);
  }
  std::vector<std::unique_ptr<Packet[]>> chunks_;
  std::vector<Packet*> free_;
  size_t in_use_ = 0;
};

}  // namespace megascale::sim
