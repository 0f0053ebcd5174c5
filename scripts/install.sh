#!/usr/bin/env bash
# Install everything the testbed needs on Debian 12 / Ubuntu 22.04+ and start Open vSwitch.
#
# Idempotent; run as root from anywhere:   sudo bash scripts/install.sh
#
# 1. Debian packages: Mininet (for mnexec), Open vSwitch, iperf3, ethtool, ping, tcpdump, python3-venv.
# 2. Open vSwitch started. With the openvswitch kernel module (e.g. the Vagrant VM) the kernel datapath is used;
#    without it (containers, sandboxes) the userspace datapath, which needs userspace TSO for TCP to work.
# 3. A virtual environment in <project>/.venv on the system's python3 (>= 3.10) with ryu 4.34 made to work on
#    Python 3.10+ (old setuptools, no build isolation, eventlet 0.33.3), mininet, scapy, numpy, matplotlib,
#    pytest and the testbed itself (editable).
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLUX_VENV:-$PROJECT_DIR/.venv}"
log() { printf '[install] %s\n' "$*"; }

if [[ $EUID -ne 0 ]]; then
    echo "install.sh: must run as root (try: sudo bash scripts/install.sh)" >&2
    exit 2
fi

# --- 1. system packages --------------------------------------------------------------------------------------------
PACKAGES=(mininet openvswitch-switch iperf3 iputils-ping ethtool tcpdump iproute2 procps psmisc
          python3 python3-venv python3-dev gcc)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "system packages present"
fi

# --- 2. Open vSwitch ----------------------------------------------------------------------------------------------
has_kernel_datapath() {
    [[ -d /sys/module/openvswitch ]] && return 0
    modprobe openvswitch 2>/dev/null && [[ -d /sys/module/openvswitch ]]
}
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
if has_kernel_datapath; then
    log "openvswitch kernel module present: kernel datapath"
    DATAPATH=kernel
else
    log "no openvswitch kernel module: userspace datapath"
    DATAPATH=user
fi
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    log "starting Open vSwitch"
    # Without the module ovs-ctl prints a module-loading error and a ulimit warning; both are harmless.
    "$OVS_CTL" start --system-id=random >/dev/null 2>&1 || true
fi
if [[ $DATAPATH == user ]]; then
    # TCP through userspace bridges needs TSO emulation (veth checksum offload is otherwise not completed);
    # the setting is read at start only, so restart once when it changes.
    if [[ "$(ovs-vsctl --timeout=5 get Open_vSwitch . other_config:userspace-tso-enable 2>/dev/null)" != '"true"' ]]; then
        ovs-vsctl --timeout=5 set Open_vSwitch . other_config:userspace-tso-enable=true
        "$OVS_CTL" restart --system-id=random >/dev/null 2>&1 || true
    fi
fi
ovs-vsctl --timeout=5 show >/dev/null || { echo "install.sh: Open vSwitch did not start" >&2; exit 1; }
log "Open vSwitch $(ovs-vsctl --version | head -1 | awk '{print $NF}') running"

# --- 3. Python environment ------------------------------------------------------------------------------------------
PY=/usr/bin/python3
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
    echo "install.sh: Python 3.10+ needed, found $("$PY" --version)" >&2; exit 2; }
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
# ryu 4.34 (2020) builds only with an old setuptools and without build isolation, and needs eventlet 0.33.x
# on Python >= 3.10 (controller/launcher.py supplies the one name newer eventlets dropped).
"${PIP[@]}" install 'setuptools==65.5.0' wheel pbr
"${PIP[@]}" install --no-build-isolation 'ryu==4.34' 'eventlet==0.33.3' 'dnspython==2.6.1'
# (setuptools warns about the package folders in the project root: that is where they are meant to be.)
"${PIP[@]}" install --no-build-isolation -e "$PROJECT_DIR[test]" 2> >(grep -v -e BuildBackendWarning \
    -e "Please be careful" -e "name as your package" -e "warnings.warn" -e '^ *$' >&2)
check_out=$("$VENV/bin/python" - 2>&1 <<'EOF'
import controller.launcher  # noqa: F401  (patches eventlet before ryu is imported)
import mininet.net, ryu.cmd.manager, scapy.all, numpy, matplotlib, yaml, pytest  # noqa: F401
EOF
) || { echo "$check_out" >&2; echo "install.sh: the Python environment does not import" >&2; exit 1; }
log "Python environment ready: $VENV ($("$VENV/bin/python" --version))"
log "done. Run:  sudo python testbed/run.py --scheduler flux"
