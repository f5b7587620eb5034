// verbs-ud's port over an opened device, for open_ud_port and for tests that give it a fake device
// (tests/unit/wire/verbs/ud_port_test.cpp): everything after device, port and GID were chosen.
#pragma once

#include <memory>

#include "megascale/common/result.h"
#include "megascale/wire/packet_port.h"
#include "megascale/wire/verbs/gid.h"
#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"

namespace megascale::wire::verbs {

// The port on `dev` (its port already chosen and ACTIVE) with the GID `gid` of that port: its CQ,
// `config.slots` UD QPs, registered buffers with every receive posted.
Result<std::unique_ptr<PacketPort>> make_ud_port(const VerbsPortConfig& config, std::unique_ptr<IbDevice> dev,
                                                 const GidEntry& gid);

}  // namespace megascale::wire::verbs
