// A small XML reader for NCCL topology files: elements, attributes, comments, the <?xml?> declaration
// and a DOCTYPE; text content is skipped. Enough for NCCL's own dumps (which have no text) and hand
// edits. Internal to megascale_topology_host.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::topo::host::xml {

struct Element {
  std::string name;
  int line = 0;                                                 // where the start tag opens, 1-based
  std::vector<std::pair<std::string, std::string>> attributes;  // in document order, entities decoded
  std::vector<std::unique_ptr<Element>> children;

  // The attribute's value, or nullptr when absent.
  const std::string* attribute(std::string_view key) const;
};

// The document's root element; an error names the line and what is wrong there.
Result<std::unique_ptr<Element>> parse(std::string_view text);

// Escapes &, <, >, " for an attribute value.
std::string escape(std::string_view text);

}  // namespace megascale::topo::host::xml
