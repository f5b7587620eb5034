// What the project's YAML loaders (congestion, trainer, sim scenarios and replays, topology fabrics)
// need for their error messages: a node's line, whether a scalar was written plain, what kind of node
// was found, text from the file made safe for a one-line message, and a file's errors listed in file
// order. Header-only; include it only from code that links yaml-cpp.
//
//   if (!is_plain_scalar(node)) return error(at_line(source, line_of(node)) + ": ...");
//   msg += "'" + printable(node.Scalar()) + "'";
//   errors.push_back({line_of(node), "expected a mapping, got " + std::string(node_kind(node))});
//   return make_error(in_file_order(std::move(errors), source));
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

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

// What `node` is, in the words of messages ("got a mapping"): "a mapping", "a list", "nothing" (null),
// otherwise "a scalar". Loaders show a scalar's own text instead, each in its own way.
inline std::string_view node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    default:
      return "a scalar";
  }
}

// "source:line", or just "source" when `line` is 0 (no position).
inline std::string at_line(std::string_view source, int line) {
  return line > 0 ? std::string(source) + ":" + std::to_string(line) : std::string(source);
}

// One error found in a file, with the 1-based line it points at (0 = none), so that a loader can report
// every error it found, in file order (in_file_order).
struct ParseError {
  int line = 0;
  std::string text;
};

// The errors one per line, each as "source:line: text", sorted by line (stable: errors on one line keep
// the order they were found in); errors without a line go last.
inline std::string in_file_order(std::vector<ParseError> errors, std::string_view source) {
  auto order = [](const ParseError& e) { return e.line == 0 ? std::numeric_limits<int>::max() : e.line; };
  std::stable_sort(errors.begin(), errors.end(),
                   [&](const ParseError& a, const ParseError& b) { return order(a) < order(b); });
  std::string message;
  for (const ParseError& e : errors) {
    if (!message.empty()) message += '\n';
    message += at_line(source, e.line) + ": " + e.text;
  }
  return message;
}

}  // namespace megascale::yaml
