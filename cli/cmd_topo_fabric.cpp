// `megascale topo fabric` and `megascale topo ports`: the fabric model for network engineers.
//
//   megascale topo fabric megascale                  # tiers, switch counts, radix use, bisection; draws
//                                                    # out/topo/megascale.png (-o DIR, --png FILE, --no-plot)
//   megascale topo fabric megascale --from h0:n0 --to h300:n0 --png fabric.png
//   megascale topo fabric configs/fabrics/small-2tier.yaml --json -
//   megascale topo ports megascale --from h0:n0 --to h300:n0 -q 16
//       --hash crc16-bisync:per-switch --hash crc16-bisync:offset=5:per-switch --hash crc16-bisync:offset=10
//
// FABRIC is a built-in preset name or a YAML file. Endpoints are NICs named hH:nN (host H, NIC N, from 0;
// NIC N is on rail N in a rail-optimised fabric). `ports` without --hash spreads the ports evenly over
// the range and cannot say which path each takes; with one --hash every tier uses it, with three they
// are the ToR, aggregation (spine) and core hashes in that order. --json FILE ('-': standard output, the
// text then goes to standard error) writes the documents docs/CLI.md describes. Bad input exits with
// status 2; a drawing that gnuplot fails to make exits with 1, a missing gnuplot is only reported.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
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
#include "vocab.h"

namespace megascale::cli {
namespace {

using nlohmann::json;
using namespace megascale::topo;

struct FabricOptions {
  std::string fabric;
  std::string from;
  std::string to;
  std::string out_dir = "out/topo";
  std::string png;  // overrides out_dir/<name>.png
  bool no_plot = false;
  std::string json_path;
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
  std::string json_path;
};

double gbps(int64_t bps) {
  return static_cast<double>(bps) / 1e9;
}
std::string speed(int64_t bps) {
  return fmt::format("{:g}G", gbps(bps));
}
std::string tbps(double bps) {
  return fmt::format("{:.1f} Tb/s", bps / 1e12);
}
std::string plural(uint64_t n, std::string_view one, std::string_view many = "") {
  return many.empty() ? fmt::format("{} {}{}", n, one, n == 1 ? "" : "s")
                      : fmt::format("{} {}", n, n == 1 ? one : many);
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

// Loads the fabric and the two endpoints (when given); prints the problem, prefixed with the command's
// name, and returns nullopt on bad input.
struct Loaded {
  Fabric fabric;
  std::optional<NodeId> from;
  std::optional<NodeId> to;
};

std::optional<Loaded> load(std::string_view cmd, const std::string& name, const std::string& from,
                           const std::string& to) {
  Result<Fabric> f = load_fabric(name);
  if (!f) {
    fmt::print(stderr, "megascale {}: {}\n", cmd, f.error().message);
    return std::nullopt;
  }
  Loaded out{std::move(*f), std::nullopt, std::nullopt};
  if (from.empty() != to.empty()) {
    fmt::print(stderr, "megascale {}: --from and --to go together (got only {} {})\n", cmd,
               from.empty() ? "--to" : "--from", from.empty() ? to : from);
    return std::nullopt;
  }
  if (!from.empty()) {
    Result<NodeId> a = parse_endpoint(out.fabric, from);
    Result<NodeId> b = parse_endpoint(out.fabric, to);
    if (!a || !b) {
      fmt::print(stderr, "megascale {}: {} {}\n", cmd, !a ? "--from" : "--to",
                 !a ? a.error().message : b.error().message);
      return std::nullopt;
    }
    if (*a == *b) {
      fmt::print(stderr, "megascale {}: --from and --to are the same NIC ({})\n", cmd, from);
      return std::nullopt;
    }
    out.from = *a;
    out.to = *b;
  }
  return out;
}

void add_summary_json(json& doc, const Fabric& f, const FabricSummary& s) {
  json tiers = json::array();
  for (const TierSummary& t : s.tiers) {
    tiers.push_back({{"tier", f.tier_name(t.tier)},
                     {"switches", t.switches},
                     {"ports_used", t.ports_used},
                     {"radix", f.spec().switch_radix},
                     {"down_links", t.down_links},
                     {"down_speed_gbps", gbps(t.down_speed_bps)},
                     {"up_links", t.up_links},
                     {"up_speed_gbps", gbps(t.up_speed_bps)},
                     {"oversubscription", t.oversubscription}});
  }
  const FabricSpec& sp = f.spec();
  doc.update({{"name", sp.name},
              {"source", sp.source},
              {"tiers", sp.tiers},
              {"gpus", s.gpus},
              {"servers", sp.servers},
              {"nics_per_server", sp.nics_per_server},
              {"nic_speed_gbps", gbps(f.shape().server_link_bps)},
              {"rail_optimized", sp.rail_optimized},
              {"pods", sp.pods},
              {"links", s.links},
              {"host_bandwidth_gbps", s.host_bandwidth_bps / 1e9},
              {"bisection_bandwidth_gbps", s.bisection_bandwidth_bps / 1e9},
              {"switch_tiers", tiers}});
}

void print_summary(std::FILE* out, const Fabric& f, const FabricSummary& s) {
  const FabricSpec& sp = f.spec();
  fmt::print(out, "fabric {}, from {}\n", sp.name, sp.source);
  fmt::print(out, "  {} tiers; {} GPUs = {} servers x {} NICs x {}; {}; {}\n", sp.tiers, s.gpus, sp.servers,
             sp.nics_per_server, speed(f.shape().server_link_bps),
             sp.rail_optimized ? fmt::format("rail-optimised ({} rails)", sp.nics_per_server)
                               : std::string("not rail-optimised"),
             plural(sp.pods, "pod"));
  fmt::print(out, "  {:<12} {:>8} {:>11}  {:<12} {:<12} {}\n", "tier", "switches", "ports used", "down", "up",
             "oversubscription");
  for (const TierSummary& t : s.tiers) {
    fmt::print(out, "  {:<12} {:>8} {:>8}/{:<2}  {:<12} {:<12} {}\n", f.tier_name(t.tier), t.switches,
               t.ports_used, sp.switch_radix, fmt::format("{} x {}", t.down_links, speed(t.down_speed_bps)),
               t.up_links ? fmt::format("{} x {}", t.up_links, speed(t.up_speed_bps)) : "-",
               t.up_links ? fmt::format("{:.2f}:1", t.oversubscription) : "-");
  }
  if (sp.tiers == 3) {
    fmt::print(out,
               "  pod: {} ToRs, {} aggregation switches; core: {} planes x {} switches, {} from each "
               "aggregation switch to each core switch of its plane\n",
               f.shape().tors_per_pod, sp.tier2_per_pod, sp.core_planes, sp.core_per_plane,
               plural(f.shape().agg_links_per_core, "link"));
  }
  const bool full = s.bisection_bandwidth_bps >= s.host_bandwidth_bps / 2;
  fmt::print(out, "  links {}; host bandwidth {}; bisection bandwidth {} ({})\n", s.links,
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
          {"path_count", ps.count()},
          {"switch_sequences", ps.switch_path_count()},
          {"links_per_path", ps.length()},
          {"switches_per_position", ps.switches_per_position()},
          {"ecmp_hops", hops},
          {"first_paths", first}};
}

void print_paths(std::FILE* out, const Fabric& f, const PathSet& ps, uint32_t show) {
  fmt::print(out, "paths {} -> {} ({}): {} over {}, {} each\n", f.node_name(ps.src()), f.node_name(ps.dst()),
             scope_text(ps.scope()), plural(ps.count(), "equal-cost path"),
             plural(ps.switch_path_count(), "switch sequence", "switch sequences"),
             plural(ps.length(), "link"));
  std::vector<uint64_t> per_position = ps.switches_per_position();
  for (size_t h = 0; h < ps.hops().size(); ++h) {
    fmt::print(out, "  ECMP hop {}: {} switch, going {}: {} ({} over all paths)\n", h + 1,
               f.tier_name(ps.hops()[h].tier), ps.hops()[h].up ? "up" : "down",
               plural(ps.hops()[h].choices, "equal-cost link"),
               plural(per_position[h + 1], "distinct next switch", "distinct next switches"));
  }
  std::vector<Path> paths = ps.enumerate(show);
  for (size_t i = 0; i < paths.size(); ++i) fmt::print(out, "  path {}: {}\n", i, switch_names(f, paths[i]));
  if (ps.count() > paths.size())
    fmt::print(out, "  ... {} more (--paths N lists more)\n", ps.count() - paths.size());
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
  if (ps) {
    const bool cut = !whole && f.nodes()[ps->dst()].pod != 0;
    g.highlight_title =
        fmt::format("first {} {} -> {}{}", plural(std::min<uint64_t>(ps->count(), 4), "path"),
                    f.node_name(ps->src()), f.node_name(ps->dst()), cut ? " (up to the core)" : "");
  }
  what =
      whole ? std::string("the whole fabric")
            : fmt::format("pod 0 of {} ({} ToRs, {} {} switches) and all {} core switches; servers not drawn",
                          sp.pods, f.shape().tors_per_pod, sp.tier2_per_pod, f.tier_name(Tier::aggregation),
                          f.shape().cores);
  g.title = fmt::format("fabric {}: {}", sp.name, what);
  return render_graph_png(g);
}

// out/topo/megascale.png, or out/topo/megascale-h0n0-h300n0.png with a pair (its paths are drawn).
std::string default_png(const FabricOptions& o, const Fabric& f) {
  std::string name = f.spec().name;
  if (!o.from.empty()) name += "-" + o.from + "-" + o.to;
  std::erase(name, ':');
  return (std::filesystem::path(o.out_dir) / (name + ".png")).string();
}

// Draws unless --no-plot; returns the PNG written, or nullopt (said why in one line). `failed` is set
// when the drawing was wanted and possible but did not come out.
std::optional<std::string> plot(std::FILE* out, const FabricOptions& o, const Fabric& f,
                                const std::optional<PathSet>& ps, bool& failed) {
  if (o.no_plot) return std::nullopt;
  const std::string png = o.png.empty() ? default_png(o, f) : o.png;
  if (!gnuplot_available()) {
    fmt::print(out, "not drawn: gnuplot is not installed (Debian: apt-get install gnuplot-nox)\n");
    return std::nullopt;
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(png).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) {
    fmt::print(stderr, "megascale topo fabric: cannot create {} for the drawing: {}\n", dir.string(),
               ec.message());
    failed = true;
    return std::nullopt;
  }
  std::string what;
  if (Status drawn = draw(f, ps, png, what); !drawn) {
    fmt::print(stderr, "megascale topo fabric: not drawn: {}\n", drawn.error().message);
    failed = true;
    return std::nullopt;
  }
  fmt::print(out, "drew {}: {}\n", png, what);
  return png;
}

// Writes the JSON document when --json was given; false (said why) when it could not be written.
bool write_doc(std::string_view cmd, std::FILE* out, const std::string& path, const json& doc) {
  if (path.empty()) return true;
  if (Status s = vocab::write_json(path, doc); !s) {
    fmt::print(stderr, "megascale {}: {}\n", cmd, s.error().message);
    return false;
  }
  if (path != "-") fmt::print(out, "wrote {}\n", path);
  return true;
}

int run_fabric(const FabricOptions& o) {
  std::optional<Loaded> in = load("topo fabric", o.fabric, o.from, o.to);
  if (!in) return kExitUsage;
  const Fabric& f = in->fabric;
  FabricSummary s = summarize(f);
  std::optional<PathSet> ps;
  if (in->from) {
    Result<PathSet> r = shortest_paths(f, *in->from, *in->to);
    if (!r) {
      fmt::print(stderr, "megascale topo fabric: {}\n", r.error().message);
      return kExitUsage;
    }
    ps = std::move(*r);
  }
  std::FILE* out = vocab::human_stream(o.json_path);
  print_summary(out, f, s);
  if (ps) print_paths(out, f, *ps, o.show_paths);
  bool failed = false;
  const std::optional<std::string> png = plot(out, o, f, ps, failed);

  json doc = vocab::json_document("topo fabric");
  add_summary_json(doc, f, s);
  doc["paths"] = ps ? paths_json(f, *ps, o.show_paths) : json(nullptr);
  doc["png"] = png ? json(*png) : json(nullptr);
  if (!write_doc("topo fabric", out, o.json_path, doc)) failed = true;
  return failed ? kExitFailure : kExitOk;
}

size_t tier_slot(Tier tier) {
  return tier == Tier::tor ? 0 : (tier == Tier::aggregation ? 1 : 2);
}

// No choice of ports can put fewer lanes than this on the busiest switch-to-switch link: at ECMP hop h
// the lanes spread over at most (deciding switches x choices) links.
uint64_t fewest_max_lanes_per_link(const PathSet& ps, uint64_t lanes) {
  const std::vector<uint64_t> deciders = ps.switches_per_position();
  uint64_t floor = 0;
  for (size_t h = 0; h < ps.hops().size(); ++h) {
    const uint64_t links = deciders[h] * ps.hops()[h].choices;
    floor = std::max(floor, (lanes + links - 1) / links);
  }
  return floor;
}

// Whether every tier on the path picks its link from the same bits of the same hash function (seeds
// aside: a seed XORs a constant into a CRC or XOR hash, so it changes which link, not which bits).
bool same_hash_bits(const PathSet& ps, const EcmpModel& m) {
  const HashModel& first = m.tier[tier_slot(ps.hops().front().tier)];
  for (const PathHop& hop : ps.hops()) {
    const HashModel& h = m.tier[tier_slot(hop.tier)];
    if (hop.choices > 1 && (h.function != first.function || h.offset_bits != first.offset_bits)) return false;
  }
  return true;
}

// Three specs (ToR, aggregation/spine, core) of the ToR's hash that read disjoint bits: each tier's
// offset starts where the tier below it stops (a 32-way group reads 5 bits).
std::vector<std::string> split_hash_bits(const PathSet& ps, const EcmpModel& m) {
  uint32_t bits[3] = {};
  for (const PathHop& hop : ps.hops()) {
    uint32_t b = 0;
    while ((1u << b) < hop.choices) ++b;
    bits[tier_slot(hop.tier)] = std::max(bits[tier_slot(hop.tier)], b);
  }
  HashModel h = m.tier[0];
  std::vector<std::string> specs;
  for (size_t t = 0; t < 3; ++t) {
    specs.push_back(topo::to_string(h));
    h.offset_bits = (h.offset_bits + bits[t]) % 16;
  }
  return specs;
}

int run_ports(const PortsOptions& o) {
  constexpr std::string_view kCmd = "topo ports";
  std::optional<Loaded> in = load(kCmd, o.fabric, o.from, o.to);
  if (!in) return kExitUsage;
  if (o.sport_min > o.sport_max) {
    fmt::print(stderr, "megascale topo ports: --sport-min {} is above --sport-max {}\n", o.sport_min,
               o.sport_max);
    return kExitUsage;
  }
  const uint32_t range = o.sport_max - o.sport_min + 1;
  if (o.lanes > range) {
    fmt::print(stderr,
               "megascale topo ports: --lanes {} needs {} source ports, but --sport-min {} to --sport-max {} "
               "holds {}\n",
               o.lanes, o.lanes, o.sport_min, o.sport_max, range);
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
      fmt::print(stderr, "megascale topo ports: --hash: {}\n", m.error().message);
      return kExitUsage;
    }
    req.ecmp = *m;
  }
  auto start = std::chrono::steady_clock::now();
  Result<PortMapping> r = map_source_ports(f, req);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Result<PathSet> ps = shortest_paths(f, req.src_nic, req.dst_nic);
  if (!r || !ps) {
    fmt::print(stderr, "megascale topo ports: {}\n", !r ? r.error().message : ps.error().message);
    return kExitUsage;
  }
  const PortMapping& m = *r;
  std::FILE* out = vocab::human_stream(o.json_path);
  json doc = vocab::json_document("topo ports");
  doc.update({{"fabric", f.spec().name},
              {"from", o.from},
              {"to", o.to},
              {"scope", scope_text(ps->scope())},
              {"path_count", m.path_count},
              {"sport_min", req.sport_min},
              {"sport_max", req.sport_max},
              {"dport", req.dport},
              {"hash", nullptr},
              {"distinct_paths", nullptr},
              {"reachable_paths_seen", nullptr},
              {"max_lanes_per_link", nullptr},
              {"fewest_max_lanes_per_link", nullptr},
              {"ports_hashed", m.ports_hashed},
              {"elapsed_ms", ms},
              {"notes", json::array()}});
  std::string ports_list;
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
    ports_list += fmt::format("{}{}", k ? "," : "", m.lanes[k].sport);
  }
  doc["lanes"] = lanes;
  doc["source_ports"] = ports_list;

  fmt::print(out, "ports {} -> {} on {} ({}): {}; source ports {}-{}, UDP dst {}\n", o.from, o.to,
             f.spec().name, scope_text(ps->scope()), plural(m.path_count, "equal-cost path"), req.sport_min,
             req.sport_max, req.dport);
  if (!req.ecmp) {
    fmt::print(
        out, "no hash model (--hash): ports stepped evenly over the range; the path each takes is unknown\n");
    fmt::print(out, "{:>5}  {:>6}\n", "lane", "sport");
    for (size_t k = 0; k < m.lanes.size(); ++k) fmt::print(out, "{:>5}  {:>6}\n", k, m.lanes[k].sport);
  } else {
    const uint64_t floor = fewest_max_lanes_per_link(*ps, m.lanes.size());
    doc["hash"] = describe_ecmp_model(f, *req.ecmp);
    doc["distinct_paths"] = m.distinct_paths;
    doc["reachable_paths_seen"] = m.reachable_paths;
    doc["max_lanes_per_link"] = m.max_lanes_per_link;
    doc["fewest_max_lanes_per_link"] = floor;
    fmt::print(out, "hash: {}\n", describe_ecmp_model(f, *req.ecmp));
    fmt::print(out, "{:>5}  {:>6}  {:>6}  {}\n", "lane", "sport", "path", "switches");
    for (size_t k = 0; k < m.lanes.size(); ++k) {
      fmt::print(out, "{:>5}  {:>6}  {:>6}  {}\n", k, m.lanes[k].sport, *m.lanes[k].path_index,
                 switch_names(f, ps->at(*m.lanes[k].path_index)));
    }
    const std::string busiest =
        ps->hops().empty() ? std::string("no switch-to-switch link on the way")
                           : fmt::format("the busiest switch-to-switch link carries {}{}",
                                         plural(m.max_lanes_per_link, "lane"),
                                         m.max_lanes_per_link == floor ? " (the fewest possible)" : "");
    fmt::print(out, "{} on {}; {}; {} hashed ({} among them) in {:.2f} ms\n", plural(m.lanes.size(), "lane"),
               plural(m.distinct_paths, "distinct path"), busiest, plural(m.ports_hashed, "port"),
               plural(m.reachable_paths, "distinct path"), ms);
    if (!ps->hops().empty() && m.distinct_paths < std::min<uint64_t>(m.lanes.size(), m.path_count) &&
        m.ports_hashed == range) {
      std::string note;
      if (same_hash_bits(*ps, *req.ecmp)) {
        const std::vector<std::string> split = split_hash_bits(*ps, *req.ecmp);
        PortMappingRequest retry = req;
        Result<EcmpModel> split_model = parse_ecmp_model(split);
        if (split_model) retry.ecmp = *split_model;
        Result<PortMapping> better = map_source_ports(f, retry);
        note = fmt::format(
            "ports {}-{} reach only {} of the {} paths: every tier picks its link from the same bits of the "
            "same hash, and a seed (per switch or not) only XORs a constant into it, so each later hop's "
            "choice follows the ToR's (hash polarisation), and no choice of source ports gets past that",
            req.sport_min, req.sport_max, m.reachable_paths, m.path_count);
        if (split_model && better && better->distinct_paths > m.distinct_paths) {
          note += fmt::format(
              ". Switches that give each tier its own bits, --hash {} --hash {} --hash {}, would put these "
              "lanes on {}",
              split[0], split[1], split[2], plural(better->distinct_paths, "distinct path"));
        }
      } else {
        note = fmt::format(
            "ports {}-{} reach only {} of the {} paths under this hash, so lanes share paths; a wider range "
            "(--sport-min, --sport-max) may reach more",
            req.sport_min, req.sport_max, m.reachable_paths, m.path_count);
      }
      doc["notes"].push_back(note);
      fmt::print(out, "note: {}\n", note);
    }
  }
  fmt::print(out, "source ports, lane 0 first (MEGASCALE_SOURCE_PORTS, perf --source-ports): {}\n",
             ports_list);
  return write_doc(kCmd, out, o.json_path, doc) ? kExitOk : kExitFailure;
}

}  // namespace

void add_topo_fabric_commands(CLI::App& topo) {
  auto fo = std::make_shared<FabricOptions>();
  CLI::App* fabric = topo.add_subcommand(
      "fabric",
      "Summarise a fabric (tiers, switches, radix use, oversubscription, bisection bandwidth) and the "
      "equal-cost paths between two NICs, and draw it (gnuplot) into out/topo/NAME.png");
  std::string presets;
  for (const std::string& name : topo::fabric_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  fabric->add_option("fabric", fo->fabric, "Built-in preset (" + presets + ") or fabric YAML file")
      ->required();
  fabric->add_option("--from", fo->from, "Source NIC, hH:nN (host H, NIC/rail N)");
  fabric->add_option("--to", fo->to, "Destination NIC, hH:nN");
  fabric->add_option("--paths", fo->show_paths, "How many of the paths to list")->capture_default_str();
  vocab::out_dir(fabric, fo->out_dir,
                 "Folder for the drawing, NAME.png (NAME-hAnB-hCnD.png with --from/--to); created if missing")
      ->capture_default_str();
  CLI::Option* no_plot = fabric->add_flag("--no-plot", fo->no_plot, "Do not draw");
  fabric
      ->add_option("--png", fo->png,
                   "Draw into this PNG instead (fabrics over 400 nodes are drawn as pod 0 and the core)")
      ->type_name("FILE")
      ->excludes(no_plot);
  vocab::json(fabric, fo->json_path);
  fabric->callback([fo] { exit_code() = run_fabric(*fo); });

  auto po = std::make_shared<PortsOptions>();
  CLI::App* ports = topo.add_subcommand(
      "ports", "Choose UDP source ports for N lanes between two NICs so they take distinct ECMP paths");
  ports->add_option("fabric", po->fabric, "Built-in preset or fabric YAML file")->required();
  ports->add_option("--from", po->from, "Source NIC, hH:nN")->required();
  ports->add_option("--to", po->to, "Destination NIC, hH:nN")->required();
  ports
      ->add_option("-q,--lanes", po->lanes,
                   "Number of lanes (queue pairs, perftest's -q), one source port each")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  vocab::renamed(ports, "-n", "-q/--lanes");
  ports
      ->add_option("--hash", po->hashes,
                   "Switch hash: NAME[:seed=N][:offset=N][:per-switch]; once for every tier or three times "
                   "(tor, aggregation/spine, core). NAME: crc16-bisync, crc16-xor8/4/2/1, crc16-ccitt, "
                   "crc32-lo, crc32-hi, xor16")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ports->add_option("--sport-min", po->sport_min, "Lowest source port")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  ports->add_option("--sport-max", po->sport_max, "Highest source port")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  vocab::json(ports, po->json_path);
  ports->callback([po] { exit_code() = run_ports(*po); });
}

}  // namespace megascale::cli
