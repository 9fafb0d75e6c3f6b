#include "control/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace sb::control {

namespace fs = std::filesystem;

std::string sibling_binary(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return name;
  return (self.parent_path() / name).string();
}

Result<uint16_t> free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return Status::Io("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    return Status::Io("bind 127.0.0.1:0");
  }
  ::close(s);
  return uint16_t(ntohs(a.sin_port));
}

Result<rib::Member> loopback_member(uint32_t id) {
  rib::Member m;
  m.id = id;
  Result<uint16_t> p1 = free_port(), p2 = free_port();
  for (int i = 0; i < 16 && p1.ok() && p2.ok() && p1.value() == p2.value(); ++i) p2 = free_port();
  if (!p1.ok() || !p2.ok() || p1.value() == p2.value()) return Status::Io("no free port");
  m.control = "tcp://127.0.0.1:" + std::to_string(p1.value());
  m.publish = "tcp://127.0.0.1:" + std::to_string(p2.value());
  return m;
}

namespace {

std::string yaml_cluster(const rib::ClusterSpec& c, uint64_t fib_capacity) {
  (void)fib_capacity;
  std::ostringstream y;
  y << "cluster:\n  name: " << c.name << "\n  hash_seed: " << c.hash_seed << "\n  partitions: " << c.partitions
    << "\n  capacity: " << c.capacity << "\n  architecture: " << rib::architecture_name(c.architecture)
    << "\n  key_mode: " << (c.key_mode == KeyMode::kUeIpv4 ? "ue-ip" : "5tuple")
    << "\n  curve: " << (c.curve ? "true" : "false") << "\n  members:\n";
  for (const auto& m : c.members) {
    y << "    - {id: " << m.id << ", control: \"" << m.control << "\", publish: \"" << m.publish << "\"";
    if (c.curve) y << ", curve_public: \"" << m.curve_public << "\"";
    y << ", weight: " << m.weight << "}\n";
  }
  if (!c.clients.empty()) {
    y << "  clients:\n";
    for (const auto& k : c.clients) y << "    - {name: " << k.name << ", curve_public: \"" << k.curve_public << "\"}\n";
  }
  return y.str();
}

}  // namespace

Result<std::unique_ptr<Harness>> Harness::start(const HarnessOptions& opt) {
  std::unique_ptr<Harness> h(new Harness());
  h->opt_ = opt;
  char tmpl[] = "/tmp/sb-cluster.XXXXXX";
  if (!::mkdtemp(tmpl)) return Status::Io("mkdtemp");
  h->dir_ = tmpl;
  rib::ClusterSpec& c = h->spec_;
  c.name = "harness";
  c.hash_seed = 12345;
  c.partitions = opt.partitions;
  c.capacity = opt.capacity;
  c.architecture = opt.architecture;
  c.key_mode = opt.key_mode;
  c.curve = opt.curve;
  std::vector<KeyPair> keys(opt.nodes);
  for (uint32_t i = 0; i < opt.nodes; ++i) {
    Result<rib::Member> lm = loopback_member(i);
    if (!lm.ok()) return lm.status();
    rib::Member m = lm.value();
    if (opt.curve) {
      Result<KeyPair> kp = generate_keypair();
      if (!kp.ok()) return kp.status();
      keys[i] = kp.value();
      m.curve_public = keys[i].public_key;
      SB_RETURN_IF_ERROR(write_key_file(h->dir_ + "/node" + std::to_string(i) + ".key", keys[i]));
    }
    c.members.push_back(m);
  }
  if (opt.curve) {
    Result<KeyPair> kp = generate_keypair();
    if (!kp.ok()) return kp.status();
    h->client_ = kp.value();
    c.clients.push_back({"harness", h->client_.public_key});
    SB_RETURN_IF_ERROR(write_key_file(h->dir_ + "/client.key", h->client_));
  }
  // Two members must not draw the same port (free_port() closes its socket,
  // so the kernel may hand a port out twice).
  auto distinct = [&] {
    std::set<std::string> eps;
    for (const auto& m : c.members)
      if (!eps.insert(m.control).second || !eps.insert(m.publish).second) return false;
    return true;
  };
  auto fresh_ports = [&]() -> Status {
    for (int i = 0; i < 16; ++i) {
      for (uint32_t j = 0; j < opt.nodes; ++j) {
        Result<rib::Member> lm = loopback_member(j);
        if (!lm.ok()) return lm.status();
        c.members[j].control = lm.value().control;
        c.members[j].publish = lm.value().publish;
      }
      if (distinct()) return Status::Ok();
    }
    return Status::Io("no distinct free ports");
  };
  if (!distinct()) SB_RETURN_IF_ERROR(fresh_ports());
  c.assign_round_robin();
  SB_RETURN_IF_ERROR(c.validate());
  // The ports come from free_port(), which closes its socket before the
  // node binds: another process, or an outgoing connection of a node
  // started first (its ephemeral source port), can take a port in between.
  // A node that then cannot bind makes the whole start retry on new ports.
  h->pid_.assign(opt.nodes, -1);
  Status st;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) {
      for (pid_t& p : h->pid_)
        if (p > 0) {
          ::kill(p, SIGKILL);
          int ws;
          ::waitpid(p, &ws, 0);
          p = -1;
        }
      for (uint32_t i = 0; i < opt.nodes; ++i) {
        std::error_code ec;
        fs::remove_all(h->dir_ + "/data" + std::to_string(i), ec);
        fs::remove(h->dir_ + "/node" + std::to_string(i) + ".log", ec);
      }
      SB_RETURN_IF_ERROR(fresh_ports());
    }
    const std::string cluster_yaml = yaml_cluster(c, opt.fib_capacity);
    for (uint32_t i = 0; i < opt.nodes; ++i) {
      std::ofstream f(h->config_path(i));
      f << cluster_yaml << "node:\n  id: " << i << "\n  data_dir: " << h->dir_ << "/data" << i << "\n";
      if (opt.curve) f << "  key_file: " << h->dir_ << "/node" << i << ".key\n";
      f << "  fsync: " << rib::fsync_policy_name(opt.fsync) << "\n  fib_capacity: " << opt.fib_capacity
        << "\n  snapshot_every: " << opt.snapshot_every << "\n" << opt.node_yaml;
      if (!f) return Status::Io(h->config_path(i) + ": write");
    }
    h->attempts_ = attempt + 1;
    int taken = -1;
    if (opt.test_port_taken_once && attempt == 0) {
      taken = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(std::stoi(c.members[0].control.substr(c.members[0].control.rfind(':') + 1))));
      if (taken < 0 || ::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(taken, 1) != 0)
        return Status::Io("test_port_taken_once: cannot take the port");
    }
    st = Status::Ok();
    for (uint32_t i = 0; i < opt.nodes && st.ok(); ++i) st = h->launch(i, opt.extra_args);
    for (uint32_t i = 0; i < opt.nodes && st.ok(); ++i) st = h->wait_ready(i, 0);
    if (taken >= 0) ::close(taken);
    if (st.ok() || st.message().find("cannot bind") == std::string::npos) break;
  }
  SB_RETURN_IF_ERROR(st);
  return h;
}

std::string Harness::config_path(uint32_t node) const {
  return dir_ + "/node" + std::to_string(node) + ".yaml";
}

Status Harness::launch(uint32_t node, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {opt_.sb_node, "--config", config_path(node), "--control-only"};
  for (const auto& a : extra) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = dir_ + "/node" + std::to_string(node) + ".log";
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, opt_.sb_node.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::Io("cannot start " + opt_.sb_node + ": " + std::strerror(rc));
  pid_[node] = pid;
  return Status::Ok();
}

Status Harness::wait_ready(uint32_t node, size_t log_offset) {
  const std::string log = dir_ + "/node" + std::to_string(node) + ".log";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.ready_timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    if (s.size() > log_offset && s.find(": ready", log_offset) != std::string::npos) return Status::Ok();
    int st;
    if (::waitpid(pid_[node], &st, WNOHANG) == pid_[node]) {
      pid_[node] = -1;
      return Status::Io("node " + std::to_string(node) + " exited before ready: " + s.substr(log_offset));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Unavailable("node " + std::to_string(node) + " not ready in time (see " + log + ")");
}

Status Harness::kill9(uint32_t node) {
  if (node >= pid_.size() || pid_[node] <= 0) return Status::FailedPrecondition("node not running");
  ::kill(pid_[node], SIGKILL);
  int st;
  ::waitpid(pid_[node], &st, 0);
  pid_[node] = -1;
  return Status::Ok();
}

Status Harness::restart(uint32_t node, const std::vector<std::string>& extra_args) {
  if (pid_[node] > 0) SB_RETURN_IF_ERROR(kill9(node));
  const std::string log = dir_ + "/node" + std::to_string(node) + ".log";
  std::error_code ec;
  const size_t off = fs::exists(log, ec) ? size_t(fs::file_size(log, ec)) : 0;
  SB_RETURN_IF_ERROR(launch(node, extra_args.empty() ? opt_.extra_args : extra_args));
  return wait_ready(node, off);
}

Result<std::unique_ptr<Client>> Harness::client() const {
  return Client::connect(spec_, client_keys());
}

Harness::~Harness() {
  for (pid_t& p : pid_) {
    if (p > 0) {
      ::kill(p, SIGKILL);
      int st;
      ::waitpid(p, &st, 0);
      p = -1;
    }
  }
  if (!opt_.keep_dir && !dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace sb::control
