#pragma once

// A small tmpfs mounted on a fresh temp dir, for the tests of a full disk
// (root only: mount(2)). Unmounted and removed when destroyed; a failed
// unmount is a test failure.

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace onceq::itest {

class tmpfs_mount {
 public:
  static bool can_mount() { return ::geteuid() == 0; }

  // size: tmpfs's size option, e.g. "40M". See error() when !mounted().
  explicit tmpfs_mount(const std::string& size) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "onceq-tmpfs-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp: " + std::string(std::strerror(errno));
      return;
    }
    path_ = tmpl;
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      error_ = "mount tmpfs: " + std::string(std::strerror(errno));
      return;
    }
    mounted_ = true;
  }
  ~tmpfs_mount() {
    if (mounted_) {
      EXPECT_EQ(::umount(path_.c_str()), 0) << std::strerror(errno);
    }
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  tmpfs_mount(const tmpfs_mount&) = delete;
  tmpfs_mount& operator=(const tmpfs_mount&) = delete;

  // Grows (or shrinks) the tmpfs in place; false with errno set on failure.
  bool resize(const std::string& size) {
    return ::mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT, ("size=" + size).c_str()) == 0;
  }

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string error_;
  bool mounted_ = false;
};

}  // namespace onceq::itest
