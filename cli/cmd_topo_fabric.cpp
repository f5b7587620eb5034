// `megascale topo fabric` and `megascale topo ports`: the fabric model for network engineers.
//
//   megascale topo fabric megascale                          # tiers, switch counts, radix use, bisection
//   megascale topo fabric megascale --from h0:n0 --to h300:n0 --png fabric.png
//   megascale topo fabric configs/fabrics/small-2tier.yaml --json
//   megascale topo ports megascale --from h0:n0 --to h300:n0 -n 16
//       --hash crc16-bisync:per-switch --hash crc16-bisync:offset=5:per-switch --hash crc16-bisync:offset=10
//
// FABRIC is a built-in preset name or a YAML file. Endpoints are NICs named hH:nN (host H, NIC N, from 0;
// NIC N is on rail N in a rail-optimised fabric). `ports` without --hash spreads the ports evenly over
// the range and cannot say which path each takes; with one --hash every tier uses it, with three they
// are the ToR, aggregation (spine) and core hashes in that order. Bad input exits with status 2.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/topology/ecmp.h"
#include "megascale/topology/fabric.h"
#include "megascale/topology/paths.h"
#include "megascale/topology/ports.h"
#include "plot.h"

namespace megascale::cli {
namespace {

using nlohmann::json;
using namespace megascale::topo;

struct FabricOptions {
  std::string fabric;
  std::string from;
  std::string to;
  std::string png;
  bool json_out = false;
  uint32_t show_paths = 4;
};

struct PortsOptions {
  std::string fabric;
  std::string from;
  std::string to;
  uint32_t lanes = 8;
  std::vector<std::string> hashes;
  uint32_t sport_min = 0xC000;
  uint32_t sport_max = 0xFFFF;
  bool json_out = false;
};

std::string speed(int64_t bps) {
  return fmt::format("{:g}G", static_cast<double>(bps) / 1e9);
}
std::string tbps(double bps) {
  return fmt::format("{:.1f} Tb/s", bps / 1e12);
}

std::string_view scope_text(PairScope s) {
  switch (s) {
    case PairScope::same_tor:
      return "same ToR";
    case PairScope::same_pod:
      return "same pod, different ToRs";
    case PairScope::cross_pod:
      return "different pods";
    default:
      return "same NIC";
  }
}

std::string switch_names(const Fabric& f, const Path& p) {
  std::string out;
  for (NodeId s : p.switches) out += fmt::format("{}{}", out.empty() ? "" : " ", f.node_name(s));
  return out;
}

// Loads the fabric and the two endpoints (when given); prints the problem and returns nullopt on bad input.
struct Loaded {
  Fabric fabric;
  std::optional<NodeId> from;
  std::optional<NodeId> to;
};

std::optional<Loaded> load(const std::string& name, const std::string& from, const std::string& to) {
  Result<Fabric> f = load_fabric(name);
  if (!f) {
    fmt::print(stderr, "{}\n", f.error().message);
    return std::nullopt;
  }
  Loaded out{std::move(*f), std::nullopt, std::nullopt};
  if (from.empty() != to.empty()) {
    fmt::print(stderr, "--from and --to go together\n");
    return std::nullopt;
  }
  if (!from.empty()) {
    Result<NodeId> a = parse_endpoint(out.fabric, from);
    Result<NodeId> b = parse_endpoint(out.fabric, to);
    if (!a || !b) {
      fmt::print(stderr, "{}\n", !a ? a.error().message : b.error().message);
      return std::nullopt;
    }
    if (*a == *b) {
      fmt::print(stderr, "--from and --to are the same NIC ({})\n", from);
      return std::nullopt;
    }
    out.from = *a;
    out.to = *b;
  }
  return out;
}

json summary_json(const Fabric& f, const FabricSummary& s) {
  json tiers = json::array();
  for (const TierSummary& t : s.tiers) {
    tiers.push_back({{"tier", f.tier_name(t.tier)},
                     {"switches", t.switches},
                     {"ports_used", t.ports_used},
                     {"radix", f.spec().switch_radix},
                     {"down_links", t.down_links},
                     {"down_speed_bps", t.down_speed_bps},
                     {"up_links", t.up_links},
                     {"up_speed_bps", t.up_speed_bps},
                     {"oversubscription", t.oversubscription}});
  }
  const FabricSpec& sp = f.spec();
  return {{"name", sp.name},
          {"source", sp.source},
          {"tiers", sp.tiers},
          {"gpus", s.gpus},
          {"servers", sp.servers},
          {"nics_per_server", sp.nics_per_server},
          {"nic_speed_bps", f.shape().server_link_bps},
          {"rail_optimized", sp.rail_optimized},
          {"pods", sp.pods},
          {"links", s.links},
          {"host_bandwidth_bps", s.host_bandwidth_bps},
          {"bisection_bandwidth_bps", s.bisection_bandwidth_bps},
          {"switch_tiers", tiers}};
}

void print_summary(const Fabric& f, const FabricSummary& s) {
  const FabricSpec& sp = f.spec();
  fmt::print("fabric {} ({})\n", sp.name, sp.source);
  fmt::print("  {} tiers; {} GPUs = {} servers x {} NICs x {}; {}; {} pod{}\n", sp.tiers, s.gpus, sp.servers,
             sp.nics_per_server, speed(f.shape().server_link_bps),
             sp.rail_optimized ? fmt::format("rail-optimised ({} rails)", sp.nics_per_server)
                               : std::string("not rail-optimised"),
             sp.pods, sp.pods == 1 ? "" : "s");
  fmt::print("  {:<12} {:>8} {:>11}  {:<12} {:<12} {}\n", "tier", "switches", "ports used", "down", "up",
             "oversubscription");
  for (const TierSummary& t : s.tiers) {
    fmt::print("  {:<12} {:>8} {:>8}/{:<2}  {:<12} {:<12} {}\n", f.tier_name(t.tier), t.switches,
               t.ports_used, sp.switch_radix, fmt::format("{} x {}", t.down_links, speed(t.down_speed_bps)),
               t.up_links ? fmt::format("{} x {}", t.up_links, speed(t.up_speed_bps)) : "-",
               t.up_links ? fmt::format("{:.2f}:1", t.oversubscription) : "-");
  }
  if (sp.tiers == 3) {
    fmt::print(
        "  pod: {} ToRs, {} aggregation switches; core: {} planes x {} switches, {} links from each "
        "aggregation switch to each core switch of its plane\n",
        f.shape().tors_per_pod, sp.tier2_per_pod, sp.core_planes, sp.core_per_plane,
        f.shape().agg_links_per_core);
  }
  const bool full = s.bisection_bandwidth_bps >= s.host_bandwidth_bps / 2;
  fmt::print("  links {}; host bandwidth {}; bisection bandwidth {} ({})\n", s.links,
             tbps(s.host_bandwidth_bps), tbps(s.bisection_bandwidth_bps),
             full ? std::string("half the host bandwidth: full bisection")
                  : fmt::format("{:.0f}% of full bisection",
                                200 * s.bisection_bandwidth_bps / s.host_bandwidth_bps));
}

json paths_json(const Fabric& f, const PathSet& ps, uint32_t show) {
  json hops = json::array();
  for (size_t h = 0; h < ps.hops().size(); ++h) {
    hops.push_back({{"decided_at_tier", f.tier_name(ps.hops()[h].tier)},
                    {"direction", ps.hops()[h].up ? "up" : "down"},
                    {"choices", ps.hops()[h].choices}});
  }
  json first = json::array();
  for (const Path& p : ps.enumerate(show)) {
    json sw = json::array();
    for (NodeId s : p.switches) sw.push_back(f.node_name(s));
    first.push_back({{"switches", sw}, {"links", p.links}});
  }
  return {{"from", f.node_name(ps.src())},
          {"to", f.node_name(ps.dst())},
          {"scope", scope_text(ps.scope())},
          {"paths", ps.count()},
          {"switch_paths", ps.switch_path_count()},
          {"links_per_path", ps.length()},
          {"switches_per_position", ps.switches_per_position()},
          {"ecmp_hops", hops},
          {"first_paths", first}};
}

void print_paths(const Fabric& f, const PathSet& ps, uint32_t show) {
  fmt::print("paths {} -> {} ({}): {} equal-cost paths over {} switch sequences, {} links each\n",
             f.node_name(ps.src()), f.node_name(ps.dst()), scope_text(ps.scope()), ps.count(),
             ps.switch_path_count(), ps.length());
  std::vector<uint64_t> per_position = ps.switches_per_position();
  for (size_t h = 0; h < ps.hops().size(); ++h) {
    fmt::print(
        "  ECMP hop {}: {} switch, going {}: {} equal-cost link{} ({} distinct next switches over all "
        "paths)\n",
        h + 1, f.tier_name(ps.hops()[h].tier), ps.hops()[h].up ? "up" : "down", ps.hops()[h].choices,
        ps.hops()[h].choices == 1 ? "" : "s", per_position[h + 1]);
  }
  std::vector<Path> paths = ps.enumerate(show);
  for (size_t i = 0; i < paths.size(); ++i) fmt::print("  path {}: {}\n", i, switch_names(f, paths[i]));
  if (ps.count() > paths.size()) fmt::print("  ... {} more\n", ps.count() - paths.size());
}

// A tiered drawing. Fabrics of up to ~400 nodes are drawn whole; larger ones as pod 0 (its ToRs and
// aggregation switches and every core switch), without servers, so the picture stays readable.
Status draw(const Fabric& f, const std::optional<PathSet>& ps, const std::string& png, std::string& what) {
  const FabricSpec& sp = f.spec();
  const bool whole = f.nodes().size() <= 400;
  std::vector<bool> drawn(f.nodes().size(), false);
  for (NodeId n = 0; n < f.nodes().size(); ++n) {
    const Node& node = f.nodes()[n];
    drawn[n] = whole || (node.tier == Tier::core) || (node.tier != Tier::nic && node.pod == 0);
  }
  // x positions: evenly spread per tier, NICs ordered by their ToR so the server links do not cross.
  std::vector<std::vector<NodeId>> rows(4);
  for (NodeId n = 0; n < f.nodes().size(); ++n) {
    if (drawn[n]) rows[static_cast<size_t>(f.nodes()[n].tier)].push_back(n);
  }
  std::stable_sort(rows[0].begin(), rows[0].end(),
                   [&](NodeId a, NodeId b) { return f.tor_of_nic(a) < f.tor_of_nic(b); });
  std::vector<double> x(f.nodes().size(), 0);
  GraphPlotSpec g;
  g.png_path = png;
  g.data_path = png + ".dat";
  for (size_t tier = 0; tier < rows.size(); ++tier) {
    for (size_t i = 0; i < rows[tier].size(); ++i) {
      x[rows[tier][i]] = (static_cast<double>(i) + 0.5) / static_cast<double>(rows[tier].size());
      g.points.push_back({x[rows[tier][i]], static_cast<double>(tier), static_cast<int>(tier)});
    }
    if (!rows[tier].empty()) {
      g.y_labels.emplace_back(static_cast<double>(tier), std::string(f.tier_name(static_cast<Tier>(tier))));
    }
  }
  for (size_t tier = 0; tier < 4; ++tier) {
    g.group_titles.push_back(
        fmt::format("{} ({} drawn)", f.tier_name(static_cast<Tier>(tier)), rows[tier].size()));
  }
  std::map<std::pair<NodeId, NodeId>, bool> seen;  // parallel links drawn once
  std::map<std::pair<NodeId, NodeId>, bool> on_path;
  if (ps) {
    for (const Path& p : ps->enumerate(4)) {
      for (LinkId l : p.links) on_path[{f.links()[l].lower, f.links()[l].upper}] = true;
    }
  }
  for (const Link& l : f.links()) {
    if (!drawn[l.lower] || !drawn[l.upper] || seen[{l.lower, l.upper}]) continue;
    seen[{l.lower, l.upper}] = true;
    double y0 = static_cast<double>(f.nodes()[l.lower].tier);
    g.segments.push_back({x[l.lower], y0, x[l.upper], y0 + 1, on_path.count({l.lower, l.upper}) > 0});
  }
  if (ps)
    g.highlight_title = fmt::format("first paths {} -> {}", f.node_name(ps->src()), f.node_name(ps->dst()));
  what =
      whole ? std::string("the whole fabric")
            : fmt::format("pod 0 of {} ({} ToRs, {} {} switches) and all {} core switches; servers not drawn",
                          sp.pods, f.shape().tors_per_pod, sp.tier2_per_pod, f.tier_name(Tier::aggregation),
                          f.shape().cores);
  g.title = fmt::format("fabric {}: {}", sp.name, what);
  return render_graph_png(g);
}

int run_fabric(const FabricOptions& o) {
  std::optional<Loaded> in = load(o.fabric, o.from, o.to);
  if (!in) return kExitUsage;
  const Fabric& f = in->fabric;
  FabricSummary s = summarize(f);
  std::optional<PathSet> ps;
  if (in->from) {
    Result<PathSet> r = shortest_paths(f, *in->from, *in->to);
    if (!r) {
      fmt::print(stderr, "{}\n", r.error().message);
      return kExitUsage;
    }
    ps = std::move(*r);
  }
  json doc = summary_json(f, s);
  if (ps) doc["paths"] = paths_json(f, *ps, o.show_paths);
  if (!o.json_out) {
    print_summary(f, s);
    if (ps) print_paths(f, *ps, o.show_paths);
  }
  int rc = kExitOk;
  if (!o.png.empty()) {
    std::string what;
    Status drawn = draw(f, ps, o.png, what);
    doc["png"] = drawn ? json(o.png) : json(nullptr);
    if (drawn) {
      if (!o.json_out) fmt::print("drew {}: {}\n", o.png, what);
    } else {
      fmt::print(stderr, "no PNG: {}\n", drawn.error().message);
      rc = kExitFailure;
    }
  }
  if (o.json_out) fmt::print("{}\n", doc.dump(2));
  return rc;
}

int run_ports(const PortsOptions& o) {
  std::optional<Loaded> in = load(o.fabric, o.from, o.to);
  if (!in) return kExitUsage;
  if (!in->from) {
    fmt::print(stderr, "topo ports needs --from and --to\n");
    return kExitUsage;
  }
  const Fabric& f = in->fabric;
  PortMappingRequest req;
  req.src_nic = *in->from;
  req.dst_nic = *in->to;
  req.lanes = o.lanes;
  req.sport_min = static_cast<uint16_t>(o.sport_min);
  req.sport_max = static_cast<uint16_t>(o.sport_max);
  if (!o.hashes.empty()) {
    Result<EcmpModel> m = parse_ecmp_model(o.hashes);
    if (!m) {
      fmt::print(stderr, "--hash: {}\n", m.error().message);
      return kExitUsage;
    }
    req.ecmp = *m;
  }
  auto start = std::chrono::steady_clock::now();
  Result<PortMapping> r = map_source_ports(f, req);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!r) {
    fmt::print(stderr, "{}\n", r.error().message);
    return kExitUsage;
  }
  Result<PathSet> ps = shortest_paths(f, req.src_nic, req.dst_nic);
  if (!ps) return kExitFailure;
  const PortMapping& m = *r;
  json lanes = json::array();
  for (size_t k = 0; k < m.lanes.size(); ++k) {
    json lane = {{"lane", k}, {"sport", m.lanes[k].sport}};
    if (m.lanes[k].path_index) {
      json sw = json::array();
      for (NodeId s : ps->at(*m.lanes[k].path_index).switches) sw.push_back(f.node_name(s));
      lane["path"] = *m.lanes[k].path_index;
      lane["switches"] = sw;
    }
    lanes.push_back(lane);
  }
  const std::string hash_text = req.ecmp ? describe_ecmp_model(f, *req.ecmp) : std::string();
  if (o.json_out) {
    json doc = {{"fabric", f.spec().name},
                {"from", o.from},
                {"to", o.to},
                {"scope", scope_text(ps->scope())},
                {"path_count", m.path_count},
                {"hash", req.ecmp ? json(hash_text) : json(nullptr)},
                {"lanes", lanes},
                {"distinct_paths", req.ecmp ? json(m.distinct_paths) : json(nullptr)},
                {"reachable_paths_seen", req.ecmp ? json(m.reachable_paths) : json(nullptr)},
                {"max_lanes_per_link", req.ecmp ? json(m.max_lanes_per_link) : json(nullptr)},
                {"ports_hashed", m.ports_hashed},
                {"elapsed_ms", ms}};
    fmt::print("{}\n", doc.dump(2));
    return kExitOk;
  }
  fmt::print("ports {} -> {} on {} ({}): {} equal-cost paths; source ports {}-{}, UDP dst {}\n", o.from, o.to,
             f.spec().name, scope_text(ps->scope()), m.path_count, req.sport_min, req.sport_max, req.dport);
  if (!req.ecmp) {
    fmt::print(
        "no hash model (--hash): ports stepped evenly over the range; the path each takes is unknown\n");
    fmt::print("{:>5}  {:>6}\n", "lane", "sport");
    for (size_t k = 0; k < m.lanes.size(); ++k) fmt::print("{:>5}  {:>6}\n", k, m.lanes[k].sport);
    return kExitOk;
  }
  fmt::print("hash: {}\n", hash_text);
  fmt::print("{:>5}  {:>6}  {:>6}  {}\n", "lane", "sport", "path", "switches");
  for (size_t k = 0; k < m.lanes.size(); ++k) {
    fmt::print("{:>5}  {:>6}  {:>6}  {}\n", k, m.lanes[k].sport, *m.lanes[k].path_index,
               switch_names(f, ps->at(*m.lanes[k].path_index)));
  }
  fmt::print(
      "{} lanes on {} distinct paths; the busiest switch-to-switch link carries {} lane{}; {} ports hashed "
      "({} distinct paths among them) in {:.2f} ms\n",
      m.lanes.size(), m.distinct_paths, m.max_lanes_per_link, m.max_lanes_per_link == 1 ? "" : "s",
      m.ports_hashed, m.reachable_paths, ms);
  uint64_t range = uint64_t{req.sport_max} - req.sport_min + 1;
  if (m.distinct_paths < std::min<uint64_t>(m.lanes.size(), m.path_count) && m.ports_hashed == range) {
    fmt::print(
        "note: this hash reaches only {} of the {} paths from this port range; if every tier uses the same "
        "hash bits the choices repeat hop after hop (polarisation): give each tier its own offset, e.g. "
        "--hash crc16-bisync --hash crc16-bisync:offset=5 --hash crc16-bisync:offset=10\n",
        m.reachable_paths, m.path_count);
  }
  return kExitOk;
}

}  // namespace

void add_topo_fabric_commands(CLI::App& topo) {
  auto fo = std::make_shared<FabricOptions>();
  CLI::App* fabric = topo.add_subcommand(
      "fabric",
      "Summarise a fabric (tiers, switches, radix use, oversubscription, bisection bandwidth), the "
      "equal-cost paths between two NICs, and draw it");
  std::string presets;
  for (const std::string& name : topo::fabric_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  fabric->add_option("fabric", fo->fabric, "Built-in preset (" + presets + ") or fabric YAML file")
      ->required();
  fabric->add_option("--from", fo->from, "Source NIC, hH:nN (host H, NIC/rail N)");
  fabric->add_option("--to", fo->to, "Destination NIC, hH:nN");
  fabric->add_option("--paths", fo->show_paths, "How many of the paths to list")->capture_default_str();
  fabric->add_option("--png", fo->png, "Draw the fabric (gnuplot) into this PNG; large fabrics as one pod");
  fabric->add_flag("--json", fo->json_out, "Print JSON instead of text");
  fabric->callback([fo] { exit_code() = run_fabric(*fo); });

  auto po = std::make_shared<PortsOptions>();
  CLI::App* ports = topo.add_subcommand(
      "ports", "Choose UDP source ports for N lanes between two NICs so they take distinct ECMP paths");
  ports->add_option("fabric", po->fabric, "Built-in preset or fabric YAML file")->required();
  ports->add_option("--from", po->from, "Source NIC, hH:nN")->required();
  ports->add_option("--to", po->to, "Destination NIC, hH:nN")->required();
  ports->add_option("-n,--lanes", po->lanes, "Number of lanes (source ports)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  ports
      ->add_option("--hash", po->hashes,
                   "Switch hash: NAME[:seed=N][:offset=N][:per-switch]; once for every tier or three times "
                   "(tor, aggregation/spine, core). NAME: crc16-bisync, crc16-xor8/4/2/1, crc16-ccitt, "
                   "crc32-lo, crc32-hi, xor16")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ports->add_option("--sport-min", po->sport_min, "Lowest source port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  ports->add_option("--sport-max", po->sport_max, "Highest source port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  ports->add_flag("--json", po->json_out, "Print JSON instead of text");
  ports->callback([po] { exit_code() = run_ports(*po); });
}

}  // namespace megascale::cli
