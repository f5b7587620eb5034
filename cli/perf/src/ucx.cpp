// The UCX baseline's bandwidth rows (ucx.h).
#include "megascale/perf/ucx.h"

#if MEGASCALE_PERF_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <thread>
#include <vector>

namespace megascale::perf {

#if !MEGASCALE_PERF_HAVE_UCX

bool have_ucx() {
  return false;
}

UcxBw run_ucx_bw_loopback(const UcxBwOptions&) {
  return {.error = "this build has no UCX (install libucx-dev, scripts/install-deps.sh does, and rebuild)"};
}

#else

bool have_ucx() {
  return true;
}

namespace {

TimeNs now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The transports of an endpoint's lanes ("tcp/lo"), read from ucp_ep_print_info's lane lines.
std::string lane_transports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return "?";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  const std::string info(text, size);
  std::free(text);
  std::set<std::string> found;
  static const std::regex lane(R"(lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)/([A-Za-z0-9_]+))");
  for (auto it = std::sregex_iterator(info.begin(), info.end(), lane); it != std::sregex_iterator(); ++it) {
    found.insert((*it)[1].str() + "/" + (*it)[2].str());
  }
  std::string out;
  for (const std::string& t : found) out += (out.empty() ? "" : ",") + t;
  return out.empty() ? "?" : out;
}

struct Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h sender = nullptr, receiver = nullptr;
  ucp_ep_h ep = nullptr;
  ~Ucx() {
    if (ep != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) {
          ucp_worker_progress(sender);
          ucp_worker_progress(receiver);
        }
        ucp_request_free(r);
      }
    }
    if (sender != nullptr) ucp_worker_destroy(sender);
    if (receiver != nullptr) ucp_worker_destroy(receiver);
    if (context != nullptr) ucp_cleanup(context);
  }
};

std::string failed(const char* call, ucs_status_t s) {
  return fmt::format("UCX {}: {}", call, ucs_status_string(s));
}

}  // namespace

UcxBw run_ucx_bw_loopback(const UcxBwOptions& o) {
  UcxBw out;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  out.version = fmt::format("{}.{}.{}", major, minor, release);
  if (o.size_bytes == 0 || o.iterations == 0 || o.window == 0) {
    out.error = "UCX baseline: size, iterations and window must be above 0";
    return out;
  }
  Ucx u;
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    out.error = failed("ucp_config_read", s);
    return out;
  }
  // The kernel's network path on the loopback interface, unless the environment chose.
  if (std::getenv("UCX_TLS") == nullptr) ucp_config_modify(config, "TLS", "tcp");
  if (std::getenv("UCX_NET_DEVICES") == nullptr) ucp_config_modify(config, "NET_DEVICES", "lo");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  const ucs_status_t init = ucp_init(&params, config, &u.context);
  ucp_config_release(config);
  if (init != UCS_OK) {
    out.error = failed("ucp_init", init);
    return out;
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  for (ucp_worker_h* w : {&u.sender, &u.receiver}) {
    if (ucs_status_t s = ucp_worker_create(u.context, &wp, w); s != UCS_OK) {
      out.error = failed("ucp_worker_create", s);
      return out;
    }
  }
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  if (ucs_status_t s = ucp_worker_get_address(u.receiver, &address, &address_bytes); s != UCS_OK) {
    out.error = failed("ucp_worker_get_address", s);
    return out;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = address;
  const ucs_status_t created = ucp_ep_create(u.sender, &ep, &u.ep);
  ucp_worker_release_address(u.receiver, address);
  if (created != UCS_OK) {
    out.error = failed("ucp_ep_create", created);
    return out;
  }
  out.transports = lane_transports(u.ep);

  const uint64_t n = o.iterations;
  const size_t bytes = static_cast<size_t>(o.size_bytes);
  const uint32_t window = static_cast<uint32_t>(std::min<uint64_t>(o.window, n));
  std::vector<char> send_buffer(bytes, 'm');
  std::vector<char> receive_ring(bytes * window);
  std::vector<TimeNs> posted(n), delivered(n);
  std::atomic<bool> stop{false};
  std::atomic<bool> receiver_done{false};  // set as the receiver's thread ends; receive_error is then set
  std::string receive_error;
  constexpr ucp_tag_t kTag = 0x6d73;  // "ms"

  // Counters a completion callback bumps (each worker is progressed by its own thread only).
  struct Counts {
    uint64_t done = 0;
    uint64_t in_flight = 0;
    std::vector<TimeNs>* times = nullptr;
    ucs_status_t status = UCS_OK;
  };
  std::thread receiver([&] {
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(true, std::memory_order_release); }
    } done{receiver_done};
    Counts c{.times = &delivered};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
      auto* k = static_cast<Counts*>(user);
      if (status != UCS_OK) k->status = status;
      (*k->times)[k->done++] = now_ns();
      --k->in_flight;
      ucp_request_free(request);
    };
    p.user_data = &c;
    uint64_t next = 0;
    while (c.done < n && !stop.load(std::memory_order_relaxed)) {
      while (c.in_flight < window && next < n) {
        void* r = ucp_tag_recv_nbx(u.receiver, receive_ring.data() + (next % window) * bytes, bytes, kTag,
                                   ~ucp_tag_t{0}, &p);
        ++next;
        if (UCS_PTR_IS_ERR(r)) {
          receive_error = failed("ucp_tag_recv_nbx", UCS_PTR_STATUS(r));
          return;
        }
        if (r == nullptr) {
          delivered[c.done++] = now_ns();
        } else {
          ++c.in_flight;
        }
      }
      ucp_worker_progress(u.receiver);
      if (c.status != UCS_OK) {
        receive_error = failed("a receive", c.status);
        return;
      }
    }
  });
  Counts s{.times = nullptr};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = [](void* request, ucs_status_t status, void* user) {
    auto* k = static_cast<Counts*>(user);
    if (status != UCS_OK) k->status = status;
    ++k->done;
    --k->in_flight;
    ucp_request_free(request);
  };
  p.user_data = &s;
  uint64_t sent = 0;
  TimeNs last_progress = now_ns();
  uint64_t last_done = 0;
  while (s.done < n) {
    while (s.in_flight < window && sent < n) {
      posted[sent] = now_ns();
      void* r = ucp_tag_send_nbx(u.ep, send_buffer.data(), bytes, kTag, &p);
      ++sent;
      if (UCS_PTR_IS_ERR(r)) {
        s.status = UCS_PTR_STATUS(r);
        break;
      }
      if (r == nullptr) {
        ++s.done;
      } else {
        ++s.in_flight;
      }
    }
    if (s.status != UCS_OK) break;
    ucp_worker_progress(u.sender);
    if (s.done != last_done) {
      last_done = s.done;
      last_progress = now_ns();
    } else if (now_ns() - last_progress > static_cast<TimeNs>(o.timeout_s * 1e9)) {
      out.error =
          fmt::format("UCX baseline: no send completed for {:g} s ({} of {} done)", o.timeout_s, s.done, n);
      break;
    }
  }
  if (s.status != UCS_OK && out.error.empty()) out.error = failed("a send", s.status);
  // The receiver ends once every message arrived (the sender's worker keeps answering meanwhile: a
  // rendezvous needs both sides).
  const TimeNs wait_from = now_ns();
  while (out.error.empty() && !receiver_done.load(std::memory_order_acquire)) {
    ucp_worker_progress(u.sender);
    if (now_ns() - wait_from > static_cast<TimeNs>(o.timeout_s * 1e9)) {
      out.error =
          fmt::format("UCX baseline: the receiver did not get every message within {:g} s", o.timeout_s);
    }
  }
  if (!out.error.empty()) stop.store(true);
  receiver.join();
  if (out.error.empty() && !receive_error.empty()) out.error = receive_error;
  if (!out.error.empty()) return out;
  out.figures = bw_figures(o.size_bytes, posted, delivered, o.peak_run == 0 ? window : o.peak_run);
  return out;
}

#endif

std::string append_ucx_baseline(PerfReport& report, const std::function<void(const std::string&)>& out,
                                double timeout_s) {
  auto say = [&](const std::string& line) {
    if (out) out(line);
  };
  nlohmann::json rows = nlohmann::json::array();
  std::string version, transports, error;
  std::vector<std::string> lines;
  for (const BwRow& row : report.bw) {
    const UcxBw u = run_ucx_bw_loopback({.size_bytes = row.size_bytes,
                                         .iterations = row.iterations,
                                         .window = row.window,
                                         .timeout_s = timeout_s});
    if (!u.error.empty()) {
      error = fmt::format("--baseline ucx, {} B: {}", row.size_bytes, u.error);
      break;
    }
    version = u.version;
    transports = u.transports;
    const double ratio =
        u.figures.bw_average_gbps > 0 ? row.figures.bw_average_gbps / u.figures.bw_average_gbps : 0.0;
    rows.push_back({{"size_bytes", row.size_bytes},
                    {"iterations", row.iterations},
                    {"window", row.window},
                    {"megascale_bw_average_gbps", row.figures.bw_average_gbps},
                    {"ucx_bw_average_gbps", u.figures.bw_average_gbps},
                    {"ucx_bw_peak_gbps", u.figures.bw_peak_gbps},
                    {"ratio", ratio}});
    lines.push_back(fmt::format(" {:<10} {:<14} {:<20.2f} {:<18.2f} {:.2f}", row.size_bytes, row.iterations,
                                row.figures.bw_average_gbps, u.figures.bw_average_gbps, ratio));
  }
  if (!rows.empty()) {
    say(std::string(87, '-'));
    say(fmt::format(" baseline: UCX {} (UCP tag messages over {}), the same sizes, iterations and window",
                    version, transports));
    say(fmt::format(" {:<10} {:<14} {:<20} {:<18} {}", "#bytes", "#iterations", "megascale[Gb/sec]",
                    "ucx[Gb/sec]", "megascale/ucx"));
    for (const std::string& l : lines) say(l);
    say(std::string(87, '-'));
  }
  report.baseline = {{"name", "ucx"}, {"version", version}, {"transports", transports}, {"rows", rows}};
  return error;
}

}  // namespace megascale::perf
