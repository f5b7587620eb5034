// `megascale ceiling`: what the kernel alone moves over loopback on this host, UDP and TCP, and what
// each of the UDP wire's own passes over the payload costs (cli/perf/include/megascale/perf/ceiling.h).
//
//   megascale ceiling                                   # tcp, udp, udp+copy, udp+copy+crc; 4 pairs, 3 s
//   megascale ceiling --rows udp,tcp --pairs 8 -s 65000 -D 5
//   taskset -c 0-7 megascale ceiling                    # on 8 CPUs
//
// One line per row: goodput; the host's busy cores over the run (/proc/stat, softirq included: run it
// on an otherwise idle host) and the sender and receiver threads' own; and payload bytes per busy
// CPU-second of the host. Where a host is CPU-bound (the NCCL plugin on a GPU host), bytes per
// CPU-second bounds what any design over that path can move.
// Exit status: 0 done, 1 a run failed or a payload arrived corrupt, 2 bad flags.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/perf/ceiling.h"

namespace megascale::cli {
namespace {

struct CeilingFlags {
  perf::CeilingOptions o;
  std::string rows = "tcp,udp,udp+copy,udp+copy+crc";
  size_t tcp_bytes = 64 * 1024;
};

int run_ceiling_command(const CeilingFlags& f) {
  std::vector<perf::CeilingOptions> rows;
  std::stringstream in(f.rows);
  std::string name;
  while (std::getline(in, name, ',')) {
    perf::CeilingOptions o = f.o;
    if (const std::string e = perf::parse_row(name, o); !e.empty()) {
      std::fprintf(stderr, "megascale ceiling: --rows: %s\n", e.c_str());
      return kExitUsage;
    }
    if (o.proto == perf::CeilingProto::kTcp) o.bytes = f.tcp_bytes;
    if (const std::string e = perf::validate(o); !e.empty()) {
      std::fprintf(stderr, "megascale ceiling: %s: %s\n", name.c_str(), e.c_str());
      return kExitUsage;
    }
    rows.push_back(o);
  }
  if (rows.empty()) {
    std::fprintf(stderr, "megascale ceiling: --rows names no row\n");
    return kExitUsage;
  }
  std::printf(
      "# loopback ceiling: %u sender/receiver thread pairs, blocking calls, %.1f s a row; udp: %u in "
      "flight per pair, %u per sendmmsg/recvmmsg\n",
      f.o.pairs, f.o.seconds, f.o.window, f.o.batch);
  std::printf("%-14s %8s %9s %8s %10s %9s %9s %9s %8s %6s %6s\n", "#row", "bytes", "Gbit/s", "GB/s",
              "host cores", "tx cores", "rx cores", "GB/cpu-s", "lost", "order", "crc");
  int rc = kExitOk;
  for (const perf::CeilingOptions& o : rows) {
    const perf::CeilingResult r = perf::run_ceiling(o);
    if (!r.error.empty()) {
      std::fprintf(stderr, "megascale ceiling: %s: %s\n", perf::row_name(o).c_str(), r.error.c_str());
      rc = kExitFailure;
      continue;
    }
    std::printf("%-14s %8zu %9.2f %8.2f %10.2f %9.2f %9.2f %9.2f %8llu %6llu %6s\n",
                perf::row_name(o).c_str(), o.bytes, r.gbps(), r.gbps() / 8, r.host_cpu_seconds / r.seconds,
                r.sender_cpu_seconds / r.seconds, r.receiver_cpu_seconds / r.seconds,
                r.bytes_per_cpu_second() / 1e9, static_cast<unsigned long long>(r.lost),
                static_cast<unsigned long long>(r.out_of_order),
                o.crc ? std::to_string(r.crc_errors).c_str() : "-");
    if (r.crc_errors > 0) {
      std::fprintf(stderr, "megascale ceiling: %s: %llu payloads arrived corrupt\n",
                   perf::row_name(o).c_str(), static_cast<unsigned long long>(r.crc_errors));
      rc = kExitFailure;
    }
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace

void add_ceiling_command(CLI::App& app) {
  auto f = std::make_shared<CeilingFlags>();
  CLI::App* cmd = app.add_subcommand(
      "ceiling",
      "What the kernel alone moves over loopback here, UDP and TCP, with the UDP wire's own payload passes "
      "added back one at a time: the bound under the transport on a CPU-bound host");
  cmd->add_option("--rows", f->rows,
                  "Rows to run, in order: udp or tcp, each with +copy (one more copy of each payload at the "
                  "receiver) and +crc (CRC32C at both ends, checked)")
      ->capture_default_str();
  cmd->add_option("--pairs", f->o.pairs, "Sender/receiver thread pairs, each with its own sockets")
      ->capture_default_str();
  cmd->add_option("-s,--size", f->o.bytes,
                  "UDP datagram payload in bytes (the plugin's segment on lo: 32768)")
      ->capture_default_str();
  cmd->add_option("--tcp-size", f->tcp_bytes, "Bytes per TCP send() and recv()")->capture_default_str();
  cmd->add_option("-D,--duration", f->o.seconds, "Seconds of sending per row")->capture_default_str();
  cmd->add_option("-t,--window", f->o.window, "UDP datagrams in flight per pair")->capture_default_str();
  cmd->add_option("--batch", f->o.batch, "UDP datagrams per sendmmsg / recvmmsg")->capture_default_str();
  cmd->add_flag("-6,--ipv6", f->o.ipv6, "Use ::1 instead of 127.0.0.1");
  cmd->callback([f] { exit_code() = run_ceiling_command(*f); });
}

}  // namespace megascale::cli
