// core/test_util.h: helpers for tests: seed printing and override,
// running a program (the CLI, testbed and Ansible tests drive real tools),
// and a loopback listener (a port in use, a proxy that must stay unused).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sb {

// The seed a randomized test uses: `fallback` unless SB_TEST_SEED is set.
// Printed so a failure can be reproduced (LevelDB test::RandomSeed()).
inline uint64_t test_seed(uint64_t fallback) {
  uint64_t s = fallback;
  if (const char* e = std::getenv("SB_TEST_SEED")) s = std::strtoull(e, nullptr, 0);
  std::fprintf(stderr, "[seed] %llu (override with SB_TEST_SEED)\n", (unsigned long long)s);
  return s;
}

}  // namespace sb

// ---- running programs from tests -----------------------------------------
namespace sb::test {

struct Run {
  int rc;           // exit status (-1 if killed by a signal)
  std::string out;  // stdout and stderr, interleaved
};

// Runs `cmd` with /bin/sh, captures stdout+stderr. Never throws.
inline Run sh(const std::string& cmd) {
  Run r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The source tree (SB_TEST_SRCDIR, set by sb_add_tests for every test).
inline std::string src_dir() {
  const char* s = std::getenv("SB_TEST_SRCDIR");
  return s ? s : ".";
}

// A TCP socket listening on 127.0.0.1 on a free port (fd < 0 if the
// kernel refused: tests REQUIRE(ok())). hit(): something connected (the
// kernel completes the handshake without accept); proxy_env(): the
// http_proxy / HTTP_PROXY assignments naming it.
struct LoopbackListener {
  int fd = -1;
  int port = 0;
  explicit LoopbackListener(int backlog = 64) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l) != 0) {
      close(fd);
      fd = -1;
      return;
    }
    port = ntohs(a.sin_port);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  ~LoopbackListener() {
    if (fd >= 0) close(fd);
  }
  bool ok() const { return fd >= 0; }
  bool hit() const {
    const int c = accept(fd, nullptr, nullptr);
    if (c < 0) return false;
    close(c);
    return true;
  }
  std::string proxy_env() const {
    const std::string u = "http://127.0.0.1:" + std::to_string(port);
    return "http_proxy=" + u + " HTTP_PROXY=" + u;
  }
};

}  // namespace sb::test
