// Errors as values: `Result<T>` holds either a T or an `Error` with a message that names the problem.
//
//   Result<CcConfig> r = load_cc_config("configs/cc/swift.yaml");
//   if (!r) { fmt::print(stderr, "{}\n", r.error().message); return 2; }
//   const CcConfig& cfg = *r;
//
// Nothing in megascale throws across a layer boundary; functions that can fail on bad input return
// a Result (or a Status, which is Result<void>).
//
// An Error also says what kind of failure it is, for a caller that must answer with a code of its own
// (the NCCL plugin's ncclResult_t): set it where the failure is made, pass it on unchanged.
//
//   if (fd < 0) return make_error(ErrorCode::kSystem, "socket: " + errno_text(errno));
//   if (!r) return to_net_result(r.error().code);   // collectives/nccl/src/net_result.h
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace megascale {

// What kind of failure an Error is.
enum class ErrorCode : uint8_t {
  kInvalidArgument,  // bad input: a value, a file, a flag, a call's arguments
  kInvalidUsage,     // a valid call at the wrong time: a closed connection, a limit of outstanding calls
  kSystem,           // the operating system refused: a socket, bind, epoll, a thread
  kRemote,           // the peer: refused, reset or closed the connection, its port is closed
  kTimeout,          // a retry budget or a deadline ran out with no answer
  kDevice,           // the accelerator: a CUDA call or a GPU copy failed
  kUnsupported,      // this build or host cannot do what was asked
  kInternal,         // a broken invariant: a bug
};

// "invalid argument", "system", ...
inline std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kInvalidUsage:
      return "invalid usage";
    case ErrorCode::kSystem:
      return "system";
    case ErrorCode::kRemote:
      return "remote";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kDevice:
      return "device";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

// `code` defaults to kInvalidArgument: most failures in megascale are bad input (configuration,
// YAML, flags, arguments), reported where the input is read; the few of another kind (the operating
// system, the peer, a timeout, the GPU) name their code where they are made.
struct Error {
  std::string message;
  ErrorCode code = ErrorCode::kInvalidArgument;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

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
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Error make_error(std::string message) {
  return Error{std::move(message)};
}
inline Error make_error(ErrorCode code, std::string message) {
  return Error{std::move(message), code};
}

}  // namespace megascale
