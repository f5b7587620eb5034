#include "megascale/sim/faults.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "megascale/sim/clos.h"

namespace megascale::sim {

namespace {

// The node named `name`, or the node count if none is.
topo::NodeId node_named(const topo::Fabric& model, std::string_view name) {
  const auto n = static_cast<topo::NodeId>(model.nodes().size());
  for (topo::NodeId i = 0; i < n; ++i)
    if (model.node_name(i) == name) return i;
  return n;
}

}  // namespace

Result<topo::LinkId> parse_fabric_link(const topo::Fabric& model, std::string_view text) {
  const auto n_links = static_cast<uint32_t>(model.links().size());
  uint32_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec == std::errc{} && end == text.data() + text.size()) {
    if (id >= n_links)
      return make_error("link " + std::string(text) + ": the fabric has " + std::to_string(n_links) +
                        " links");
    return topo::LinkId{id};
  }
  const topo::NodeId none = static_cast<topo::NodeId>(model.nodes().size());
  const topo::NodeId whole = node_named(model, text);
  if (whole != none) {
    if (!model.is_nic(whole))
      return make_error("link " + std::string(text) + ": a switch alone does not name a link (use A-B)");
    return model.server_link(whole);
  }
  // "A-B": node names hold no '-', so the first '-' splits them.
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos)
    return make_error("link " + std::string(text) + ": not a link id, a NIC name or A-B of node names");
  const topo::NodeId a = node_named(model, text.substr(0, dash));
  const topo::NodeId b = node_named(model, text.substr(dash + 1));
  if (a == none || b == none)
    return make_error("link " + std::string(text) + ": no node named " +
                      std::string(a == none ? text.substr(0, dash) : text.substr(dash + 1)));
  for (topo::LinkId l = 0; l < n_links; ++l) {
    const topo::Link& k = model.links()[l];
    if ((k.lower == a && k.upper == b) || (k.lower == b && k.upper == a)) return l;
  }
  return make_error("link " + std::string(text) + ": those nodes are not linked");
}

void set_fabric_link_state(Fabric& fabric, topo::LinkId link, bool up, bool reroute) {
  const ClosInfo* info = fabric.clos();
  fabric.link(info->up_link[link]).set_up(up);
  fabric.link(info->down_link[link]).set_up(up);
  if (!reroute) return;
  const topo::Link& k = info->model.links()[link];
  if (info->up_port[link] != Switch::kNoPort)
    fabric.switch_at(info->switch_of_node[k.lower]).set_port_up(info->up_port[link], up);
  fabric.switch_at(info->switch_of_node[k.upper]).set_port_up(info->down_port[link], up);
}

LinkFaults::LinkFaults(Fabric& fabric, std::vector<LinkStateChange> changes, bool reroute)
    : fabric_(fabric), changes_(std::move(changes)), reroute_(reroute) {
  std::stable_sort(changes_.begin(), changes_.end(),
                   [](const LinkStateChange& a, const LinkStateChange& b) { return a.at_ps < b.at_ps; });
  for (size_t s = 0; s < fabric_.switch_count(); ++s) fabric_.switch_at(s).set_reroute(reroute_);
}

void LinkFaults::start(TimePs start_ps) {
  start_ps_ = start_ps;
  next_ = 0;
  if (!changes_.empty()) fabric_.sim().schedule_at(start_ps_ + changes_[0].at_ps, this);
}

void LinkFaults::on_event() {
  const TimePs now = fabric_.sim().now();
  while (next_ < changes_.size() && start_ps_ + changes_[next_].at_ps <= now) {
    set_fabric_link_state(fabric_, changes_[next_].link, changes_[next_].up, reroute_);
    ++next_;
  }
  if (next_ < changes_.size()) fabric_.sim().schedule_at(start_ps_ + changes_[next_].at_ps, this);
}

}  // namespace megascale::sim
