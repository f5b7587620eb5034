// The receiver's CNP pacer (DCQCN's notification point) as the fluid model and the replay use it.
// Private to sim/fluid/src.
#pragma once

#include "megascale/congestion/dcqcn.h"

namespace megascale::sim {
using ReceiverCnpPacer = cc::CnpPacer;
}  // namespace megascale::sim
