// Writes the fuzz targets' seed corpora with the engine's own encoders, so that fuzzing starts from
// valid packets of every type (fuzz_packet) and from scripts that hold a real conversation
// (fuzz_handshake, script format in fuzz_handshake.cpp). The files in tests/fuzz/corpus/ are its output:
//
//   fuzz_seed_corpus tests/fuzz/corpus     # writes corpus/fuzz_packet/* and corpus/fuzz_handshake/*
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/packet.h"

namespace {

using namespace megascale::engine;
using Bytes = std::vector<uint8_t>;

bool write_file(const std::string& path, const Bytes& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  return std::fclose(f) == 0 && ok;
}

Bytes header(size_t len, const uint8_t* hdr) {
  return Bytes(hdr, hdr + len);
}

// One valid packet of each type and flavour.
std::vector<std::pair<std::string, Bytes>> packets() {
  std::vector<std::pair<std::string, Bytes>> out;
  uint8_t h[kMaxHeaderBytes];
  const uint64_t id = 0x1122334455667788ULL;

  const Bytes payload = {'m', 'e', 'g', 'a', 's', 'c', 'a', 'l', 'e', '!'};
  SegHeader seg{.seq = 5,
                .send_ts_ns = 123456789,
                .payload_len = 10,
                .payload_crc = crc32c(payload.data(), 10),
                .slot = 2,
                .tag = 7,
                .offset = 0,
                .msg_len = 10};
  Bytes data = header(encode_seg({.lane = 1, .flags = kFlagLast, .dst_conn_id = id}, seg, h), h);
  data.insert(data.end(), payload.begin(), payload.end());
  out.emplace_back("seg_data_last", data);
  // The same in protocol version 1, and in version 2 without its payload CRC (kFlagNoPayloadCrc).
  data = header(encode_seg({.version = 1, .lane = 1, .flags = kFlagLast, .dst_conn_id = id}, seg, h), h);
  data.insert(data.end(), payload.begin(), payload.end());
  out.emplace_back("seg_data_last_v1", data);
  SegHeader unchecked = seg;
  unchecked.payload_crc = 0;
  data =
      header(encode_seg({.version = 2, .lane = 1, .flags = kFlagLast | kFlagNoPayloadCrc, .dst_conn_id = id},
                        unchecked, h),
             h);
  data.insert(data.end(), payload.begin(), payload.end());
  out.emplace_back("seg_data_unchecked", data);

  seg.msg_len = 4096;
  seg.offset = 1024;
  data = header(encode_seg({.lane = 0, .flags = kFlagRetransmit, .dst_conn_id = id}, seg, h), h);
  data.insert(data.end(), payload.begin(), payload.end());
  out.emplace_back("seg_data_middle_retransmit", data);

  SegHeader empty{.seq = 6, .send_ts_ns = 1, .slot = 3, .tag = 0, .msg_len = 0};
  out.emplace_back("seg_data_zero_length",
                   header(encode_seg({.flags = kFlagLast, .dst_conn_id = id}, empty, h), h));

  SegHeader big{.seq = 7, .send_ts_ns = 2, .slot = 4, .tag = 1, .msg_len = 1 << 20};
  out.emplace_back("seg_too_large",
                   header(encode_seg({.flags = kFlagTooLarge, .dst_conn_id = id}, big, h), h));

  SegHeader credit{.seq = 1, .send_ts_ns = 3, .slot = 0, .tag = -1, .capacity_bytes = 65536};
  out.emplace_back("seg_credit", header(encode_seg({.flags = kFlagCredit, .dst_conn_id = id}, credit, h), h));

  AckHeader ack;  // (its sack array has no default member initializer: fields one by one)
  ack.cum_ack = 10;
  ack.echo_seq = 14;
  ack.echo_ts_ns = 99;
  ack.remote_delay_ns = 1500;
  ack.ce_count = 2;
  ack.echo_lane = 1;
  ack.nsack = 2;
  ack.sack[0] = {12, 13};
  ack.sack[1] = {14, 20};
  out.emplace_back("ack_two_sacks", header(encode_ack({.dst_conn_id = id}, ack, h), h));
  AckHeader plain;
  plain.cum_ack = 3;
  plain.echo_seq = 2;
  plain.echo_ts_ns = 5;
  out.emplace_back("ack_plain", header(encode_ack({.dst_conn_id = id}, plain, h), h));
  out.emplace_back("ack_keepalive_probe",
                   header(encode_ack({.flags = kFlagAckRequest, .dst_conn_id = id}, plain, h), h));

  out.emplace_back("cnp", header(encode_cnp({.dst_conn_id = id}, CnpBody{.lane = 3}, h), h));

  HandshakeBody hs{.src_conn_id = 42,
                   .lanes = 4,
                   .cc_kind = 3,
                   .mss_bytes = 4096,
                   .recv_slots = 256,
                   .window_segments = 4096};
  out.emplace_back("syn", header(encode_handshake({.type = PacketType::kSyn, .dst_conn_id = 0}, hs, h), h));
  out.emplace_back("syn_ack",
                   header(encode_handshake({.type = PacketType::kSynAck, .dst_conn_id = id}, hs, h), h));
  HandshakeBody v3 = hs;
  v3.version_min = v3.version_max = 3;
  out.emplace_back(
      "syn_ack_confirm",
      header(
          encode_handshake(
              {.version = 3, .type = PacketType::kSynAck, .flags = kFlagConfirm, .dst_conn_id = id}, v3, h),
          h));
  HandshakeBody v2 = hs;
  v2.version_min = 2;
  v2.version_max = 3;
  out.emplace_back(
      "syn_version_2_3",
      header(encode_handshake({.version = 2, .type = PacketType::kSyn, .dst_conn_id = 0}, v2, h), h));

  out.emplace_back(
      "fin", header(encode_fin({.dst_conn_id = id}, FinBody{.final_seq = 77, .unfinished_sends = 1}, h), h));
  out.emplace_back(
      "fin_reply",
      header(encode_fin({.flags = kFlagFinReply, .dst_conn_id = id}, FinBody{.final_seq = 9}, h), h));

  const char text[] = "version mismatch: acceptor speaks 1..1, initiator speaks 2..3";
  RstBody rst{
      .reason = RstReason::kVersionMismatch, .ref_conn_id = 42, .text_len = sizeof text - 1, .text = text};
  out.emplace_back("rst_version", header(encode_rst({.dst_conn_id = 42}, rst, h), h));
  RstBody unknown{.reason = RstReason::kUnknownConnection, .ref_conn_id = id};
  out.emplace_back("rst_unknown_no_text", header(encode_rst({.dst_conn_id = 0}, unknown, h), h));
  return out;
}

// fuzz_handshake script helpers (ops: 0 INJECT, 1 EXCHANGE, 2 TIME, 3 APP).
void exchange(Bytes& s, uint8_t rounds, uint8_t offset = 0, uint8_t x = 0, uint8_t mflags = 0) {
  s.insert(s.end(), {1, rounds, offset, x, mflags});
}
void tick(Bytes& s, uint16_t ticks) {
  s.insert(s.end(), {2, static_cast<uint8_t>(ticks), static_cast<uint8_t>(ticks >> 8)});
}
// what: 0 send, 1 recv, 2 close, 3 release, 4 test; on C when on_c.
void app(Bytes& s, uint8_t what, bool on_c, uint16_t size, int8_t tag) {
  s.insert(s.end(), {3, static_cast<uint8_t>(what | (on_c ? 8 : 0)), static_cast<uint8_t>(size),
                     static_cast<uint8_t>(size >> 8), static_cast<uint8_t>(tag)});
}
void inject(Bytes& s, uint8_t flags, const Bytes& d) {
  s.insert(s.end(), {0, flags, static_cast<uint8_t>(d.size()), static_cast<uint8_t>(d.size() >> 8)});
  s.insert(s.end(), d.begin(), d.end());
}

std::vector<std::pair<std::string, Bytes>> scripts() {
  std::vector<std::pair<std::string, Bytes>> out;
  Bytes s;
  // Handshake, then C sends 3000 bytes (3 segments) to a receive posted on L, both ways.
  exchange(s, 4);
  app(s, 1, false, 4000, -1);
  app(s, 0, true, 3000, 5);
  exchange(s, 8);
  app(s, 1, true, 100, 1);
  app(s, 0, false, 100, 1);
  exchange(s, 8);
  out.emplace_back("transfer_both_ways", s);

  // The same with the first data packet lost: recovery by timeout.
  s.clear();
  exchange(s, 4);
  app(s, 1, false, 4000, -1);
  app(s, 0, true, 3000, 5);
  exchange(s, 1);
  exchange(s, 1, 0, 0, 4);
  tick(s, 100);
  exchange(s, 8);
  out.emplace_back("transfer_loss_rto", s);

  // A corrupted packet re-sealed: the protocol sees damaged content with valid checksums.
  s.clear();
  exchange(s, 4);
  app(s, 1, false, 4000, -1);
  app(s, 0, true, 3000, 5);
  exchange(s, 2, 50, 0xFF, 1 | 2);
  exchange(s, 8);
  out.emplace_back("transfer_corrupt_resealed", s);

  // Clean close from C after a transfer; then release on L.
  s.clear();
  exchange(s, 4);
  app(s, 1, false, 10, 0);
  app(s, 0, true, 10, 0);
  exchange(s, 4);
  app(s, 2, true, 0, 0);
  exchange(s, 8);
  app(s, 3, false, 0, 0);
  exchange(s, 4);
  out.emplace_back("close_then_release", s);

  // Nobody answers: the pending connect times out (connect_timeout 50 ms = 5000 ticks).
  s.clear();
  for (int i = 0; i < 12; ++i) tick(s, 1000);
  out.emplace_back("connect_times_out", s);

  // Valid packets of every type, injected into both endpoints from the real peer and a stranger, with
  // and without fix-ups (dst_conn_id := a live connection).
  s.clear();
  exchange(s, 4);
  uint8_t flags = 0;
  for (const auto& [name, pkt] : packets()) {
    inject(s, flags, pkt);
    inject(s, static_cast<uint8_t>(4 | 8 | (flags & 1)), pkt);
    flags = static_cast<uint8_t>((flags + 1) % 4);
  }
  exchange(s, 4);
  out.emplace_back("inject_every_type", s);

  // Duplicated handshake packets and a duplicated data segment.
  s.clear();
  exchange(s, 1, 0, 0, 8);
  exchange(s, 1, 0, 0, 8);
  app(s, 1, false, 2048, 3);
  app(s, 0, true, 2048, 3);
  exchange(s, 1, 0, 0, 8);
  exchange(s, 8);
  out.emplace_back("duplicates", s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const std::string dirs[] = {root, root + "/fuzz_packet", root + "/fuzz_handshake"};
  for (const std::string& d : dirs) mkdir(d.c_str(), 0755);
  int written = 0;
  for (const auto& [name, bytes] : packets()) written += write_file(root + "/fuzz_packet/" + name, bytes);
  for (const auto& [name, bytes] : scripts()) written += write_file(root + "/fuzz_handshake/" + name, bytes);
  std::printf("wrote %d seed files under %s\n", written, root.c_str());
  return written == static_cast<int>(packets().size() + scripts().size()) ? 0 : 1;
}
