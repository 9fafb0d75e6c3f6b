// Tests of the Ansible side that need no running cluster: every playbook
// passes --syntax-check against both inventories, the example inventory
// parses, the systemd unit verifies, and sb-supervise (the testbed's
// supervisor) starts, restarts, reports and stops a process by PID file.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/test_util.h"

using sb::test::has;
using sb::test::Run;
using sb::test::sh;

namespace {


std::string src() { return sb::test::src_dir(); }

std::string tmpdir() {
  char t[] = "/tmp/sb-ansible-test-XXXXXX";
  REQUIRE(mkdtemp(t) != nullptr);
  return t;
}

}  // namespace

TEST_CASE("ansible: every playbook passes --syntax-check", "[ansible]") {
  const std::string a = src() + "/ansible";
  for (const char* pb : {"site.yml", "start.yml", "stop.yml", "status.yml", "rolling-restart.yml", "restart-changed.yml"}) {
    INFO(pb);
    const Run r = sh("cd " + a + " && ANSIBLE_CONFIG=ansible.cfg ansible-playbook --syntax-check -i "
                     "inventories/example-hardware/hosts.yml " + pb);
    INFO(r.out);
    CHECK(r.rc == 0);
  }
}

TEST_CASE("ansible: a change restarts its nodes one at a time, never the cluster at once", "[ansible]") {
  // The handler only marks a node; no handler restarts anything itself
  // (handlers run on every notified host in parallel).
  const std::string handlers = sh("cat " + src() + "/ansible/roles/restart_mark/handlers/main.yml").out;
  CHECK(has(handlers, "sb_node_restart_pending"));
  CHECK_FALSE(has(handlers, "state: restarted"));
  CHECK_FALSE(has(handlers, "'restart'"));
  // restart-changed.yml (imported by site.yml and start.yml) on four local
  // "hosts", three of them marked: a stand-in sb-supervise logs when each
  // restart begins and ends; no two may overlap, the unmarked host is left alone.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin && cat > " + d + "/bin/sb-supervise <<'EOF'\n"
             "#!/bin/sh\n"
             "p=''; while [ $# -gt 0 ]; do case \"$1\" in --pidfile) p=$2; shift 2;; --) break;; *) shift;; esac; done\n"
             "h=$(basename \"$p\" .pid); echo \"begin $h\" >> " + d + "/restarts; sleep 0.4; echo \"end $h\" >> " + d +
             "/restarts\n"
             "EOF\nchmod +x " + d + "/bin/sb-supervise").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {sb_node_restart_pending: true}\n"
                                     "        n2: {sb_node_restart_pending: false}\n"
                                     "        n3: {sb_node_restart_pending: true}\n"
                                     "        n4: {sb_node_restart_pending: true}\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    health_mode: none\n    install_dir: " << d << "/bin\n"
                                     "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                     "    pid_file: \"" << d << "/{{ inventory_hostname }}.pid\"\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ansible-playbook -i " + d +
                   "/hosts.yml restart-changed.yml");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(sh("cat " + d + "/restarts").out == "begin n1\nend n1\nbegin n3\nend n3\nbegin n4\nend n4\n");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the example-hardware inventory is valid", "[ansible]") {
  const Run r = sh("cd " + src() + "/ansible && ansible-inventory -i inventories/example-hardware/hosts.yml --list");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  for (const char* h : {"\"gw1\"", "\"gw4\"", "\"sb_nodes\"", "\"service_mode\": \"systemd\""}) CHECK(has(r.out, h));
  // Hugepages for sb-node's EAL memory and no more (its tables are not on
  // hugepages): it reserved 16384 pages (32 GiB) for 4096 MiB of EAL memory.
  CHECK(has(r.out, "\"hugepages_2m\": 2048,"));
  CHECK(has(r.out, "\"sb_memory_mb\": 4096,"));
}

TEST_CASE("ansible: the packages role installs DPDK with its recommended drivers", "[ansible]") {
  // dpdk's PMDs and ring mempool driver are Recommends: a host with
  // Install-Recommends off must still get them.
  const std::string t = sh("cat " + src() + "/ansible/roles/packages/tasks/main.yml").out;
  const size_t apt = t.find("ansible.builtin.apt:");
  REQUIRE(apt != std::string::npos);
  const size_t end = t.find("\n- name:", apt);
  CHECK(has(t.substr(apt, end == std::string::npos ? std::string::npos : end - apt), "install_recommends: true"));
  const Run c = sh("dpkg-query -W -f='${Recommends}' dpdk 2>/dev/null");
  if (c.rc == 0) CHECK(has(c.out, "librte-mempool-ring"));  // why it matters, where dpdk is installed
}

TEST_CASE("ansible: the systemd unit verifies", "[ansible]") {
  const std::string d = tmpdir();
  // The unit names its ExecStart binary: give it one to find.
  REQUIRE(sh("mkdir -p " + d + "/bin && printf '#!/bin/sh\\n' > " + d + "/bin/sb-node && chmod +x " + d +
             "/bin/sb-node").rc == 0);
  const Run t = sh("cd " + src() + "/ansible && ansible localhost -c local -m ansible.builtin.template -a "
                   "'src=roles/service/templates/sb-node.service.j2 dest=" + d + "/sb-node.service' "
                   "-e @roles/layout/defaults/main.yml -e @roles/service/defaults/main.yml "
                   "-e install_dir=" + d + "/bin -e config_path=/etc/sb/sb-node.yaml -e sb_node_args='' "
                   "-e sb_stop_timeout_s=30");
  INFO(t.out);
  REQUIRE(t.rc == 0);
  const std::string unit = sh("cat " + d + "/sb-node.service").out;
  CHECK(has(unit, "\nRestartPreventExitStatus=2 3\n"));  // usage, configuration: a restart cannot fix them
  CHECK(has(unit, "\nTimeoutStopSec=30\n"));
  // Restarted without a start limit (in [Unit], where systemd reads it):
  // five quick crashes must not leave the gateway stopped for good.
  const size_t svc = unit.find("\n[Service]\n");
  REQUIRE(svc != std::string::npos);
  CHECK(has(unit.substr(0, svc), "\nStartLimitIntervalSec=0\n"));
  CHECK(has(unit, "\nRestart=on-failure\n"));
  // A root daemon that parses packets from untrusted sides runs sandboxed.
  for (const char* h : {"\nNoNewPrivileges=yes\n", "\nPrivateTmp=yes\n", "\nProtectSystem=full\n",
                        "\nProtectHome=read-only\n", "\nUMask=0077\n"}) {
    INFO(h);
    CHECK(has(unit, h));
  }
  // The role's one stop timeout, shared with sb-supervise.
  CHECK(has(sh("cat " + src() + "/ansible/roles/service/defaults/main.yml").out, "sb_stop_timeout_s: 30"));
  const Run v = sh("systemd-analyze verify " + d + "/sb-node.service");
  INFO(v.out);
  CHECK(v.rc == 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the service and health roles alone have install_dir's default, as install has", "[ansible]") {
  // install_dir had its default in the install role alone: the service
  // role rendered its unit and the health role its sb-ctl probe with an
  // undefined variable unless the inventory set it or the install role was
  // in the same play (site.yml), and status.yml read it from the inventory
  // only. The service role alone on one local "host" (a stand-in systemctl),
  // the health role alone (ctl mode), status.yml: no install_dir anywhere.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/path && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "case \"$1\" in\n"
             "  show) printf 'Id=sb-node.service\\nLoadState=loaded\\nActiveState=inactive\\n' ;;\n"
             "  is-enabled) echo disabled; exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1: {node_id: 1}\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: systemd\n"
                                     "    config_path: " << d << "/sb-node.yaml\n    key_file: " << d << "/node.key\n"
                                     "    sb_unit_path: " << d << "/sb-node.service\n    pid_file: " << d << "/sb-node.pid\n"
                                     "    health_mode: ctl\n    health_retries: 1\n    health_delay: 0\n";
  std::ofstream(d + "/service.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [service]\n";
  std::ofstream(d + "/health.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [health]\n";
  const std::string play = "cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg "
                           "ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d +
                           "/hosts.yml ";
  Run r = sh(play + d + "/service.yml");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "is undefined"));
  CHECK(has(sh("cat " + d + "/sb-node.service").out, "\nExecStart=\"/opt/sb/bin/sb-node\" \"--config\" \"" + d +
                                                          "/sb-node.yaml\"\n"));
  // The probe runs the default's sb-ctl (which this machine need not have:
  // the run may fail on that, never on an undefined variable).
  r = sh(play + d + "/health.yml");
  INFO(r.out);
  CHECK_FALSE(has(r.out, "is undefined"));
  CHECK(has(r.out, "\"cmd\": \"/opt/sb/bin/sb-ctl --config " + d + "/sb-node.yaml --key "));
  r = sh(play + "status.yml");  // reads, never changes anything
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "is undefined"));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the systemd unit quotes its paths and arguments by systemd's rules", "[ansible]") {
  // ExecStart had its paths unquoted: a space split a path into two
  // arguments, a % was read as a unit specifier (%z: the unit does not load)
  // and a $ as an environment variable. systemd-analyze verify loads the
  // unit and checks the executable it parsed exists; the words are then
  // read back by systemd's rules (systemd.syntax(7), systemd.service(5)):
  // %% -> %, double-quoted words with C escapes, $$ -> $ in the arguments.
  const std::string d = tmpdir();
  const std::string bin = d + "/my bin %z $X";
  const std::string cfg = d + "/conf dir/it's \"yes\" \\ 100% #1 ; ${HOME} $$/sb-node.yaml";
  REQUIRE(sh("mkdir -p '" + bin + "' && printf '#!/bin/sh\\n' > '" + bin + "/sb-node' && chmod +x '" + bin +
             "/sb-node'").rc == 0);
  // The variables as JSON (-e @file): no shell or k=v quoting in the way.
  auto json = [](const std::string& v) {
    std::string o = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o + "\"";
  };
  std::ofstream(d + "/vars.json") << "{\"install_dir\": " << json(bin) << ", \"config_path\": " << json(cfg)
                                  << ", \"sb_doc_dir\": " << json(d + "/doc dir %z $X")
                                  << ", \"sb_node_args\": \"--control-only  --x=a%b ;\", \"sb_stop_timeout_s\": 30}";
  const Run t = sh("cd " + src() + "/ansible && ansible localhost -c local -m ansible.builtin.template -a "
                   "'src=roles/service/templates/sb-node.service.j2 dest=" + d + "/sb-node.service' "
                   "-e @roles/layout/defaults/main.yml -e @roles/service/defaults/main.yml -e @" + d + "/vars.json");
  INFO(t.out);
  REQUIRE(t.rc == 0);
  const std::string unit = sh("cat " + d + "/sb-node.service").out;
  INFO(unit);
  const Run v = sh("systemd-analyze verify " + d + "/sb-node.service");
  INFO(v.out);
  CHECK(v.rc == 0);
  CHECK_FALSE(has(v.out, "Invalid URL"));  // Documentation=file:... percent-encoded
  std::ofstream(d + "/argv.py") << R"PY(
import sys
line = [l for l in open(sys.argv[1]) if l.startswith('ExecStart=')][0][len('ExecStart='):].rstrip('\n')
assert '%' not in line.replace('%%', ''), 'a lone % is a unit specifier'
line = line.replace('%%', '%')
esc = {'n': '\n', 't': '\t', 'r': '\r', '\\': '\\', '"': '"', "'": "'"}
words, i = [], 0
while i < len(line):
    if line[i] in ' \t':
        i += 1
        continue
    assert line[i] == '"', 'every word quoted: ' + line[i:]
    i, w = i + 1, ''
    while line[i] != '"':
        if line[i] == '\\':
            w, i = w + esc[line[i + 1]], i + 2
        else:
            w, i = w + line[i], i + 1
    words.append(w)
    i += 1
args = words[1:]
assert all('$' not in a.replace('$$', '') for a in args), 'a lone $ is a variable'
print('\n'.join([words[0]] + [a.replace('$$', '$') for a in args]))
)PY";
  const Run a = sh("python3 " + d + "/argv.py " + d + "/sb-node.service");
  INFO(a.out);
  CHECK(a.rc == 0);
  CHECK(a.out == bin + "/sb-node\n--config\n" + cfg + "\n--control-only\n--x=a%b\n;\n");
  sh("rm -rf '" + d + "'");
}

TEST_CASE("sb-supervise: start, keep alive, status, stop by PID file", "[ansible]") {
  const std::string sup = src() + "/ansible/roles/service/files/sb-supervise";
  const std::string d = tmpdir();
  const std::string pid = d + "/p.pid", log = d + "/p.log";
  const std::string start = sup + " start --pidfile " + pid + " --log " + log + " -- sleep 1000";
  Run r = sh(start);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "started"));
  r = sh(start);
  CHECK(has(r.out, "running"));  // idempotent: nothing changed
  r = sh(sup + " status --pidfile " + pid);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "running"));
  // The supervised child dies: it is restarted.
  const Run child = sh("pgrep -P $(cat " + pid + ") -f 'sleep 1000'");
  REQUIRE(child.rc == 0);
  const int c1 = std::stoi(child.out);
  kill(c1, SIGKILL);
  std::string c2;
  for (int i = 0; i < 50 && (c2.empty() || std::stoi(c2) == c1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const Run again = sh("pgrep -P $(cat " + pid + ") -f 'sleep 1000'");
    c2 = again.rc == 0 ? again.out : "";
  }
  REQUIRE_FALSE(c2.empty());
  CHECK(std::stoi(c2) != c1);
  const int sup_pid = std::stoi(sh("cat " + pid).out);
  r = sh(sup + " stop --pidfile " + pid);
  CHECK(has(r.out, "stopped"));
  CHECK(kill(sup_pid, 0) != 0);
  CHECK(kill(std::stoi(c2), 0) != 0);
  r = sh(sup + " stop --pidfile " + pid);
  CHECK(has(r.out, "not running"));
  r = sh(sup + " status --pidfile " + pid);
  CHECK(r.rc == 3);
  CHECK(has(sh("cat " + log).out, "restarting"));
  sh("rm -rf " + d);
}

TEST_CASE("sb-supervise: stop kills a command that ignores SIGTERM with its supervisor", "[ansible]") {
  const std::string sup = src() + "/ansible/roles/service/files/sb-supervise";
  const std::string d = tmpdir();
  const std::string pid = d + "/p.pid", log = d + "/p.log";
  Run r = sh(sup + " start --pidfile " + pid + " --log " + log + " -- sh -c 'trap \"\" TERM; exec sleep 1001'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  Run child;
  for (int i = 0; i < 50; ++i) {
    child = sh("pgrep -P $(cat " + pid + ") -f 'sleep 1001'");
    if (child.rc == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(child.rc == 0);
  const int c = std::stoi(child.out);
  const int sup_pid = std::stoi(sh("cat " + pid).out);
  const auto t0 = std::chrono::steady_clock::now();
  r = sh(sup + " stop --pidfile " + pid + " --stop-timeout 2");  // SIGTERM ignored: SIGKILL after 2 s
  CHECK(has(r.out, "stopped"));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took >= 1.5);
  CHECK(took < 10);
  for (int i = 0; i < 20 && (kill(c, 0) == 0 || kill(sup_pid, 0) == 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(kill(sup_pid, 0) != 0);
  CHECK(kill(c, 0) != 0);  // not orphaned, still running
  if (kill(c, 0) == 0) kill(c, SIGKILL);
  sh("rm -rf " + d);
}

namespace {
// Starts `command` under sb-supervise and waits (up to 5 s) until the
// supervisor is gone or `wait_s` passed; returns the log.
struct Supervised {
  std::string d, pid, log, sup;
  explicit Supervised(const std::string& command) {
    d = tmpdir();
    pid = d + "/p.pid";
    log = d + "/p.log";
    sup = src() + "/ansible/roles/service/files/sb-supervise";
    sh(sup + " start --pidfile " + pid + " --log " + log + " -- " + command);  // may say "did not start"
  }
  ~Supervised() {
    sh(sup + " stop --pidfile " + pid + " --stop-timeout 2");
    sh("rm -rf " + d);
  }
  bool running() const { return sh(sup + " status --pidfile " + pid).rc == 0; }
  std::string log_text() const { return sh("cat " + log).out; }
  int starts() const { return std::stoi(sh("grep -c 'starting:' " + log + " || true").out); }
};
}  // namespace

TEST_CASE("sb-supervise: exit 2 or 3 (usage, configuration) is not restarted, and says so", "[ansible]") {
  for (const char* rc : {"2", "3"}) {
    INFO("exit " << rc);
    Supervised s(std::string("sh -c 'echo bad config >&2; exit ") + rc + "'");
    // Restarts would come after 1 s, 2 s, ...: 2.5 s shows whether any happens.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const std::string l = s.log_text();
    INFO(l);
    CHECK_FALSE(s.running());
    CHECK(s.starts() == 1);
    CHECK(has(l, std::string("exited ") + rc + ": "));
    CHECK(has(l, "not restarting"));
    CHECK_FALSE(has(l, "restarting in"));
    CHECK(sh(s.sup + " status --pidfile " + s.pid).rc == 3);
  }
}

TEST_CASE("sb-supervise: a clean exit 0 after a SIGTERM sent to the command itself is not restarted", "[ansible]") {
  Supervised s("sh -c 'trap \"exit 0\" TERM; while :; do sleep 0.1; done'");
  Run child;
  for (int i = 0; i < 50; ++i) {
    child = sh("pgrep -P $(cat " + s.pid + ") -x sh");
    if (child.rc == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(child.rc == 0);
  REQUIRE(kill(std::stoi(child.out), SIGTERM) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const std::string l = s.log_text();
  INFO(l);
  CHECK_FALSE(s.running());
  CHECK(s.starts() == 1);
  CHECK(has(l, "exited 0: stopped cleanly"));
}

TEST_CASE("sb-supervise: any other exit is a crash and is restarted", "[ansible]") {
  Supervised s("sh -c 'exit 1'");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // starts at 0 s and 1 s (then 3 s)
  const std::string l = s.log_text();
  INFO(l);
  CHECK(s.running());
  CHECK(s.starts() >= 2);
  CHECK(has(l, "exited with 1; restarting in 1s"));
}

TEST_CASE("ansible: --diff never prints a node's CURVE secret key", "[ansible]") {
  // The keys role on one local "host", keys made by a stand-in sb-ctl.
  const std::string d = tmpdir();
  REQUIRE(sh("cat > " + d + "/sb-ctl <<'EOF'\n#!/bin/sh\n"
             "printf '# CURVE keypair\\npublic: \"PUBLIC-%s\"\\nsecret: \"SECRET-%s\"\\n' $$ $$ > \"$4\"\n"
             "EOF\nchmod +x " + d + "/sb-ctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    keys_dir: " << d << "/keys\n"
                                     "    sb_ctl_local: " << d << "/sb-ctl\n    key_file: " << d << "/n1/node.key\n";
  std::ofstream(d + "/keys.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [keys]\n"
                                    "  handlers:\n    - name: restart sb-node\n      ansible.builtin.debug: {msg: marked}\n";
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 "
                           "ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " +
                           d + "/keys.yml --diff";
  const Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  REQUIRE(has(sh("cat " + d + "/n1/node.key").out, "SECRET-"));  // the node got its key ...
  CHECK_FALSE(has(r.out, "SECRET-"));                              // ... and the log never saw it
  CHECK(sh("stat -c %a " + d + "/n1/node.key").out == "600\n");
  // Check mode with a key file that would change: still not shown.
  REQUIRE(sh("rm " + d + "/n1/node.key").rc == 0);
  const Run c = sh(play + " --check");
  INFO(c.out);
  CHECK(c.rc == 0);
  CHECK_FALSE(has(c.out, "SECRET-"));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: check mode of a pending restart does not fail on the health waits", "[ansible]") {
  // restart-changed.yml --check on a marked node: nothing is restarted, and
  // the health role (which would wait on a probe check mode never runs)
  // does not fail the dry run, for either health mode.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin && printf '#!/bin/sh\\necho ran >> " + d + "/ran\\n' > " + d +
             "/bin/sb-supervise && cp " + d + "/bin/sb-supervise " + d + "/bin/sb-ctl && chmod +x " + d +
             "/bin/*").rc == 0);
  for (const char* mode : {"http", "ctl"}) {
    INFO(mode);
    std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                       "        n1: {sb_node_restart_pending: true, node_id: 1}\n"
                                       "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                       "    health_mode: " << mode << "\n"
                                       "    health_url: http://127.0.0.1:9/health\n    health_retries: 2\n"
                                       "    keys_dir: " << d << "\n    install_dir: " << d << "/bin\n"
                                       "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                       "    pid_file: " << d << "/n1.pid\n";
    const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ansible-playbook -i " + d +
                     "/hosts.yml restart-changed.yml --check");
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(access((d + "/ran").c_str(), F_OK) != 0);  // a dry run restarts nothing
  }
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a new sb-ctl alone does not restart sb-node, a new sb-node does", "[ansible]") {
  // The install role (install_mode: copy) on one local "host", with a
  // stand-in build tree; the handler only says whether it was notified.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/build/bin && echo 1 > " + d + "/build/bin/sb-node && echo 1 > " + d +
             "/build/bin/sb-ctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    install_dir: " << d << "/bin\n";
  std::ofstream(d + "/install.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [install]\n"
                                       "  handlers:\n    - name: restart sb-node\n"
                                       "      ansible.builtin.debug: {msg: marked}\n";
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 "
                           "ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " +
                           d + "/install.yml -e sb_build_dir=" + d + "/build -e sb_source_dir=" + src();
  const std::string handler = "RUNNING HANDLER [restart sb-node]";
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, handler));  // first install
  REQUIRE(sh("echo 2 > " + d + "/build/bin/sb-ctl").rc == 0);
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(sh("cat " + d + "/bin/sb-ctl").out == "2\n");  // installed ...
  CHECK_FALSE(has(r.out, handler));                    // ... without a restart
  REQUIRE(sh("echo 2 > " + d + "/build/bin/sb-node").rc == 0);
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, handler));
  sh("rm -rf " + d);
}

namespace {
// "n1 : ok=14 changed=0 ..." -> 0 (-1: no recap line for the host)
int changed_count(const std::string& out, const std::string& host) {
  const std::string at = "\n" + host + " ";
  size_t p = out.rfind(at);
  if (p == std::string::npos) return -1;
  p = out.find("changed=", p);
  if (p == std::string::npos) return -1;
  return std::atoi(out.c_str() + p + 8);
}

// A stand-in `sb-ctl keys gen --out FILE` (a fake keypair per call) in d.
void fake_keygen(const std::string& d) {
  REQUIRE(sh("cat > " + d + "/sb-ctl <<'EOF'\n#!/bin/sh\n"
             "printf '# CURVE keypair\\npublic: \"PUBLIC-%s\"\\nsecret: \"SECRET-%s\"\\n' $$ $$ > \"$4\"\n"
             "EOF\nchmod +x " + d + "/sb-ctl").rc == 0);
}

// The variables the config template needs, for local "hosts" n1..nN whose
// files live under d/<host>/ (the key file at d/<host>/<key_file>).
// `extra` is appended to the group vars and `host_extra[i]` to host
// n(i+1)'s vars.
std::string local_inventory(const std::string& d, int n, const std::string& extra = "",
                            const std::vector<std::string>& host_extra = {},
                            const std::string& key_file = "keys/node.key") {
  std::string s = "all:\n  children:\n    sb_nodes:\n      hosts:\n";
  for (int i = 1; i <= n; ++i) {
    s += "        n" + std::to_string(i) + ":\n";
    s += "          ansible_host: 127.0.0." + std::to_string(i) + "\n";
    s += "          node_id: " + std::to_string(i) + "\n";
    s += "          fabric_mac: \"02:00:00:00:02:0" + std::to_string(i) + "\"\n";
    s += "          s1u_ip: 198.18.9." + std::to_string(10 + i) + "\n";
    if (size_t(i - 1) < host_extra.size()) s += host_extra[size_t(i - 1)];
  }
  s += "  vars:\n    ansible_connection: local\n    keys_dir: " + d + "/keys\n    sb_ctl_local: " + d + "/sb-ctl\n"
       "    data_dir: \"" + d + "/{{ inventory_hostname }}/data\"\n"
       "    config_path: \"" + d + "/{{ inventory_hostname }}/etc/sb-node.yaml\"\n"
       "    key_file: \"" + d + "/{{ inventory_hostname }}/" + key_file + "\"\n"
       "    ports: {ext: net_null0, fabric: net_null1, enb: net_null2}\n"
       "    ext_next_hop_mac: \"02:00:00:00:ee:01\"\n    enb_next_hop_mac: \"02:00:00:00:eb:01\"\n" + extra;
  return s;
}

// A play of `roles` with a stand-in `restart sb-node` handler that only says
// it ran; returns the command that runs it (extra ansible-playbook args after).
std::string local_play(const std::string& d, const std::string& roles) {
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [" << roles << "]\n"
                                    "  handlers:\n    - name: restart sb-node\n"
                                    "      ansible.builtin.debug: {msg: marked}\n";
  return "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() +
         "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d + "/play.yml";
}
}  // namespace

TEST_CASE("ansible: keys and config are idempotent when the key file and the config share a directory", "[ansible]") {
  // example-hardware puts both in /etc/sb: a second run must change nothing
  // (the keys role and the config role must not set the directory's mode
  // back and forth).
  const std::string d = tmpdir();
  fake_keygen(d);
  std::ofstream(d + "/hosts.yml") << local_inventory(d, 2, "", {}, "etc/node.key");
  const std::string play = local_play(d, "keys, config");
  const Run first = sh(play);
  INFO(first.out);
  REQUIRE(first.rc == 0);
  CHECK(changed_count(first.out, "n1") > 0);
  const Run second = sh(play);
  INFO(second.out);
  REQUIRE(second.rc == 0);
  CHECK(changed_count(second.out, "n1") == 0);
  CHECK(changed_count(second.out, "n2") == 0);
  // The directory holding the secret key stays closed to group and others.
  CHECK(sh("stat -c %a " + d + "/n1/etc").out == "700\n");
  CHECK(sh("stat -c %a " + d + "/n1/etc/node.key").out == "600\n");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a member's control and publish ports are the member's own on every node", "[ansible]") {
  // n2 binds other ports (a host variable, e.g. two nodes on one machine):
  // every node's member list must say so, and the cluster sections, which
  // every node must agree on, stay identical.
  const std::string d = tmpdir();
  std::ofstream(d + "/hosts.yml") << local_inventory(
      d, 2, "    sb_ctl_local: " SB_BUILD_DIR "/bin/sb-ctl\n    sb_hugepages: false\n    sb_memory_mb: 256\n",
      {"", "          sb_control_port: 7100\n          sb_publish_port: 7101\n"});
  const Run r = sh(local_play(d, "keys, config"));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::string c1 = sh("sed -n '/^cluster:/,/^node:/p' " + d + "/n1/etc/sb-node.yaml").out;
  const std::string c2 = sh("sed -n '/^cluster:/,/^node:/p' " + d + "/n2/etc/sb-node.yaml").out;
  INFO(c1);
  CHECK(has(c1, "control: \"tcp://127.0.0.2:7100\""));
  CHECK(has(c1, "publish: \"tcp://127.0.0.2:7101\""));
  CHECK(has(c1, "control: \"tcp://127.0.0.1:7000\""));
  CHECK(c1 == c2);
  for (const char* h : {"n1", "n2"}) {
    INFO(h);
    const Run v = sh(SB_BUILD_DIR "/bin/sb-node --config " + d + "/" + h + "/etc/sb-node.yaml --print-eal");
    INFO(v.out);
    CHECK(v.rc == 0);
  }
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a bad inventory fails clearly before anything is rendered or installed", "[ansible]") {
  struct Bad {
    const char* what;
    std::string from, to;  // a replacement in the valid inventory
    const char* says;
    bool site = false;  // also through site.yml (besides the first and the third)
  };
  const std::vector<Bad> bad = {
      {"duplicate node id", "node_id: 2", "node_id: 1", "node_id (a member id) used by more than one node: 1: n1, n2"},
      // sb-node reads "01" as 1: compared as numbers, not as strings.
      {"duplicate node id spelled with a leading zero", "node_id: 2", "node_id: \"01\"",
       "node_id (a member id) used by more than one node: 1: n1, n2"},
      // /metrics would bind the port the member's publish socket has.
      {"metrics port on the publish port", "    ansible_connection: local\n",
       "    ansible_connection: local\n    metrics_port: 7001\n",
       "n1: metrics_port '7001': a port in 1..65535 other than sb_control_port (7000) and sb_publish_port (7001)"},
      {"metrics address that is a host name", "    ansible_connection: local\n",
       "    ansible_connection: local\n    metrics_address: mgmt.example\n", "n1: metrics_address 'mgmt.example'"},
      {"node id too large", "node_id: 2", "node_id: 32", "n2: node_id '32'"},
      {"missing fabric_mac", "          fabric_mac: \"02:00:00:00:02:02\"\n", "", "n2: 'fabric_mac' is not set"},
      {"host name as address", "ansible_host: 127.0.0.2", "ansible_host: gw2.example", "n2: ansible_host 'gw2.example'"},
      {"same endpoints", "ansible_host: 127.0.0.2", "ansible_host: 127.0.0.1",
       "endpoint (ansible_host and sb_control_port/sb_publish_port) used by more than one node: tcp://127.0.0.1:7000: n1, n2"},
      {"loopback S1-U address", "s1u_ip: 198.18.9.12", "s1u_ip: 127.0.0.1", "n2: s1u_ip '127.0.0.1'"},
      {"duplicate fabric MAC", "\"02:00:00:00:02:02\"", "\"02-00-00-00-02-01\"",
       "fabric_mac used by more than one node: 02:00:00:00:02:01: n1, n2"},
      {"cluster name that is no path component", "    ansible_connection: local\n",
       "    ansible_connection: local\n    sb_cluster_name: \"lab/x\"\n", "sb_cluster_name 'lab/x'"},
      {"multicast ext port MAC", "ports: {ext: net_null0,", "ports: {ext: {device: net_null0, mac: \"03:00:00:00:10:01\"},",
       "mac (a unicast MAC"},
      {"all-zero enb port MAC", "enb: net_null2}", "enb: {device: net_null2, mac: \"00:00:00:00:00:00\"}}",
       "mac (a unicast MAC"},
      // systemd takes no executable from these paths (ExecStart is install_dir/sb-node).
      {"install_dir with a trailing slash", "    ansible_connection: local\n",
       "    ansible_connection: local\n    install_dir: /opt/sb/bin/\n", "install_dir '/opt/sb/bin/': the systemd unit"},
      // Hugepages (hugepages_2m, reserved by the packages role): more than the
      // host holds, fewer than sb-node's EAL memory (sb_memory_mb 2048 here).
      {"hugepages beyond the host's memory", "    ansible_connection: local\n",
       "    ansible_connection: local\n    hugepages_2m: 2048\n    ansible_memtotal_mb: 4096\n",
       "n1: hugepages_2m 2048 reserves 4096 MiB of hugepages, but this host has 4096 MiB of memory", true},
      {"hugepages below the EAL memory", "    ansible_connection: local\n",
       "    ansible_connection: local\n    hugepages_2m: 512\n    ansible_memtotal_mb: 65536\n",
       "n1: hugepages_2m 512 gives 1024 MiB of hugepages, less than the sb_memory_mb (2048 MiB)"},
      {"hugepages beyond this machine's memory (its facts)", "    ansible_connection: local\n",
       "    ansible_connection: local\n    hugepages_2m: 1000000000\n",
       "n1: hugepages_2m 1000000000 reserves 2000000000 MiB of hugepages, but this host has "},
      {"hugepages not a number", "    ansible_connection: local\n", "    ansible_connection: local\n    hugepages_2m: 16G\n",
       "n1: hugepages_2m '16G': a whole number of 2 MiB pages"},
      {"install_dir with a backslash", "    ansible_connection: local\n",
       "    ansible_connection: local\n    install_dir: /opt/s\\b\n", "install_dir '/opt/s"},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    const std::string d = tmpdir();
    fake_keygen(d);
    std::string inv = local_inventory(d, 2);
    const size_t at = inv.find(b.from);
    REQUIRE(at != std::string::npos);
    inv.replace(at, b.from.size(), b.to);
    std::ofstream(d + "/hosts.yml") << inv;
    const Run r = sh(local_play(d, "config") + " -e '{\"sb_public_keys\": {\"n1\": \"P1\", \"n2\": \"P2\", \"admin\": \"PA\"}}'");
    INFO(r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, b.says));
    CHECK(access((d + "/n1/etc/sb-node.yaml").c_str(), F_OK) != 0);  // nothing rendered
    if (!b.site && &b != &bad[0] && &b != &bad[2]) {  // site.yml: a few are enough (each run takes seconds)
      sh("rm -rf " + d);
      continue;
    }
    // site.yml stops before its first role (nothing installed, no key copied).
    const Run s = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d +
                     "/hosts.yml site.yml -e manage_packages=false -e install_dir=" + d + "/bin -e sb_build_dir=" + d +
                     "/none");
    INFO(s.out);
    CHECK(s.rc != 0);
    CHECK(has(s.out, b.says));
    CHECK_FALSE(has(s.out, "TASK [packages"));  // (it reserves the hugepages)
    CHECK_FALSE(has(s.out, "TASK [install"));
    CHECK(access((d + "/bin").c_str(), F_OK) != 0);
    sh("rm -rf " + d);
  }
}

TEST_CASE("ansible: a value sb-node refuses fails at render time, naming the field, and the node keeps its file", "[ansible]") {
  // The inventory checks cover only some variables: -e sb_mtu=100 or
  // sb_key_mode=ueip rendered a file sb-node refused at start (exit 3),
  // found only when the health wait timed out. The sb-node installed on the
  // host (install_dir) now checks every rendered file (--print-eal) before
  // it replaces the node's file.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin && ln -s " SB_BUILD_DIR "/bin/sb-node " + d + "/bin/sb-node").rc == 0);
  std::ofstream(d + "/hosts.yml") << local_inventory(
      d, 2,
      "    sb_ctl_local: " SB_BUILD_DIR "/bin/sb-ctl\n    sb_hugepages: false\n    sb_memory_mb: 256\n"
      "    install_dir: " + d + "/bin\n",
      {"          metrics_address: 127.0.0.11\n"});
  const std::string play = local_play(d, "keys, config");
  const std::string cfg = d + "/n1/etc/sb-node.yaml";
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "TASK [config : Node configuration (checked by sb-node --print-eal)]"));
  std::string good = sh("cat " + cfg).out;
  INFO(good);
  // metrics_address: where /metrics and /health listen (default ansible_host).
  CHECK(has(good, "\n  metrics: \"127.0.0.11:9100\"\n"));
  CHECK(has(sh("cat " + d + "/n2/etc/sb-node.yaml").out, "\n  metrics: \"127.0.0.2:9100\"\n"));
  // The control timing is sb-node's own unless set.
  for (const char* f : {"heartbeat_ms", "dead_after_ms", "fib_timeout_ms", "forward_timeout_ms", "fsync_interval_ms"})
    CHECK_FALSE(has(good, f));
  struct Bad {
    std::string vars;  // -e
    const char* field;  // in sb-node's message
  };
  for (const Bad& b : std::vector<Bad>{{"sb_mtu=100", "sb-node: node.mtu: must be in [576, 9600]"},
                                       {"sb_key_mode=ueip", "cluster.key_mode: 'ueip'"},
                                       {"sb_mbufs=100", "node.mbufs"},
                                       {"sb_heartbeat_ms=2000", "node.dead_after_ms: must be in [3 x heartbeat_ms"}}) {
    INFO(b.vars);
    r = sh(play + " -e " + b.vars);
    INFO(r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, "n1: " + d + "/bin/sb-node refused the configuration rendered for " + cfg));
    CHECK(has(r.out, b.field));
    // sb-node's message, without the name of the temporary file it checked.
    CHECK(has(r.out, "(not installed: the node keeps the file it had): sb-node: " + std::string(b.field).substr(
                         std::string(b.field).rfind("sb-node: ", 0) == 0 ? 9 : 0)));
    CHECK(sh("cat " + cfg).out == good);  // not installed
  }
  // Set, the timing is written (and sb-node took it).
  r = sh(play + " -e sb_heartbeat_ms=50 -e sb_dead_after_ms=3000 -e sb_fib_timeout_ms=4000 "
                "-e sb_forward_timeout_ms=6000 -e sb_fsync=interval -e sb_fsync_interval_ms=20");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  good = sh("cat " + cfg).out;
  CHECK(has(good, "\n  fsync: \"interval\"\n  fib_capacity: 1048576\n  fsync_interval_ms: 20\n  heartbeat_ms: 50\n"
                  "  dead_after_ms: 3000\n  fib_timeout_ms: 4000\n  forward_timeout_ms: 6000\n"));
  // site.yml: the sb-node the install role has just put on the host checks
  // the file; the run stops there, before the service is started.
  r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d +
         "/hosts.yml site.yml -e manage_packages=false -e service_mode=supervised -e sb_build_dir=" SB_BUILD_DIR
         " -e install_dir=" + d + "/site/bin -e pid_file=" + d + "/sb.pid -e log_file=" + d + "/sb.log -e sb_mtu=100");
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "TASK [install : Binaries (copied from the control machine)]"));
  CHECK(has(r.out, "n1: " + d + "/site/bin/sb-node refused the configuration rendered for " + cfg));
  CHECK(has(r.out, "node.mtu: must be in [576, 9600]"));
  CHECK_FALSE(has(r.out, "TASK [service"));
  CHECK(access((d + "/sb.pid").c_str(), F_OK) != 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the ctl health check waits until every partition is resynced, not just for an answer", "[ansible]") {
  // health_mode: ctl on one local "host": a stand-in sb-ctl answers `stats`
  // at once (rc 0) but reports unsynced partitions for its first two calls,
  // as a restarted --control-only node does while it resyncs.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin && cat > " + d + "/bin/sb-ctl <<'EOF'\n#!/bin/sh\n"
             "echo call >> " + d + "/calls\n"
             "n=$(wc -l < " + d + "/calls)\n"
             "printf 'node 1\\n  unsynced_partitions       %s\\n  sessions_handled          0\\n' "
             "$([ \"$n\" -le 2 ] && echo 3 || echo 0)\n"
             "EOF\nchmod +x " + d + "/bin/sb-ctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1: {node_id: 1}\n"
                                     "  vars:\n    ansible_connection: local\n    health_mode: ctl\n"
                                     "    health_retries: 5\n    health_delay: 0\n    key_file: " << d << "/node.key\n"
                                     "    install_dir: " << d << "/bin\n    config_path: " << d << "/sb-node.yaml\n";
  std::ofstream(d + "/health.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [health]\n";
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" +
                           src() + "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d + "/health.yml";
  Run r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(sh("wc -l < " + d + "/calls").out == "3\n");  // ready only at the third answer
  // A node that never resyncs fails the wait.
  REQUIRE(sh("rm " + d + "/calls && seq 1 100 | sed 's/.*/call/' > " + d + "/calls0 && mv " + d + "/calls0 " + d +
             "/calls && sed -i 's/-le 2/-ge 1/' " + d + "/bin/sb-ctl").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc != 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a /health request that gets no answer gives up after health_timeout, not 30 s", "[ansible]") {
  // A node whose port accepts connections but never answers (a hung
  // process, a listen queue nobody serves): each probe must end at
  // health_timeout, else a retry holds for the uri module's default 30 s.
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(ls >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(ls, 8) == 0);  // never accepted: the kernel completes the handshakes
  socklen_t al = sizeof a;
  REQUIRE(::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &al) == 0);
  const std::string d = tmpdir();
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1: {node_id: 1}\n"
                                     "  vars:\n    ansible_connection: local\n    health_mode: http\n"
                                     "    health_url: http://127.0.0.1:" << ntohs(a.sin_port) << "/health\n"
                                     "    health_retries: 2\n    health_delay: 0\n    health_timeout: 2\n";
  std::ofstream(d + "/health.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [health]\n";
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() +
                   "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d + "/health.yml");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(ls);
  INFO(r.out);
  CHECK(r.rc != 0);  // never ready
  CHECK(s < 25.0);   // 3 probes of 2 s and ansible's start-up; one default-timeout probe alone is 30 s
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a rolling restart waits until every node has resynced before the next node", "[ansible]") {
  // rolling-restart.yml on three local "hosts" (health_mode: ctl). A
  // restarted node is ready at once, but its peers then resync its
  // partitions (its stream has a new epoch): the stand-in sb-supervise makes
  // every other node report unsynced partitions for its next two stats
  // calls, and logs a violation if a restart begins while any node still does.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin " + d + "/unsynced && cat > " + d + "/bin/sb-supervise <<'EOF'\n#!/bin/sh\n"
             "p=''; while [ $# -gt 0 ]; do case \"$1\" in --pidfile) p=$2; shift 2;; --) break;; *) shift;; esac; done\n"
             "h=$(basename \"$p\" .pid)\n"
             "for f in " + d + "/unsynced/*; do [ -e \"$f\" ] || continue; [ \"$(cat $f)\" -gt 0 ] && "
             "echo \"violation: restart $h while $(basename $f) resyncs\" >> " + d + "/log; done\n"
             "echo \"restart $h\" >> " + d + "/log\n"
             "for o in n1 n2 n3; do [ $o = $h ] && echo 0 > " + d + "/unsynced/$o || echo 2 > " + d +
             "/unsynced/$o; done\n"
             "EOF\n"
             "cat > " + d + "/bin/sb-ctl <<'EOF'\n#!/bin/sh\n"
             "v=''; while [ $# -gt 0 ]; do case \"$1\" in --via) v=$2; shift 2;; *) shift;; esac; done\n"
             "f=" + d + "/unsynced/n$v; c=$(cat $f 2>/dev/null || echo 0)\n"
             "if [ \"$c\" -gt 0 ]; then echo $((c - 1)) > $f; u=4; else u=0; fi\n"
             "printf 'node %s\\n  unsynced_partitions       %s\\n' $v $u\n"
             "EOF\nchmod +x " + d + "/bin/*").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1}\n        n2: {node_id: 2}\n        n3: {node_id: 3}\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    health_mode: ctl\n    health_retries: 10\n    health_delay: 0\n"
                                     "    key_file: " << d << "/node.key\n    install_dir: " << d << "/bin\n"
                                     "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                     "    pid_file: \"" << d << "/{{ inventory_hostname }}.pid\"\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d +
                   "/hosts.yml rolling-restart.yml");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(sh("cat " + d + "/log").out == "restart n1\nrestart n2\nrestart n3\n");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: install_mode build builds sb-node and sb-ctl with the packages role's tools only", "[ansible]") {
  // A stand-in source tree whose `make release` would run the project's
  // tools/install-deps (the whole development, test and demo toolchain:
  // ansible, clang, tshark, matplotlib, openssh-server ...), and a stand-in
  // cmake on PATH. A host build must not run install-deps: its packages are
  // the packages role's (sb_build_packages), which must name every library
  // the CMake build finds.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/src/tools " + d + "/src/docs " + d + "/path && cd " + d + " && "
             "echo doc > src/README.md && echo doc > src/docs/config.md && "  // installed beside the binaries
             "printf 'release:\\n\\ttools/install-deps\\n\\tmkdir -p build-release/bin && echo m > "
             "build-release/bin/sb-node && echo m > build-release/bin/sb-ctl\\n' > src/Makefile && "
             "printf '#!/bin/sh\\ntouch " + d + "/install-deps-ran\\n' > src/tools/install-deps && "
             "printf '#!/bin/sh\\necho \"cmake $*\" >> " + d + "/cmake.log\\n"
             "if [ \"$1\" = --build ]; then mkdir -p \"$2/bin\" && echo c > \"$2/bin/sb-node\" && "
             "echo c > \"$2/bin/sb-ctl\"; fi\\n' > path/cmake && chmod +x src/tools/install-deps path/cmake").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    install_mode: build\n"
                                     "    install_dir: " << d << "/bin\n    sb_source_dir: " << d << "/src\n"
                                     "    sb_src_dir: " << d << "/host-src\n";
  const Run r = sh("export PATH=" + d + "/path:$PATH && " + local_play(d, "install"));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(access((d + "/install-deps-ran").c_str(), F_OK) != 0);
  CHECK(sh("cat " + d + "/bin/sb-node " + d + "/bin/sb-ctl").out == "c\nc\n");
  const std::string cmake = sh("cat " + d + "/cmake.log").out;
  INFO(cmake);
  CHECK(has(cmake, "-DCMAKE_BUILD_TYPE=Release"));
  CHECK(has(cmake, "-DSB_BUILD_TESTS=OFF"));  // a gateway builds no test suite
  // Debian 12 packages of what cmake/SbDeps.cmake and the CMakeLists find.
  const std::string pkgs = sh("cat " + src() + "/ansible/roles/packages/defaults/main.yml").out;
  for (const char* p : {"g++", "cmake", "ninja-build", "pkg-config", "libdpdk-dev", "libzmq3-dev", "cppzmq-dev",
                        "libprotobuf-dev", "protobuf-compiler", "libboost1.74-dev", "libyaml-cpp-dev",
                        "libxxhash-dev", "nlohmann-json3-dev"}) {
    INFO(p);
    CHECK((has(pkgs, std::string("  - ") + p + "\n") || has(pkgs, std::string("  - ") + p + " ")));
  }
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a changed sb_node_args restarts a supervised node, an unchanged one does not", "[ansible]") {
  // systemd mode has the arguments in the unit (a change restarts the
  // node); the supervised mode must notice a change too, or the node keeps
  // running with its old command line. The service role on one local
  // "host", the real sb-supervise, a stand-in sb-node that sleeps.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin && printf '#!/bin/sh\\nexec sleep 1002\\n' > " + d + "/bin/sb-node && chmod +x " +
             d + "/bin/sb-node").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    install_dir: " << d << "/bin\n    config_path: " << d << "/sb-node.yaml\n"
                                     "    log_file: " << d << "/sb.log\n    pid_file: " << d << "/sb-node.pid\n";
  const std::string play = local_play(d, "service");
  const std::string handler = "RUNNING HANDLER [restart sb-node]";
  Run r = sh(play + " -e sb_node_args=--control-only");  // started with it: nothing to restart
  INFO(r.out);
  REQUIRE(r.rc == 0);
  r = sh(play + " -e sb_node_args=--control-only");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_FALSE(has(r.out, handler));
  CHECK(changed_count(r.out, "n1") == 0);
  r = sh(play + " -e sb_node_args=''");  // the data plane from now on
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, handler));
  sh(d + "/bin/sb-supervise stop --pidfile " + d + "/sb-node.pid --stop-timeout 2");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: ports take rx queues and MACs, and sb-node accepts the rendered file", "[ansible]") {
  // Two worker lcores need two rx queues per port (rx queue q goes to
  // worker q mod W): a role is a device string or {device, queues, mac}.
  const std::string d = tmpdir();
  std::ofstream(d + "/hosts.yml") << local_inventory(
      d, 1,
      "    sb_ctl_local: " SB_BUILD_DIR "/bin/sb-ctl\n    sb_hugepages: false\n    sb_memory_mb: 256\n"
      "    sb_lcores: \"1-2\"\n");
  std::ofstream(d + "/ports.yml") << "ports:\n  ext: {device: net_null0, queues: 2, mac: \"02:00:00:00:10:01\"}\n"
                                     "  fabric: {device: net_null1, queues: 2}\n  enb: net_null2\n";
  const Run r = sh(local_play(d, "keys, config") + " -e @" + d + "/ports.yml");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::string cfg = sh("cat " + d + "/n1/etc/sb-node.yaml").out;
  INFO(cfg);
  CHECK(has(cfg, "    ext: {device: \"net_null0\", queues: 2, mac: \"02:00:00:00:10:01\"}\n"));
  CHECK(has(cfg, "    fabric: {device: \"net_null1\", queues: 2}\n"));
  CHECK(has(cfg, "    enb: {device: \"net_null2\"}\n"));
  const Run v = sh(SB_BUILD_DIR "/bin/sb-node --config " + d + "/n1/etc/sb-node.yaml --print-eal");
  INFO(v.out);
  CHECK(v.rc == 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the example-hardware inventory renders configurations sb-node accepts", "[ansible]") {
  // Its four nodes' files, rendered locally (paths moved to a temporary
  // directory, real keys): sb-node --print-eal parses and checks them whole.
  const std::string d = tmpdir();
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [keys, config]\n"
                                    "  handlers:\n    - name: restart sb-node\n      ansible.builtin.debug: {msg: marked}\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i "
                   "inventories/example-hardware/hosts.yml " + d + "/play.yml -e ansible_connection=local "
                   "-e ansible_memtotal_mb=32768 "  // its servers' memory: the hugepage checks pass
                   "-e keys_dir=" + d + "/keys -e sb_ctl_local=" SB_BUILD_DIR "/bin/sb-ctl "
                   "-e '{\"config_path\": \"" + d + "/{{ inventory_hostname }}/sb-node.yaml\", "
                   "\"key_file\": \"" + d + "/{{ inventory_hostname }}/node.key\", "
                   "\"data_dir\": \"" + d + "/{{ inventory_hostname }}/data\"}'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  for (const char* h : {"gw1", "gw2", "gw3", "gw4"}) {
    INFO(h);
    const std::string cfg = d + "/" + h + "/sb-node.yaml";
    CHECK(has(sh("cat " + cfg).out, "    ext: {device: \"0000:3b:00.0\", queues: 2}\n"));
    const Run v = sh(SB_BUILD_DIR "/bin/sb-node --config " + cfg + " --print-eal");
    INFO(v.out);
    CHECK(v.rc == 0);
  }
  sh("rm -rf " + d);
}

namespace {
// A plain HTTP server on 127.0.0.1 (an ephemeral port) serving the files of
// `dir` (a stand-in node's /health and /metrics), stopped by its PID.
struct LocalHttp {
  std::string pid, port;
  explicit LocalHttp(const std::string& dir) {
    pid = sh("python3 -u -m http.server --bind 127.0.0.1 0 --directory " + dir + " > " + dir +
             "/../http.log 2>&1 & echo $!").out;
    for (int i = 0; i < 50 && port.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      port = sh("sed -n 's/.* port \\([0-9]*\\) .*/\\1/p' " + dir + "/../http.log").out;
    }
    if (!port.empty()) port.pop_back();
  }
  ~LocalHttp() {
    if (!pid.empty()) sh("kill " + pid);
  }
};

// A port on 127.0.0.1 that accepts connections and never answers: an
// http_proxy that cannot reach the nodes. hit(): anything connected.
struct DeadProxy {
  int fd = -1, port = 0;
  DeadProxy() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 64) == 0);
    socklen_t l = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l) == 0);
    port = ntohs(a.sin_port);
  }
  ~DeadProxy() { ::close(fd); }
  bool hit() const {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return false;
    ::close(c);
    return true;
  }
  std::string env() const {
    const std::string u = "http://127.0.0.1:" + std::to_string(port);
    return "http_proxy=" + u + " HTTP_PROXY=" + u + " no_proxy= NO_PROXY= ";
  }
};
}  // namespace

TEST_CASE("ansible: the /health waits and status.yml's /metrics read never go through an http_proxy", "[ansible]") {
  // The uri module honours http_proxy: on a host whose environment sets one
  // (common on servers behind a corporate proxy), every /health probe went
  // to the proxy, which cannot reach the nodes' management addresses: the
  // health waits failed (after up to 30 min) on a healthy cluster, and
  // status.yml printed no counters. Here the proxy never answers.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/www && echo ready > " + d + "/www/health && "
             "echo 'sb_rx_packets_total{port=\"ext\"} 42' > " + d + "/www/metrics").rc == 0);
  const LocalHttp node(d + "/www");
  REQUIRE_FALSE(node.port.empty());
  const DeadProxy proxy;
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1, ansible_host: 127.0.0.1}\n"
                                     "  vars:\n    ansible_connection: local\n    health_mode: http\n"
                                     "    metrics_port: " << node.port << "\n"
                                     "    health_retries: 1\n    health_delay: 0\n    health_timeout: 2\n"
                                     "    service_mode: supervised\n    install_dir: " << d << "/bin\n";
  // The single-node wait (health role) and the every-node wait of a rolling restart.
  std::ofstream(d + "/health.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [health]\n"
                                      "  tasks:\n    - ansible.builtin.include_role: {name: health, tasks_from: cluster}\n";
  const std::string env = "cd " + src() + "/ansible && " + proxy.env() +
                          "ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() +
                          "/ansible/roles ansible-playbook -i " + d + "/hosts.yml ";
  Run r = sh(env + d + "/health.yml");
  INFO(r.out);
  CHECK(r.rc == 0);
  r = sh(env + "status.yml");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "sb_rx_packets_total{port=\\\"ext\\\"} 42"));
  CHECK_FALSE(proxy.hit());
  sh("rm -rf " + d);
}

TEST_CASE("ansible: install_mode build retries a build that failed, never keeps the old binaries", "[ansible]") {
  // The host build ran only when the source sync changed something: after
  // a build that failed (a missing package, an interrupted run), the next
  // run found the source unchanged, skipped the build, kept the previous
  // sb-node installed and reported success with nothing changed. A
  // stand-in cmake builds "binaries" holding the source's version, fails
  // while d/fail exists, and says "ninja: no work to do." when up to date.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/src/docs " + d + "/path && echo v1 > " + d + "/src/version && cd " + d + " && "
             "echo doc > src/README.md && echo doc > src/docs/config.md && "  // installed beside the binaries
             "printf '#!/bin/sh\\n"
             "[ \"$1\" = -S ] && mkdir -p build-release && touch build-release/build.ninja\\n"
             "if [ \"$1\" = --build ]; then\\n"
             "  [ -e " + d + "/fail ] && { echo build failed >&2; exit 1; }\\n"
             "  if [ \"$(cat \"$2/bin/sb-node\" 2>/dev/null)\" = \"$(cat version)\" ]; then echo \"ninja: no work to do.\"; exit 0; fi\\n"
             "  mkdir -p \"$2/bin\" && cp version \"$2/bin/sb-node\" && cp version \"$2/bin/sb-ctl\"\\n"
             "fi\\n' > path/cmake && chmod +x path/cmake").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    install_mode: build\n"
                                     "    install_dir: " << d << "/bin\n    sb_source_dir: " << d << "/src\n"
                                     "    sb_src_dir: " << d << "/host-src\n";
  const std::string play = "export PATH=" + d + "/path:$PATH && " + local_play(d, "install");
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  REQUIRE(sh("cat " + d + "/bin/sb-node").out == "v1\n");
  // A new version whose build fails: the run fails ...
  REQUIRE(sh("echo v2 > " + d + "/src/version && touch " + d + "/fail").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc != 0);
  // ... and once the cause is fixed, the next run builds and installs it.
  REQUIRE(sh("rm " + d + "/fail").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(sh("cat " + d + "/bin/sb-node").out == "v2\n");
  CHECK(has(r.out, "RUNNING HANDLER [restart sb-node]"));
  // Nothing new: nothing changed.
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(changed_count(r.out, "n1") == 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: keys are generated in a keys_dir whose path has a space", "[ansible]") {
  // keys_dir defaults to the checkout (playbook_dir/keys/<cluster>), and a
  // checkout may live in "/home/ops/My Projects/": the keypair command was a
  // string split on spaces, so `--out` got the first half of the path and
  // the run failed (or wrote the key elsewhere).
  const std::string d = tmpdir() + "/my checkout";
  REQUIRE(sh("mkdir -p '" + d + "'").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    keys_dir: \"" << d << "/keys\"\n"
                                     "    sb_ctl_local: " SB_BUILD_DIR "/bin/sb-ctl\n    key_file: \"" << d
                                  << "/n1/node.key\"\n";
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [keys]\n"
                                    "  handlers:\n    - name: restart sb-node\n      ansible.builtin.debug: {msg: marked}\n";
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" +
                           src() + "/ansible/roles ansible-playbook -i '" + d + "/hosts.yml' '" + d + "/play.yml'";
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  for (const char* k : {"/keys/n1.key", "/keys/admin.key", "/n1/node.key"}) {
    INFO(k);
    CHECK(sh("stat -c %a '" + d + k + "'").out == "600\n");
  }
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(changed_count(r.out, "n1") == 0);
  sh("rm -rf '" + d.substr(0, d.rfind('/')) + "'");
}

TEST_CASE("ansible: status.yml says what it could not read, never an empty report", "[ansible]") {
  // A node whose /metrics did not answer was reported as an empty list of
  // counters, and a missing sb-supervise or sb-node as an empty process
  // state or version: a report that looks like a quiet node. Here nothing
  // is installed and the metrics port refuses connections (a socket bound
  // but not listening).
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t al = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &al) == 0);
  const std::string d = tmpdir();
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1, ansible_host: 127.0.0.1}\n"
                                     "  vars:\n    ansible_connection: local\n    health_mode: http\n"
                                     "    metrics_port: " << ntohs(a.sin_port) << "\n    health_timeout: 2\n"
                                     "    service_mode: supervised\n    install_dir: " << d << "/bin\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d +
                   "/hosts.yml status.yml");
  ::close(s);
  INFO(r.out);
  CHECK(r.rc == 0);  // a report, not a check
  CHECK(has(r.out, "\"metrics: unavailable ("));
  CHECK(has(r.out, "\"process: [Errno 2] No such file or directory"));
  CHECK(has(r.out, "\"version: [Errno 2] No such file or directory"));
  CHECK_FALSE(has(r.out, "\"process: \","));
  CHECK_FALSE(has(r.out, "\"version: \","));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: a changed unit restarts a running node even when it also had to be enabled", "[ansible]") {
  // systemd mode: the handler marks a node unless the start task changed
  // (started just now, already on the new files). Enabling and starting
  // were one task, so a running node that was disabled (systemctl disable
  // while debugging) changed it by the enable alone: its new unit (or
  // configuration, key, binary) was never restarted. The service role on
  // one local "host" with a stand-in systemctl keeping its state in files.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/path " + d + "/state && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "S=" + d + "/state\n"
             "case \"$1\" in\n"
             "  daemon-reload) ;;\n"
             "  show) a=inactive; [ -e $S/active ] && a=active\n"
             "        printf 'Id=sb-node.service\\nLoadState=loaded\\nActiveState=%s\\n' $a ;;\n"
             "  is-enabled) if [ -e $S/enabled ]; then echo enabled; else echo disabled; exit 1; fi ;;\n"
             "  enable) touch $S/enabled ;;\n"
             "  disable) rm -f $S/enabled ;;\n"
             "  start|restart) touch $S/active ;;\n"
             "  stop) rm -f $S/active ;;\n"
             "  *) exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: systemd\n"
                                     "    install_dir: " << d << "/bin\n    config_path: " << d << "/sb-node.yaml\n"
                                     "    sb_unit_path: " << d << "/sb-node.service\n";
  // The role's own handler; then what it marked.
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [service]\n"
                                    "- hosts: sb_nodes\n  gather_facts: false\n  tasks:\n"
                                    "    - ansible.builtin.debug: {msg: \"pending={{ sb_node_restart_pending | default('none') }}\"}\n";
  const std::string play = "cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg "
                           "ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d +
                           "/hosts.yml " + d + "/play.yml";
  Run r = sh(play);  // first run: started with the new unit, nothing to restart
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "pending=False"));
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(changed_count(r.out, "n1") == 0);
  // Running but disabled, and the unit changes: marked for a restart.
  REQUIRE(sh("rm " + d + "/state/enabled").rc == 0);
  r = sh(play + " -e sb_node_args=--control-only");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "pending=True"));
  CHECK(access((d + "/state/enabled").c_str(), F_OK) == 0);
  // Stopped, and the unit changes: started on it, nothing to restart.
  REQUIRE(sh("rm " + d + "/state/active").rc == 0);
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "pending=False"));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: site.yml --check before the first run passes and makes nothing", "[ansible]") {
  // A dry run on new hosts (systemd mode) with no keys generated yet failed
  // three times over: the public keys were read from files the (skipped)
  // key generation had not made, the node's key was copied from one, and
  // systemd was asked to enable, start or restart a unit check mode had not
  // written. A stand-in systemctl knows the unit only once its file exists.
  const std::string d = tmpdir();
  fake_keygen(d);
  REQUIRE(sh("mkdir -p " + d + "/path " + d + "/build/bin && echo 1 > " + d + "/build/bin/sb-node && echo 1 > " + d +
             "/build/bin/sb-ctl && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "case \"$1\" in\n"
             "  daemon-reload) ;;\n"
             "  show) l=loaded; [ -e " + d + "/sb-node.service ] || l=not-found\n"
             "        printf 'Id=sb-node.service\\nLoadState=%s\\nActiveState=inactive\\n' $l ;;\n"
             "  is-enabled) echo disabled; exit 1 ;;\n"
             "  list-unit-files) ;;\n"
             "  is-active) echo inactive; exit 3 ;;\n"
             "  *) echo \"systemctl $*: not in a dry run\" >> " + d + "/ran; exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << local_inventory(
      d, 2,
      "    manage_packages: false\n    service_mode: systemd\n    sb_unit_path: " + d + "/sb-node.service\n"
      "    install_dir: \"" + d + "/{{ inventory_hostname }}/bin\"\n    sb_build_dir: " + d + "/build\n");
  const Run r = sh("cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 "
                   "ansible-playbook -i " + d + "/hosts.yml site.yml --check");
  INFO(r.out);
  CHECK(r.rc == 0);
  for (const char* made : {"/keys", "/n1", "/n2", "/sb-node.service", "/ran"}) {
    INFO(made);
    CHECK(access((d + made).c_str(), F_OK) != 0);
  }
  sh("rm -rf " + d);
}

TEST_CASE("ansible: stop.yml where sb-node was never installed has nothing to stop, and real errors still fail", "[ansible]") {
  // The systemd_service module fails on a unit it cannot find ("Could not
  // find the requested service sb-node"): stopping a cluster with a host
  // that was never provisioned failed there. A stand-in systemctl keeps the
  // unit's state in files: unit (installed), active, broken (systemctl
  // cannot talk to systemd), stopfails.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/path " + d + "/state && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "S=" + d + "/state\n"
             "[ -e $S/broken ] && { echo 'System has not been booted with systemd as init system (PID 1).' >&2; exit 1; }\n"
             "case \"$1\" in\n"
             "  show) l=not-found; [ -e $S/unit ] && l=loaded; a=inactive; [ -e $S/active ] && a=active\n"
             "        printf 'Id=sb-node.service\\nLoadState=%s\\nActiveState=%s\\n' $l $a ;;\n"
             "  is-enabled) echo disabled; exit 1 ;;\n"
             "  stop) echo stop >> $S/stops; [ -e $S/stopfails ] && { echo 'Job for sb-node.service failed' >&2; exit 1; }\n"
             "        rm -f $S/active ;;\n"
             "  *) exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: systemd\n"
                                     "    install_dir: " << d << "/bin\n    pid_file: " << d << "/sb-node.pid\n";
  const std::string play = "cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg "
                           "ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d + "/hosts.yml stop.yml";
  const std::string st = d + "/state/";
  // Never installed: succeeds, says so, stops nothing.
  Run r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "no systemd unit on this host (never installed): nothing to stop"));
  CHECK(access((st + "stops").c_str(), F_OK) != 0);
  CHECK(changed_count(r.out, "n1") == 0);
  // Installed and running: stopped; then stopped already: nothing changes.
  REQUIRE(sh("touch " + st + "unit " + st + "active").rc == 0);
  r = sh(play + " --check");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "would be stopped (--check"));
  CHECK(access((st + "active").c_str(), F_OK) == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "\"sb-node: stopped\""));
  CHECK(access((st + "active").c_str(), F_OK) != 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "\"sb-node: was not running\""));
  CHECK(changed_count(r.out, "n1") == 0);
  // Its unit file deleted while it still runs (not-found, active): stopped, not "nothing to stop".
  REQUIRE(sh("rm " + st + "unit && touch " + st + "active").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "stopped (its unit file was gone)"));
  CHECK(access((st + "active").c_str(), F_OK) != 0);
  // Real errors fail the run: systemctl that cannot reach systemd, a stop that fails.
  REQUIRE(sh("touch " + st + "broken").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "System has not been booted with systemd"));
  REQUIRE(sh("rm " + st + "broken && touch " + st + "unit " + st + "active " + st + "stopfails").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "Unable to stop service sb-node"));
  // Supervised mode with no sb-supervise installed: nothing to stop either.
  r = sh(play + " -e service_mode=supervised");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "sb-supervise is not installed (never installed): nothing to stop"));
  sh("rm -rf " + d);
}

namespace {
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}
}  // namespace

TEST_CASE("ansible: strings in the node's YAML stay strings, numbers stay numbers", "[ansible]") {
  // The template wrote paths and names as plain YAML scalars: a data_dir
  // with " #" lost its end as a comment (sb-node silently used another
  // directory), ": " broke the mapping, and yes, null, ~ or 012 meant
  // something else to a YAML reader (yaml-cpp reads a plain null as no
  // value at all). Every string is now a double-quoted YAML string; numbers
  // given as strings (-e sb_mtu=1500) are still written as numbers, and a
  // value that is no number is quoted (sb-node refuses it by name) instead
  // of being pasted into the file.
  const std::string d = tmpdir();
  const std::string data = d + "/n1/data #1/yes: no/012";
  const std::string key = d + "/n1/keys 'x' \"y\" % ~/node.key";
  std::ofstream(d + "/hosts.yml")
      << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n          ansible_host: 127.0.0.1\n"
         "          node_id: 1\n          fabric_mac: \"02:00:00:00:02:01\"\n          s1u_ip: 198.18.9.11\n"
         "  vars:\n    ansible_connection: local\n    keys_dir: " << d << "/keys\n"
         "    sb_ctl_local: " SB_BUILD_DIR "/bin/sb-ctl\n    sb_cluster_name: \"null\"\n"
         "    data_dir: '" << data << "'\n    key_file: '" << replace_all(key, "'", "''") << "'\n"
         "    config_path: " << d << "/n1/etc/sb-node.yaml\n"
         "    ports: {ext: {device: net_null0, queues: \"1\"}, fabric: net_null1, enb: net_null2}\n"
         "    ext_next_hop_mac: \"02:00:00:00:ee:01\"\n    enb_next_hop_mac: \"02:00:00:00:eb:01\"\n"
         "    sb_hugepages: false\n    sb_memory_mb: 256\n    sb_lcores: \"0\"\n";
  const std::string play = local_play(d, "keys, config");
  Run r = sh(play + " -e sb_mtu=1500");  // -e k=v: a string
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::string cfg = d + "/n1/etc/sb-node.yaml";
  INFO(sh("cat " + cfg).out);
  // A YAML 1.1 reader (PyYAML: yes/no are booleans, 012 octal, ~ null)
  // reads back exactly the strings and numbers meant.
  const Run y = sh("python3 -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); n = c[\"node\"]; "
                   "print(repr([c[\"cluster\"][\"name\"], n[\"data_dir\"], n[\"key_file\"], n[\"file_prefix\"], "
                   "n[\"lcores\"], n[\"s1u_ip\"], n[\"id\"], n[\"mtu\"], n[\"memory_mb\"], n[\"ports\"][\"ext\"][\"queues\"], "
                   "n[\"hugepages\"], c[\"cluster\"][\"partitions\"], c[\"cluster\"][\"members\"][0][\"weight\"]]))' " + cfg);
  INFO(y.out);
  REQUIRE(y.rc == 0);
  const std::string want_data = replace_all(data, "'", "\\'"), want_key = replace_all(key, "'", "\\'");
  CHECK(y.out == "['null', '" + want_data + "', '" + want_key +
                     "', 'null-1', '0', '198.18.9.11', 1, 1500, 256, 1, False, 1024, 1]\n");
  // sb-node reads it (its EAL file prefix from the quoted name).
  Run v = sh(SB_BUILD_DIR "/bin/sb-node --config '" + cfg + "' --print-eal");
  INFO(v.out);
  CHECK(v.rc == 0);
  CHECK(has(v.out, "--file-prefix\nnull-1\n"));
  // Not a number: quoted, and sb-node names the field.
  r = sh(play + " -e '{\"sb_mtu\": \"1500\\nfoo: 1 # x\"}'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(sh("cat " + cfg).out, "\n  mtu: \"1500\\nfoo: 1 # x\"\n"));
  v = sh(SB_BUILD_DIR "/bin/sb-node --config '" + cfg + "' --print-eal");
  INFO(v.out);
  CHECK(v.rc == 3);
  CHECK(has(v.out, "node.mtu: bad value"));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the ctl health check runs sb-ctl on each node with the node's own files", "[ansible]") {
  // health_mode: ctl ran the node's sb-ctl, configuration and the admin
  // key's path on the control machine (delegate_to: localhost): it worked
  // only where the control machine shares the nodes' filesystem. Now every
  // probe runs on the node it asks. Two local "hosts" with their own
  // install_dir, config_path and key_file; the inventory's localhost has a
  // connection that does not exist, so anything still sent there fails.
  const std::string d = tmpdir();
  for (const char* h : {"n1", "n2"})
    REQUIRE(sh("mkdir -p " + d + "/" + h + "/bin && printf '#!/bin/sh\\necho \"$0 $*\" >> " + d + "/calls\\n"
               "printf \"node 1\\\\n  unsynced_partitions 0\\\\n\"\\n' > " + d + "/" + h + "/bin/sb-ctl && chmod +x " + d +
               "/" + h + "/bin/sb-ctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  hosts:\n    localhost: {ansible_connection: sb_no_such_connection}\n"
                                     "  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1}\n        n2: {node_id: 2}\n"
                                     "      vars:\n        ansible_connection: local\n        health_mode: ctl\n"
                                     "        health_retries: 2\n        health_delay: 0\n        health_timeout: 3\n"
                                     "        install_dir: \"" << d << "/{{ inventory_hostname }}/bin\"\n"
                                     "        config_path: \"" << d << "/{{ inventory_hostname }}/sb-node.yaml\"\n"
                                     "        key_file: \"" << d << "/{{ inventory_hostname }}/node.key\"\n";
  // The single-node wait of every node, then (as n1's step of a rolling
  // restart) the wait for every node.
  std::ofstream(d + "/health.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [health]\n"
                                      "- hosts: sb_nodes\n  gather_facts: false\n  serial: 1\n  tasks:\n"
                                      "    - ansible.builtin.include_role: {name: health, tasks_from: cluster}\n"
                                      "      when: inventory_hostname == 'n1'\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_ROLES_PATH=" + src() +
                   "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d + "/health.yml");
  INFO(r.out);
  CHECK(r.rc == 0);
  const std::string calls = sh("sort " + d + "/calls").out;
  INFO(calls);
  std::string want;
  for (const char* h : {"n1", "n2"}) {
    const std::string n = d + "/" + h;
    const std::string line = n + "/bin/sb-ctl --config " + n + "/sb-node.yaml --key " + n +
                             "/node.key --timeout 3000 --via " + std::string(h).substr(1) + " stats\n";
    want += line + line;  // its own wait, and n1's wait for every node
  }
  CHECK(calls == want);
  sh("rm -rf " + d);
}

namespace {
// Stand-ins for the rolling-restart and restart-changed tests, in d/bin:
// sb-supervise logs each restart to d/log; sb-ctl (health_mode: ctl) fails
// like an unreachable node while d/down-nN exists, and says node N has
// unsynced partitions for as many calls as d/unsynced-nN holds.
bool write_restart_stand_ins(const std::string& d) {
  return sh("mkdir -p " + d + "/bin && cat > " + d + "/bin/sb-supervise <<'EOF'\n#!/bin/sh\n"
            "p=''; while [ $# -gt 0 ]; do case \"$1\" in --pidfile) p=$2; shift 2;; --) break;; *) shift;; esac; done\n"
            "echo \"restart $(basename \"$p\" .pid)\" >> " + d + "/log\n"
            "EOF\n"
            "cat > " + d + "/bin/sb-ctl <<'EOF'\n#!/bin/sh\n"
            "v=''; while [ $# -gt 0 ]; do case \"$1\" in --via) v=$2; shift 2;; *) shift;; esac; done\n"
            "[ -e " + d + "/down-n$v ] && { echo \"sb-ctl: node $v did not answer within 3000 ms\" >&2; exit 4; }\n"
            "f=" + d + "/unsynced-n$v; c=$(cat $f 2>/dev/null || echo 0)\n"
            "if [ \"$c\" -gt 0 ]; then echo $((c - 1)) > $f; u=3; else u=0; fi\n"
            "printf 'node %s\\n  unsynced_partitions       %s\\n' $v $u\n"
            "EOF\nchmod +x " + d + "/bin/*").rc == 0;
}
}  // namespace

TEST_CASE("ansible: a rolling restart refuses to start on a degraded cluster unless forced", "[ansible]") {
  // rolling-restart.yml took its first node down whatever the others'
  // state: with one node already not ready, that left two out of service
  // (and the wait for every node then stopped the run with one node
  // restarted). Three local "hosts", health_mode: ctl: a stand-in sb-ctl
  // says n2 has unsynced partitions for as many calls as d/unsynced-n2
  // holds, and fails like an unreachable node while d/down-n3 exists; a
  // stand-in sb-supervise logs the restarts.
  const std::string d = tmpdir();
  REQUIRE(write_restart_stand_ins(d));
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1}\n        n2: {node_id: 2}\n        n3: {node_id: 3}\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    health_mode: ctl\n    health_retries: 3\n    health_delay: 0\n"
                                     "    key_file: " << d << "/node.key\n    install_dir: " << d << "/bin\n"
                                     "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                     "    pid_file: \"" << d << "/{{ inventory_hostname }}.pid\"\n";
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " +
                           d + "/hosts.yml rolling-restart.yml";
  REQUIRE(sh("echo 1000 > " + d + "/unsynced-n2 && touch " + d + "/down-n3").rc == 0);
  for (const char* args : {"", " --check", " --limit n1"}) {  // a dry run says so too; --limit checks every node
    INFO(args);
    const Run r = sh(play + args);
    INFO(r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, "rolling restart refused, nothing was restarted"));
    CHECK(has(r.out, "n2: unsynced_partitions       3"));
    CHECK(has(r.out, "n3: sb-ctl stats failed (exit 4): sb-ctl: node 3 did not answer within 3000 ms"));
    CHECK_FALSE(has(r.out, "n1: "));
    CHECK(has(r.out, "-e sb_rolling_restart_force=true"));
    CHECK(access((d + "/log").c_str(), F_OK) != 0);  // nothing restarted
  }
  // Forced: it says what it overrides, then restarts every node (n2 is
  // ready again after the check's call, n3 is back).
  REQUIRE(sh("echo 1 > " + d + "/unsynced-n2 && rm " + d + "/down-n3").rc == 0);
  Run r = sh(play + " -e sb_rolling_restart_force=true");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "restarting anyway, although n2: unsynced_partitions"));
  CHECK(sh("cat " + d + "/log").out == "restart n1\nrestart n2\nrestart n3\n");
  // A healthy cluster: no override needed.
  REQUIRE(sh("rm " + d + "/log").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "restarting anyway"));
  CHECK(sh("cat " + d + "/log").out == "restart n1\nrestart n2\nrestart n3\n");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: restart-changed.yml refuses to restart changed nodes on a degraded cluster unless forced", "[ansible]") {
  // site.yml and start.yml restart the nodes a change marked
  // (restart-changed.yml) without the check rolling-restart.yml makes
  // first: with a node already not ready, the first restart took a second
  // one out of service. Three local "hosts" (health_mode: ctl), n1 and n3
  // marked; the stand-ins of the rolling restart's test: sb-ctl says n2 has
  // unsynced partitions for as many calls as d/unsynced-n2 holds, and
  // sb-supervise logs the restarts.
  const std::string d = tmpdir();
  REQUIRE(write_restart_stand_ins(d));
  auto inventory = [&](const std::string& n2_extra) {
    std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                       "        n1: {node_id: 1, sb_node_restart_pending: true}\n"
                                       "        n2: {node_id: 2" << n2_extra << "}\n"
                                       "        n3: {node_id: 3, sb_node_restart_pending: true}\n"
                                       "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                       "    health_mode: ctl\n    health_retries: 3\n    health_delay: 0\n"
                                       "    key_file: " << d << "/node.key\n    install_dir: " << d << "/bin\n"
                                       "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                       "    pid_file: \"" << d << "/{{ inventory_hostname }}.pid\"\n";
  };
  inventory("");
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " +
                           d + "/hosts.yml restart-changed.yml";
  const std::string log = d + "/log";
  REQUIRE(sh("echo 1000 > " + d + "/unsynced-n2").rc == 0);
  // Refused, naming n2, and the marked nodes it leaves on their old process
  // (a second site.yml would find nothing changed); --limit checks every node.
  for (const char* args : {"", " --limit n1"}) {
    INFO(args);
    const Run r = sh(play + args);
    INFO(r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, "rolling restart refused, nothing was restarted"));
    CHECK(has(r.out, "n2: unsynced_partitions       3"));
    CHECK(has(r.out, "-e sb_rolling_restart_force=true"));
    const std::string marked = *args ? "n1" : "n1, n3";
    CHECK(has(r.out, "The nodes this run changed (" + marked + ") keep their old process"));
    CHECK(has(r.out, "restart them with rolling-restart.yml --limit " + std::string(*args ? "n1" : "n1,n3") +
                         " (once the cluster is healthy, or forced)"));
    CHECK(access(log.c_str(), F_OK) != 0);  // nothing restarted
  }
  // Forced: it says what it overrides, then restarts the marked nodes only.
  REQUIRE(sh("echo 1 > " + d + "/unsynced-n2").rc == 0);
  Run r = sh(play + " -e sb_rolling_restart_force=true");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "restarting anyway, although n2: unsynced_partitions"));
  CHECK(sh("cat " + log).out == "restart n1\nrestart n3\n");
  // A healthy cluster: no override needed.
  REQUIRE(sh("rm " + log).rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "restarting anyway"));
  CHECK(sh("cat " + log).out == "restart n1\nrestart n3\n");
  // Nothing marked (a first run, nothing changed): no check, no restart;
  // the final health wait waits for n2 to resync, as before.
  REQUIRE(sh("rm " + log + " && echo 2 > " + d + "/unsynced-n2").rc == 0);
  r = sh(play + " -e sb_node_restart_pending=false");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "Ask every node's stats once"));
  CHECK(access(log.c_str(), F_OK) != 0);
  // A node this run has just started (n2: its start changed, so it is not
  // marked) is still resyncing: waited for, then checked, not refused.
  inventory(", sb_node_started: true");
  REQUIRE(sh("echo 2 > " + d + "/unsynced-n2").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_FALSE(has(r.out, "refused"));
  CHECK(sh("cat " + log).out == "restart n1\nrestart n3\n");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the rolling restart's health check names a node not ready on /health or unreachable", "[ansible]") {
  // health_mode: http: n1 answers ready, n2's /health answers 404 (not
  // ready), n3 cannot be reached over its connection (ssh to a port nobody
  // listens on): the run stops before any restart and names both.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/www " + d + "/bin && echo ready > " + d + "/www/health && "
             "printf '#!/bin/sh\\necho restarted >> " + d + "/log\\n' > " + d + "/bin/sb-supervise && chmod +x " + d +
             "/bin/sb-supervise").rc == 0);
  const LocalHttp node(d + "/www");
  REQUIRE_FALSE(node.port.empty());
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);  // bound, not listening: connections are refused
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t al = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &al) == 0);
  const std::string url = "http://127.0.0.1:" + node.port;
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n"
                                     "        n1: {node_id: 1, ansible_host: 127.0.0.1, health_url: \"" << url << "/health\"}\n"
                                     "        n2: {node_id: 2, ansible_host: 127.0.0.1, health_url: \"" << url << "/not-ready\"}\n"
                                     "        n3: {node_id: 3, ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: "
                                  << ntohs(a.sin_port) << ", health_url: \"" << url << "/health\"}\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    health_mode: http\n    health_timeout: 2\n    install_dir: " << d << "/bin\n"
                                     "    config_path: " << d << "/sb-node.yaml\n    log_file: " << d << "/sb.log\n"
                                     "    pid_file: \"" << d << "/{{ inventory_hostname }}.pid\"\n";
  const Run r = sh("cd " + src() + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook -i " + d +
                   "/hosts.yml rolling-restart.yml");
  ::close(s);
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "rolling restart refused, nothing was restarted"));
  CHECK(has(r.out, "n2: /health answered 404"));
  CHECK(has(r.out, "n3: unreachable ("));
  CHECK_FALSE(has(r.out, "n1: "));
  CHECK(access((d + "/log").c_str(), F_OK) != 0);
  sh("rm -rf " + d);
}

TEST_CASE("ansible: the systemd unit's Documentation= names files the install role put on the host", "[ansible]") {
  // The unit said Documentation=file:<install_dir>/../README.md, a file
  // nothing installed. The install and service roles (systemd mode, a
  // stand-in systemctl and build tree) on one local "host" whose install_dir
  // is under a temporary root with a space in its path: every URL of
  // Documentation=, read back (%% -> %, percent-decoded), is a file there,
  // the same as the source tree's.
  const std::string d = tmpdir();
  const std::string root = d + "/root dir";
  REQUIRE(sh("mkdir -p " + d + "/path " + d + "/build/bin && echo 1 > " + d + "/build/bin/sb-node && echo 1 > " + d +
             "/build/bin/sb-ctl && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "case \"$1\" in\n"
             "  show) printf 'Id=sb-node.service\\nLoadState=loaded\\nActiveState=inactive\\n' ;;\n"
             "  is-enabled) echo disabled; exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: systemd\n"
                                     "    install_dir: \"" << root << "/opt/sb/bin\"\n    sb_build_dir: " << d << "/build\n"
                                     "    sb_source_dir: " << src() << "\n    config_path: " << d << "/sb-node.yaml\n"
                                     "    sb_unit_path: " << d << "/sb-node.service\n";
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [install, service]\n";
  const Run r = sh("cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 "
                   "ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d +
                   "/play.yml");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  INFO(sh("cat " + d + "/sb-node.service").out);
  std::ofstream(d + "/docs.py") << R"PY(
import os, sys, urllib.parse
lines = [l for l in open(sys.argv[1]) if l.startswith('Documentation=')]
assert len(lines) == 1, lines
for u in lines[0][len('Documentation='):].split():
    assert u.startswith('file:'), u
    p = urllib.parse.unquote(u[len('file:'):].replace('%%', '%'))
    print(('ok ' if os.path.isfile(p) else 'missing ') + p)
)PY";
  const Run docs = sh("python3 " + d + "/docs.py " + d + "/sb-node.service");
  INFO(docs.out);
  REQUIRE(docs.rc == 0);
  const std::string share = root + "/opt/sb/share/doc/scalebricks";
  CHECK(docs.out == "ok " + share + "/README.md\nok " + share + "/config.md\n");
  CHECK(sh("cmp '" + share + "/README.md' " + src() + "/README.md && cmp '" + share + "/config.md' " + src() +
           "/docs/config.md").rc == 0);
  sh("rm -rf '" + d + "'");
}

namespace {
// An operator's clone on the control machine, in d/clone: this tree's
// ansible/ (without keys it may hold), stand-in docs, and a stand-in
// `make release` tree whose sb-ctl makes fake keypairs (fake_keygen) and
// whose sb-node is a file saying where it came from. Returns the command
// that runs a playbook of the clone's ansible/ (its name and arguments
// after), from there, as the README says to.
std::string fake_clone(const std::string& d) {
  const std::string c = d + "/clone";
  REQUIRE(sh("mkdir -p " + c + "/docs " + c + "/build-release/bin && cp -r " + src() + "/ansible " + c +
             "/ && rm -rf " + c + "/ansible/keys " + c + "/ansible/inventories/testbed/hosts.yml && "
             "echo 'clone README' > " + c + "/README.md && echo 'clone config.md' > " + c + "/docs/config.md && "
             "echo 'clone sb-node' > " + c + "/build-release/bin/sb-node").rc == 0);
  fake_keygen(c + "/build-release/bin");
  return "cd " + c + "/ansible && ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 ansible-playbook ";
}
}  // namespace

TEST_CASE("ansible: the keys role alone has its defaults and its handler", "[ansible]") {
  // A play of only the keys role (to make the keys before the first
  // site.yml, or to put back a node's key file) stopped on what the other
  // roles of site.yml defined: sb_cluster_name (config) for keys_dir,
  // sb_build_dir (install) for sb_ctl_local, and the `restart sb-node`
  // handler (service) its key file notifies. The play beside site.yml in a
  // clone, an inventory with none of those variables: the keys are made in
  // the default keys_dir by the clone's sb-ctl, each node gets its own, and
  // a node whose key file changed is marked for the rolling restart.
  const std::string d = tmpdir();
  const std::string run = fake_clone(d);
  const std::string clone = d + "/clone";
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n        n2:\n"
                                     "  vars:\n    ansible_connection: local\n"
                                     "    key_file: \"" << d << "/{{ inventory_hostname }}/node.key\"\n";
  std::ofstream(clone + "/ansible/keys-only.yml")
      << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [keys]\n"
         "- hosts: sb_nodes\n  gather_facts: false\n  tasks:\n"
         "    - ansible.builtin.debug: {msg: \"{{ inventory_hostname }} pending={{ sb_node_restart_pending | default('none') }}\"}\n";
  const std::string play = run + "-i " + d + "/hosts.yml keys-only.yml";
  const std::string keys = clone + "/ansible/keys/sb/";  // playbook_dir/keys/<sb_cluster_name>
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_FALSE(has(r.out, "is undefined"));
  for (const char* k : {"n1.key", "n2.key", "admin.key"}) {
    INFO(k);
    CHECK(has(sh("cat " + keys + k).out, "SECRET-"));
  }
  for (const char* h : {"n1", "n2"}) {
    INFO(h);
    CHECK(sh("cmp " + keys + h + ".key " + d + "/" + h + "/node.key").rc == 0);
    CHECK(sh("stat -c %a " + d + "/" + h + "/node.key").out == "600\n");
    CHECK(has(r.out, std::string(h) + " pending=True"));  // not started by this play: restarted by restart-changed.yml
  }
  // Nothing new: nothing changed, nothing marked.
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(changed_count(r.out, "n1") == 0);
  CHECK(changed_count(r.out, "n2") == 0);
  CHECK(has(r.out, "n1 pending=none"));
  // n1's key file lost on its host: put back (the same keypair), n1 alone marked.
  const std::string before = sh("cat " + keys + "n1.key").out;
  REQUIRE(sh("rm " + d + "/n1/node.key").rc == 0);
  r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(sh("cat " + d + "/n1/node.key").out == before);
  CHECK(has(r.out, "n1 pending=True"));
  CHECK(has(r.out, "n2 pending=none"));
  sh("rm -rf " + d);
}

TEST_CASE("ansible: sb_source_dir and sb_build_dir default to the root of the clone the playbooks are in", "[ansible]") {
  // An operator runs the playbooks from ansible/ of a clone: the install
  // role takes the docs from the clone's root and the binaries from its
  // build-release/ (`make release`), with no sb_source_dir or sb_build_dir
  // in the inventory. The defaults are the root itself (they were
  // <clone>/ansible/..: a missing binary was named by that path).
  const std::string d = tmpdir();
  const std::string run = fake_clone(d);
  const std::string clone = d + "/clone";
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    install_dir: " << d << "/opt/bin\n";
  std::ofstream(clone + "/ansible/install-only.yml")
      << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [install]\n"
         "  tasks:\n    - ansible.builtin.debug: {msg: \"source={{ sb_source_dir }} build={{ sb_build_dir }}\"}\n";
  const std::string play = run + "-i " + d + "/hosts.yml install-only.yml";
  Run r = sh(play);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "\"source=" + clone + " build=" + clone + "/build-release\""));
  CHECK(sh("cat " + d + "/opt/bin/sb-node").out == "clone sb-node\n");
  CHECK(sh("cmp " + d + "/opt/bin/sb-ctl " + clone + "/build-release/bin/sb-ctl").rc == 0);
  CHECK(sh("cat " + d + "/opt/share/doc/scalebricks/README.md " + d + "/opt/share/doc/scalebricks/config.md").out ==
        "clone README\nclone config.md\n");
  // No `make release` yet: the message names the clone's build tree.
  REQUIRE(sh("rm " + clone + "/build-release/bin/sb-node").rc == 0);
  r = sh(play);
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, clone + "/build-release/bin/sb-node is missing: run `make release` on the control machine first"));
  sh("rm -rf " + d);
}

namespace {
// The service role on one local "host" (inventory d/hosts.yml), then what
// its handler marked: "True", "False", or "none" (not notified), after a
// run with `args` (--check for a dry run). REQUIREs the run to pass.
std::string restart_mark_after(const std::string& d, const std::string& args) {
  std::ofstream(d + "/play.yml") << "- hosts: sb_nodes\n  gather_facts: false\n  roles: [service]\n"
                                    "- hosts: sb_nodes\n  gather_facts: false\n  tasks:\n"
                                    "    - ansible.builtin.debug: {msg: \"pending={{ sb_node_restart_pending | default('none') }}.\"}\n";
  const Run r = sh("cd " + src() + "/ansible && PATH=" + d + "/path:$PATH ANSIBLE_CONFIG=ansible.cfg ANSIBLE_NOCOLOR=1 "
                   "ANSIBLE_ROLES_PATH=" + src() + "/ansible/roles ansible-playbook -i " + d + "/hosts.yml " + d +
                   "/play.yml " + args);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const size_t p = r.out.find("pending=");
  REQUIRE(p != std::string::npos);
  return r.out.substr(p + 8, r.out.find('.', p) - p - 8);
}
}  // namespace

TEST_CASE("ansible: --check marks the supervised nodes the real run restarts, not the ones it starts", "[ansible]") {
  // A dry run starts nothing (sb-supervise's start is a command, which
  // check mode does not run), so the handler took every node whose files
  // would change for a running one: a new host or a stopped node, which
  // the real run starts on the new files, was reported as restarted. The
  // service role with the real sb-supervise and a stand-in sb-node; each
  // state (new host, running, stopped) with a change to mark, the dry run
  // first: it must mark what the real run then marks.
  const std::string d = tmpdir();
  REQUIRE(sh("mkdir -p " + d + "/bin " + d + "/path && printf '#!/bin/sh\\nexec sleep 1000\\n' > " + d +
             "/bin/sb-node && chmod +x " + d + "/bin/sb-node").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: supervised\n"
                                     "    install_dir: " << d << "/bin\n    config_path: " << d << "/sb-node.yaml\n"
                                     "    pid_file: " << d << "/sb-node.pid\n    log_file: " << d << "/sb-node.log\n";
  const std::string status = d + "/bin/sb-supervise status --pidfile " + d + "/sb-node.pid";
  // A new host: nothing installed, nothing running. The real run starts it.
  CHECK(restart_mark_after(d, "--check") == "False");
  CHECK(access((d + "/bin/sb-supervise").c_str(), F_OK) != 0);  // the dry run made nothing
  CHECK(access((d + "/sb-node.pid").c_str(), F_OK) != 0);
  CHECK(restart_mark_after(d, "") == "False");
  REQUIRE(sh(status).rc == 0);
  // Running, and its command line changes: restarted.
  CHECK(restart_mark_after(d, "--check -e sb_node_args=--control-only") == "True");
  CHECK(restart_mark_after(d, "-e sb_node_args=--control-only") == "True");
  // Stopped, and its command line changes: started, not restarted.
  REQUIRE(sh(d + "/bin/sb-supervise stop --pidfile " + d + "/sb-node.pid --stop-timeout 2").rc == 0);
  CHECK(restart_mark_after(d, "--check") == "False");
  CHECK(sh(status).rc == 3);  // the dry run started nothing
  CHECK(restart_mark_after(d, "") == "False");
  CHECK(sh(status).rc == 0);
  sh(d + "/bin/sb-supervise stop --pidfile " + d + "/sb-node.pid --stop-timeout 2");
  sh("rm -rf " + d);
}

TEST_CASE("ansible: --check marks the systemd nodes the real run restarts, also on a new host", "[ansible]") {
  // A dry run does not write the unit, so it neither enables nor starts it
  // when the unit changes (systemd does not know a unit of a new host), and
  // the handler then took every node for a running one: a new host, or a
  // stopped node whose unit changes, which the real run starts on the new
  // unit, was reported as restarted. A stand-in systemctl keeps its state
  // in files, knows the unit once its file exists, and logs what it is
  // asked to change; each state with a change to mark, the dry run first.
  const std::string d = tmpdir();
  const std::string st = d + "/state/";
  REQUIRE(sh("mkdir -p " + d + "/path " + d + "/state && cat > " + d + "/path/systemctl <<'EOF'\n#!/bin/sh\n"
             "S=" + d + "/state\n"
             "case \"$1\" in\n"
             "  show) l=not-found; [ -e " + d + "/sb-node.service ] && l=loaded; a=inactive; [ -e $S/active ] && a=active\n"
             "        printf 'Id=sb-node.service\\nLoadState=%s\\nActiveState=%s\\n' $l $a ;;\n"
             "  is-enabled) if [ -e $S/enabled ]; then echo enabled; else echo disabled; exit 1; fi ;;\n"
             "  is-active) if [ -e $S/active ]; then echo active; else echo inactive; exit 3; fi ;;\n"
             "  list-unit-files) ;;\n"
             "  daemon-reload|enable|start|restart|stop) echo \"$1\" >> $S/calls\n"
             "        case \"$1\" in enable) touch $S/enabled ;; start|restart) touch $S/active ;; stop) rm -f $S/active ;; esac ;;\n"
             "  *) echo \"systemctl $*: unexpected\" >> $S/calls; exit 1 ;;\n"
             "esac\nEOF\nchmod +x " + d + "/path/systemctl").rc == 0);
  std::ofstream(d + "/hosts.yml") << "all:\n  children:\n    sb_nodes:\n      hosts:\n        n1:\n"
                                     "  vars:\n    ansible_connection: local\n    service_mode: systemd\n"
                                     "    install_dir: " << d << "/bin\n    config_path: " << d << "/sb-node.yaml\n"
                                     "    sb_unit_path: " << d << "/sb-node.service\n";
  // A new host: no unit. The real run writes it and starts sb-node.
  CHECK(restart_mark_after(d, "--check") == "False");
  CHECK(access((d + "/sb-node.service").c_str(), F_OK) != 0);  // the dry run changed nothing
  CHECK(access((st + "calls").c_str(), F_OK) != 0);
  CHECK(restart_mark_after(d, "") == "False");
  REQUIRE(access((st + "active").c_str(), F_OK) == 0);
  // Running, and its unit changes: restarted.
  REQUIRE(sh("rm " + st + "calls").rc == 0);
  CHECK(restart_mark_after(d, "--check -e sb_node_args=--control-only") == "True");
  CHECK(access((st + "calls").c_str(), F_OK) != 0);
  CHECK(restart_mark_after(d, "-e sb_node_args=--control-only") == "True");
  // Stopped, and its unit changes: started on the new unit, not restarted.
  REQUIRE(sh("rm " + st + "active " + st + "calls").rc == 0);
  CHECK(restart_mark_after(d, "--check") == "False");
  CHECK(access((st + "calls").c_str(), F_OK) != 0);
  CHECK(restart_mark_after(d, "") == "False");
  CHECK(access((st + "active").c_str(), F_OK) == 0);
  sh("rm -rf " + d);
}
