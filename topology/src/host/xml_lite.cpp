// The small XML reader (see xml_lite.h). One pass, an explicit stack (no recursion, so a deeply nested
// file cannot overflow the C++ stack), every error with its line number.
#include "xml_lite.h"

#include <fmt/format.h>

#include <charconv>

namespace megascale::topo::host::xml {
namespace {

constexpr size_t kMaxDepth = 256;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.' || c == ':';
}

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<std::unique_ptr<Element>> run() {
    std::unique_ptr<Element> root;
    std::vector<Element*> open;
    while (true) {
      const size_t lt = text_.find('<', pos_);
      // Text between tags is ignored, but nothing may follow the root or precede it except space.
      for (size_t i = pos_; i < (lt == std::string_view::npos ? text_.size() : lt); ++i) {
        if (!space(text_[i]) && open.empty()) return fail_at(i, "text outside the root element");
      }
      advance_to(lt == std::string_view::npos ? text_.size() : lt);
      if (lt == std::string_view::npos) break;
      if (starts("<?")) {
        if (!skip_past("?>")) return fail("unterminated <? ... ?>");
      } else if (starts("<!--")) {
        if (!skip_past("-->")) return fail("unterminated comment");
      } else if (starts("<!")) {
        if (!skip_past(">")) return fail("unterminated <! ... >");
      } else if (starts("</")) {
        advance_to(pos_ + 2);
        std::string name = read_name();
        skip_space();
        if (!starts(">")) return fail(fmt::format("expected '>' to close </{}>", name));
        advance_to(pos_ + 1);
        if (open.empty()) return fail(fmt::format("</{}> closes nothing", name));
        if (open.back()->name != name) {
          return fail(
              fmt::format("</{}> closes <{}> opened on line {}", name, open.back()->name, open.back()->line));
        }
        open.pop_back();
      } else {
        if (open.empty() && root) return fail("a second root element");
        auto element = std::make_unique<Element>();
        element->line = line_;
        advance_to(pos_ + 1);
        element->name = read_name();
        if (element->name.empty()) return fail("'<' not followed by an element name");
        bool self_closing = false;
        while (true) {
          skip_space();
          if (pos_ >= text_.size())
            return fail_line(element->line, fmt::format("unterminated <{}>", element->name));
          if (starts("/>")) {
            self_closing = true;
            advance_to(pos_ + 2);
            break;
          }
          if (starts(">")) {
            advance_to(pos_ + 1);
            break;
          }
          std::string key = read_name();
          if (key.empty()) return fail(fmt::format("unexpected '{}' in <{}>", text_[pos_], element->name));
          skip_space();
          if (!starts("=")) return fail(fmt::format("attribute '{}' of <{}> has no '='", key, element->name));
          advance_to(pos_ + 1);
          skip_space();
          if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\'')) {
            return fail(fmt::format("attribute '{}' of <{}>: value not quoted", key, element->name));
          }
          const char quote = text_[pos_];
          const size_t end = text_.find(quote, pos_ + 1);
          if (end == std::string_view::npos)
            return fail(fmt::format("attribute '{}': unterminated value", key));
          auto value = unescape(text_.substr(pos_ + 1, end - pos_ - 1));
          if (!value)
            return fail(fmt::format("attribute '{}' of <{}>: {}", key, element->name, value.error().message));
          if (element->attribute(key) != nullptr) {
            return fail(fmt::format("attribute '{}' repeated in <{}>", key, element->name));
          }
          element->attributes.emplace_back(std::move(key), std::move(*value));
          advance_to(end + 1);
        }
        Element* raw = element.get();
        if (open.empty()) {
          root = std::move(element);
        } else {
          open.back()->children.push_back(std::move(element));
        }
        if (!self_closing) {
          if (open.size() >= kMaxDepth) return fail(fmt::format("elements nested deeper than {}", kMaxDepth));
          open.push_back(raw);
        }
      }
    }
    if (!open.empty()) {
      return fail(
          fmt::format("end of file inside <{}> opened on line {}", open.back()->name, open.back()->line));
    }
    if (!root) return fail("no element (empty document)");
    return root;
  }

  static Result<std::string> unescape(std::string_view raw) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '<') return make_error("'<' in an attribute value");
      if (raw[i] != '&') {
        out += raw[i];
        continue;
      }
      const size_t semi = raw.find(';', i);
      if (semi == std::string_view::npos) return make_error("'&' without ';'");
      std::string_view entity = raw.substr(i + 1, semi - i - 1);
      if (entity == "amp")
        out += '&';
      else if (entity == "lt")
        out += '<';
      else if (entity == "gt")
        out += '>';
      else if (entity == "quot")
        out += '"';
      else if (entity == "apos")
        out += '\'';
      else if (entity.size() > 1 && entity[0] == '#') {
        unsigned code = 0;
        const bool hex = entity[1] == 'x' || entity[1] == 'X';
        std::string_view digits = entity.substr(hex ? 2 : 1);
        auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), code, hex ? 16 : 10);
        if (ec != std::errc() || ptr != digits.data() + digits.size() || code == 0 || code > 0x7f) {
          return make_error(fmt::format("unsupported character reference &{};", entity));
        }
        out += static_cast<char>(code);
      } else {
        return make_error(fmt::format("unknown entity &{};", entity));
      }
      i = semi;
    }
    return out;
  }

 private:
  bool starts(std::string_view s) const { return text_.substr(pos_, s.size()) == s; }

  void advance_to(size_t to) {
    for (; pos_ < to && pos_ < text_.size(); ++pos_) {
      if (text_[pos_] == '\n') ++line_;
    }
  }

  bool skip_past(std::string_view end) {
    const size_t at = text_.find(end, pos_);
    if (at == std::string_view::npos) return false;
    advance_to(at + end.size());
    return true;
  }

  void skip_space() {
    while (pos_ < text_.size() && space(text_[pos_])) advance_to(pos_ + 1);
  }

  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  Error fail(const std::string& what) const { return fail_line(line_, what); }
  Error fail_line(int line, const std::string& what) const {
    return make_error(fmt::format("line {}: {}", line, what));
  }
  Error fail_at(size_t at, const std::string& what) {
    advance_to(at);
    return fail(what);
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

const std::string* Element::attribute(std::string_view key) const {
  for (const auto& [k, v] : attributes) {
    if (k == key) return &v;
  }
  return nullptr;
}

Result<std::unique_ptr<Element>> parse(std::string_view text) {
  return Parser(text).run();
}

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace megascale::topo::host::xml
