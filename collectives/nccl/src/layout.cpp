// MEGASCALE_LAYOUT: parsing and the automatic rule (see layout.h).
#include "layout.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "handle.h"
#include "megascale/engine/config.h"

namespace megascale::nccl {
namespace {

struct Key {
  std::string_view name;
  uint64_t lo, hi;
  bool bytes;  // K/M/G suffixes
};
constexpr Key kKeys[] = {
    {"wires", 1, 16, false},
    {"io_threads", 0, 64, false},
    {"lanes", 1, engine::kMaxLanes, false},
    {"stripes", 1, kMaxStripes, false},
    {"stripe_bytes", kMinStripeBytes, 1ULL << 30, true},
};

// A whole number, with a K/M/G suffix (powers of 1024) where `bytes`; nothing else in the text.
std::optional<uint64_t> parse_count(std::string_view text, bool bytes) {
  uint64_t scale = 1;
  if (bytes && !text.empty()) {
    const char s = text.back();
    scale = s == 'K' || s == 'k'   ? 1ULL << 10
            : s == 'M' || s == 'm' ? 1ULL << 20
            : s == 'G' || s == 'g' ? 1ULL << 30
                                   : 1;
    if (scale != 1) text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return std::strtoull(std::string(text).c_str(), nullptr, 10) * scale;
}

Error bad_layout(std::string_view text, const std::string& why) {
  return make_error("MEGASCALE_LAYOUT=" + std::string(text) + ": " + why);
}

// 'text', built by appending (GCC 12 misreads `"'" + std::string(v)` as an overlapping copy).
std::string quoted(std::string_view v) {
  std::string out(1, '\'');
  out.append(v);
  out.push_back('\'');
  return out;
}

// "wires, io_threads, lanes, stripes, stripe_bytes"
std::string keys_text() {
  std::string out;
  for (const Key& k : kKeys) {
    if (!out.empty()) out.append(", ");
    out.append(k.name);
  }
  return out;
}

}  // namespace

std::string Layout::text() const {
  return "wires=" + std::to_string(wires) + ",io_threads=" + std::to_string(io_threads) +
         ",lanes=" + std::to_string(lanes) + ",stripes=" + std::to_string(stripes) +
         ",stripe_bytes=" + std::to_string(stripe_bytes);
}

Result<LayoutRequest> parse_layout(std::string_view text) {
  LayoutRequest req;
  if (text.empty() || text == "auto") return req;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return bad_layout(text, quoted(item) + " is not key=value (keys: " + keys_text() + "; or auto)");
    }
    const std::string_view name = item.substr(0, eq);
    const auto key =
        std::find_if(std::begin(kKeys), std::end(kKeys), [&](const Key& k) { return k.name == name; });
    if (key == std::end(kKeys)) {
      return bad_layout(text, "unknown key " + quoted(name) + " (keys: " + keys_text() + ")");
    }
    const std::optional<uint64_t> v = parse_count(item.substr(eq + 1), key->bytes);
    if (!v || *v < key->lo || *v > key->hi) {
      return bad_layout(text, std::string(key->name) +
                                  (key->bytes ? " must be a byte count in " : " must be an integer in ") +
                                  std::to_string(key->lo) + ".." + std::to_string(key->hi) +
                                  (key->bytes ? " (K, M, G suffixes: 512K)" : ""));
    }
    const bool given = key->name == "wires"        ? req.wires.has_value()
                       : key->name == "io_threads" ? req.io_threads.has_value()
                       : key->name == "lanes"      ? req.lanes.has_value()
                       : key->name == "stripes"    ? req.stripes.has_value()
                                                   : req.stripe_bytes.has_value();
    if (given) return bad_layout(text, std::string(key->name) + " is given twice");
    const auto v32 = static_cast<uint32_t>(*v);
    if (key->name == "wires") req.wires = v32;
    if (key->name == "io_threads") req.io_threads = v32;
    if (key->name == "lanes") req.lanes = v32;
    if (key->name == "stripes") req.stripes = v32;
    if (key->name == "stripe_bytes") req.stripe_bytes = *v;
    if (comma == text.size()) break;
  }
  return req;
}

LayoutChoice resolve_layout(const LayoutRequest& req, unsigned usable_cpus, unsigned local_ranks,
                            const std::string& cpus_note) {
  LayoutChoice out;
  Layout& t = out.layout;
  local_ranks = std::max(1u, local_ranks);
  const unsigned share = std::max(1u, usable_cpus / local_ranks);
  out.cpu_share = share;
  out.share_text = std::to_string(usable_cpus) + " usable CPUs" +
                   (cpus_note.empty() ? "" : " (" + cpus_note + ")") + " / " + std::to_string(local_ranks) +
                   (local_ranks == 1 ? " local rank" : " local ranks");
  const unsigned room = share > kNcclBusyThreads ? share - kNcclBusyThreads : 0;
  // I/O threads are at most the lanes: each one serves its own lane sockets.
  const uint32_t lane_cap = req.lanes.value_or(kWideIoThreads);
  const uint32_t io_wide = std::min(lane_cap, kWideIoThreads);
  const uint32_t io_narrow = std::min(lane_cap, kIoThreads);
  const bool fitted = req.wires || req.io_threads;  // the user set part of the threads
  bool lane_per_io_thread = false;
  std::string rung;
  if (!fitted && local_ranks >= kHalfShareRanks && share >= kHalfShareMinCpus) {
    t.wires = 2;
    t.io_threads = std::min(io_wide, share / 4 - 1);
    lane_per_io_thread = true;
    rung = "half of it spinning with " + std::to_string(local_ranks) + " local ranks";
  } else if (!fitted) {
    if (room >= 2 * (1 + io_wide) + kWideHeadroomCpus) {
      t.io_threads = io_wide;
    } else if (room >= 2 * (1 + io_narrow)) {
      t.io_threads = io_narrow;
    }
    if (t.io_threads > 0) {
      t.wires = 2;
    } else if (room >= kStripedWires) {
      t.wires = kStripedWires;
      t.stripes = kStripedStripes;
    } else {
      t.wires = std::clamp<uint32_t>(room, kMinWires, kMaxWires);
    }
    rung = std::to_string(kNcclBusyThreads) + " left to NCCL";
  } else {
    if (req.io_threads) {
      t.io_threads = *req.io_threads;
    } else {
      const unsigned per_wire = room / *req.wires;
      t.io_threads = per_wire >= 2 ? std::min<uint32_t>(per_wire - 1, io_wide) : 0;
    }
    if (req.wires) {
      t.wires = *req.wires;
    } else if (t.io_threads == 0) {
      t.wires = std::clamp<uint32_t>(room, kMinWires, kMaxWires);
    } else {
      t.wires = std::clamp<uint32_t>(room / (1 + t.io_threads), 1, 2);
    }
    rung = std::to_string(kNcclBusyThreads) + " left to NCCL";
  }
  if (req.lanes) {
    t.lanes = *req.lanes;
  } else {
    t.lanes = lane_per_io_thread ? t.io_threads : std::max(kDefaultLanes, t.io_threads);
  }
  if (req.stripes) t.stripes = *req.stripes;
  t.stripe_bytes = req.stripe_bytes.value_or((kStripedMessageBytes / t.stripes + 4095) / 4096 * 4096);
  out.why = out.share_text + " = " + std::to_string(share) + " each, " + rung + ": " +
            std::to_string(t.wires) + (t.wires == 1 ? " wire" : " wires") + " x (1 + " +
            std::to_string(t.io_threads) + " I/O threads)" +
            (t.stripes > 1 ? ", each comm over " + std::to_string(t.stripes) + " of them" : "");
  return out;
}

}  // namespace megascale::nccl
