// process.cpp — process.hpp.
#include "loom/rt/proc/process.hpp"

#include "loom/rt/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace loom::rt {

int run_program(const std::vector<std::string>& argv, std::string& out) {
  out.clear();
  int fds[2];
  if (::pipe(fds) != 0) return 127;
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    sigset_t none;  // a caller that blocks its stop signals (loom-serve) must not pass that on
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string shell_quote(const std::string& s) {
  static const std::regex plain("[A-Za-z0-9_.,:/=+@%-]+");
  if (std::regex_match(s, plain)) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string comment_text(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

[[noreturn]] void io_failed(const std::string& what) { throw Error(what + ": " + std::strerror(errno)); }

void fsync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_failed(dir + ": cannot open the folder to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) io_failed(dir + ": fsync failed");
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text, mode_t mode) {
  // mkstemp: a new name of its own, created O_EXCL (never a planted file or symlink followed).
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) io_failed(path + ": cannot create a temporary file beside it");
  try {
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) io_failed(tmp + ": cannot write");
      done += static_cast<size_t>(n);
    }
    if (::fchmod(fd, mode) != 0) io_failed(tmp + ": cannot set its mode");
    if (::fsync(fd) != 0) io_failed(tmp + ": fsync failed");
    if (::close(fd) != 0) {
      ::unlink(tmp.c_str());
      io_failed(tmp + ": cannot close");
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  commit_file(tmp, path);
}

void commit_file(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_failed(path + ": cannot rename " + tmp + " into place");
  }
  fsync_folder(folder_of(path));
}

}  // namespace loom::rt
