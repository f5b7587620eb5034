// Rate pacer: turns a controller's pacing rate into send times, with a small burst allowance.
//
// A token bucket of burst_bytes capacity filled at the pacing rate. A packet of L bytes may leave when
// the bucket holds min(L, burst_bytes) tokens; sending takes L tokens (the bucket may go into debt when
// L > burst_bytes). Tokens are kept in double and the bucket is re-anchored at every send, so pacing at
// 400 Gb/s (a 4 KB packet every 81.92 ns) loses nothing to whole-ns rounding: a packet released up to
// 1 ns late keeps the credit it earned meanwhile, and the long-run rate is the set rate.
//
//   Pacer pacer(PacerParams{}, cc->pacing_rate_bps());
//   pacer.set_rate(now, cc->pacing_rate_bps());        // after every controller update
//   if (pacer.next_send_ns(now, 4096) == now) { send(); pacer.on_send(now, 4096); }
//   else wake_at(pacer.next_send_ns(now, 4096));
//
// After an idle period at most burst_bytes leave back to back (the bucket starts full). Pure and
// deterministic: `now` is always passed in, and calls must not go back in time (an earlier `now` is
// treated as the latest one seen).
#pragma once

#include <cstdint>

#include "megascale/common/units.h"
#include "megascale/congestion/params.h"

namespace megascale::cc {

class Pacer {
 public:
  // The bucket starts full. A rate <= 0 stops sending once the tokens run out.
  Pacer(const PacerParams& params, double rate_bps);

  // Changes the rate from `now` on: tokens earned before `now` were earned at the old rate, and the
  // new rate never grants credit for the past, so raising it after an idle period releases at most
  // burst_bytes at once.
  void set_rate(TimeNs now, double rate_bps);
  double rate_bps() const { return rate_bps_; }

  // Earliest time (>= now) a packet of `bytes` may leave: `now` if the tokens allow it already;
  // kNever if the rate is zero and the tokens do not suffice.
  TimeNs next_send_ns(TimeNs now, uint64_t bytes) const;
  // The same for a packet as large as the last one sent (a flow's packets are nearly all one MSS).
  TimeNs next_send_ns(TimeNs now) const { return next_send_ns(now, last_send_bytes_); }

  // A packet of `bytes` left at `now`: takes its tokens (the caller should have waited for
  // next_send_ns; sending early puts the bucket into debt, which later sends repay).
  void on_send(TimeNs now, uint64_t bytes);

  // Tokens in the bucket at `now`, bytes (negative while in debt; at most burst_bytes).
  double tokens_bytes(TimeNs now) const;

 private:
  double burst_bytes_;
  double rate_bps_;
  double bytes_per_ns_;    // rate_bps / 8e9
  bool anchored_ = false;  // false until the first send: the bucket is full
  TimeNs anchor_ns_ = 0;   // tokens_at_anchor_ was exact at this time
  double tokens_at_anchor_ = 0;
  uint64_t last_send_bytes_ = 0;
};

}  // namespace megascale::cc
