// The receiver's CNP pacer (DCQCN's notification point) as the fluid model and the replay use it.
// Private to sim/fluid/src.
#pragma once

#include "megascale/common/units.h"

#if __has_include("megascale/congestion/dcqcn.h")
#include "megascale/congestion/dcqcn.h"

namespace megascale::sim {
using ReceiverCnpPacer = cc::CnpPacer;
}  // namespace megascale::sim

#else

namespace megascale::sim {

// Stand-in with cc::CnpPacer's contract (congestion/dcqcn.h, written in parallel) so sim/ builds before
// that lands; the #if picks the real one once it exists, and this branch can then be deleted.
// A CE-marked segment triggers a CNP unless one went out for this flow less than `interval` ago.
class ReceiverCnpPacer {
 public:
  explicit ReceiverCnpPacer(TimeNs interval) : interval_(interval) {}
  bool on_packet(TimeNs now, bool ce) {
    if (!ce || (sent_any_ && now - last_cnp_ < interval_)) return false;
    sent_any_ = true;
    last_cnp_ = now;
    return true;
  }

 private:
  TimeNs interval_;
  TimeNs last_cnp_ = 0;
  bool sent_any_ = false;
};

}  // namespace megascale::sim

#endif
