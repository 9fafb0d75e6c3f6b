// End-to-end tests of testbed/up and testbed/down on the real kernel: they
// create network namespaces, bridges, veths and sshd processes (root
// needed: make test runs as root), use testbed index 14 so they never touch
// a demo testbed (index 0), and check that down leaves nothing behind.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/test_util.h"

using sb::test::has;
using sb::test::Run;
using sb::test::sh;

namespace {


std::string src() { return sb::test::src_dir(); }


std::vector<int> recorded_pids(const std::string& record) {
  std::vector<int> pids;
  std::ifstream in(record);
  std::string kind, name, line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    ls >> kind >> name;
    if (kind == "pid") pids.push_back(std::stoi(name));
  }
  return pids;
}

// Every trace of testbed sb14: namespaces, links, state.
std::string traces() {
  std::string t;
  const Run ns = sh("ip netns list | grep -E '^sb14(n[0-9]+|gen|enb)\\b' || true");
  t += ns.out;
  const Run links = sh("ip -br link | grep -E '^sb14' || true");
  t += links.out;
  if (access("/run/sb-testbed/sb14", F_OK) == 0) t += "state dir /run/sb-testbed/sb14\n";
  return t;
}


// A fake testbed sb14 for testbed/traffic: no namespaces, no DPDK. The
// state dir holds a one-node inventory (the node at 127.0.0.2); dir/bin has
// what traffic runs (`ip netns exec NS CMD` runs CMD here, curl answers
// nothing unless fake_curl is false) and
// dir/build/bin/sb-gen logs "EVENT TIME PID" lines to dir/events. Its sink
// is ready (prints its status lines) sink_delay s after it starts, as a
// DPDK EAL and port take a while; its report runs dir/on-report if there is one.
struct FakeTraffic {
  std::string dir;
  explicit FakeTraffic(double sink_delay, bool fake_curl = true) {
    sh(src() + "/testbed/down --index 14");  // a previous crashed run
    REQUIRE(traces().empty());
    char t[] = "/tmp/sbtb-traffic-XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    dir = t;
    const std::string ip = sh("command -v ip").out;
    REQUIRE(!ip.empty());
    REQUIRE(sh("mkdir -p " + dir + "/bin " + dir + "/build/bin /run/sb-testbed/sb14 && : > " + dir +
               "/events && : > /run/sb-testbed/sb14/objects && echo src_ip > " + dir + "/s.csv").rc == 0);
    std::ofstream(dir + "/bin/ip") << "#!/bin/sh\n"
                                   << "if [ \"$1\" = netns ] && [ \"$2\" = exec ]; then shift 3; exec \"$@\"; fi\n"
                                   << "exec " << ip.substr(0, ip.size() - 1) << " \"$@\"\n";
    if (fake_curl) std::ofstream(dir + "/bin/curl") << "#!/bin/sh\nexit 7\n";
    std::ofstream(dir + "/build/bin/sb-gen")
        << "#!/bin/bash\n"
        << "ev=" << dir << "/events mode=$1 out=\n"
        << "shift; while [ $# -gt 0 ]; do case \"$1\" in --out) out=$2; shift 2 ;; *) shift ;; esac; done\n"
        << "t() { date +%s.%N; }\n"
        << "case \"$mode\" in\n"
        << "sink)\n"
        << "  echo \"sink-start $(t) $$\" >>\"$ev\"\n"
        << "  sleep " << sink_delay << "\n"
        << "  echo \"sink-ready $(t) $$\" >>\"$ev\"\n"
        << "  trap 'echo {\\\"mode\\\":\\\"sink\\\"} >\"$out\"; exit 0' TERM\n"
        << "  while :; do echo 'sb-gen sink:    1.0 s  rx 0  correct 0  misdelivered 0  dup 0  unknown 0' >&2\n"
        << "    sleep 0.2 & wait $!; done ;;\n"
        << "send)\n"
        << "  echo \"send-start $(t) $$\" >>\"$ev\"\n"
        << "  sleep 0.3; echo 'sb-gen send:    1.0 s  sent 0  (0 pps)  unknown 0  tx_failed 0' >&2; sleep 0.7\n"
        << "  echo '{\"mode\":\"send\"}' >\"$out\" ;;\n"
        << "report)\n"
        << "  if [ -x " << dir << "/on-report ]; then " << dir << "/on-report; fi\n"
        << "  echo '{}' ;;\n"
        << "esac\n";
    std::ofstream("/run/sb-testbed/sb14/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                                    << "        n1:\n"
                                                    << "          ansible_host: 127.0.0.2\n"
                                                    << "          ext_mac: \"02:5b:0e:01:01:00\"\n"
                                                    << "          enb_port_mac: \"02:5b:0e:03:01:00\"\n"
                                                    << "          s1u_ip: 198.18.233.11\n";
    REQUIRE(sh("chmod +x " + dir + "/bin/* " + dir + "/build/bin/sb-gen").rc == 0);
  }
  ~FakeTraffic() {
    sh(src() + "/testbed/down --index 14");
    sh("rm -rf " + dir);
  }
  // The traffic command line (a 1 s run).
  std::string cmd() const {
    return "PATH=" + dir + "/bin:$PATH " + src() + "/testbed/traffic --index 14 --build " + dir +
           "/build --sessions " + dir + "/s.csv --duration 1 --out " + dir + "/out";
  }
  // The time of the first EVENT line, -1 if there is none.
  double event(const std::string& what) const {
    std::ifstream in(dir + "/events");
    std::string e;
    double t;
    int pid;
    while (in >> e >> t >> pid)
      if (e == what) return t;
    return -1;
  }
};
}  // namespace

TEST_CASE("testbed up/down: namespaces, ssh, Ansible, nothing left behind", "[testbed]") {
  REQUIRE(geteuid() == 0);  // make test runs as root; the testbed needs it
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  sh(down + " --index 14");  // a previous crashed run
  REQUIRE(traces().empty());

  const Run u = sh(up + " --nodes 2 --index 14");
  INFO(u.out);
  REQUIRE(u.rc == 0);
  const std::vector<int> pids = recorded_pids("/run/sb-testbed/sb14/objects");
  CHECK(pids.size() == 2);  // one sshd per node namespace
  for (int p : pids) CHECK(kill(p, 0) == 0);

  // The node namespaces have their four interfaces, MTU >= 1600 on data ports.
  const Run links = sh("ip -n sb14n2 -o link show");
  for (const char* ifn : {"ext", "fabric", "enb", "mgmt"}) CHECK(has(links.out, std::string(" ") + ifn + "@"));
  CHECK(has(sh("ip -n sb14n1 -o link show fabric").out, "mtu 1600"));
  CHECK(has(sh("ip -n sb14n1 -o addr show mgmt").out, "198.18.224.11/24"));
  // Only 198.18.0.0/15 addresses anywhere in the testbed.
  for (const char* ns : {"sb14n1", "sb14n2", "sb14gen", "sb14enb"}) {
    const Run a = sh(std::string("ip -n ") + ns + " -4 -o addr show | awk '{print $4}'");
    std::istringstream in(a.out);
    std::string addr;
    while (in >> addr) {
      INFO(ns << " " << addr);
      CHECK((addr.rfind("198.18.", 0) == 0 || addr.rfind("198.19.", 0) == 0 || addr.rfind("127.", 0) == 0));
    }
  }

  // Ansible reaches every node over ssh, from the root namespace.
  const Run ping = sh("ANSIBLE_NOCOLOR=1 ansible -i " + src() +
                      "/ansible/inventories/testbed/hosts.yml sb_nodes -m ping -o");
  INFO(ping.out);
  CHECK(ping.rc == 0);
  CHECK(has(ping.out, "n1 | SUCCESS"));
  CHECK(has(ping.out, "n2 | SUCCESS"));

  // The inventory testbed/up wrote is valid with the versioned group_vars,
  // and the playbooks parse against it.
  const Run inv = sh("cd " + src() + "/ansible && ansible-inventory -i inventories/testbed/hosts.yml --list");
  INFO(inv.out);
  CHECK(inv.rc == 0);
  CHECK(has(inv.out, "\"service_mode\": \"supervised\""));
  CHECK(has(inv.out, "\"netns\": \"sb14n2\""));
  const Run syn = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ansible-playbook --syntax-check "
                     "-i inventories/testbed/hosts.yml site.yml");
  CHECK(syn.rc == 0);

  // up refuses to clobber; --force replaces.
  const Run again = sh(up + " --nodes 2 --index 14");
  CHECK(again.rc != 0);
  CHECK(has(again.out, "already exists"));
  const Run forced = sh(up + " --nodes 1 --index 14 --force");
  INFO(forced.out);
  CHECK(forced.rc == 0);
  for (int p : pids) CHECK(kill(p, 0) != 0);  // the old sshds are gone
  const std::vector<int> pids2 = recorded_pids("/run/sb-testbed/sb14/objects");

  const Run d = sh(down + " --index 14");
  INFO(d.out);
  CHECK(d.rc == 0);
  CHECK(traces().empty());
  for (int p : pids2) {
    // Gone or a zombie awaiting its reaper: not running.
    std::ifstream st("/proc/" + std::to_string(p) + "/stat");
    std::string s;
    std::getline(st, s);
    CHECK((s.empty() || has(s, ") Z ")));
  }
  CHECK(access((src() + "/ansible/inventories/testbed/hosts.yml").c_str(), F_OK) != 0);
  // Idempotent.
  const Run d2 = sh(down + " --index 14");
  CHECK(d2.rc == 0);
  CHECK(has(d2.out, "nothing to remove"));
}

TEST_CASE("testbed up that fails half-way removes what it made (also from inside a function)", "[testbed]") {
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  sh(down + " --index 14");  // a previous crashed run
  REQUIRE(traces().empty());
  // An sshd that starts and writes no PID file: up gives up on node 1's
  // sshd (tb_die, an exit the old ERR trap never saw) after making the
  // namespaces, bridges and veths.
  char tmpl[] = "/tmp/sbtb-fake-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string bin = tmpl;
  REQUIRE(sh("printf '#!/bin/sh\nexit 0\n' > " + bin + "/sshd && chmod +x " + bin + "/sshd").rc == 0);
  const Run u = sh("PATH=" + bin + ":$PATH " + up + " --nodes 2 --index 14");
  sh("rm -rf " + bin);
  INFO(u.out);
  CHECK(u.rc != 0);
  CHECK(has(u.out, "did not start"));
  CHECK(has(u.out, "removing what was made"));
  CHECK(traces().empty());
}

TEST_CASE("testbed up that fails while moving a veth leaves no temporary veth behind", "[testbed]") {
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  sh(down + " --index 14");  // a previous crashed run
  REQUIRE(traces().empty());
  // An `ip` that refuses to move a new veth into node 1's namespace: the
  // pair still has its temporary names (sb14ta..., sb14tb...) in the root
  // namespace when up gives up; up's cleanup (testbed/down) must delete it.
  char tmpl[] = "/tmp/sbtb-fakeip-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string bin = tmpl, ip = sh("command -v ip").out;
  REQUIRE(!ip.empty());
  std::ofstream(bin + "/ip") << "#!/bin/sh\ncase \"$*\" in \"link set sb14t\"*\" netns sb14n1\") exit 1 ;; esac\n"
                             << "exec " << ip.substr(0, ip.size() - 1) << " \"$@\"\n";
  REQUIRE(sh("chmod +x " + bin + "/ip").rc == 0);
  const Run u = sh("PATH=" + bin + ":$PATH " + up + " --nodes 2 --index 14");
  sh("rm -rf " + bin);
  INFO(u.out);
  CHECK(u.rc != 0);
  CHECK(has(u.out, "removing what was made"));
  CHECK(traces().empty());
  // Whatever the check found, leave nothing for the next test.
  sh("for l in $(ip -br link | awk '$1 ~ /^sb14t[ab]/ {sub(/@.*/, \"\", $1); print $1}'); do ip link del $l; done");
}

TEST_CASE("testbed down kills a recorded PID only while it is still in its recorded namespace", "[testbed]") {
  // down checked only the name in a recorded PID's command line: after the
  // testbed's sshd died and its PID was reused by another sshd (the host's
  // own), down killed that one. A process named like an sshd, in the root
  // namespace, recorded as the sshd of sb14n1, must survive down.
  const std::string down = src() + "/testbed/down";
  sh(down + " --index 14");  // a previous crashed run
  REQUIRE(traces().empty());
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/bin/sleep", "sshd-not-the-testbeds", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Reap {
    pid_t p;
    ~Reap() {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  } reap{pid};
  REQUIRE(sh("mkdir -p /run/sb-testbed/sb14 && echo 'pid " + std::to_string(pid) +
             " sshd sb14n1' > /run/sb-testbed/sb14/objects").rc == 0);
  const Run d = sh(down + " --index 14");
  INFO(d.out);
  CHECK(d.rc == 0);
  int st = 0;
  CHECK(waitpid(pid, &st, WNOHANG) == 0);  // still running
  CHECK(traces().empty());
}

TEST_CASE("testbed scripts reject bad arguments and non-root users", "[testbed]") {
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  struct Case { std::string cmd; const char* msg; };
  const Case cases[] = {
      {up + " --nodes 0", "--nodes must be 1..16"},
      {up + " --nodes 17", "--nodes must be 1..16"},
      {up + " --nodes x", "--nodes must be 1..16"},
      {up + " --index 16", "--index must be 0..15"},
      {up + " --nodes", "--nodes needs a value"},
      {up + " --bogus", "unknown argument '--bogus'"},
      {down + " --index abc", "--index must be 0..15"},
      {"setpriv --reuid=65534 --regid=65534 --clear-groups " + up + " --index 14", "needs root"},
      {"setpriv --reuid=65534 --regid=65534 --clear-groups " + down + " --index 14", "needs root"},
  };
  for (const auto& c : cases) {
    INFO(c.cmd);
    const Run r = sh(c.cmd);
    CHECK(r.rc != 0);
    CHECK(has(r.out, c.msg));
  }
  CHECK(traces().empty());
  const Run h = sh(up + " --help");
  CHECK(h.rc == 0);
  for (const char* o : {"--nodes", "--index", "--force"}) CHECK(has(h.out, o));
  // --help prints the script's opening comment, and only that (a fixed
  // line range printed `set -euo pipefail` as its last line).
  for (const char* s : {"up", "down", "traffic"}) {
    const Run hs = sh(src() + "/testbed/" + s + " --help");
    INFO(s << " --help:\n" << hs.out);
    CHECK(hs.rc == 0);
    CHECK(has(hs.out, std::string("testbed/") + s + ": "));
    CHECK(!has(hs.out, "set -e"));
    CHECK(!has(hs.out, "#!"));
  }
}

TEST_CASE("testbed traffic starts the sender only once the sink is ready", "[testbed]") {
  // traffic slept 1 s after starting the sink and then started the sender:
  // a sink whose EAL and port took longer (2 shared cores, other tests'
  // builds) missed the first packets, counted lost. Here the sink is ready
  // 2.5 s after it starts.
  REQUIRE(geteuid() == 0);
  FakeTraffic f(2.5);
  const Run r = sh(f.cmd());
  INFO(r.out << sh("cat " + f.dir + "/events").out);
  CHECK(r.rc == 0);
  REQUIRE(f.event("sink-ready") > 0);
  REQUIRE(f.event("send-start") > 0);
  CHECK(f.event("send-start") >= f.event("sink-ready"));
}

TEST_CASE("testbed traffic never signals a PID it has already reaped", "[testbed]") {
  // traffic's exit trap killed every PID it had started, the sender and
  // the sink included after it had waited for them: by then their PIDs
  // could belong to other processes (pid_max is 32768 on many hosts). In a
  // PID namespace of its own, the fake report gives a decoy the reaped
  // sender's PID (ns_last_pid); the decoy must survive traffic's exit.
  REQUIRE(geteuid() == 0);
  FakeTraffic f(0.2);
  std::ofstream(f.dir + "/on-report")
      << "#!/bin/bash\n"
      << "ev=" << f.dir << "/events\n"
      << "grep -q '^decoy ' \"$ev\" && exit 0\n"
      << "pid=$(awk '$1==\"send-start\" {print $3}' \"$ev\")\n"
      << "for _ in $(seq 1 20); do\n"
      << "  echo $((pid - 1)) >/proc/sys/kernel/ns_last_pid\n"
      << "  setsid sleep 30 </dev/null >/dev/null 2>&1 &\n"
      << "  d=$!\n"
      << "  if [ \"$d\" = \"$pid\" ]; then echo \"decoy $(date +%s.%N) $d\" >>\"$ev\"; exit 0; fi\n"
      << "  kill \"$d\"\n"
      << "done\n";
  std::ofstream(f.dir + "/run.sh") << f.cmd() << "\n"
                                   << "echo \"traffic exit $?\"\n"
                                   << "d=$(awk '$1==\"decoy\" {print $3}' " << f.dir << "/events)\n"
                                   << "if [ -n \"$d\" ] && kill -0 \"$d\" 2>/dev/null; then echo 'decoy alive'; fi\n";
  REQUIRE(sh("chmod +x " + f.dir + "/on-report").rc == 0);
  // The namespace's first process runs run.sh; when it ends, the kernel
  // ends every process left in the namespace (the decoy).
  const Run r = sh("unshare --pid --fork --mount-proc bash " + f.dir + "/run.sh");
  INFO(r.out << sh("cat " + f.dir + "/events").out);
  CHECK(has(r.out, "traffic exit 0"));
  REQUIRE(f.event("decoy") > 0);
  CHECK(has(r.out, "decoy alive"));
}

TEST_CASE("testbed traffic refuses a bad --duration or a missing value before it starts anything", "[testbed]") {
  // --duration reached shell arithmetic ($((DURATION + 60))) unchecked,
  // after the sampler had started: names and a[$(cmd)] were evaluated (the
  // command ran, as root), 2.5 failed half-way with a syntax error, 010 was
  // 8 to the shell and 10 to sb-gen, 0 made sb-gen send run until a signal.
  REQUIRE(geteuid() == 0);
  FakeTraffic f(0.2);
  struct Case { std::string args, msg; };
  const Case cases[] = {
      {" --duration 'PATH[$(touch " + f.dir + "/ran)]'", "--duration must be a whole number"},
      {" --duration 2.5", "--duration must be a whole number"},
      {" --duration 0", "--duration must be a whole number"},
      {" --duration 010", "--duration must be a whole number"},
      {" --out", "--out needs a value"},
  };
  for (const auto& c : cases) {
    REQUIRE(sh(": > " + f.dir + "/events").rc == 0);
    const Run r = sh(f.cmd() + c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, c.msg));
    CHECK(access((f.dir + "/ran").c_str(), F_OK) != 0);
    CHECK(sh("cat " + f.dir + "/events").out.empty());  // no sink, no sender started
  }
}

TEST_CASE("testbed up stopped by a signal right after it made a namespace or a bridge leaves neither behind", "[testbed]") {
  // up recorded a namespace or a bridge only after `ip` had made it: a
  // SIGTERM (or the Ctrl-C that also reaches up) while `ip` ran took up's
  // exit trap to testbed/down before the record line was written, and the
  // object was never removed. (A veth cannot leak so: its other end is
  // recorded, and deleting one end deletes the pair.) Here `ip` signals up
  // as soon as it has made the object.
  REQUIRE(geteuid() == 0);
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  const std::string ip = sh("command -v ip").out;
  REQUIRE(!ip.empty());
  // Shell case patterns of the `ip` command lines after which up is signalled.
  for (const char* made : {"'netns add sb14n1'", "'link add sb14fab type bridge stp_state 0'"}) {
    INFO(made);
    sh(down + " --index 14");  // a previous crashed run
    REQUIRE(traces().empty());
    char tmpl[] = "/tmp/sbtb-fakeip-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    const std::string bin = tmpl;
    std::ofstream(bin + "/ip") << "#!/bin/sh\n"
                               << ip.substr(0, ip.size() - 1) << " \"$@\"; rc=$?\n"
                               << "case \"$*\" in " << made << ") kill -TERM $PPID ;; esac\n"
                               << "exit $rc\n";
    REQUIRE(sh("chmod +x " + bin + "/ip").rc == 0);
    const Run u = sh("PATH=" + bin + ":$PATH " + up + " --nodes 2 --index 14");
    sh("rm -rf " + bin);
    INFO(u.out);
    CHECK(u.rc != 0);
    CHECK(has(u.out, "removing what was made"));
    CHECK(traces().empty());
    // Whatever the check found, leave nothing for the next test.
    sh("ip netns del sb14n1 2>/dev/null; ip link del sb14fab 2>/dev/null; " + down + " --index 14");
  }
}

TEST_CASE("testbed up refuses a testbed whose namespaces exist without its state, whichever they are", "[testbed]") {
  // up looked only for node 1's namespace, with `ip netns list | grep -q`
  // under pipefail: a leftover of the same index without its state dir
  // (another node's or the generator's namespace) went unseen, and grep -q
  // ending before ip had written everything made ip die of SIGPIPE, which
  // read as "not found" even when node 1's namespace was listed. Either way
  // up went on over the leftovers. A stand-in `ip netns list` lists them.
  REQUIRE(geteuid() == 0);
  const std::string up = src() + "/testbed/up", down = src() + "/testbed/down";
  const std::string ip = sh("command -v ip").out;
  REQUIRE(!ip.empty());
  struct Case {
    const char* what;
    std::string list;  // shell commands printing `ip netns list`
  };
  const Case cases[] = {
      {"the generator's and node 2's namespaces", "echo 'sb14gen (id: 7)'; echo sb14n2"},
      {"node 1's namespace first in a long list", "echo 'sb14n1 (id: 3)'; seq 1 200000 | sed 's/^/other/'"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    sh(down + " --index 14");  // a previous crashed run
    REQUIRE(traces().empty());
    char tmpl[] = "/tmp/sbtb-fakeip-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    const std::string bin = tmpl;
    std::ofstream(bin + "/ip") << "#!/bin/sh\n"
                               << "if [ \"$*\" = \"netns list\" ]; then " << c.list << "; exit $?; fi\n"  // like ip: dies of SIGPIPE once its reader is gone
                               << "exec " << ip.substr(0, ip.size() - 1) << " \"$@\"\n";
    REQUIRE(sh("chmod +x " + bin + "/ip").rc == 0);
    const Run u = sh("PATH=" + bin + ":$PATH " + up + " --nodes 2 --index 14");
    sh("rm -rf " + bin);
    INFO(u.out);
    CHECK(u.rc != 0);
    CHECK(has(u.out, "already exists"));
    CHECK_FALSE(has(u.out, "creating sb14"));
    sh(down + " --index 14");  // whatever it made
    CHECK(traces().empty());
  }
}

TEST_CASE("testbed traffic samples the nodes' /metrics directly, never through an http_proxy", "[testbed]") {
  // curl honours http_proxy: on a host that sets one, the sampler sent
  // every request for a node's /metrics to the proxy (off the machine),
  // which cannot reach the testbed: metrics.csv stayed empty. The proxy
  // here is a listener on 127.0.0.1 that must see no connection.
  REQUIRE(geteuid() == 0);
  const sb::test::LoopbackListener proxy;
  REQUIRE(proxy.ok());
  FakeTraffic f(0.2, false);
  const Run r = sh(proxy.proxy_env() + " " + f.cmd());
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(proxy.hit());  // nothing connected to the proxy
}
