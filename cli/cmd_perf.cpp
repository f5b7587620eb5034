// `megascale perf`: point-to-point bandwidth and latency over the transport, perftest's way.
//
//   megascale perf --loopback                        # both sides here: bw 64 KiB and latency 2 B
//   megascale perf -a --test bw --loopback -q 4 --json out/bench/perf.json
//   megascale perf -p 18515 -d eth0                  # server on eth0's address: waits for one client
//   megascale perf -p 18515 -a 10.0.0.2              # client: the same flags plus the server's address
//   megascale perf --wire verbs-ud -d rxe0 -x 1 10.0.0.2  # data over RDMA UD on rxe0's GID 1
//   megascale perf -p 18515 10.0.3.2 -q 8 --fabric megascale --from h0:n0 --to h300:n0
//       --hash crc16-bisync:per-switch                # client lanes on source ports mapped to distinct paths
//
// perftest's letters mean what they mean there: -d the device (here the network interface whose
// address this side binds), -q queue pairs (here lanes), -T the traffic class (the IP TOS byte), -t the
// tx depth, -s, -n, -D, -a, -b, -p. The server needs no flags but -p: the client sends its test
// parameters when it connects; a flag given on both sides must agree. docs/CLI.md has the JSON schema. Faults
// for testing come from MEGASCALE_FAULT_* (see bench/README.md). Exit status: 0 done, 1 a transfer or check
// failed (the connection's error is printed), 2 bad flags.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "commands.h"
#include "megascale/perf/device.h"
#include "megascale/perf/run.h"
#include "megascale/perf/ucx.h"
#include "megascale/wire/udp.h"
#include "vocab.h"

namespace megascale::cli {
namespace {

using perf::PerfOptions;
namespace flag = perf::flag;

struct PerfFlags {
  PerfOptions o;
  std::string test = "both";
  std::string poll = "adaptive";
  uint64_t buffer_mib = 256;
  std::string json_path;
  bool report_gbits = false;
  uint32_t tclass = 0;       // -T: the TOS byte
  std::string source_ports;  // --source-ports P1,P2,...
  std::string wire = "udp";  // --wire
  int64_t gid_index = -1;    // -x; -1 = not given
  std::string baseline;      // --baseline: "" or ucx
};

// The JSON document: the command and schema version, whether the run succeeded, then the report.
Status write_json(const std::string& path, const perf::PerfRun& run) {
  nlohmann::json doc = vocab::json_document("perf");
  doc["status"] = run.status == perf::PerfStatus::kOk ? "ok" : "failed";
  if (!run.error.empty()) doc["error"] = run.error;
  doc.update(perf::report_json(run.report));
  if (path != "-") {
    std::error_code ec;
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  }
  return vocab::write_json(path, doc);
}

int run_perf_command(PerfFlags& f, CLI::App* cmd) {
  PerfOptions& o = f.o;
  auto given = [&](const char* name) { return cmd->count(name) > 0; };
  const std::pair<const char*, std::string_view> names[] = {
      {"--test", flag::kTest},   {"-a", flag::kAll},      {"-s", flag::kSize},
      {"-n", flag::kIters},      {"-D", flag::kDuration}, {"-t", flag::kWindow},
      {"-q", flag::kLanes},      {"--cc", flag::kCc},     {"--segment", flag::kSegment},
      {"--check", flag::kCheck}, {"-T", flag::kTclass},   {"-b", flag::kBidirectional}};
  for (const auto& [cli_name, key] : names) {
    if (given(cli_name)) o.explicit_flags.insert(std::string(key));
  }
  // One host has no fabric for congestion control to manage, and its scheduling delays look like
  // queueing to a delay-based controller: --loopback measures the datapath with the built-in
  // `loopback` preset (fixed window of 32, 256 KiB burst, 5 ms RTO floor) unless told otherwise (the
  // banner names the preset), and segments as perf::default_segment_bytes says.
  if (o.loopback && !given("--cc")) o.cc = "loopback";
  auto test = perf::parse_perf_test(f.test);
  if (!test) {
    fmt::print(stderr, "megascale perf: {}\n", test.error().message);
    return kExitUsage;
  }
  o.test = *test;
  auto poll = perf::parse_perf_poll(f.poll);
  if (!poll) {
    fmt::print(stderr, "megascale perf: {}\n", poll.error().message);
    return kExitUsage;
  }
  o.poll = *poll;
  if (f.tclass > 255) {
    fmt::print(stderr, "megascale perf: -T {}: the traffic class is one byte, 0 .. 255\n", f.tclass);
    return kExitUsage;
  }
  if ((f.tclass & 3) != 0) {
    fmt::print(stderr,
               "megascale perf: -T {}: the low two bits of the TOS byte are ECN, which the transport sets "
               "itself; give DSCP * 4 (e.g. -T {} for DSCP {})\n",
               f.tclass, f.tclass & ~3u, f.tclass >> 2);
    return kExitUsage;
  }
  o.dscp = static_cast<uint8_t>(f.tclass >> 2);
  auto wire = perf::parse_perf_wire(f.wire);
  if (!wire) {
    fmt::print(stderr, "megascale perf: {}\n", wire.error().message);
    return kExitUsage;
  }
  o.wire = *wire;
  if (!f.baseline.empty()) {
    if (f.baseline != "ucx") {
      fmt::print(stderr, "megascale perf: --baseline '{}': the baseline is ucx\n", f.baseline);
      return kExitUsage;
    }
    if (!perf::have_ucx()) {
      fmt::print(stderr,
                 "megascale perf: --baseline ucx: this build has no UCX (install libucx-dev, as "
                 "scripts/install-deps.sh does, and rebuild)\n");
      return kExitUsage;
    }
    o.baseline_ucx = true;
  }
  if (!given("--segment")) o.segment_bytes = perf::default_segment_bytes(o.wire, o.loopback, o.lanes);
  if (given("-x")) {
    if (f.gid_index < 0 || f.gid_index > 65535) {
      fmt::print(stderr, "megascale perf: -x {}: a GID index is 0 .. 65535\n", f.gid_index);
      return kExitUsage;
    }
    o.gid_index = static_cast<uint32_t>(f.gid_index);
  }
  // On the verbs wire -d names the RDMA device (perftest's meaning), checked when the wire opens.
  if (given("-d") && !perf::is_verbs(o.wire)) {
    if (given("--bind")) {
      fmt::print(stderr, "megascale perf: -d and --bind both choose the local address: give one\n");
      return kExitUsage;
    }
    auto address = perf::interface_address(o.device, o.ipv6);
    if (!address) {
      fmt::print(stderr, "megascale perf: {}\n", address.error().message);
      return kExitUsage;
    }
    o.bind_host = *address;
  }
  o.port_given = given("-p");
  if (given("--source-ports")) {
    auto ports = wire::parse_source_ports(f.source_ports);
    if (!ports) {
      fmt::print(stderr, "megascale perf: --source-ports {}: {}\n", f.source_ports, ports.error().message);
      return kExitUsage;
    }
    o.source_ports = *ports;
  }
  o.buffer_budget_bytes = f.buffer_mib << 20;

  for (const std::string& w : perf::perf_warnings(o, wire::usable_cpus())) {
    fmt::print(stderr, "megascale perf: warning: {}\n", w);
  }

  perf::PerfSink sink;
  std::FILE* const human = vocab::human_stream(f.json_path);
  sink.out = [human](const std::string& line) {
    fmt::print(human, "{}\n", line);
    std::fflush(human);
  };
  sink.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  const perf::PerfRun run = perf::run_perf(o, sink);

  if (!f.json_path.empty() && run.status != perf::PerfStatus::kUsage &&
      (!run.report.bw.empty() || !run.report.lat.empty() || run.status == perf::PerfStatus::kOk)) {
    if (Status s = write_json(f.json_path, run); !s) {
      fmt::print(stderr, "megascale perf: {}\n", s.error().message);
      return kExitFailure;
    }
  }
  switch (run.status) {
    case perf::PerfStatus::kOk:
      return kExitOk;
    case perf::PerfStatus::kUsage:
      fmt::print(stderr, "megascale perf: {}\n", run.error);
      return kExitUsage;
    case perf::PerfStatus::kFailed:
      fmt::print(stderr, "megascale perf: {}\n", run.error);
      return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace

void add_perf_command(CLI::App& app) {
  auto f = std::make_shared<PerfFlags>();
  PerfOptions& o = f->o;
  CLI::App* cmd = app.add_subcommand(
      "perf",
      "Point-to-point bandwidth and latency over the transport, perftest's way: server `megascale perf`, "
      "client `megascale perf <server>` with the same flags, or both here with --loopback");
  cmd->add_option("server", o.server, "The server's host name or address (client mode)");
  cmd->add_flag("--loopback", o.loopback,
                "Run server and client in this process over 127.0.0.1 (::1 with -6)");
  cmd->add_option("--test", f->test, "bw, lat or both")->capture_default_str();
  cmd->add_flag("-a,--all", o.all_sizes, "All sizes: 2 B .. 8 MiB (bw: .. 64 MiB)");
  vocab::size(cmd, vocab::kSizeFlag, o.size_bytes, "Message size, e.g. 4096 or 64K (default: bw 64K, lat 2)");
  vocab::iterations(
      cmd, o.iterations,
      "Messages per bw row / round trips per latency row (default 5000 / 1000, at most 2 GiB a row)");
  vocab::duration(cmd, vocab::kDurationFlag, o.duration_s,
                  "Time per row instead of a count, e.g. 5 or 500ms");
  cmd->add_option("-p,--port", o.port, "The server's UDP port (one more port per extra lane)")
      ->capture_default_str();
  cmd->add_flag("-6,--ipv6", o.ipv6, "Use IPv6");
  cmd->add_option("--wire", f->wire,
                  "What carries the measured messages: udp, verbs-ud (RDMA UD datagrams) or verbs-rc (RDMA "
                  "writes on RC QPs); verbs keeps the control connection on UDP (host, -p)")
      ->capture_default_str();
  cmd->add_option("-d,--ib-dev", o.device,
                  "The device (perftest's -d): udp: the network interface whose address this side binds, "
                  "e.g. lo or eth0 (its IPv4 address; IPv6 with -6); verbs: the RDMA device, e.g. rxe0 or "
                  "mlx5_0 (default: the first with an ACTIVE RoCE port)")
      ->type_name("DEV");
  cmd->add_option("-i,--ib-port", o.ib_port,
                  "verbs: the RDMA device's port, 1-based (default: its first ACTIVE Ethernet port)");
  cmd->add_option("-x,--gid-index", f->gid_index,
                  "verbs: the GID index (as MEGASCALE_IB_GID_INDEX, which it overrides; default: the "
                  "RoCE v2 IPv4 GID, or as MEGASCALE_IB_ADDR_FAMILY/ADDR_RANGE/ROCE_VERSION_NUM choose)");
  cmd->add_option("--bind", o.bind_host, "Local address to bind (default: any; loopback: 127.0.0.1 / ::1)");
  cmd->add_option("-t,--window,--tx-depth", o.window, "bw messages in flight (perftest's -t/--tx-depth)")
      ->capture_default_str();
  cmd->add_option("-q,--qp,--lanes", o.lanes,
                  "Lanes, perftest's queue pairs: UDP source ports, each with its own congestion control")
      ->capture_default_str();
  cmd->add_option("--source-ports", f->source_ports,
                  "Client: the lanes' UDP source ports, one per lane, P1,P2,... (as `megascale topo ports` "
                  "prints them); lane i sends from port i");
  cmd->add_option("--fabric", o.fabric,
                  "Client: choose the lanes' source ports with the fabric model (preset or YAML) so they "
                  "take distinct ECMP paths from --from to --to (see `megascale topo ports`)");
  cmd->add_option("--from", o.from, "Client with --fabric: this host's NIC in the fabric, hH:nN");
  cmd->add_option("--to", o.to, "Client with --fabric: the server's NIC in the fabric, hH:nN");
  cmd->add_option("--hash", o.hashes,
                  "Client with --fabric: switch hash NAME[:seed=N][:offset=N][:per-switch], once for every "
                  "tier or three times (tor, aggregation/spine, core); none: ports spread evenly")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  vocab::cc(cmd, o.cc, "Congestion-control preset: a built-in name or a YAML file (--loopback: loopback)")
      ->capture_default_str();
  cmd->add_option(
         "--segment", o.segment_bytes,
         "Payload bytes per datagram (keep + 100 B within the MTU; --loopback: 60000 on one lane, 16384 "
         "on more; verbs-rc: 65000, one RDMA write each)")
      ->capture_default_str();
  cmd->add_option(
         "-T,--tclass,--tos", f->tclass,
         "Traffic class of every packet (perftest's -T): the IP TOS byte, DSCP * 4 (DSCP 26: -T 104); "
         "the transport sets the low two (ECN) bits")
      ->capture_default_str();
  vocab::renamed(cmd, "--dscp", "-T,--tclass (the TOS byte, DSCP * 4)");
  cmd->add_flag(
      "-b,--bidirectional", o.bidirectional,
      "bw rows both ways at once (perftest's -b; give it on both sides): BW is the sum of both sides' "
      "sends");
  cmd->add_flag("--check", o.check, "Fill and verify every byte of every message (else both ends of each)");
  cmd->add_option(
         "--poll", f->poll,
         "adaptive: spin while traffic flows, sleep after 1 ms without; busy: always spin (a core per "
         "side); sleep: epoll whenever idle (better on hosts with few free cores)")
      ->capture_default_str();
  cmd->add_option(
         "--io-threads", o.io_threads,
         "I/O threads per side: 0 = the polling thread makes every system call (lowest latency); N = "
         "N threads own the lanes' sockets (send, receive, CRC checks) so lanes move in parallel")
      ->capture_default_str();
  cmd->add_option("--stall-us", o.stall_us,
                  "With --io-threads: an I/O thread silent this long (its CPU taken away) has its sends and "
                  "receives taken over by the others until it is back; 0 = never")
      ->capture_default_str();
  cmd->add_flag("!--no-payload-crc", o.payload_crc,
                "This side's payloads leave without their CRC32C (protocol version 2; the header CRC stays): "
                "measures what the payload CRC costs");
  vocab::timeout(cmd, o.timeout_s, "Fail when nothing completes for this long, e.g. 60 or 500ms")
      ->capture_default_str();
  cmd->add_option("--buffer-mib", f->buffer_mib,
                  "Message buffers per side, MiB: bounds the bw window; must hold one message of the largest "
                  "size (a latency row: five), else perf refuses")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--baseline", f->baseline,
                  "ucx: with --loopback, each bw row again over UCX (UCP tag messages; TCP on lo unless "
                  "UCX_TLS / UCX_NET_DEVICES say otherwise) and a table of both with their ratio");
  vocab::json(cmd, f->json_path);
  cmd->add_flag("--report_gbits,--report-gbits", f->report_gbits,
                "Accepted for perftest habits: Gb/s is the unit");
  cmd->add_flag("-v,--verbose", o.verbose, "A wire line after each row: syscalls per GB, GSO/GRO messages");
  cmd->callback([f, cmd] { exit_code() = run_perf_command(*f, cmd); });
}

}  // namespace megascale::cli
