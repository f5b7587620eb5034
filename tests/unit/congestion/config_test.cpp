// Tests of the preset loader (config.h): shipped presets, key -> field mapping with unit conversion,
// every class of bad input and its message, files and built-in names, the knob table in the docs, and
// that no input makes the parser throw. Needs no controller: make_controller is tested in factory_test.
#include "megascale/congestion/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace megascale::cc {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = MEGASCALE_SOURCE_DIR;
constexpr const char* kBad = "configs/cc/bad.yaml";

// Every field of CcConfig but `name`, read as a double. Listed by hand: a field added to params.h must be
// added here, to the schema and to the docs table.
struct FieldRef {
  const char* name;
  double (*get)(const CcConfig&);
};
FieldRef make_field(const char* name, double (*get)(const CcConfig&)) {
  return FieldRef{name, get};
}
#define MEGASCALE_FIELD(path) make_field(#path, [](const CcConfig& c) { return static_cast<double>(c.path); })
#define MEGASCALE_SWIFT_FIELDS(s)                                                                       \
  MEGASCALE_FIELD(s.ai_packets), MEGASCALE_FIELD(s.beta), MEGASCALE_FIELD(s.max_mdf),                   \
      MEGASCALE_FIELD(s.base_target_ns), MEGASCALE_FIELD(s.per_hop_ns), MEGASCALE_FIELD(s.fs_range_ns), \
      MEGASCALE_FIELD(s.fs_min_cwnd_packets), MEGASCALE_FIELD(s.fs_max_cwnd_packets),                   \
      MEGASCALE_FIELD(s.retx_reset_threshold), MEGASCALE_FIELD(s.min_cwnd_packets),                     \
      MEGASCALE_FIELD(s.max_cwnd_packets), MEGASCALE_FIELD(s.init_cwnd_packets),                        \
      MEGASCALE_FIELD(s.use_fabric_delay)
const std::vector<FieldRef> kFields = {
    MEGASCALE_FIELD(kind),
    MEGASCALE_FIELD(flow.line_rate_bps),
    MEGASCALE_FIELD(flow.mss_bytes),
    MEGASCALE_FIELD(flow.base_rtt_ns),
    MEGASCALE_FIELD(flow.hops),
    MEGASCALE_SWIFT_FIELDS(swift),
    MEGASCALE_FIELD(dcqcn.g),
    MEGASCALE_FIELD(dcqcn.alpha_init),
    MEGASCALE_FIELD(dcqcn.alpha_update_ns),
    MEGASCALE_FIELD(dcqcn.rate_increase_timer_ns),
    MEGASCALE_FIELD(dcqcn.byte_counter_bytes),
    MEGASCALE_FIELD(dcqcn.fast_recovery_steps),
    MEGASCALE_FIELD(dcqcn.rate_ai_bps),
    MEGASCALE_FIELD(dcqcn.rate_hai_bps),
    MEGASCALE_FIELD(dcqcn.min_rate_bps),
    MEGASCALE_FIELD(dcqcn.min_decrease_interval_ns),
    MEGASCALE_FIELD(dcqcn.max_decrease_fraction),
    MEGASCALE_FIELD(dcqcn.cnp_interval_ns),
    MEGASCALE_FIELD(dcqcn.window_cap_bdp),
    MEGASCALE_FIELD(hybrid.g),
    MEGASCALE_FIELD(hybrid.ecn_min_cut),
    MEGASCALE_SWIFT_FIELDS(hybrid.swift),
    MEGASCALE_FIELD(fixed.window_packets),
    MEGASCALE_FIELD(rto.initial_rto_ns),
    MEGASCALE_FIELD(rto.min_rto_ns),
    MEGASCALE_FIELD(rto.max_rto_ns),
    MEGASCALE_FIELD(rto.first_jitter),
    MEGASCALE_FIELD(rto.rttvar_k),
    MEGASCALE_FIELD(rto.retry_budget_ns),
    MEGASCALE_FIELD(rto.max_retries),
    MEGASCALE_FIELD(pacer.burst_bytes),
};

// Names of the fields in which `a` and `b` differ.
std::set<std::string> differing_fields(const CcConfig& a, const CcConfig& b) {
  std::set<std::string> out;
  for (const FieldRef& f : kFields) {
    if (f.get(a) != f.get(b)) out.insert(f.name);
  }
  return out;
}

double field_value(const CcConfig& c, const std::string& name) {
  for (const FieldRef& f : kFields) {
    if (name == f.name) return f.get(c);
  }
  ADD_FAILURE() << "no field " << name;
  return 0;
}

// One YAML key, a value different from its default, the field it must land in and the field's value
// after unit conversion.
struct KeyCase {
  std::string key;
  std::string yaml_value;
  std::string field;
  double field_value;
};

std::vector<KeyCase> swift_key_cases(const std::string& at, const std::string& field_at, double k) {
  // `k` makes hybrid.swift's values differ from swift's, so a mix-up between the two is caught.
  return {
      {at + ".ai_packets", std::to_string(2 * k), field_at + ".ai_packets", 2 * k},
      {at + ".beta", std::to_string(0.25 * k), field_at + ".beta", 0.25 * k},
      {at + ".max_mdf", std::to_string(0.125 * k), field_at + ".max_mdf", 0.125 * k},
      {at + ".base_target_us", std::to_string(15.5 * k), field_at + ".base_target_ns", 15'500 * k},
      {at + ".per_hop_us", std::to_string(1.25 * k), field_at + ".per_hop_ns", 1'250 * k},
      {at + ".fs_range_us", std::to_string(60 * k), field_at + ".fs_range_ns", 60'000 * k},
      {at + ".fs_min_cwnd_packets", std::to_string(0.5 * k), field_at + ".fs_min_cwnd_packets", 0.5 * k},
      {at + ".fs_max_cwnd_packets", std::to_string(40 * k), field_at + ".fs_max_cwnd_packets", 40 * k},
      {at + ".retx_reset_threshold", std::to_string(3 * static_cast<int>(k)),
       field_at + ".retx_reset_threshold", 3 * k},
      {at + ".min_cwnd_packets", std::to_string(0.01 * k), field_at + ".min_cwnd_packets", 0.01 * k},
      {at + ".max_cwnd_packets", std::to_string(400 * k), field_at + ".max_cwnd_packets", 400 * k},
      {at + ".init_cwnd_packets", std::to_string(4 * k), field_at + ".init_cwnd_packets", 4 * k},
      {at + ".use_fabric_delay", "false", field_at + ".use_fabric_delay", 0},
  };
}

std::vector<KeyCase> every_key_case() {
  std::vector<KeyCase> cases = {
      {"controller", "swift", "kind", static_cast<double>(ControllerKind::kSwift)},
      {"flow.line_rate_gbps", "25", "flow.line_rate_bps", 25e9},
      {"flow.mss_bytes", "9000", "flow.mss_bytes", 9000},
      {"flow.base_rtt_us", "2.5", "flow.base_rtt_ns", 2500},
      {"flow.hops", "3", "flow.hops", 3},
      {"dcqcn.g", "0.125", "dcqcn.g", 0.125},
      {"dcqcn.alpha_init", "0.5", "dcqcn.alpha_init", 0.5},
      {"dcqcn.alpha_update_us", "2", "dcqcn.alpha_update_ns", 2000},
      {"dcqcn.rate_increase_timer_us", "100", "dcqcn.rate_increase_timer_ns", 100'000},
      {"dcqcn.byte_counter_bytes", "1e6", "dcqcn.byte_counter_bytes", 1e6},
      {"dcqcn.fast_recovery_steps", "2", "dcqcn.fast_recovery_steps", 2},
      {"dcqcn.rate_ai_mbps", "8", "dcqcn.rate_ai_bps", 8e6},
      {"dcqcn.rate_hai_mbps", "80", "dcqcn.rate_hai_bps", 80e6},
      {"dcqcn.min_rate_mbps", "10", "dcqcn.min_rate_bps", 10e6},
      {"dcqcn.min_decrease_interval_us", "4", "dcqcn.min_decrease_interval_ns", 4000},
      {"dcqcn.max_decrease_fraction", "0.25", "dcqcn.max_decrease_fraction", 0.25},
      {"dcqcn.cnp_interval_us", "20", "dcqcn.cnp_interval_ns", 20'000},
      {"dcqcn.window_cap_bdp", "1.5", "dcqcn.window_cap_bdp", 1.5},
      {"hybrid.g", "0.25", "hybrid.g", 0.25},
      {"hybrid.ecn_min_cut", "0.1", "hybrid.ecn_min_cut", 0.1},
      {"fixed.window_packets", "16", "fixed.window_packets", 16},
      {"rto.initial_rto_us", "500", "rto.initial_rto_ns", 500'000},
      {"rto.min_rto_us", "50", "rto.min_rto_ns", 50'000},
      {"rto.max_rto_ms", "2.5", "rto.max_rto_ns", 2'500'000},
      {"rto.first_jitter", "0.25", "rto.first_jitter", 0.25},
      {"rto.rttvar_k", "2", "rto.rttvar_k", 2},
      {"rto.retry_budget_s", "0.5", "rto.retry_budget_ns", 5e8},
      {"rto.max_retries", "8", "rto.max_retries", 8},
      {"pacer.burst_bytes", "8192", "pacer.burst_bytes", 8192},
  };
  for (auto& c : swift_key_cases("swift", "swift", 1)) cases.push_back(c);
  for (auto& c : swift_key_cases("hybrid.swift", "hybrid.swift", 2)) cases.push_back(c);
  return cases;
}

// {"a.b.c" -> "v"} -> nested block YAML. Keys sharing a prefix share the section.
std::string to_yaml(const std::vector<std::pair<std::string, std::string>>& keys) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;
  std::string out;
  for (const auto& [key, value] : keys) {
    auto dot = key.find('.');
    if (dot == std::string::npos) {
      out += key + ": " + value + "\n";
    } else {
      sections[key.substr(0, dot)].push_back({key.substr(dot + 1), value});
    }
  }
  for (const auto& [name, children] : sections) {
    out += name + ":\n";
    std::istringstream lines(to_yaml(children));
    for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every line of a multi-error message starts with the source, so each can be read on its own.
::testing::AssertionResult every_line_starts_with(const std::string& message, const std::string& source) {
  std::istringstream lines(message);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(source, 0) != 0) return ::testing::AssertionFailure() << "line lacks the source: " << line;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult mentions_all(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    if (message.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\":\n" << message;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- shipped presets ----

TEST(CcConfigPresets, EveryEmbeddedPresetParsesAndValidates) {
  const std::map<std::string, ControllerKind> expected = {{"dcqcn-nic", ControllerKind::kDcqcn},
                                                          {"dcqcn-paper", ControllerKind::kDcqcn},
                                                          {"fixed", ControllerKind::kFixedWindow},
                                                          {"hybrid", ControllerKind::kHybrid},
                                                          {"loopback", ControllerKind::kFixedWindow},
                                                          {"swift", ControllerKind::kSwift}};
  std::vector<std::string> names = builtin_cc_config_names();
  ASSERT_EQ(names.size(), expected.size());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    Result<CcConfig> cfg = builtin_cc_config(name);
    ASSERT_TRUE(cfg) << cfg.error().message;
    ASSERT_TRUE(expected.count(name));
    EXPECT_EQ(cfg->kind, expected.at(name));
    EXPECT_EQ(cfg->name, "builtin:" + name);
    Status valid = validate_cc_config(*cfg, "builtin:" + name);
    EXPECT_TRUE(valid) << valid.error().message;
  }
}

TEST(CcConfigPresets, FilesOnDiskMatchTheEmbeddedCopies) {
  std::set<std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/configs/cc")) {
    if (entry.path().extension() != ".yaml") continue;
    std::string stem = entry.path().stem().string();
    on_disk.insert(stem);
    Result<CcConfig> from_file = load_cc_config(entry.path().string());
    Result<CcConfig> builtin = builtin_cc_config(stem);
    ASSERT_TRUE(from_file) << from_file.error().message;
    ASSERT_TRUE(builtin) << builtin.error().message;
    EXPECT_EQ(from_file->name, stem);
    EXPECT_EQ(differing_fields(*from_file, *builtin), std::set<std::string>{}) << stem;
  }
  std::vector<std::string> names = builtin_cc_config_names();
  EXPECT_EQ(on_disk, std::set<std::string>(names.begin(), names.end()));
}

TEST(CcConfigPresets, HybridIsTheDefaultAndEqualsParamsDefaults) {
  Result<CcConfig> hybrid = builtin_cc_config("hybrid");
  ASSERT_TRUE(hybrid) << hybrid.error().message;
  EXPECT_EQ(differing_fields(*hybrid, CcConfig{}), std::set<std::string>{});
}

TEST(CcConfigPresets, SwiftValuesLandInNanoseconds) {
  Result<CcConfig> cfg = builtin_cc_config("swift");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const SwiftParams& s = cfg->swift;
  EXPECT_EQ(s.base_target_ns, 25'000);  // 25 us (SIGCOMM '20 T2 target)
  EXPECT_EQ(s.per_hop_ns, 3'800);       // 3.8 us
  EXPECT_EQ(s.fs_range_ns, 125'000);    // 125 us = 5 * base
  EXPECT_DOUBLE_EQ(s.min_cwnd_packets, 0.001);
  EXPECT_DOUBLE_EQ(s.fs_min_cwnd_packets, 0.1);
  EXPECT_DOUBLE_EQ(s.max_mdf, 0.5);
  EXPECT_EQ(s.retx_reset_threshold, 5u);
  EXPECT_EQ(cfg->rto.max_rto_ns, 1'000'000'000);        // 1000 ms
  EXPECT_EQ(cfg->rto.retry_budget_ns, 30'000'000'000);  // 30 s
  EXPECT_DOUBLE_EQ(cfg->flow.line_rate_bps, 100e9);
}

TEST(CcConfigPresets, DcqcnPaperValues) {
  Result<CcConfig> cfg = builtin_cc_config("dcqcn-paper");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const DcqcnParams& d = cfg->dcqcn;
  EXPECT_DOUBLE_EQ(d.g, 1.0 / 256);
  EXPECT_EQ(d.alpha_update_ns, 55'000);
  EXPECT_EQ(d.rate_increase_timer_ns, 55'000);
  EXPECT_EQ(d.byte_counter_bytes, 10'000'000u);
  EXPECT_EQ(d.fast_recovery_steps, 5u);
  EXPECT_DOUBLE_EQ(d.rate_ai_bps, 40e6);
  EXPECT_EQ(d.cnp_interval_ns, 50'000);
  EXPECT_EQ(d.min_decrease_interval_ns, 0);
}

TEST(CcConfigPresets, DcqcnNicFirmwareValuesAt100G) {
  Result<CcConfig> cfg = builtin_cc_config("dcqcn-nic");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const DcqcnParams& d = cfg->dcqcn;
  EXPECT_DOUBLE_EQ(d.g, 5.0 / 1024);  // G = 1019: alpha <- (1019/1024) alpha
  EXPECT_DOUBLE_EQ(d.alpha_init, 1023.0 / 1024);
  EXPECT_EQ(d.alpha_update_ns, 1'000);           // 1 us
  EXPECT_EQ(d.min_decrease_interval_ns, 4'000);  // 4 us
  EXPECT_EQ(d.rate_increase_timer_ns, 300'000);  // 300 us
  EXPECT_EQ(d.fast_recovery_steps, 1u);
  EXPECT_DOUBLE_EQ(d.rate_ai_bps, 20e6);    // 5 Mbps * 100G/25G
  EXPECT_DOUBLE_EQ(d.rate_hai_bps, 200e6);  // 50 Mbps * 100G/25G
  EXPECT_DOUBLE_EQ(d.max_decrease_fraction, 0.5);
  EXPECT_DOUBLE_EQ(d.min_rate_bps, 1e6);
}

TEST(CcConfigPresets, FixedWindow) {
  Result<CcConfig> cfg = builtin_cc_config("fixed");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->fixed.window_packets, 64);
}

// ---- every key lands in its own field, with its unit converted ----

TEST(CcConfigKeys, EachKeySetsExactlyItsFieldWithUnitsConverted) {
  for (const KeyCase& c : every_key_case()) {
    SCOPED_TRACE(c.key + ": " + c.yaml_value);
    std::vector<std::pair<std::string, std::string>> keys = {{c.key, c.yaml_value}};
    if (c.key != "controller") keys.push_back({"controller", "hybrid"});
    Result<CcConfig> cfg = parse_cc_config(to_yaml(keys), "test.yaml");
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(differing_fields(*cfg, CcConfig{}), std::set<std::string>{c.field});
    EXPECT_DOUBLE_EQ(field_value(*cfg, c.field), c.field_value);
  }
}

TEST(CcConfigKeys, EveryFieldHasExactlyOneKey) {
  std::multiset<std::string> fields;
  for (const KeyCase& c : every_key_case()) fields.insert(c.field);
  ASSERT_EQ(fields.size(), kFields.size());
  for (const FieldRef& f : kFields) EXPECT_EQ(fields.count(f.name), 1u) << f.name;
}

TEST(CcConfigKeys, AllKeysTogetherChangeEveryField) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const KeyCase& c : every_key_case()) keys.push_back({c.key, c.yaml_value});
  keys.push_back({"description", "\"every key away from its default\""});
  Result<CcConfig> cfg = parse_cc_config(to_yaml(keys), "all.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(differing_fields(*cfg, CcConfig{}).size(), kFields.size());
  for (const KeyCase& c : every_key_case())
    EXPECT_DOUBLE_EQ(field_value(*cfg, c.field), c.field_value) << c.key;
  EXPECT_EQ(cfg->name, "all");
}

TEST(CcConfigKeys, QuotedControllerNameAndEmptySectionAreAccepted) {
  Result<CcConfig> cfg = parse_cc_config("controller: \"dcqcn\"\nswift:\nrto: {}\n", "x.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->kind, ControllerKind::kDcqcn);
  EXPECT_EQ(differing_fields(*cfg, CcConfig{}), std::set<std::string>{"kind"});
}

TEST(CcConfigKeys, ControllerNamesRoundTrip) {
  for (ControllerKind kind : {ControllerKind::kFixedWindow, ControllerKind::kSwift, ControllerKind::kDcqcn,
                              ControllerKind::kHybrid}) {
    Result<ControllerKind> parsed = parse_controller_kind(to_string(kind));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, kind);
  }
  Result<ControllerKind> bad = parse_controller_kind("Swift");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(mentions_all(bad.error().message, {"'Swift'", "fixed, swift, dcqcn, hybrid"}));
}

// ---- bad input: every message names the file, the key path and the value ----

struct BadCase {
  const char* name;
  std::string yaml;
  std::vector<std::string> must_mention;
};

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      {"unknown_key",
       "controller: swift\nswift:\n  bsae_target_us: 25\n",
       {"bad.yaml:3:", "unknown key 'swift.bsae_target_us'", "valid keys in 'swift'", "base_target_us"}},
      {"unknown_top_key",
       "controller: swift\nswfit: {beta: 0.5}\n",
       {"bad.yaml:2:", "unknown key 'swfit'", "controller, description, flow, swift, dcqcn"}},
      {"unknown_nested_key",
       "controller: hybrid\nhybrid:\n  swift:\n    bta: 0.5\n",
       {"bad.yaml:4:", "unknown key 'hybrid.swift.bta'", "valid keys in 'hybrid.swift'", "beta"}},
      {"string_for_number",
       "controller: swift\nswift: {beta: fast}\n",
       {"bad.yaml:2:", "swift.beta", "expected a number", "'fast'"}},
      {"quoted_number", "controller: swift\nswift: {beta: \"0.8\"}\n", {"swift.beta", "string \"0.8\""}},
      {"number_with_unit",
       "controller: swift\nswift: {base_target_us: 25us}\n",
       {"swift.base_target_us", "'25us'"}},
      {"mapping_for_number", "controller: swift\nswift:\n  beta: {x: 1}\n", {"swift.beta", "a mapping"}},
      {"nan", "controller: swift\nswift: {beta: nan}\n", {"swift.beta", "finite", "'nan'"}},
      {"number_for_bool",
       "controller: swift\nswift: {use_fabric_delay: 3}\n",
       {"swift.use_fabric_delay", "true or false", "'3'"}},
      {"scalar_section",
       "controller: swift\nswift: 5\n",
       {"bad.yaml:2:", "swift: expected a mapping", "'5'"}},
      {"zero_line_rate",
       "controller: swift\nflow: {line_rate_gbps: 0}\n",
       {"bad.yaml:2:", "flow.line_rate_gbps: must be > 0, got 0"}},
      {"negative_ai_rate",
       "controller: dcqcn\ndcqcn: {rate_ai_mbps: -40}\n",
       {"dcqcn.rate_ai_mbps: must be > 0, got -40"}},
      {"negative_min_rate",
       "controller: dcqcn\ndcqcn: {min_rate_mbps: -1}\n",
       {"dcqcn.min_rate_mbps", "got -1"}},
      {"min_rate_above_line_rate",
       "controller: dcqcn\nflow: {line_rate_gbps: 10}\ndcqcn: {min_rate_mbps: 20000}\n",
       {"bad.yaml:3:", "dcqcn.min_rate_mbps", "flow.line_rate_gbps", "got 20000"}},
      {"zero_target",
       "controller: swift\nswift:\n  base_target_us: 0\n",
       {"configs/cc/bad.yaml:3: swift.base_target_us: must be > 0, got 0"}},
      {"negative_hybrid_target",
       "controller: hybrid\nhybrid: {swift: {base_target_us: -5}}\n",
       {"hybrid.swift.base_target_us", "got -5"}},
      {"zero_alpha_period",
       "controller: dcqcn\ndcqcn: {alpha_update_us: 0}\n",
       {"dcqcn.alpha_update_us", "got 0"}},
      {"max_mdf_above_one",
       "controller: swift\nswift: {max_mdf: 1.5}\n",
       {"swift.max_mdf: must be in (0, 1], got 1.5"}},
      {"zero_dcqcn_g", "controller: dcqcn\ndcqcn: {g: 0}\n", {"dcqcn.g: must be in (0, 1], got 0"}},
      {"negative_beta", "controller: swift\nswift: {beta: -0.1}\n", {"swift.beta", "got -0.1"}},
      {"jitter_one",
       "controller: swift\nrto: {first_jitter: 1}\n",
       {"rto.first_jitter: must be in [0, 1), got 1"}},
      {"zero_decrease_fraction",
       "controller: dcqcn\ndcqcn: {max_decrease_fraction: 0}\n",
       {"dcqcn.max_decrease_fraction", "got 0"}},
      {"hybrid_g_two", "controller: hybrid\nhybrid: {g: 2}\n", {"hybrid.g", "got 2"}},
      {"alpha_init_above_one",
       "controller: dcqcn\ndcqcn: {alpha_init: 1.5}\n",
       {"dcqcn.alpha_init", "got 1.5"}},
      {"ecn_min_cut_above_one",
       "controller: hybrid\nhybrid: {ecn_min_cut: 1.2}\n",
       {"hybrid.ecn_min_cut", "got 1.2"}},
      {"min_cwnd_above_max",
       "controller: swift\nswift: {min_cwnd_packets: 50, max_cwnd_packets: 10}\n",
       {"swift.min_cwnd_packets: must be <= swift.max_cwnd_packets (10), got 50"}},
      {"init_cwnd_above_max",
       "controller: swift\nswift:\n  init_cwnd_packets: 2000\n",
       {"bad.yaml:3:", "swift.init_cwnd_packets", "[0.001, 1000]", "got 2000"}},
      {"init_cwnd_below_min",
       "controller: hybrid\nhybrid: {swift: {min_cwnd_packets: 1, init_cwnd_packets: 0.5}}\n",
       {"hybrid.swift.init_cwnd_packets", "got 0.5"}},
      {"fs_min_equals_fs_max",
       "controller: swift\nswift: {fs_min_cwnd_packets: 100, fs_max_cwnd_packets: 100}\n",
       {"swift.fs_min_cwnd_packets: must be < swift.fs_max_cwnd_packets (100), got 100"}},
      {"min_rto_above_max",
       "controller: swift\nrto: {min_rto_us: 2000000, max_rto_ms: 1}\n",
       {"rto.min_rto_us", "rto.max_rto_ms", "got 2000000"}},
      {"initial_rto_below_min",
       "controller: swift\nrto: {initial_rto_us: 50}\n",
       {"rto.initial_rto_us", "got 50"}},
      {"zero_retry_budget",
       "controller: swift\nrto: {retry_budget_s: 0}\n",
       {"rto.retry_budget_s: must be > 0, got 0"}},
      {"negative_retry_budget",
       "controller: swift\nrto: {retry_budget_s: -1}\n",
       {"rto.retry_budget_s", "got -1"}},
      {"huge_retry_budget",
       "controller: swift\nrto: {retry_budget_s: 1e12}\n",
       {"rto.retry_budget_s", "out of range"}},
      {"zero_mss",
       "controller: swift\nflow: {mss_bytes: 0}\n",
       {"flow.mss_bytes: must be in [1, 65000], got 0"}},
      {"jumbo_mss", "controller: swift\nflow: {mss_bytes: 65001}\n", {"flow.mss_bytes", "got 65001"}},
      {"fractional_mss",
       "controller: swift\nflow: {mss_bytes: 4096.5}\n",
       {"flow.mss_bytes: must be a whole number, got 4096.5"}},
      {"negative_mss",
       "controller: swift\nflow: {mss_bytes: -1}\n",
       {"flow.mss_bytes: must be in [1, 65000], got -1"}},
      {"huge_byte_counter",
       "controller: dcqcn\ndcqcn: {byte_counter_bytes: 1e30}\n",
       {"dcqcn.byte_counter_bytes: must be in [0, 18446744073709551615], got 1e+30"}},
      {"hops_overflow", "controller: swift\nflow: {hops: 256}\n", {"flow.hops", "[0, 255]", "got 256"}},
      {"zero_retx_threshold",
       "controller: swift\nswift: {retx_reset_threshold: 0}\n",
       {"swift.retx_reset_threshold: must be >= 1, got 0"}},
      {"unknown_controller",
       "controller: swfit\n",
       {"bad.yaml:1:", "controller: unknown controller 'swfit'", "fixed, swift, dcqcn, hybrid"}},
      {"missing_controller", "swift: {beta: 0.5}\n", {"bad.yaml", "missing key 'controller'"}},
      {"duplicate_key",
       "controller: swift\ncontroller: dcqcn\n",
       {"bad.yaml:2:", "duplicate key 'controller'", "line 1"}},
      {"syntax_unclosed_brace",
       "controller: swift\nswift: {beta: 0.5\n",
       {"bad.yaml:3:", "YAML syntax error"}},
      {"syntax_bad_indent",
       "controller: swift\nswift:\n  beta: 0.5\n max_mdf: 0.5\n",
       {"bad.yaml:4:", "YAML syntax error"}},
      {"syntax_tab", "controller: swift\nswift:\n\tbeta: 0.5\n", {"bad.yaml:3:", "YAML syntax error"}},
      {"empty", "", {"bad.yaml", "empty preset"}},
      {"top_level_list", "- swift\n- dcqcn\n", {"bad.yaml:1:", "expected a mapping", "a list"}},
      {"two_documents", "controller: swift\n---\ncontroller: dcqcn\n", {"bad.yaml:2:", "one YAML document"}},
      {"stray_comma", "# note\n, x\n", {"bad.yaml:2:1:", "YAML syntax error", "','"}},
  };
  return cases;
}

class CcConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(CcConfigBad, ErrorNamesFileKeyAndValue) {
  const BadCase& c = GetParam();
  Result<CcConfig> cfg = parse_cc_config(c.yaml, kBad);
  ASSERT_FALSE(cfg) << "accepted:\n" << c.yaml;
  EXPECT_TRUE(every_line_starts_with(cfg.error().message, kBad));
  EXPECT_TRUE(mentions_all(cfg.error().message, c.must_mention));
}

INSTANTIATE_TEST_SUITE_P(AllCases, CcConfigBad, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& param) { return param.param.name; });

TEST(CcConfigErrors, AllProblemsAreReportedInLineOrder) {
  Result<CcConfig> cfg = parse_cc_config("controller: swift\nswift:\n  zzz: 1\n  beta: oops\n", kBad);
  ASSERT_FALSE(cfg);
  const std::string& m = cfg.error().message;
  size_t unknown = m.find("bad.yaml:3: unknown key 'swift.zzz'");
  size_t type = m.find("bad.yaml:4: swift.beta: expected a number");
  ASSERT_NE(unknown, std::string::npos) << m;
  ASSERT_NE(type, std::string::npos) << m;
  EXPECT_LT(unknown, type);
}

TEST(CcConfigErrors, ValidateNamesSourceKeyAndValueInYamlUnits) {
  CcConfig c;
  EXPECT_TRUE(validate_cc_config(c, "builtin:x"));
  c.swift.base_target_ns = 0;
  Status s = validate_cc_config(c, "builtin:x");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "builtin:x: swift.base_target_us: must be > 0, got 0");

  CcConfig r;
  r.rto.retry_budget_ns = -2'500'000'000;
  r.hybrid.swift.max_mdf = 0;
  Status two = validate_cc_config(r, "a.yaml");
  ASSERT_FALSE(two);
  EXPECT_TRUE(mentions_all(two.error().message, {"a.yaml: hybrid.swift.max_mdf: must be in (0, 1], got 0",
                                                 "a.yaml: rto.retry_budget_s: must be > 0, got -2.5"}));
}

// ---- files, built-in names and resolution ----

class CcConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("megascale_cc_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream((dir_ / name).string()) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(CcConfigFiles, FileErrorsNameThePathAndLine) {
  std::string path = write("tight.yaml", "controller: swift\nswift:\n  base_target_us: 0\n");
  Result<CcConfig> cfg = load_cc_config(path);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message, path + ":3: swift.base_target_us: must be > 0, got 0");
}

TEST_F(CcConfigFiles, EmptyFileIsAnEmptyPreset) {
  std::string path = write("empty.yaml", "");
  Result<CcConfig> cfg = load_cc_config(path);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message,
            path + ": empty preset; it needs at least 'controller: <fixed|swift|dcqcn|hybrid>'");
}

TEST_F(CcConfigFiles, MissingFileIsAnError) {
  std::string path = (dir_ / "nope.yaml").string();
  Result<CcConfig> cfg = load_cc_config(path);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message, path + ": file not found");
  Result<CcConfig> dir = load_cc_config(dir_.string());
  ASSERT_FALSE(dir);
  EXPECT_TRUE(mentions_all(dir.error().message, {dir_.string(), "not a regular file"}));
}

TEST_F(CcConfigFiles, ResolvePrefersAFileThenABuiltinName) {
  Result<CcConfig> builtin = resolve_cc_config("dcqcn-nic");
  ASSERT_TRUE(builtin) << builtin.error().message;
  EXPECT_EQ(builtin->name, "builtin:dcqcn-nic");
  EXPECT_EQ(builtin->dcqcn.alpha_update_ns, 1'000);

  Result<CcConfig> by_path = resolve_cc_config(kSourceDir + "/configs/cc/swift.yaml");
  ASSERT_TRUE(by_path) << by_path.error().message;
  EXPECT_EQ(by_path->name, "swift");

  // A file in the working directory wins over the built-in preset of the same name.
  write("hybrid", "controller: fixed\nfixed: {window_packets: 7}\n");
  fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  Result<CcConfig> shadowed = resolve_cc_config("hybrid");
  fs::current_path(cwd);
  ASSERT_TRUE(shadowed) << shadowed.error().message;
  EXPECT_EQ(shadowed->kind, ControllerKind::kFixedWindow);
  EXPECT_DOUBLE_EQ(shadowed->fixed.window_packets, 7);
}

TEST(CcConfigResolve, UnknownNamesListTheBuiltins) {
  Result<CcConfig> unknown = resolve_cc_config("dcqcn-fast");
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(
      mentions_all(unknown.error().message,
                   {"'dcqcn-fast'", "built-in presets: dcqcn-nic, dcqcn-paper, fixed, hybrid, loopback, swift"}));
  Result<CcConfig> builtin = builtin_cc_config("nope");
  ASSERT_FALSE(builtin);
  EXPECT_TRUE(
      mentions_all(builtin.error().message, {"'nope'", "dcqcn-nic, dcqcn-paper, fixed, hybrid, loopback, swift"}));
  // Looks like a path (".yaml" or a '/'): a missing file, not a preset name.
  Result<CcConfig> path = resolve_cc_config("missing-preset.yaml");
  ASSERT_FALSE(path);
  EXPECT_EQ(path.error().message, "missing-preset.yaml: file not found");
  Result<CcConfig> prefixed = builtin_cc_config("builtin:fixed");
  ASSERT_TRUE(prefixed) << prefixed.error().message;
  EXPECT_EQ(prefixed->kind, ControllerKind::kFixedWindow);
}

// ---- the knob table in the docs matches the parser and params.h ----

struct TableRow {
  std::string key, env, default_value, unit;
};

// The lines of the knob table: the rows under the header "| YAML key |", up to the first non-row line.
std::vector<std::string> knob_table_lines(const std::string& markdown) {
  std::vector<std::string> lines;
  std::istringstream in(markdown);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| YAML key |", 0) == 0) {
      inside = true;
    } else if (inside && line.rfind("| `", 0) == 0) {
      lines.push_back(line);
    } else if (inside && line.rfind("|---", 0) != 0) {
      break;
    }
  }
  return lines;
}

std::vector<TableRow> knob_rows(const std::string& markdown) {
  std::vector<TableRow> rows;
  for (const std::string& line : knob_table_lines(markdown)) {
    std::vector<std::string> cells;
    std::istringstream cols(line.substr(1));
    for (std::string cell; std::getline(cols, cell, '|');) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cell.erase(std::remove(cell.begin(), cell.end(), '`'), cell.end());
      cells.push_back(cell);
    }
    EXPECT_GE(cells.size(), 5u) << line;
    if (cells.size() >= 5) rows.push_back({cells[0], cells[1], cells[2], cells[3]});
  }
  return rows;
}

TEST(CcConfigDocs, KnobTableListsEveryKeyWithItsTrueDefault) {
  std::string readme = read_text(kSourceDir + "/configs/cc/README.md");
  std::vector<TableRow> rows = knob_rows(readme);
  std::set<std::string> documented;
  for (const TableRow& row : rows) {
    SCOPED_TRACE(row.key);
    EXPECT_TRUE(documented.insert(row.key).second) << "listed twice";
    std::string env = "MEGASCALE_CC_" + row.key;
    std::transform(env.begin(), env.end(), env.begin(), [](char ch) {
      return ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    });
    if (row.key != "description") {
      EXPECT_EQ(row.env, env);  // free text has no variable
    }
    for (std::string unit : {"us", "ms", "s", "gbps", "mbps", "bytes", "packets", "bdp"}) {
      std::string suffix = "_" + unit;
      if (row.key.size() > suffix.size() &&
          row.key.compare(row.key.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string shown = row.unit;
        std::transform(shown.begin(), shown.end(), shown.begin(), [](char ch) {
          return static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        });
        EXPECT_EQ(shown, unit);
      }
    }
    if (row.key == "controller" || row.key == "description") continue;
    // The documented default, written into a file, must give exactly params.h's defaults.
    Result<CcConfig> cfg =
        parse_cc_config(to_yaml({{"controller", "hybrid"}, {row.key, row.default_value}}), "README.md");
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(differing_fields(*cfg, CcConfig{}), std::set<std::string>{})
        << "documented default " << row.default_value;
  }
  std::set<std::string> keys = {"description"};
  for (const KeyCase& c : every_key_case()) keys.insert(c.key);
  EXPECT_EQ(documented, keys);

  // docs/CONFIG.md carries the same table, row for row.
  std::string config_md = read_text(kSourceDir + "/docs/CONFIG.md");
  EXPECT_EQ(knob_table_lines(config_md), knob_table_lines(readme));
}

// ---- parse never throws ----

TEST(CcConfigRobustness, TruncatedAndMutatedPresetsNeverThrow) {
  std::mt19937 rng(20240214);
  const std::string noise = ":{}[]-#&*!|>'\"%@`,? \t\n0.-e";
  int parsed = 0, rejected = 0;
  auto check = [&](const std::string& text) {
    Result<CcConfig> cfg{make_error("unset")};
    EXPECT_NO_THROW(cfg = parse_cc_config(text, kBad));
    if (cfg) {
      ++parsed;
      EXPECT_TRUE(validate_cc_config(*cfg, kBad)) << text;  // whatever parse accepts is valid
    } else {
      ++rejected;
      EXPECT_TRUE(every_line_starts_with(cfg.error().message, kBad));
    }
  };
  for (const auto& [name, text] : embedded_cc_presets()) {
    std::string full(text);
    for (size_t n = 0; n < full.size(); n += 13) check(full.substr(0, n));
    for (int i = 0; i < 300; ++i) {
      std::string mutated = full;
      for (int j = 0; j < 3; ++j) mutated[rng() % mutated.size()] = noise[rng() % noise.size()];
      check(mutated);
    }
  }
  check(std::string(5000, '['));
  check(std::string(5000, '{'));
  check("controller: swift\n" + std::string(3000, ' ') + "x");
  check(std::string("\0\xff\xfe", 3));
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace megascale::cc
