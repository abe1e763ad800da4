// error.cpp — the one table: each kind's exit status, HTTP status, gRPC code and label.
#include "loom/error.hpp"

#include <cstdio>

namespace loom {
namespace {

struct Row {
  Kind kind;
  int exit, http, grpc;  // grpc::StatusCode
  const char* name;
};

constexpr Row kTable[] = {
    {Kind::kOk, 0, 200, 0, "ok"},
    {Kind::kInput, 1, 400, 3, "bad_request"},  // INVALID_ARGUMENT (first: what code 3 maps back to)
    {Kind::kUsage, 2, 400, 3, "usage"},
    {Kind::kUnauthorized, 1, 401, 16, "unauthorized"},  // UNAUTHENTICATED
    {Kind::kNotFound, 1, 404, 5, "not_found"},
    {Kind::kTooLarge, 1, 413, 8, "too_large"},  // RESOURCE_EXHAUSTED
    {Kind::kUnavailable, 1, 503, 14, "unavailable"},
    {Kind::kTimeout, 1, 504, 4, "timeout"},  // DEADLINE_EXCEEDED
    {Kind::kInternal, 1, 500, 13, "internal"},  // INTERNAL (first: what code 13 maps back to)
    {Kind::kIO, 1, 500, 13, "io"},
};

const Row& row(Kind k) {
  for (const Row& r : kTable)
    if (r.kind == k) return r;
  return kTable[8];  // kInternal
}

}  // namespace

int exit_status(Kind k) { return row(k).exit; }
int http_status(Kind k) { return row(k).http; }
int grpc_code(Kind k) { return row(k).grpc; }
const char* kind_name(Kind k) { return row(k).name; }

Kind from_grpc_code(int code) {
  for (const Row& r : kTable)
    if (r.grpc == code) return r.kind;
  return Kind::kInternal;
}

Kind kind_of(const std::exception& e) {
  const auto* le = dynamic_cast<const Error*>(&e);
  return le ? le->kind() : Kind::kInternal;
}

int report(const char* tool, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", tool, e.what());
  const int status = exit_status(kind_of(e));
  return status == 0 ? 1 : status;
}

}  // namespace loom
