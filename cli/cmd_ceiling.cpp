// `megascale ceiling`: what the kernel alone moves over loopback on this host, UDP and TCP, and what
// each of the UDP wire's own passes over the payload costs (cli/perf/include/megascale/perf/ceiling.h).
//
//   megascale ceiling                                   # tcp, udp, udp+copy, udp+copy+crc; 4 pairs, 3 s
//   megascale ceiling --rows udp,tcp --pairs 8 -s 65000 -D 5
//   megascale ceiling -D 500ms --json - | jq '.rows[].goodput_gbps'
//   taskset -c 0-7 megascale ceiling                    # on 8 CPUs
//
// One line per row: goodput; the host's busy cores over the run (/proc/stat, softirq included: run it
// on an otherwise idle host) and the sender and receiver threads' own; and payload bytes per busy
// CPU-second of the host. Where a host is CPU-bound (the NCCL plugin on a GPU host), bytes per
// CPU-second bounds what any design over that path can move. --json writes the rows too (docs/CLI.md).
// Exit status: 0 done, 1 a run failed or a payload arrived corrupt, 2 bad flags.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/perf/ceiling.h"
#include "vocab.h"

namespace megascale::cli {
namespace {

struct CeilingFlags {
  perf::CeilingOptions o;
  std::string rows = "tcp,udp,udp+copy,udp+copy+crc";
  size_t tcp_bytes = 64 * 1024;
  std::string json_path;
};

// Busy CPU time per KiB of payload received (the host's, or the threads' where /proc/stat is absent).
double cpu_ns_per_kib(const perf::CeilingResult& r) {
  const double per_byte = r.bytes_per_cpu_second();
  return per_byte > 0 ? 1024 * 1e9 / per_byte : 0;
}

// One row of --json; `base` is the row run before it with the same protocol (its name and CPU per KiB):
// this row's CPU per KiB less the base's is what the passes this row adds cost.
nlohmann::json row_json(const perf::CeilingOptions& o, const perf::CeilingResult& r,
                        const std::pair<std::string, double>* base) {
  const double cost = cpu_ns_per_kib(r);
  return nlohmann::json{{"row", perf::row_name(o)},
                        {"proto", o.proto == perf::CeilingProto::kTcp ? "tcp" : "udp"},
                        {"copy", o.copy},
                        {"crc", o.crc},
                        {"size_bytes", o.bytes},
                        {"duration_s", r.seconds},
                        {"goodput_gbps", r.gbps()},
                        {"goodput_GBps", r.gbps() / 8},
                        {"payload_received_bytes", r.bytes_received},
                        {"messages_sent", r.messages_sent},
                        {"messages_received", r.messages_received},
                        {"host_cores", r.seconds > 0 ? r.host_cpu_seconds / r.seconds : 0},
                        {"sender_cores", r.seconds > 0 ? r.sender_cpu_seconds / r.seconds : 0},
                        {"receiver_cores", r.seconds > 0 ? r.receiver_cpu_seconds / r.seconds : 0},
                        {"host_cpu_s", r.host_cpu_seconds},
                        {"sender_cpu_s", r.sender_cpu_seconds},
                        {"receiver_cpu_s", r.receiver_cpu_seconds},
                        {"payload_GBps_per_cpu", r.bytes_per_cpu_second() / 1e9},
                        {"cpu_per_kib_ns", cost},
                        {"added_over", base ? base->first : std::string()},
                        {"added_cpu_per_kib_ns", base ? cost - base->second : 0.0},
                        {"lost", r.lost},
                        {"out_of_order", r.out_of_order},
                        {"crc_errors", r.crc_errors},
                        {"rcvbuf_bytes", r.rcvbuf_bytes}};
}

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
  // The header names what is about to run before the first row's seconds of sending start.
  std::FILE* const out = vocab::human_stream(f.json_path);
  std::fprintf(
      out,
      "# loopback ceiling: %u sender/receiver thread pairs, blocking calls, %.3g s a row; udp: %u in "
      "flight per pair, %u per sendmmsg/recvmmsg\n",
      f.o.pairs, f.o.seconds, f.o.window, f.o.batch);
  std::fprintf(out, "%-14s %8s %9s %8s %10s %9s %9s %9s %8s %6s %6s\n", "#row", "bytes", "Gbit/s", "GB/s",
               "host cores", "tx cores", "rx cores", "GB/cpu-s", "lost", "order", "crc");
  std::fflush(out);
  int rc = kExitOk;
  nlohmann::json json_rows = nlohmann::json::array();
  nlohmann::json errors = nlohmann::json::array();
  // Per protocol, the last row run and its CPU per KiB: the next row's passes are added over it.
  std::map<perf::CeilingProto, std::pair<std::string, double>> last;
  for (const perf::CeilingOptions& o : rows) {
    const perf::CeilingResult r = perf::run_ceiling(o);
    if (!r.error.empty()) {
      std::fprintf(stderr, "megascale ceiling: %s: %s\n", perf::row_name(o).c_str(), r.error.c_str());
      errors.push_back(perf::row_name(o) + ": " + r.error);
      rc = kExitFailure;
      continue;
    }
    const auto base = last.find(o.proto);
    json_rows.push_back(row_json(o, r, base == last.end() ? nullptr : &base->second));
    last[o.proto] = {perf::row_name(o), cpu_ns_per_kib(r)};
    std::fprintf(out, "%-14s %8zu %9.2f %8.2f %10.2f %9.2f %9.2f %9.2f %8llu %6llu %6s\n",
                 perf::row_name(o).c_str(), o.bytes, r.gbps(), r.gbps() / 8, r.host_cpu_seconds / r.seconds,
                 r.sender_cpu_seconds / r.seconds, r.receiver_cpu_seconds / r.seconds,
                 r.bytes_per_cpu_second() / 1e9, static_cast<unsigned long long>(r.lost),
                 static_cast<unsigned long long>(r.out_of_order),
                 o.crc ? std::to_string(r.crc_errors).c_str() : "-");
    if (r.crc_errors > 0) {
      std::fprintf(stderr, "megascale ceiling: %s: %llu payloads arrived corrupt\n",
                   perf::row_name(o).c_str(), static_cast<unsigned long long>(r.crc_errors));
      errors.push_back(fmt::format("{}: {} payloads arrived corrupt", perf::row_name(o), r.crc_errors));
      rc = kExitFailure;
    }
    std::fflush(out);
  }
  if (!f.json_path.empty()) {
    nlohmann::json doc = vocab::json_document("ceiling");
    doc["status"] = rc == kExitOk ? "ok" : "failed";
    doc["errors"] = errors;
    doc["config"] = {{"pairs", f.o.pairs},
                     {"duration_s", f.o.seconds},
                     {"udp_size_bytes", f.o.bytes},
                     {"tcp_size_bytes", f.tcp_bytes},
                     {"window", f.o.window},
                     {"batch", f.o.batch},
                     {"ipv6", f.o.ipv6}};
    doc["rows"] = json_rows;
    if (Status s = vocab::write_json(f.json_path, doc); !s) {
      std::fprintf(stderr, "megascale ceiling: %s\n", s.error().message.c_str());
      return kExitFailure;
    }
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
  vocab::size(cmd, vocab::kSizeFlag, f->o.bytes,
              "UDP datagram payload, e.g. 32K (the plugin's segment on lo)")
      ->capture_default_str();
  vocab::size(cmd, "--tcp-size", f->tcp_bytes, "Bytes per TCP send() and recv(), e.g. 64K")
      ->capture_default_str();
  vocab::duration(cmd, vocab::kDurationFlag, f->o.seconds, "Time of sending per row, e.g. 3 or 500ms")
      ->capture_default_str();
  cmd->add_option("-t,--window", f->o.window, "UDP datagrams in flight per pair")->capture_default_str();
  cmd->add_option("--batch", f->o.batch, "UDP datagrams per sendmmsg / recvmmsg")->capture_default_str();
  cmd->add_flag("-6,--ipv6", f->o.ipv6, "Use ::1 instead of 127.0.0.1");
  vocab::json(cmd, f->json_path);
  cmd->callback([f] { exit_code() = run_ceiling_command(*f); });
}

}  // namespace megascale::cli
