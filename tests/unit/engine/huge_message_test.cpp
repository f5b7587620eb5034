// A 4 GiB + 1 message (offsets and sizes past 32 bits) with a few losses, every byte verified in place,
// without 8 GiB of memory.
//
// How: the send and receive buffers are 4 GiB + 4 MiB of reserved virtual memory each (MAP_NORESERVE,
// transparent huge pages where the kernel allows). The test writes chunk i's pattern (4 MiB, unique
// at every 8-byte word of the message) into the send buffer just before the engine can read it; once
// every byte of chunk i must have been placed at the receiver, it compares the receiver's chunk i
// with the sender's (memcmp), then returns both chunks' pages to the kernel (MADV_DONTNEED). At most a
// few chunks are resident at once. The two endpoints are wired back to back (no test network: one
// memcpy per packet, to stay fast).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "megascale/engine/endpoint.h"

namespace megascale::engine {
namespace {

constexpr uint64_t kChunk = 4ULL << 20;
constexpr uint64_t kSize = (4ULL << 30) + 1;
constexpr uint64_t kChunks = (kSize + kChunk - 1) / kChunk;  // 1025
constexpr uint64_t kHugePage = 2ULL << 20;

// kChunks chunks of reserved memory, committed as they are written, released chunk by chunk.
class SlidingBuffer {
 public:
  SlidingBuffer() {
    void* p = mmap(nullptr, kChunks * kChunk + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;
    map_ = p;
    base_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1));
    // Huge pages: 2 faults per chunk instead of 1024 (page faults are slow in some VMs). Optional.
    (void)madvise(base_, kChunks * kChunk, MADV_HUGEPAGE);
  }
  ~SlidingBuffer() {
    if (map_ != nullptr) munmap(map_, kChunks * kChunk + kHugePage);
  }
  bool ok() const { return base_ != nullptr; }
  uint8_t* data() { return base_; }
  void release(uint64_t chunk) { (void)madvise(base_ + chunk * kChunk, kChunk, MADV_DONTNEED); }

 private:
  void* map_ = nullptr;
  uint8_t* base_ = nullptr;
};

// Chunk i's content: 64-bit words that differ at every word offset of the whole message.
void fill_chunk(uint8_t* buf, uint64_t chunk) {
  const uint64_t begin = chunk * kChunk;
  const uint64_t end = std::min(kSize, begin + kChunk);
  auto word = [](uint64_t w) {
    uint64_t v = (w + 0x1234567) * 0x9E3779B97F4A7C15ULL;
    return v ^ (v >> 31);
  };
  uint64_t off = begin;  // chunks start 8-aligned
  for (; off + 8 <= end; off += 8) {
    const uint64_t v = word(off / 8);
    std::memcpy(buf + off, &v, 8);
  }
  if (off < end) {
    const uint64_t v = word(off / 8);
    std::memcpy(buf + off, &v, end - off);
  }
}

TEST(HugeMessage, FourGiBPlusOneArrivesIntactAtEveryOffset) {
  SlidingBuffer src, dst;
  if (!src.ok() || !dst.ok()) GTEST_SKIP() << "cannot reserve 2 x 4 GiB of address space";

  EngineConfig cfg;
  cfg.segment_bytes = 65'000;
  cfg.lanes = 4;
  cfg.window_segments = 32;  // 2.08 MB in flight at most: under one chunk
  cfg.cc.kind = cc::ControllerKind::kFixedWindow;
  cfg.cc.fixed.window_packets = 16;
  cfg.cc.flow.line_rate_bps = 1e13;  // pacing out of the way: virtual time barely moves
  const uint64_t window_bytes = uint64_t{cfg.window_segments} * cfg.segment_bytes;
  auto ea = Endpoint::create(cfg);
  auto eb = Endpoint::create(cfg);
  ASSERT_TRUE(ea.ok() && eb.ok());
  Endpoint& A = **ea;
  Endpoint& B = **eb;

  TimeNs now = 1'000'000;
  std::vector<uint8_t> wire(kMaxHeaderBytes + kMaxSegmentPayload);
  TxPacket tx;
  uint64_t data_packets = 0, dropped = 0;
  // One round: everything A may send goes to B (a few first copies lost), then B's answers to A.
  auto round = [&] {
    while (A.poll_tx(now, tx)) {
      std::memcpy(wire.data(), tx.header, tx.header_len);
      if (tx.payload_len > 0) std::memcpy(wire.data() + tx.header_len, tx.payload, tx.payload_len);
      const bool retx = tx.header[7] & kFlagRetransmit;
      if (tx.payload_len > 0 && !retx && ++data_packets % 9973 == 0) {
        ++dropped;
        continue;
      }
      B.on_packet(now, 1, wire.data(), tx.header_len + tx.payload_len, false);
    }
    while (B.poll_tx(now, tx)) {
      std::memcpy(wire.data(), tx.header, tx.header_len);
      if (tx.payload_len > 0) std::memcpy(wire.data() + tx.header_len, tx.payload, tx.payload_len);
      A.on_packet(now, 2, wire.data(), tx.header_len + tx.payload_len, false);
    }
    now += 1'000;
    if (A.next_deadline() <= now) A.on_timer(now);
    if (B.next_deadline() <= now) B.on_timer(now);
  };

  ConnId aid = *A.connect(now, 2);
  Connection* a = A.connection(aid);
  std::optional<ConnId> bid;
  for (int i = 0; i < 100 && !bid; ++i) {
    round();
    bid = B.accept();
  }
  ASSERT_TRUE(bid.has_value());
  Connection* b = B.connection(*bid);

  uint64_t filled = 0;    // chunks written into the send buffer
  uint64_t verified = 0;  // chunks compared at the receiver (then released there)
  uint64_t released = 0;  // sender chunks released
  auto r = b->post_recv(dst.data(), kSize + 12345, 9);  // a larger buffer: reports the real size
  ASSERT_TRUE(r.ok());
  fill_chunk(src.data(), filled++);
  auto s = a->post_send(src.data(), kSize, 9);
  ASSERT_TRUE(s.ok());

  Completion rc, sc;
  for (uint64_t iter = 0; iter < 50'000'000 && !(rc.done && sc.done); ++iter) {
    const uint64_t acked = a->stats().bytes_acked;
    const uint64_t placed = b->stats().bytes_received;
    // Every offset below these bounds is acknowledged / placed (the window limits the holes above).
    const uint64_t acked_below = acked > window_bytes ? acked - window_bytes : 0;
    const uint64_t placed_below = rc.done ? kSize : (placed > window_bytes ? placed - window_bytes : 0);
    while (verified < filled && std::min(kSize, (verified + 1) * kChunk) <= placed_below) {
      const uint64_t begin = verified * kChunk;
      const uint64_t len = std::min(kSize, begin + kChunk) - begin;
      ASSERT_EQ(std::memcmp(dst.data() + begin, src.data() + begin, len), 0) << "chunk " << verified;
      dst.release(verified);
      ++verified;
    }
    // A sender chunk goes once acknowledged (never read again) and verified (compared).
    while (released < verified && (released + 1) * kChunk <= acked_below) src.release(released++);
    // The engine may read up to acked + window ahead; keep one more chunk ready.
    while (filled < kChunks && filled * kChunk < acked + window_bytes + kChunk)
      fill_chunk(src.data(), filled++);
    round();
    if (!rc.done) rc = b->test(*r);
    if (!sc.done) sc = a->test(*s);
  }
  ASSERT_TRUE(rc.done && sc.done);
  EXPECT_TRUE(rc.ok) << rc.error;
  EXPECT_TRUE(sc.ok) << sc.error;
  EXPECT_EQ(rc.bytes, kSize);
  EXPECT_EQ(rc.tag, 9);
  // Verify the tail chunks now that everything is placed.
  while (verified < kChunks) {
    const uint64_t begin = verified * kChunk;
    const uint64_t len = std::min(kSize, begin + kChunk) - begin;
    ASSERT_EQ(std::memcmp(dst.data() + begin, src.data() + begin, len), 0) << "chunk " << verified;
    ++verified;
  }
  EXPECT_EQ(verified, kChunks);
  EXPECT_EQ(filled, kChunks);
  EXPECT_EQ(b->stats().bytes_received, kSize);  // each byte placed once
  EXPECT_EQ(a->stats().bytes_acked, kSize);
  EXPECT_GT(dropped, 0u);
  EXPECT_GE(a->stats().retransmits(), dropped);
  EXPECT_EQ(b->stats().corrupt_dropped + b->stats().malformed_dropped, 0u);
}

}  // namespace
}  // namespace megascale::engine
