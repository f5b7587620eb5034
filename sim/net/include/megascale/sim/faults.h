// Link failures in a simulated CLOS fabric (clos.h): a model link (both directions) taken down and
// brought back up at given times, to ask how the transport rides out a link flap (MegaScale §6.3:
// flaps of seconds: the retry budget must outlast them).
//
//   auto link = parse_fabric_link(model, "tor0-spine3");           // or "h0:n0", or a LinkId "17"
//   LinkFaults faults(fabric, {{.at_ps = 100 * kPsPerUs, .link = *link, .up = false},
//                              {.at_ps = 2100 * kPsPerUs, .link = *link, .up = true}},
//                     /*reroute=*/false);
//   faults.start(sim.now());                                         // times count from here
//
// Down means: both one-way links lose every frame in flight and every frame put on them until the
// link is up again (link.h). Reroute says what the switches do meanwhile. Off (the default): nothing;
// ECMP keeps hashing flows onto the dead link, as before the failure is detected, so only the
// transport (RTOs, and the engine's repathing of a lane after timeouts, which changes its UDP source
// port and so its hash) gets traffic around it. On: the two switches at the link's ends drop it from
// their ECMP groups at once (switch.h, Switch::set_port_up), the state after local detection; switches
// further away do not learn of it (no routing protocol), so a ToR elsewhere still sends toward an
// aggregation switch whose only way down is the dead link.
#pragma once

#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/fabric.h"
#include "megascale/topology/fabric.h"

namespace megascale::sim {

struct LinkStateChange {
  TimePs at_ps = 0;       // after start()
  topo::LinkId link = 0;  // the model's link
  bool up = false;
};

// A model link by name: "A-B" with the model's node names in either order ("tor0-spine3", "h0:n0-tor0"),
// "h0:n0" (the NIC's server link), or a LinkId in decimal. Errors name what was not found.
Result<topo::LinkId> parse_fabric_link(const topo::Fabric& model, std::string_view text);

// Sets a model link's state now, on a fabric built by build_clos (see the header comment for reroute).
void set_fabric_link_state(Fabric& fabric, topo::LinkId link, bool up, bool reroute);

// Applies state changes at their times. The fabric must come from build_clos and outlive this.
class LinkFaults : public EventSource {
 public:
  LinkFaults(Fabric& fabric, std::vector<LinkStateChange> changes, bool reroute);
  // Schedules the changes at start_ps + at_ps.
  void start(TimePs start_ps);
  void on_event() override;
  size_t applied() const { return next_; }

 private:
  Fabric& fabric_;
  std::vector<LinkStateChange> changes_;  // sorted by time
  bool reroute_;
  TimePs start_ps_ = 0;
  size_t next_ = 0;
};

}  // namespace megascale::sim
