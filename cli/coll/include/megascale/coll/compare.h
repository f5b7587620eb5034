// --compare A B: the same sweep under two settings (nets, or any NCCL or megascale variables), run as
// whole jobs alternately, round by round (A then B, `rounds` times), and one table of both with their
// ratio, so that two nets or two tunings are compared under the same host conditions.
//
//   auto a = parse_setting("Socket");                                     // NCCL_NET=Socket
//   auto b = parse_setting("NCCL_NET=Socket,NCCL_SOCKET_NTHREADS=4");
//   std::vector<std::string> child = argv_for_setting(argv, "/tmp/a.jsonl");  // without --compare
//   std::string table = compare_table("Socket", rows_a, "MegaScale", rows_b); // JSON lines of each
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::coll {

using Setting = std::vector<std::pair<std::string, std::string>>;  // variables to set

// "NET" is NCCL_NET=NET; "VAR=VALUE[,VAR=VALUE...]" sets each. Refused, quoting it: an empty setting,
// an empty variable name, a name that is not [A-Za-z_][A-Za-z0-9_]*.
Result<Setting> parse_setting(const std::string& text);

// The job's arguments for one setting's run: `argv` without --compare and its two settings, --rounds
// and its value, and any --json-lines, then --json-lines `json_lines_path` (where rank 0 writes rows).
std::vector<std::string> argv_for_setting(const std::vector<std::string>& argv,
                                          const std::string& json_lines_path);

// Both settings' rows (json_line objects, every round's) matched by collective, size, type, op and
// root: per row the median out-of-place busbw and time of each over its rounds, and b / a of the
// busbw medians (of the times for sizes below 64 KiB, where time is the figure: a / b there, so that
// above 1 is b better in both). Rows missing from either side are listed as such.
std::string compare_table(const std::string& a_name, const std::vector<nlohmann::json>& a_rows,
                          const std::string& b_name, const std::vector<nlohmann::json>& b_rows);

}  // namespace megascale::coll
