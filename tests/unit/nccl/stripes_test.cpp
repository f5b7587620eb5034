// How a comm cuts a message over its stripes (CommBase::part, transport.h): every byte in exactly one
// part, the parts in order and contiguous, each within what the receiver's buffer of the same or a
// larger capacity gives that part, and a ticket per part.
#include <gtest/gtest.h>

#include <vector>

#include "../../../collectives/nccl/src/transport.h"

namespace megascale::nccl {
namespace {

CommBase make_comm(Role role, uint32_t stripes, uint64_t stripe_bytes) {
  return CommBase(role == Role::kSend ? kSendMagic : kRecvMagic, role, 4, std::vector<Stripe>(stripes),
                  stripe_bytes);
}

TEST(Stripes, OneStripeCarriesTheWholeMessage) {
  const CommBase c = make_comm(Role::kSend, 1, 4096);
  EXPECT_EQ(c.part(0, 0), (std::pair<uint64_t, uint64_t>{0, 0}));
  EXPECT_EQ(c.part(0, 1 << 20), (std::pair<uint64_t, uint64_t>{0, 1 << 20}));
}

TEST(Stripes, PartsCoverTheMessageInOrderAndTheLastTakesTheRest) {
  const CommBase c = make_comm(Role::kSend, 4, 256 * 1024);
  // 1 MiB: four even parts.
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.part(i, 1 << 20), (std::pair<uint64_t, uint64_t>{i * 256ull * 1024, 256 * 1024})) << i;
  }
  // 2 MiB: the last stripe takes 1.25 MiB.
  EXPECT_EQ(c.part(3, 2 << 20), (std::pair<uint64_t, uint64_t>{768 * 1024, (2 << 20) - 768 * 1024}));
  // 300 KiB: two parts, the others empty at the message's end.
  EXPECT_EQ(c.part(0, 300 * 1024), (std::pair<uint64_t, uint64_t>{0, 256 * 1024}));
  EXPECT_EQ(c.part(1, 300 * 1024), (std::pair<uint64_t, uint64_t>{256 * 1024, 44 * 1024}));
  EXPECT_EQ(c.part(2, 300 * 1024), (std::pair<uint64_t, uint64_t>{300 * 1024, 0}));
  EXPECT_EQ(c.part(3, 300 * 1024), (std::pair<uint64_t, uint64_t>{300 * 1024, 0}));
}

TEST(Stripes, EverySizeSplitsIntoContiguousPartsThatFitALargerReceive) {
  for (uint32_t k = 1; k <= kMaxStripes; ++k) {
    const CommBase c = make_comm(Role::kRecv, k, 4096);
    for (uint64_t size : {0ull, 1ull, 4095ull, 4096ull, 4097ull, 12288ull, 12289ull, 16385ull, 1ull << 20}) {
      uint64_t next = 0;
      for (uint32_t i = 0; i < k; ++i) {
        const auto [off, len] = c.part(i, size);
        EXPECT_EQ(off, next) << "k " << k << " size " << size << " stripe " << i;
        next = off + len;
        // The receiver posts stripe i at the same offset with the part of its own capacity: a message
        // no larger than the receive never overflows a stripe.
        for (uint64_t capacity : {size, size + 1, size + 4096, uint64_t{2} << 20}) {
          const auto [roff, rlen] = c.part(i, capacity);
          if (len > 0) {
            EXPECT_EQ(roff, off);
            EXPECT_LE(len, rlen) << "k " << k << " size " << size << " capacity " << capacity;
          }
        }
      }
      EXPECT_EQ(next, size) << "k " << k;
    }
  }
}

TEST(Stripes, RequestsHaveATicketPerBufferAndStripe) {
  // Tickets are written through set_send/set_recv; the pool must give every part its own.
  CommBase recv = make_comm(Role::kRecv, 3, 4096);
  Request* r = recv.alloc_request();
  ASSERT_NE(r, nullptr);
  for (uint32_t t = 0; t < kMaxRecvs * 3; ++t) r->tickets[t].set_recv(1, nullptr, 0, 0);
  recv.free_request(r);
  CommBase send = make_comm(Role::kSend, 4, 4096);
  Request* s = send.alloc_request();
  ASSERT_NE(s, nullptr);
  for (uint32_t t = 0; t < 4; ++t) s->tickets[t].set_send(1, nullptr, 0, 0);
  send.free_request(s);
}

}  // namespace
}  // namespace megascale::nccl
