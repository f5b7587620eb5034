// The verbs data wire of `megascale perf --wire verbs-ud|verbs-rc` (collectives/wire/verbs, port.h).
// In a build without the verbs wire (no libibverbs) both calls refuse with a message saying so.
#pragma once

#include <memory>

#include "megascale/common/result.h"
#include "megascale/perf/options.h"
#include "megascale/wire/udp.h"

namespace megascale::perf::detail {

// Whether the options' device, port and GID settings can name a port here: an RDMA device exists
// under o.sysfs_root, -d names one of them, -i one of its ports, MEGASCALE_IB_* parse. The error is
// one line naming the problem, e.g. "verbs-ud: no RDMA device (no /sys/class/infiniband)"; it is a
// usage error (exit 2), checked before any wire opens.
Status check_verbs_device(const PerfOptions& o);

// The verbs wire for one side: `cfg`'s engine (lanes, segment, congestion control, faults) on the
// port -d, -i, -x / MEGASCALE_IB_* and -T choose; one QP (UD) or one QP per peer (RC) per lane.
Result<std::unique_ptr<wire::UdpWire>> open_verbs_wire(const PerfOptions& o, const wire::UdpConfig& cfg);

}  // namespace megascale::perf::detail
