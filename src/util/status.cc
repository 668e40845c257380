#include "runstore/status.h"

namespace runstore {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIOError:
      return "IOError";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message, int sys_errno) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, sys_errno, std::move(message)});
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code()));
  s += ": ";
  s += state_->message;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  // "file: offset 8: " and "file" alike are joined with one ": ", and a
  // context the message already starts with (the file, named by the call
  // that failed) is not said twice.
  while (!context.empty() && (context.back() == ' ' || context.back() == ':')) {
    context.remove_suffix(1);
  }
  if (context.empty() || std::string_view(state_->message).starts_with(context)) return *this;
  std::string msg(context);
  msg += ": ";
  msg += state_->message;
  return Status(state_->code, std::move(msg), state_->sys_errno);
}

}  // namespace runstore
