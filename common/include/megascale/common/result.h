// Errors as values: `Result<T>` holds either a T or an `Error` with a message that names the problem.
//
//   Result<CcConfig> r = load_cc_config("configs/cc/swift.yaml");
//   if (!r) { fmt::print(stderr, "{}\n", r.error().message); return 2; }
//   const CcConfig& cfg = *r;
//
// Nothing in megascale throws across a layer boundary; functions that can fail on bad input return
// a Result (or a Status, which is Result<void>).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace megascale {

struct Error {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}    // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Error make_error(std::string message) { return Error{std::move(message)}; }

}  // namespace megascale
