// The conformance cases. Each returns an error naming what the plugin did wrong; an error whose
// message starts with "SKIP: " means the plugin lacks what the case needs (reported, not failed).
#pragma once

#include "harness.h"

namespace megascale::nccl::conformance {

using CaseFn = Status (*)(Env& env);

struct CaseInfo {
  const char* name;
  const char* description;
  CaseFn fn;
  // The case takes its peer away and waits for the plugin's error: it runs with Options::retry_budget_s.
  // The others keep the plugin's own budget, so that a starved host (a sanitizer build beside other load)
  // does not read as a dead peer.
  bool takes_peer_away = false;
};

const std::vector<CaseInfo>& all_cases();

Status case_load(Env& env);
Status case_connect_accept_one_thread(Env& env);
Status case_steps_in_flight(Env& env);
Status case_message_sizes(Env& env);
Status case_receive_larger_than_send(Env& env);
Status case_zero_byte(Env& env);
Status case_grouped_receive(Env& env);
Status case_max_requests(Env& env);
Status case_iflush(Env& env);
Status case_optional_recv_completion(Env& env);
Status case_many_comms_threads(Env& env);
Status case_close_with_requests(Env& env);
Status case_peer_killed_while_sending(Env& env);
Status case_peer_killed_while_receiving(Env& env);
Status case_peer_stopped_while_sending(Env& env);
Status case_peer_stopped_while_receiving(Env& env);
Status case_latency(Env& env);
Status case_step_time(Env& env);
Status case_steps_both_ways(Env& env);
Status case_throughput(Env& env);

inline Error skip(const std::string& why) {
  return make_error("SKIP: " + why);
}

}  // namespace megascale::nccl::conformance
