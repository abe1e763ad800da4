// services.cpp — services.hpp: announcements, written whole and read leniently.
#include "spec/services.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/tensor_in.hpp"
#include "loom/error.hpp"
#include "loom/rt/proc/process.hpp"

namespace loom::serve {

std::string announced_host(const std::string& bind) {
  if (bind != "0.0.0.0" && bind != "::") return bind;
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  return name;
}

void write_announcement(const std::string& path, const std::string& bind, int http_port, int grpc_port) {
  const nlohmann::json j = {{"host", announced_host(bind)}, {"http_port", http_port}, {"grpc_port", grpc_port},
                            {"pid", static_cast<int>(::getpid())}};
  rt::write_file_atomic(path, j.dump() + "\n");
}

bool read_announcement(const std::string& path, Announcement* a, std::string* why) {
  // Opened without following a symlink, then judged by what was opened (no race with a swap).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (why) *why = errno == ELOOP ? path + " is a symlink" : path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st{};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool owned = ok && (st.st_uid == ::geteuid() || st.st_uid == 0);
  const bool private_write = ok && !(st.st_mode & (S_IWGRP | S_IWOTH));
  std::string text;
  if (ok && owned && private_write && st.st_size < (1 << 16)) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!ok || !owned || !private_write) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    if (why)
      *why = !ok       ? path + " is not a regular file"
             : !owned ? path + " belongs to user " + std::to_string(st.st_uid) +
                            ", not to this one: announcements others write are not believed"
                      : path + " can be written by group or others (mode " + mode + "): not believed";
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("host") || !j["host"].is_string() || !j.contains("http_port") ||
      !j["http_port"].is_number_integer())
    return false;
  a->host = j["host"].get<std::string>();
  a->http_port = j["http_port"].get<int>();
  a->grpc_port = j.contains("grpc_port") && j["grpc_port"].is_number_integer() ? j["grpc_port"].get<int>() : -1;
  a->pid = j.contains("pid") && j["pid"].is_number_integer() ? j["pid"].get<int>() : 0;
  return true;
}

std::string services_dir(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* d = std::getenv("LOOM_SERVICES_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.loom/services";
  return "";
}

std::string service_file(const std::string& dir, const std::string& name) {
  if (!valid_name(name)) throw loom::Error("'" + name + "' is not a service name", Kind::kInput);
  return dir + "/" + name + ".json";
}

void announce_service(const std::string& dir, const std::string& name, const std::string& bind, int http_port, int grpc_port) {
  if (dir.empty()) throw loom::Error("no services folder (set --services-dir, LOOM_SERVICES_DIR or HOME)", Kind::kUsage);
  const std::string file = service_file(dir, name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw loom::Error("the services folder " + dir + ": " + ec.message(), Kind::kIO);
  write_announcement(file, bind, http_port, grpc_port);
}

void withdraw_service(const std::string& dir, const std::string& name) {
  const std::string file = service_file(dir, name);
  Announcement a;
  if (read_announcement(file, &a) && a.pid == static_cast<int>(::getpid())) ::unlink(file.c_str());
}

std::string service_grpc_address(const std::string& dir, const std::string& name) {
  if (dir.empty()) throw loom::Error("service " + name + ": no services folder (set --services-dir, LOOM_SERVICES_DIR or HOME)", Kind::kUsage);
  const std::string file = service_file(dir, name);
  Announcement a;
  std::string why;
  if (!read_announcement(file, &a, &why)) {
    if (::access(file.c_str(), F_OK) == 0 && !why.empty())
      throw loom::Error("service " + name + ": " + why, Kind::kUnavailable);
    throw loom::Error("service " + name + " is not announced in " + dir + " (no " + name +
                          ".json: no controller of that name runs with this services folder; or give url: grpc://host:port)",
                      Kind::kNotFound);
  }
  if (a.grpc_port < 0)
    throw loom::Error("service " + name + " (" + file + ") serves no gRPC: start its controller with --grpc-port", Kind::kUnavailable);
  return (a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.grpc_port);
}

}  // namespace loom::serve
