// The plugin's thread layout, MEGASCALE_LAYOUT: how many UDP wires a device runs, how many I/O threads
// each wire has, how many lanes a connection has, and how a comm's messages are cut over stripes. The
// five only make sense together, so they are one knob; keys left out are fitted by the automatic rule
// (resolve_layout) around the ones given.
//
//   auto req = parse_layout("wires=2,stripe_bytes=512K");   // or "" / "auto": everything automatic
//   if (!req) return req.error();                          // names the key and what it allows
//   LayoutChoice choice = resolve_layout(*req, /*usable_cpus=*/16, /*local_ranks=*/2);
//   choice.layout.text();  // "wires=2,io_threads=2,lanes=4,stripes=1,stripe_bytes=524288"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "megascale/common/result.h"

namespace megascale::nccl {

// The rule's constants (resolve_layout, docs/CONFIG.md "MEGASCALE_LAYOUT"). NCCL's own busy threads (a
// rank's main thread and its proxy) keep two CPUs of the rank's share; the rest is the room.
inline constexpr unsigned kNcclBusyThreads = 2;
// Two wires of 1 + kWideIoThreads threads where the room holds them with kWideHeadroomCpus to spare:
// without spare CPUs the busy threads fill the share and small collectives wait on the scheduler.
inline constexpr uint32_t kWideIoThreads = 6;
inline constexpr unsigned kWideHeadroomCpus = 2;
// Else two wires of 1 + kIoThreads where the room holds them. I/O threads only where two such wires fit:
// with less room, wires of one thread each move more and spread a rank's connections over several wires.
inline constexpr uint32_t kIoThreads = 4;
// Else, without I/O threads, kStripedWires wires with each comm over kStripedStripes of them where the
// room is at least kStripedWires (so that a rank's connections keep every wire busy), else one wire a CPU
// of the room, kMinWires..kMaxWires, so that with NCCL's two they do not outnumber the share; these
// threads sleep when idle. A share with no room (8 ranks on a 16-CPU host) still gets two: one wire
// moved 0.59-0.68x the bus bandwidth of two at 32-128 MiB there (docs/PERFORMANCE.md, "The plugin at 8
// ranks").
inline constexpr uint32_t kStripedWires = 6;
inline constexpr uint32_t kStripedStripes = 4;
inline constexpr uint32_t kMinWires = 2;
inline constexpr uint32_t kMaxWires = 4;
// With kHalfShareRanks or more ranks on the host and a share of kHalfShareMinCpus or more, only half the
// share spins: with every CPU of a many-rank host polling, the ranks' threads starve each other
// (docs/PERFORMANCE.md).
inline constexpr unsigned kHalfShareRanks = 3;
inline constexpr unsigned kHalfShareMinCpus = 16;
// A connection has one lane per I/O thread, but at least kDefaultLanes.
inline constexpr uint32_t kDefaultLanes = 4;
// The message stripe_bytes cuts even over the stripes by default: NCCL's Simple-protocol step at its
// default NCCL_BUFFSIZE (4 MiB over NCCL_STEPS 8, two steps a slice for ring collectives).
inline constexpr uint64_t kStripedMessageBytes = 1 << 20;

// The rule in words, as docs/CONFIG.md states it (schema::render_markdown).
inline constexpr std::string_view kLayoutRuleText =
    "Two CPUs of the rank's share (usable CPUs / local ranks) stay with NCCL, and the rest, the room, "
    "gets the first of these that fits: 2 wires x (1 + 6 I/O threads) with 2 CPUs to spare, 2 wires x "
    "(1 + 4), 6 wires x (1 + 0) with each comm over 4 stripes, else one wire of one thread a CPU of the "
    "room (2..4); I/O threads are at most the lanes, lanes are one per I/O thread but at least 4, and "
    "stripe_bytes is 1 MiB / stripes rounded up to 4 KiB. With 3 or more local ranks and a share of 16 "
    "or more, only half the share spins: 2 wires x (1 + share / 4 - 1 I/O threads, at most 6), a lane "
    "each.";

// A resolved layout. Field comments give what each key sets.
struct Layout {
  uint32_t wires = kMinWires;      // UDP wires (one progress thread each) per device and DSCP, 1..16
  uint32_t io_threads = 0;         // I/O threads per wire (UdpConfig::io_threads), 0..64
  uint32_t lanes = kDefaultLanes;  // lanes (UDP source ports, a controller each) per connection, 1..64
  uint32_t stripes = 1;            // connections each comm runs over, each on its own wire, 1..8
  uint64_t stripe_bytes = kStripedMessageBytes;  // each stripe's part of a message but the last's
  // "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576": MEGASCALE_LAYOUT's own syntax.
  std::string text() const;
  bool operator==(const Layout&) const = default;
};

// The keys of a MEGASCALE_LAYOUT value; those left out are empty.
struct LayoutRequest {
  std::optional<uint32_t> wires, io_threads, lanes, stripes;
  std::optional<uint64_t> stripe_bytes;
  bool empty() const { return !wires && !io_threads && !lanes && !stripes && !stripe_bytes; }
};

// Parses a MEGASCALE_LAYOUT value: "" or "auto", or comma-separated key=value with the keys wires
// (1..16), io_threads (0..64), lanes (1..64), stripes (1..8) and stripe_bytes (4096..1073741824, K/M/G
// suffixes: 512K). An unknown key, a key given twice or a bad value is an error naming the key and what
// it allows: "MEGASCALE_LAYOUT=wires=0: wires must be an integer in 1..16".
Result<LayoutRequest> parse_layout(std::string_view text);

// The layout, the share it was fitted to and why, in words for the echo.
struct LayoutChoice {
  Layout layout;
  unsigned cpu_share = 1;  // usable CPUs / local ranks
  std::string share_text;  // "16 usable CPUs / 2 local ranks"
  std::string why;         // "auto: 16 usable CPUs / 2 local ranks = 8 each, ..."
};

// Fills the keys `req` leaves out (kLayoutRuleText); keys given are kept and the rest fitted around
// them: wires given, each wire gets the I/O threads its part of the room holds beyond its own thread
// (at most 6 and the lanes); I/O threads given, the wires that room holds (2..4 without I/O threads, 1..2
// with). Either one given turns off the half-share and the striped rung. `usable_cpus` is
// wire::cpu_budget().usable; `cpus_note` (its note(), e.g. a cgroup quota) goes into the text.
LayoutChoice resolve_layout(const LayoutRequest& req, unsigned usable_cpus, unsigned local_ranks,
                            const std::string& cpus_note = {});

}  // namespace megascale::nccl
