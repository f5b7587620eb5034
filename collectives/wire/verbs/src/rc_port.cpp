// verbs-rc's port (port.h). Not built yet: open_rc_port refuses with a message naming what to use.
#include "megascale/wire/verbs/port.h"

namespace megascale::wire::verbs {

Result<std::unique_ptr<PacketPort>> open_rc_port(const VerbsPortConfig& /*config*/) {
  return make_error(ErrorCode::kUnsupported, "verbs-rc: this build has no RC port yet; use verbs-ud or udp");
}

}  // namespace megascale::wire::verbs
