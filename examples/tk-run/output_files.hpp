// SPDX-License-Identifier: MIT
// tk-run's outputs, all or nothing: each output gets a temporary file in
// its destination folder when the call starts (so that a missing folder, a
// directory or a read-only place fails the call before any work), the
// bytes go there, and only when every output is written are they renamed
// into place. Whatever is not committed is removed by the destructor, and
// by SIGINT, SIGTERM or SIGHUP (install_signal_cleanup).
#pragma once

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <string>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "npy.hpp"
#include "op.hpp"

namespace tkrun {

class OutputFiles {
 public:
  explicit OutputFiles(const std::map<std::string, std::string>& outputs) {
    // Every destination judged first, then the temporary files created; a
    // failure part way removes those already made (no destructor runs for
    // a constructor that throws).
    std::map<std::tuple<dev_t, ino_t, std::string>, std::string> named;
    for (const auto& [name, path] : outputs) {
      const std::string what = "output '" + name + "': " + printable(path);
      const std::filesystem::path p(path);
      const std::string base = p.filename().string();
      if (base.empty() || base == "." || base == "..") throw UsageError(what + " names a folder, not a file");
      const std::string dir = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0)
        throw UsageError(what + ": cannot write in folder " + printable(dir) + ": " + std::strerror(errno));
      if (!S_ISDIR(st.st_mode)) throw UsageError(what + ": " + printable(dir) + " is not a folder");
      const auto key = std::make_tuple(st.st_dev, st.st_ino, base);
      if (named.count(key)) throw UsageError(what + ": the same file as output '" + named[key] + "'");
      named[key] = name;
      struct stat existing {};
      if (::stat(path.c_str(), &existing) == 0) {
        if (S_ISDIR(existing.st_mode)) throw UsageError(what + " is a directory");
        if (!S_ISREG(existing.st_mode)) throw UsageError(what + " exists and is not a regular file");
      }
      files_.push_back(File{name, path,
                            dir + "/." + base + ".tk-run-" + std::to_string(::getpid()) + "-" +
                                std::to_string(files_.size()) + ".tmp",
                            -1, false});
    }
    try {
      for (auto& f : files_) {
        f.fd = ::open(f.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f.fd < 0) {
          const int err = errno;
          const std::string dir = std::filesystem::path(f.tmp).parent_path().string();
          throw UsageError("output '" + f.name + "': " + printable(f.path) + ": cannot create a file in folder " +
                           printable(dir) + ": " + std::strerror(err));
        }
        f.created = true;
        track(f.tmp);
      }
    } catch (...) {
      cleanup();
      throw;
    }
  }

  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  ~OutputFiles() { cleanup(); }

  // The bytes of output `name`, into its temporary file.
  void write(const std::string& name, const std::string& bytes) {
    File& f = find(name);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw UsageError("output '" + name + "': " + printable(f.path) + ": write failed: " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0)
      throw UsageError("output '" + name + "': " + printable(f.path) + ": write failed: " + std::strerror(errno));
    f.written = true;
  }

  // Every output written: rename them all into place.
  void commit() {
    for (const auto& f : files_)
      if (!f.written) throw UsageError("output '" + f.name + "' was not produced by this op");
    std::string done;
    for (auto& f : files_) {
      if (::rename(f.tmp.c_str(), f.path.c_str()) != 0)
        throw UsageError("output '" + f.name + "': cannot move the file into place at " + printable(f.path) + ": " +
                         std::strerror(errno) + (done.empty() ? "" : " (already in place: " + done + ")"));
      f.renamed = true;
      done += (done.empty() ? "" : ", ") + f.name;
    }
  }

  // SIGINT, SIGTERM and SIGHUP remove the temporary files, then end the
  // process as the signal would have.
  static void install_signal_cleanup() {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_signal);
  }

 private:
  struct File {
    std::string name, path, tmp;
    int fd;
    bool written;
    bool created = false, renamed = false;
  };

  // Closes and removes every temporary file not renamed into place.
  void cleanup() {
    for (auto& f : files_) {
      if (f.fd >= 0) ::close(f.fd);
      f.fd = -1;
      if (f.created && !f.renamed) ::unlink(f.tmp.c_str());
      f.created = false;
    }
    untrack_all();
  }

  File& find(const std::string& name) {
    for (auto& f : files_)
      if (f.name == name) return f;
    throw UsageError("output '" + name + "' was not requested");
  }

  // The temporary paths the signal handler removes: C strings in a fixed
  // table, written before the count that publishes them.
  static constexpr int kMaxTracked = 64;
  static inline char* tracked_[kMaxTracked] = {};
  static inline volatile std::sig_atomic_t tracked_count_ = 0;

  static void track(const std::string& path) {
    if (tracked_count_ >= kMaxTracked) return;
    tracked_[tracked_count_] = ::strdup(path.c_str());
    tracked_count_ = tracked_count_ + 1;
  }
  static void untrack_all() {
    const int n = tracked_count_;
    tracked_count_ = 0;
    for (int i = 0; i < n; ++i) {
      std::free(tracked_[i]);
      tracked_[i] = nullptr;
    }
  }
  static void on_signal(int sig) {
    for (int i = 0; i < tracked_count_; ++i)
      if (tracked_[i]) ::unlink(tracked_[i]);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }

  std::vector<File> files_;
};

}  // namespace tkrun
