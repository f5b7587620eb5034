// A simulated host: one engine::Endpoint, the transport's own code, driven in virtual time, and a NIC
// port (an OutputQueue at the NIC's rate feeding the link to its switch). The engine's peer ids are
// host addresses: connect(now, 7) opens a connection to host 7, and a packet from host 7 arrives as
// from peer 7. Each engine lane's path id becomes the packet's UDP source port, which is what ECMP
// hashes, so a lane keeps its path until it repaths, as on a real fabric.
//
//   auto ep = engine::Endpoint::create(cfg);            // cfg.virtual_payload = true
//   Host h(sim, pool, /*address=*/3, std::move(*ep));
//   h.attach_nic(&nic_queue);                           // nic_queue feeds the host's uplink
//   auto id = h.endpoint().connect(ns_from_ps(sim.now()), /*peer=*/5);
//   h.kick();                                           // after posting work: let the engine send
//
// Driving (the contract in endpoint.h): every arriving frame goes to on_packet_header_only at the
// engine's `now` (the nanosecond the simulator's picosecond falls in); a timer event is kept at the
// engine's next_deadline(); the NIC pulls one packet from poll_tx whenever its port is free, so
// frames leave back to back at line rate and the engine's pacers and windows, not a host queue,
// decide what waits (as an RDMA NIC's scheduler pulls from its QPs when the port frees; HPCC-sim's
// RdmaHw). The engine runs with EngineConfig::virtual_payload.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "megascale/engine/endpoint.h"
#include "megascale/sim/packet.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/simulation.h"

namespace megascale::sim {

class Host;

// Told after every engine call on a host (a frame arrived, a timer ran): a workload checks its
// requests there.
class HostListener {
 public:
  virtual ~HostListener() = default;
  virtual void on_host_activity(Host& host) = 0;
  // Told when an engine call on `host` (an arriving frame, a timer, a kick) completed a send or a
  // receive, ok or not, before any on_host_activity that follows; `activity_follows`: the call was a
  // frame or a timer, and on_host_activity(host) comes next (a kick or a free NIC has none). A
  // workload with thousands of requests per host looks at them only after some completed.
  virtual void on_requests_completed(Host& /*host*/, bool /*activity_follows*/) {}
};

// The UDP source port of a lane's path id (the IANA ephemeral range 49152..65535); packets without a
// lane (path id 0) leave from kSimUdpPort, the "home" port.
uint16_t source_port_for_path(uint32_t path_id);

class Host : public PacketSink, public EventSource, public QueueIdleListener {
 public:
  Host(Simulation& sim, PacketPool& pool, uint32_t address, std::unique_ptr<engine::Endpoint> endpoint);

  // The NIC port: frames from the engine enter it; its idle signal asks the engine for more.
  void attach_nic(OutputQueue* nic);
  void set_listener(HostListener* listener) { listener_ = listener; }

  engine::Endpoint& endpoint() { return *endpoint_; }
  const engine::Endpoint& endpoint() const { return *endpoint_; }
  uint32_t address() const { return address_; }
  OutputQueue* nic() { return nic_; }

  // Lets the engine act now (after connect, post_send, post_recv or close from outside).
  void kick() { service(); }

  // A frame from the fabric for this host.
  void receive(Packet* pkt) override;
  // The engine's timer is due.
  void on_event() override;
  void on_queue_idle(OutputQueue& queue) override;

  uint64_t frames_sent() const { return frames_sent_; }
  uint64_t frames_received() const { return frames_received_; }

 private:
  // Runs due timers, gives the NIC a packet if it is free, and keeps a timer event at the deadline;
  // then tells the listener if requests completed since the last call.
  void service(bool activity_follows = false);
  void serve_engine();
  void send(const engine::TxPacket& tx);
  void arm(TimePs at_ps);

  Simulation& sim_;
  PacketPool& pool_;
  uint32_t address_;
  std::unique_ptr<engine::Endpoint> endpoint_;
  OutputQueue* nic_ = nullptr;
  HostListener* listener_ = nullptr;
  // Times of this host's timer events in the simulation's queue, earliest last. Only an earlier
  // deadline adds one; an event whose deadline moved later fires and finds nothing due (harmless).
  std::vector<TimePs> armed_;
  uint64_t frames_sent_ = 0;
  uint64_t frames_received_ = 0;
  uint64_t completions_seen_ = 0;  // the endpoint's send + receive completions at the last service()
};

}  // namespace megascale::sim
