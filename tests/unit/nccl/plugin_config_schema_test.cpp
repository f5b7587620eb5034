// The plugin's knob table (collectives/nccl/src/config_schema.h) against what it describes:
// docs/CONFIG.md's plugin tables are the table rendered, every MEGASCALE_* name the loader reads or the
// plugin's sources spell is a row of it, and each row's stated default is what an empty environment gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../support/source_path.h"
#include "config_schema.h"

namespace megascale::nccl {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool is_known(const std::vector<std::string>& known, const std::string& name) {
  if (std::binary_search(known.begin(), known.end(), name)) return true;
  // "MEGASCALE_FAULT_" + suffix in code: a prefix of a family's members.
  return name.back() == '_' &&
         std::any_of(known.begin(), known.end(), [&](const std::string& k) { return k.rfind(name, 0) == 0; });
}

bool is_other_programs(const std::string& name) {
  for (std::string_view other : schema::other_programs_names()) {
    if (other.back() == '_' ? name.rfind(other, 0) == 0 : name == other) return true;
  }
  return false;
}

TEST(PluginConfigSchema, ConfigMdHoldsTheRenderedTable) {
  const std::string doc = read_text(megascale::test::source_path("docs/CONFIG.md"));
  ASSERT_FALSE(doc.empty());
  auto expected = schema::splice_generated(doc, schema::render_markdown());
  ASSERT_TRUE(expected) << expected.error().message;
  if (*expected == doc) return;
  // The first line that differs, as a hint.
  std::istringstream a(doc), b(*expected);
  std::string la, lb;
  int line = 0;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    ++line;
    if (!more_a && !more_b) break;
    if (la != lb || more_a != more_b) break;
  }
  ADD_FAILURE() << "docs/CONFIG.md's plugin tables differ from the schema (collectives/nccl/src/"
                   "config_schema.cpp) at line "
                << line << ":\n  file:   " << la << "\n  schema: " << lb
                << "\nRegenerate them: build/collectives/nccl/megascale_config_doc --write docs/CONFIG.md";
}

TEST(PluginConfigSchema, EveryNameTheLoaderReadsIsARow) {
  const std::vector<std::string> known = schema::known_names();
  ASSERT_GT(known.size(), 80u);  // the rows and the preset's and the fault injection's families
  const std::string dir = ::testing::TempDir();
  // Environments that take the readers down every path that asks for a variable.
  const std::vector<std::map<std::string, std::string>> environments = {
      {},
      {{"MEGASCALE_SOURCE_PORTS", "1,2,3,4"}},
      {{"MEGASCALE_LAYOUT", "wires=2,io_threads=1"},
       {"MEGASCALE_GDR_COPY", "emulate"},
       {"MEGASCALE_FAULT_COPY_STALL", "3"},
       {"MEGASCALE_FAULT_DROP", "0.1"},
       {"MEGASCALE_CC", "swift"},
       {"MEGASCALE_CC_SWIFT_BETA", "0.5"},
       {"MEGASCALE_TRACE_FILE", dir + "/t-%p.json"},
       {"MEGASCALE_LATE_ACK_WARN_S", "0"},
       {"MEGASCALE_TC", "96"}},
  };
  std::set<std::string> read;
  for (const auto& vars : environments) {
    auto c = load_plugin_config([&](const char* name) -> const char* {
      read.insert(name);
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(c) << c.error().message;
  }
  size_t megascale = 0;
  for (const std::string& name : read) {
    if (name.rfind("MEGASCALE_", 0) != 0) continue;
    ++megascale;
    EXPECT_TRUE(std::binary_search(known.begin(), known.end(), name))
        << name << " is read by the plugin but is not a row of collectives/nccl/src/config_schema.cpp";
  }
  EXPECT_GT(megascale, 80u);
}

// Every "MEGASCALE_..." spelled in a string literal of the plugin's sources names a row (or another
// program's variable): a knob read outside the table would show up here.
TEST(PluginConfigSchema, EveryNameInThePluginSourcesIsARow) {
  const std::vector<std::string> known = schema::known_names();
  const std::filesystem::path src = megascale::test::source_path("collectives/nccl/src");
  size_t files = 0, names = 0;
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    ++files;
    const std::string text = read_text(entry.path());
    // The string literals, outside comments: a small lexer of quotes, escapes and // comments.
    bool in_string = false, in_line_comment = false, in_block_comment = false;
    std::string literal;
    for (size_t i = 0; i < text.size(); ++i) {
      const char ch = text[i];
      const char next = i + 1 < text.size() ? text[i + 1] : '\0';
      if (in_line_comment) {
        in_line_comment = ch != '\n';
      } else if (in_block_comment) {
        if (ch == '*' && next == '/') {
          in_block_comment = false;
          ++i;
        }
      } else if (in_string) {
        if (ch == '\\') {
          literal += next;
          ++i;
        } else if (ch == '"') {
          in_string = false;
          for (size_t at = literal.find("MEGASCALE_"); at != std::string::npos;
               at = literal.find("MEGASCALE_", at + 1)) {
            size_t end = at + 10;
            while (end < literal.size() &&
                   ((literal[end] >= 'A' && literal[end] <= 'Z') ||
                    (literal[end] >= '0' && literal[end] <= '9') || literal[end] == '_')) {
              ++end;
            }
            const std::string name = literal.substr(at, end - at);
            ++names;
            EXPECT_TRUE(is_known(known, name) || is_other_programs(name))
                << entry.path().filename().string() << ": \"" << name
                << "\" is not a row of collectives/nccl/src/config_schema.cpp";
          }
        } else {
          literal += ch;
        }
      } else if (ch == '/' && next == '/') {
        in_line_comment = true;
      } else if (ch == '/' && next == '*') {
        in_block_comment = true;
      } else if (ch == '\'' && i + 2 < text.size()) {
        i += next == '\\' ? 3 : 2;  // a character literal such as '"' or '\''
      } else if (ch == '"') {
        in_string = true;
        literal.clear();
      }
    }
  }
  EXPECT_GT(files, 20u);
  EXPECT_GT(names, 30u);
}

// The docs' Default column is what the loader gives where it is a plain number, and every row's text is
// one sentence.
TEST(PluginConfigSchema, RowsStateTheirDefaultsInOneSentence) {
  auto c = load_plugin_config([](const char*) -> const char* { return nullptr; });
  ASSERT_TRUE(c) << c.error().message;
  std::map<std::string, std::string> value;
  for (const Setting& s : c->settings) value[s.name] = s.value;
  size_t numeric = 0;
  for (const schema::Knob& k : schema::plugin_knobs()) {
    const std::string d(k.description);
    EXPECT_FALSE(d.empty()) << k.name;
    EXPECT_EQ(d.back(), '.') << k.name;
    for (size_t at = d.find(". "); at != std::string::npos; at = d.find(". ", at + 1)) {
      EXPECT_FALSE(at + 2 < d.size() && d[at + 2] >= 'A' && d[at + 2] <= 'Z')
          << k.name << ": more than one sentence";
    }
    if (k.type == schema::Type::kReplaced || k.type == schema::Type::kFamily) continue;
    ASSERT_EQ(value.count(std::string(k.name)), 1u) << k.name << " is not echoed";
    const std::string def(k.default_text);
    if (!def.empty() && def.find_first_not_of("0123456789") == std::string::npos) {
      ++numeric;
      EXPECT_EQ(value[std::string(k.name)], def) << k.name;
    }
  }
  EXPECT_GT(numeric, 10u);
}

}  // namespace
}  // namespace megascale::nccl
