# testbed/lib.sh: names, addresses and the object record shared by up and down.
# Sourced by testbed/up and testbed/down; not run on its own.
#
# A testbed is identified by its index K (0..15, --index, default 0):
#   prefix        sb<K>                    (every namespace, bridge and root-side veth)
#   state dir     /run/sb-testbed/sb<K>    (keys, sshd configs, PID files, inventory, record)
#   management    198.18.(16K).0/24        root end .1, node i .(10+i)
#   data MACs     02:5b:KK:RR:II:00        RR = role, II = node
# so two testbeds with different indexes never collide, in names or in
# addresses. Every address is inside 198.18.0.0/15.
set -euo pipefail

TB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

tb_die() { echo "testbed: $*" >&2; exit 1; }

# --help: the opening comment of script $1 (after the #! line), "# " removed.
tb_usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"; }

tb_need_root() {
  [ "$(id -u)" -eq 0 ] || tb_die "$1 needs root (it creates network namespaces, veth pairs, bridges and sshd processes); run it as root"
}

tb_setup_names() {
  local k=$1
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -le 15 ] || tb_die "--index must be 0..15 (got '$k')"
  TB_INDEX=$k
  TB_P="sb$k"
  TB_STATE="/run/sb-testbed/$TB_P"
  TB_RECORD="$TB_STATE/objects"
  TB_MGMT_NET="198.18.$((16 * k)).0/24"
  TB_MGMT_HOST="198.18.$((16 * k)).1"
  # Addresses used inside generated packets and for S1-U (never configured
  # on kernel interfaces of the data path):
  TB_UE_NET="198.19.$((16 * k)).0/20"          # UE (phone) addresses
  TB_SERVER_NET="198.18.$((16 * k + 8)).0/24"   # Internet-side servers
  TB_S1U_NET="198.18.$((16 * k + 9)).0/24"      # gateway S1-U and eNodeB addresses
}

tb_mgmt_ip() { echo "198.18.$((16 * TB_INDEX)).$((10 + $1))"; }
# role: 01 ext, 02 fabric, 03 enb, 11 generator ext, 13 eNodeB s1u
tb_mac() { printf '02:5b:%02x:%s:%02x:00' "$TB_INDEX" "$1" "$2"; }

# Record an object so down removes exactly what up made.
tb_record() { echo "$*" >>"$TB_RECORD"; }
