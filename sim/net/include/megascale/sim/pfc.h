// A switch's ingress side of one link, with the buffer accounting of Priority Flow Control (PFC,
// IEEE 802.1Qbb): every frame that enters the switch through this ingress is counted against it until
// it leaves the switch (served by an output queue, or dropped). Above XOFF bytes the ingress sends a
// PAUSE to the port upstream of the link; at or below XON it sends a RESUME. PAUSE and RESUME are
// control events that cross the link with its propagation delay, not frames in its queues (a PFC frame
// jumps the data queue on a real port and is 64 bytes, so its own serialisation is left out).
//
//   PfcConfig pfc{.enabled = true, .xoff_bytes = 60'000, .xon_bytes = 40'000};
//   SwitchIngress in(sim, pool, &sw, &upstream_port, /*link_delay_ps=*/kPsPerUs, /*rate_bps=*/100e9, pfc);
//   link.set_far_end(&in);      // frames from upstream_port reach the switch through `in`
//
// Headroom (lossless mode): after the ingress crosses XOFF, frames keep arriving until the PAUSE has
// crossed the link (delay), the frame upstream was serialising when it arrived has finished (one
// frame), and the bytes already on the wire have landed (delay again): 2 x delay x rate + one frame
// (the headroom formula of the 802.1Qbb/DCB deployment guides; Zhu et al., DCQCN, SIGCOMM '15 §2). The
// frame that crossed XOFF itself may overshoot by one more frame, so the default headroom here is
// 2 x delay x rate + 2 frames. In lossless mode the switch's output queues do not tail-drop; an
// ingress holding more than XOFF + headroom drops (counted as headroom_drops), which a correctly sized
// headroom never lets happen.
//
// Dynamic threshold (`dynamic: true`, with the switch's SharedBuffer, shared_buffer.h): instead of a
// fixed XOFF, an ingress may hold up to alpha x (free shared buffer) in the shared pool (Choudhury-Hahne
// applied to ingress priority groups, as Broadcom switches and SONiC's "dynamic_th" do). The first frame
// that does not fit under that threshold goes into the ingress's headroom (reserved apart from the
// pool) and sends the PAUSE; further frames go to headroom until it is empty again, and one that would
// overflow headroom is dropped (headroom_drops). Departures free headroom bytes first, then shared ones.
// RESUME is sent once headroom is empty and the ingress's bytes + xon_offset_bytes are within the
// threshold (which rises as the buffer drains), or when it holds nothing.
// With two priorities (QueueConfig::priorities) only data frames are counted: control frames are not
// in the lossless class (set_lossless_data_only).
#pragma once

#include <cstdint>
#include <deque>

#include "megascale/sim/packet.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/shared_buffer.h"
#include "megascale/sim/simulation.h"

namespace megascale::sim {

struct PfcConfig {
  bool enabled = false;
  uint64_t xoff_bytes = 100'000;  // PAUSE when an ingress holds more than this
  uint64_t xon_bytes = 80'000;    // RESUME when it holds this or less (< xoff_bytes)
  // Bytes above XOFF an ingress may hold before it drops; 0: 2 x delay x rate + 2 x max_frame_bytes.
  uint64_t headroom_bytes = 0;
  uint32_t max_frame_bytes = 4096 + 128 + kFrameOverheadBytes;  // largest frame: MSS + headers + framing
  // Dynamic XOFF (needs the switch's shared buffer): pause above alpha x free shared bytes instead of
  // xoff_bytes; xon_bytes is then unused and RESUME comes xon_offset_bytes below the threshold.
  bool dynamic = false;
  double alpha = 1.0 / 8;         // SONiC's default lossless dynamic_th is -3 (alpha = 2^-3)
  uint64_t xon_offset_bytes = 0;  // 0: 2 x max_frame_bytes
};

// The headroom an ingress on a link of `delay_ps` and `rate_bps` needs (the formula above).
uint64_t pfc_headroom_bytes(const PfcConfig& pfc, TimePs delay_ps, uint64_t rate_bps);

struct PfcIngressStats {
  uint64_t frames = 0;              // frames that entered here
  uint64_t max_bytes = 0;           // most bytes held at once
  uint64_t pauses_sent = 0;         // PAUSEs sent upstream
  uint64_t resumes_sent = 0;        // RESUMEs sent upstream
  uint64_t headroom_drops = 0;      // frames dropped above XOFF + headroom (lossless mode only)
  uint64_t max_headroom_bytes = 0;  // dynamic mode: most bytes held in headroom at once
};

// Where an ingress sends PAUSE/RESUME when its upstream port is in another partition (partition.h):
// the message reaches the port at arrive_ps.
class PauseSink {
 public:
  virtual ~PauseSink() = default;
  virtual void send_pause(TimePs arrive_ps, bool pause) = 0;
};

class SwitchIngress : public PacketSink, public EventSource {
 public:
  // `sw` routes the frames; `upstream` is the port feeding the link (a NIC or another switch's port).
  SwitchIngress(Simulation& sim, PacketPool& pool, PacketSink* sw, OutputQueue* upstream,
                TimePs link_delay_ps, uint64_t rate_bps, const PfcConfig& pfc);

  // A frame from the link: counted, maybe a PAUSE sent, handed to the switch.
  void receive(Packet* pkt) override;
  // The frame left the switch (sent on or dropped): uncounted, maybe a RESUME sent.
  void on_departure(const Packet* pkt);
  // A PAUSE or RESUME reaches the upstream port.
  void on_event() override;

  // The switch's shared buffer: charged with the bytes held here (outside headroom); the dynamic XOFF
  // threshold comes from it. nullptr: none (dynamic mode then behaves as the static one).
  void set_shared_buffer(SharedBuffer* shared) { shared_ = shared; }
  // The upstream port is in another partition: PAUSE/RESUME go to `remote` (nullptr: scheduled here).
  void set_remote_upstream(PauseSink* remote) { remote_upstream_ = remote; }
  // Two priorities: count only data frames (control frames are not in the lossless class).
  void set_lossless_data_only(bool on) { data_only_ = on; }
  // The XOFF threshold now: xoff_bytes, or alpha x free shared bytes in dynamic mode.
  uint64_t xoff_threshold_bytes() const;

  uint64_t held_bytes() const { return held_bytes_; }
  uint64_t headroom_held_bytes() const { return headroom_held_; }
  bool pausing() const { return pausing_; }  // the last control frame sent was a PAUSE
  uint64_t headroom_bytes() const { return headroom_bytes_; }
  const PfcIngressStats& stats() const { return stats_; }
  OutputQueue* upstream() const { return upstream_; }

 private:
  void send_control(bool pause);
  bool dynamic() const { return pfc_.enabled && pfc_.dynamic && shared_ != nullptr; }
  void receive_dynamic(Packet* pkt);
  void depart_dynamic(const Packet* pkt);

  struct Control {
    TimePs arrive_ps;
    bool pause;
  };
  Simulation& sim_;
  PacketPool& pool_;
  PacketSink* switch_;
  OutputQueue* upstream_;
  PauseSink* remote_upstream_ = nullptr;
  TimePs delay_ps_;
  PfcConfig pfc_;
  uint64_t headroom_bytes_ = 0;
  uint64_t held_bytes_ = 0;     // every byte held (shared + headroom)
  uint64_t headroom_held_ = 0;  // dynamic mode: the part in headroom
  SharedBuffer* shared_ = nullptr;
  bool data_only_ = false;
  bool pausing_ = false;
  // Control frames on the link, oldest first; one pending event for the head (as Link does).
  std::deque<Control> in_flight_;
  PfcIngressStats stats_;
};

}  // namespace megascale::sim
