// RC mode's receive ring bookkeeping, one lane's each way: the writer's credits (slots of the peer's
// ring it may fill) and the reader's slots to hand back. RC delivers a QP's writes in order, so slots
// fill and empty in order and one counter per end suffices.
//
//   RingWriter w(ring.slots);                  // the writer, per lane
//   if (std::optional<uint32_t> slot = w.take()) post(make_rc_write({..., .remote_slot = *slot}));
//   else backlog(packet);                       // no credit: wait for the reader
//   w.on_credit(ev.credits);                    // a kCredit event (completion.h)
//
//   RingReader r(ring.slots, /*return_batch=*/ring.slots / 4);   // the reader, per lane
//   if (Status s = r.on_filled(ev.ring_slot); !s) fail(s);        // a kPacket event, in order
//   endpoint->on_packet(...);                                      // the engine copies the slot out
//   if (uint32_t n = r.take_credits()) post(make_rc_credit(tag, peer_ring, n));
//
// Deadlock-free with return_batch <= slots: a writer out of credit has `slots` writes unreturned, and
// once the reader consumed them it holds at least return_batch to give back. Both ends reset() a lane
// when its QP is re-created (rc_recovery.h): the new QP pair starts with an empty ring.
#pragma once

#include <cstdint>
#include <optional>

#include "megascale/common/result.h"

namespace megascale::wire::verbs {

class RingWriter {
 public:
  explicit RingWriter(uint32_t slots) : slots_(slots), credits_(slots) {}
  // The next slot to write, or nullopt without credit.
  std::optional<uint32_t> take();
  // `n` slots handed back by the reader. Error: more than were taken (a broken peer).
  Status on_credit(uint32_t n);
  void reset();
  uint32_t credits() const { return credits_; }

 private:
  uint32_t slots_;
  uint32_t credits_;
  uint32_t next_ = 0;
};

class RingReader {
 public:
  RingReader(uint32_t slots, uint32_t return_batch) : slots_(slots), batch_(return_batch) {}
  // Validates construction: 1 <= return_batch <= slots.
  static Status check(uint32_t slots, uint32_t return_batch);
  // The write that filled `slot` arrived (and its bytes have been taken). Error: not the slot expected
  // next (writes of one QP arrive in order; anything else is a broken peer).
  Status on_filled(uint32_t slot);
  // Slots to hand back now: all consumed and not yet returned, once they reach return_batch; else 0.
  uint32_t take_credits();
  void reset();

 private:
  uint32_t slots_;
  uint32_t batch_;
  uint32_t next_ = 0;
  uint32_t unreturned_ = 0;
};

}  // namespace megascale::wire::verbs
