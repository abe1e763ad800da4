// process.cpp — process.hpp.
#include "loom/rt/proc/process.hpp"

#include "loom/rt/error.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace loom::rt {

int run_program(const std::vector<std::string>& argv, std::string& out, int timeout_ms) {
  out.clear();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 127;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return 127;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a timeout ends it and whatever it started
    sigset_t none;    // a caller that blocks its stop signals (loom-serve) must not pass that on
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], 1);  // dup2's copies are not close-on-exec; the pipe's own ends are
    ::dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(fds[1]);
  // Read until the program exits (not until the pipe closes: a background child it left behind,
  // as a site's sbatch wrapper may, keeps the pipe open), or until the deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  bool exited = false, timed_out = false;
  char buf[4096];
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (exited) break;
      ::kill(-pid, SIGKILL);
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, exited ? 0 : 50);
    if (ready > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) break;  // every writer is gone
      if (errno != EINTR && errno != EAGAIN) break;
      continue;
    }
    if (exited) break;  // exited and nothing more is waiting in the pipe
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      continue;  // one more look for what it wrote last
    }
  }
  ::close(fds[0]);
  if (!exited)
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  if (timed_out) {
    out += "\n" + argv[0] + ": no answer within " + std::to_string(timeout_ms / 1000.0).substr(0, 5) + " s; stopped";
    return 124;
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
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    io_failed(tmp + ": fsync failed");
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_failed(path + ": cannot rename " + tmp + " into place");
  }
  fsync_folder(folder_of(path));
}

}  // namespace loom::rt
