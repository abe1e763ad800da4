// services.hpp — where servers say where they listen, and where pipelines find services by name.
//
// An announcement is a small JSON file: {host, http_port, grpc_port, pid}. It is written whole
// (aside, then renamed). A replica writes one into its controller's state folder (--ready-file).
// A controller writes one as <name>.json into the services folder, so that a pipeline step
// `service: <name>` can reach it without a URL. The services folder is --services-dir, else
// $LOOM_SERVICES_DIR, else ~/.loom/services. Put it on a file system that every node sees.
// An announcement decides where requests (and a pipeline's bearer token) are sent, so only one
// that the reading user or root owns, that no one else may write and that is no symlink is
// believed: in a folder others can write, theirs are ignored (doc/loom-serve.8, FILES).
#pragma once

#include <string>

namespace loom::serve {

struct Announcement {
  std::string host;
  int http_port = -1, grpc_port = -1, pid = 0;
};

// The host named in an announcement: the bind address, or this host's name when the server
// listens on every interface (0.0.0.0 or ::).
std::string announced_host(const std::string& bind);

// Writes {host, http_port, grpc_port, pid} to `path` atomically. Throws loom::Error.
void write_announcement(const std::string& path, const std::string& bind, int http_port, int grpc_port);

// Reads an announcement. Returns false when the file is missing, is not one (yet), or is not
// to be trusted (owned by another user, writable by group or others, a symlink); `why`, when
// given, says which.
bool read_announcement(const std::string& path, Announcement* a, std::string* why = nullptr);

// --services-dir when given, else $LOOM_SERVICES_DIR, else $HOME/.loom/services; "" if none.
std::string services_dir(const std::string& given = "");

// The announcement file of the service `name` in `dir`. `name` must be a valid model name (no
// slash, no leading dot), so the path stays in `dir`.
std::string service_file(const std::string& dir, const std::string& name);

// A controller's announcement of `name` in `dir` (created with its parents, mode 0755) and its
// withdrawal at the end (only while the file is still this process's: a newer controller of the
// same name may have taken it over). Throw loom::Error.
void announce_service(const std::string& dir, const std::string& name, const std::string& bind, int http_port, int grpc_port);
void withdraw_service(const std::string& dir, const std::string& name);

// The gRPC address host:port of the controller that announced `name` in `dir`. Throws
// loom::Error saying which: a bad name, no services folder, no controller of that
// name, or a controller that serves no gRPC.
std::string service_grpc_address(const std::string& dir, const std::string& name);

}  // namespace loom::serve
