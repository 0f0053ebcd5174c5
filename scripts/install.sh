#!/usr/bin/env bash
# Install everything the testbed needs on Debian 12 / Ubuntu 22.04+ and start Open vSwitch.
#
# Idempotent; run as root from anywhere:   sudo bash scripts/install.sh
# The run and test commands (testbed/run.py, scripts/test.py) call it by themselves when something is missing.
#
# 1. Debian packages: Mininet (for mnexec), Open vSwitch, ethtool, ping, tcpdump, python3-venv.
# 2. Open vSwitch started. With the openvswitch kernel module (e.g. the Vagrant VM) the kernel datapath is used;
#    without it (containers, sandboxes) the userspace datapath, which needs userspace TSO for TCP to work.
# 3. A virtual environment in <project>/.venv on the system's python3 (>= 3.10) with ryu 4.34 made to work on
#    Python 3.10-3.13, mininet, scapy, numpy, scipy, matplotlib, pytest and the testbed itself (editable).
#
# Options (for the test command, which also checks the code on other interpreters):
#   --python PATH   build the environment on this interpreter (default /usr/bin/python3)
#   --venv DIR      where to build it (default <project>/.venv, or $FLUX_VENV)
#   --python-only   only step 3 (no root needed if DIR is writable)
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLUX_VENV:-$PROJECT_DIR/.venv}"
PY=/usr/bin/python3
PYTHON_ONLY=0
while (($#)); do
    case "$1" in
        --python) PY="$2"; shift 2 ;;
        --venv) VENV="$2"; shift 2 ;;
        --python-only) PYTHON_ONLY=1; shift ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
log() { printf '[install] %s\n' "$*"; }

if [[ $EUID -ne 0 && $PYTHON_ONLY -eq 0 ]]; then
    echo "install.sh: must run as root (try: sudo bash scripts/install.sh)" >&2
    exit 2
fi

if ((PYTHON_ONLY == 0)); then
    # --- 1. system packages --------------------------------------------------------------------------------------------
    PACKAGES=(mininet openvswitch-switch iputils-ping ethtool tcpdump iproute2 procps psmisc
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
fi

# --- 3. Python environment ------------------------------------------------------------------------------------------
[[ -x "$PY" ]] || PY="$(command -v "$PY" || true)"
[[ -n "$PY" && -x "$PY" ]] || { echo "install.sh: no Python interpreter at ${PY:-?}" >&2; exit 2; }
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PY" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' || {
    echo "install.sh: Python 3.10-3.13 needed, found $PYVER ($PY)" >&2; exit 2; }
# ryu 4.34 (2020) builds only without build isolation and with a setuptools old enough to have what its hooks use,
# and it needs an eventlet that runs on the interpreter (controller/framework.py supplies the one name newer
# eventlets dropped). Measured with fresh pip caches:
#   3.10, 3.11: setuptools 65.5.0 + eventlet 0.33.3;
#   3.12, 3.13: setuptools 67.8.0 (65.x lacks pkgutil.ImpImporter there; 68+ lacks easy_install.get_script_args)
#               + eventlet 0.38.2 (0.33.3 calls ssl.wrap_socket, gone in 3.12).
# setup.cfg pins the same eventlets with markers.
case "$PYVER" in
    3.10|3.11) SETUPTOOLS=65.5.0 EVENTLET=0.33.3 ;;
    *) SETUPTOOLS=67.8.0 EVENTLET=0.38.2 ;;
esac
STAMP="$VENV/.flux-setup"
if [[ -x "$VENV/bin/python" ]] && [[ "$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$PYVER" ]]; then
    log "$VENV was built on another Python: rebuilding it on $PYVER"
    rm -rf "$VENV"
fi
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV (Python $PYVER)"; "$PY" -m venv "$VENV"; }
rm -f "$STAMP"
# pip's own notices (local index folders that do not exist on this machine; setuptools' warning about the package
# folders in the project root, which is where they are meant to be) are filtered out; errors are not.
pip_install() {
    "$VENV/bin/python" -m pip --disable-pip-version-check -q install "$@" 2> >(grep -v -e BuildBackendWarning \
        -e "Please be careful" -e "name as your package" -e "warnings.warn" -e '^ *$' \
        -e "^WARNING: Location 'file:" >&2)
}
log "installing ryu 4.34 (setuptools $SETUPTOOLS, eventlet $EVENTLET), os-ken and the testbed's packages into $VENV"
pip_install "setuptools==$SETUPTOOLS" wheel pbr
pip_install --no-build-isolation 'ryu==4.34' "eventlet==$EVENTLET" 'dnspython==2.6.1'
pip_install --no-build-isolation -e "$PROJECT_DIR[test]"
check_out=$("$VENV/bin/python" - 2>&1 <<'PYEOF'
import controller.framework; controller.framework.prepare()  # eventlet made fit for ryu before it is imported
import mininet.net, ryu.cmd.manager, ryu.base.app_manager, os_ken.base.app_manager, scapy.all, numpy, scipy, matplotlib, yaml, tqdm, pytest  # noqa: F401
PYEOF
) || { echo "$check_out" >&2; echo "install.sh: the Python environment does not import" >&2; exit 1; }
# The stamp tells the run and test commands that this environment matches the current install recipe.
"$VENV/bin/python" "$PROJECT_DIR/testbed/bootstrap.py" --stamp > "$STAMP"
log "Python environment ready: $VENV ($("$VENV/bin/python" --version))"
if ((PYTHON_ONLY == 0)); then
    log "done. Run:  sudo python testbed/run.py --scheduler flux"
fi
