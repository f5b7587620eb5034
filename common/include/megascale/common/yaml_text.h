// What the project's YAML loaders (congestion, trainer, sim scenarios and replays, topology fabrics)
// need for their error messages: a node's line, whether a scalar was written plain, and text from the
// file made safe for a one-line message. Header-only; include it only from code that links yaml-cpp.
//
//   if (!is_plain_scalar(node)) return error(source + ":" + std::to_string(line_of(node)) + ": ...");
//   msg += "'" + printable(node.Scalar()) + "'";
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace megascale::yaml {

// 1-based line of `node` in its file; 0 when the node has no position (a null mark's line is -1).
inline int line_of(const YAML::Node& node) {
  return node.Mark().line + 1;
}

// Quoted scalars are strings in YAML ("25" is text, 25 a number); only plain scalars are numbers or
// booleans.
inline bool is_plain_scalar(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() != "!";
}

// Text from the file made safe for a one-line message: control characters escaped (\n, \t, \xNN), long
// text cut short after 60 characters with "...".
inline std::string printable(std::string_view text) {
  constexpr size_t kMaxChars = 60;
  std::string out;
  for (char c : text.substr(0, kMaxChars)) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += hex;
    } else {
      out += c;
    }
  }
  if (text.size() > kMaxChars) out += "...";
  return out;
}

}  // namespace megascale::yaml
