// What the project's YAML loaders (congestion, trainer, sim scenarios and replays, topology fabrics)
// need for their error messages: a node's line, whether a scalar was written plain, what kind of node
// was found, text from the file made safe for a one-line message, and a file's errors listed in file
// order. Header-only; include it only from code that links yaml-cpp.
//
//   if (!is_plain_scalar(node)) return error(at_line(source, line_of(node)) + ": ...");
//   msg += "'" + printable(node.Scalar()) + "'";
//   errors.push_back({line_of(node), "expected a mapping, got " + std::string(node_kind(node))});
//   return make_error(in_file_order(std::move(errors), source));
//   if (auto dups = duplicate_keys(root); !dups.empty()) return make_error(in_file_order(dups, source));
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
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

// Every key written twice in one mapping anywhere under `root`, as "duplicate key 'a.b' (first on line
// N)" at the second one's line: yaml-cpp keeps both and a lookup silently takes the first, so a user's
// later value would be ignored. Key paths join mapping keys with '.' and list items as [i], below
// `prefix`. Linear in the size of the text: a hash per mapping, no recursion on deep input, and a node
// that aliases reach many times (`*a`, even inside its own anchor) is walked once.
inline std::vector<ParseError> duplicate_keys(const YAML::Node& root, const std::string& prefix = "") {
  std::vector<ParseError> errors;
  std::vector<std::pair<YAML::Node, std::string>> todo{{root, prefix}};
  std::unordered_set<int> walked;  // the text positions of the mappings and lists seen
  auto join = [](const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  };
  while (!todo.empty()) {
    auto [node, path] = std::move(todo.back());
    todo.pop_back();
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (!walked.insert(node.Mark().pos).second) continue;
    if (node.IsSequence()) {
      size_t i = 0;
      for (const auto& item : node) todo.emplace_back(item, path + "[" + std::to_string(i++) + "]");
      continue;
    }
    std::unordered_map<std::string, int> first_line;
    for (const auto& pair : node) {
      const YAML::Node key = pair.first;  // a copy: yaml-cpp's iterators hand out temporaries
      if (!key.IsScalar()) continue;      // a mapping or list as a key: each loader refuses it itself
      if (auto [it, fresh] = first_line.emplace(key.Scalar(), line_of(key)); !fresh) {
        errors.push_back({line_of(key), "duplicate key '" + join(path, printable(key.Scalar())) +
                                            "' (first on line " + std::to_string(it->second) + ")"});
        continue;
      }
      todo.emplace_back(pair.second, join(path, key.Scalar()));
    }
  }
  return errors;
}

}  // namespace megascale::yaml
