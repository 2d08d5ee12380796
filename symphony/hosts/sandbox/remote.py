"""The sandbox on an SSH worker host: the same policy, decided there by a small POSIX `sh`
program, since the host's folders (where its programs live, which files of its /etc are
private) are the host's to read.

`launcher(settings, credentials)` is that program. The host wrapper (`symphony.hosts.ssh`)
runs it in the workspace as `sh -c <launcher> <shell> <command>`; it builds the command line of
the host's `bwrap` or `podman` and replaces itself with it:

- the host's /usr, /etc, /bin, /sbin, /lib* read-only, every entry of /etc others may not read
  masked, a private /tmp and /var/tmp;
- `$HOME` an empty tmpfs, with the agent kind's credential files (the host's own) bound into
  it read-only, and its configuration folder writable inside;
- the installations behind the host's `PATH` and the command's program (under the home folder
  a `bin` folder alone, unless it is a virtual environment's), and the folder of every
  absolute file the command names, read-only; never /, a system folder, or one that holds the
  home folder or the workspace root;
- `read_only` and `writable` folders, then the workspace (read-only where the stage says so);
  a clone's `.git` a mount of its own with its `config`, `hooks` and `info` read-only;
- bwrap: new user, PID, IPC, UTS and network namespaces (`network: none`; `full` keeps the
  host's), no capabilities, rlimits for memory and processes (for a root login, a pids cgroup
  of the launch's, as `symphony.hosts.sandbox.cgroup` does here); podman: a container on an empty
  root made once per user, the cgroup's limits, the environment passed by name;
- a root login hands its children uid 1000.

`network: model` needs the daemon's proxy on the host and is refused at load.
"""

from __future__ import annotations

import shlex

from symphony.config.sandbox import Network, SandboxSettings, WorkspaceAccess
from symphony.hosts.sandbox.home import HomeCredentials

_LAUNCHER = r"""
_sy_shell=$0 _sy_cmd=$1 _sy_ws=$PWD
command -v "$SY_KIND" >/dev/null 2>&1 || {
  echo "symphony: $SY_KIND is not installed on $(uname -n)" >&2
  exit 95
}
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
a=""
add() { for _sy_w in "$@"; do a="$a $(q "$_sy_w")"; done; }
# The mounts, in the words of each kind: read-only, writable, tmpfs, masked.
if [ "$SY_KIND" = bwrap ]; then
  ro() { add "--ro-bind${2:+-try}" "$1" "$1"; }
  rw() { add --bind "$1" "$1"; }
  fresh() { add --tmpfs "$1"; }
  mask() { add --ro-bind /dev/null "$1"; }
  folder() { add --dir "$1"; }
else
  ro() { [ -e "$1" ] && add --mount "type=bind,src=$1,dst=$1,ro=true"; }
  rw() { add --mount "type=bind,src=$1,dst=$1"; }
  fresh() { add --mount "type=tmpfs,dst=$1,notmpcopyup"; }
  mask() { add --mount "type=bind,src=/dev/null,dst=$1,ro=true"; }
  folder() { fresh "$1"; }
fi
if [ "$SY_KIND" = bwrap ]; then
  add --unshare-user --unshare-ipc --unshare-pid --unshare-uts --unshare-cgroup-try
  add --die-with-parent --new-session --cap-drop ALL --hostname sandbox
  [ "$(id -u)" = 0 ] && add --uid 1000 --gid 1000  # a root login hands its children no root
  [ "$SY_NET" = full ] || add --unshare-net
  for _sy_l in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [ -L "$_sy_l" ]; then add --symlink "$(readlink "$_sy_l")" "$_sy_l"
    elif [ -d "$_sy_l" ]; then ro "$_sy_l"; fi
  done
  add --proc /proc --dev /dev
else
  # An empty root of the host's own: the mount points of its system folders and links.
  _sy_rootfs=${TMPDIR:-/tmp}/symphony-rootfs-$(id -u)
  if [ ! -d "$_sy_rootfs/usr" ]; then
    _sy_part=$_sy_rootfs.$$
    mkdir -p "$_sy_part" &&
      (cd "$_sy_part" && mkdir -p usr etc tmp var/tmp proc dev sys run home root)
    for _sy_l in bin sbin lib lib32 lib64 libx32; do
      if [ -L "/$_sy_l" ]; then ln -s "$(readlink "/$_sy_l")" "$_sy_part/$_sy_l"
      elif [ -d "/$_sy_l" ]; then mkdir "$_sy_part/$_sy_l"; fi
    done
    mv "$_sy_part" "$_sy_rootfs" 2>/dev/null || rm -rf "$_sy_part"
  fi
  [ -d /run/systemd/system ] || add --cgroup-manager cgroupfs
  add run --rm -i --init --name "symphony-sandbox-remote-$$-$(date +%s)" --hostname sandbox
  if [ "$SY_NET" = full ]; then add --network host; else add --network none; fi
  add --cap-drop all --security-opt no-new-privileges
  if [ "$(id -u)" = 0 ]; then
    add --uidmap 1000:0:1 --uidmap 0:100000:1000 --gidmap 1000:0:1 --gidmap 0:100000:1000
    add --user 1000:1000
  else
    add --userns keep-id
  fi
  add --memory "${SY_MEMORY_MB}m" --pids-limit "$SY_PIDS"
  limit() {  # within this login's hard limit, which podman cannot raise
    _sy_v=$(awk -v n="$1" 'index($0, n) == 1 { print $(NF - 1) }' /proc/self/limits)
    case $_sy_v in ''|*[!0-9]*) _sy_v=$2 ;; esac
    [ "$_sy_v" -gt "$2" ] && _sy_v=$2
    printf '%s:%s' "$_sy_v" "$_sy_v"
  }
  add --ulimit "nofile=$(limit 'Max open files' 65536)"
  add --ulimit "nproc=$(limit 'Max processes' 32768)"
  for _sy_l in /bin /sbin /lib /lib32 /lib64 /libx32; do
    [ -d "$_sy_l" ] && [ ! -L "$_sy_l" ] && ro "$_sy_l"
  done
  for _sy_e in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do
    case $_sy_e in _sy_*|SY_*|a) ;; *) add -e "$_sy_e" ;; esac  # values stay off the line
  done
  add -e TMPDIR=/tmp -e SYMPHONY_SANDBOX=podman --workdir "$_sy_ws"
fi
ro /usr; ro /etc
for _sy_f in $(find /etc -mindepth 1 ! -type l ! -perm -o=r -prune 2>/dev/null); do
  if [ -d "$_sy_f" ]; then fresh "$_sy_f"; else mask "$_sy_f"; fi
done
fresh /tmp; fresh /var/tmp
fresh "$HOME"
prefix() {  # the installation a program or a PATH entry belongs to; under the home folder
  _sy_d=$1  # only a virtual environment's, else the folder itself (~/.cargo holds secrets)
  case ${_sy_d##*/} in bin|sbin|.bin|shims)
    case $_sy_d/ in
      "$HOME"/*) [ -f "${_sy_d%/*}/pyvenv.cfg" ] && _sy_d=${_sy_d%/*} ;;
      *) _sy_d=${_sy_d%/*} ;;
    esac ;;
  esac
  printf '%s' "${_sy_d:-/}"
}
mounted="" _sy_root=$(dirname -- "$_sy_ws")
readonly_folder() {  # never /, the system's, or one holding the home or the workspaces
  case $1 in /|/usr|/usr/*|/etc|/etc/*) return ;; esac
  case $HOME/ in "$1"/*) return ;; esac
  case $_sy_root/ in "$1"/*) return ;; esac
  case " $mounted " in *" $1 "*) return ;; esac
  [ -d "$1" ] || return
  mounted="$mounted $1"
  ro "$1"
}
program() { readonly_folder "$(prefix "$1")"; }
_sy_old=$IFS; IFS=:
for _sy_e in $PATH; do IFS=$_sy_old; [ -n "$_sy_e" ] && program "$_sy_e"; IFS=:; done
IFS=$_sy_old
_sy_first=$(printf '%s\n' "$_sy_cmd" |
  awk '{ for (i = 1; i <= NF; i++) if ($i !~ /=/ && $i != "exec") { print $i; exit } }')
if [ -n "$_sy_first" ]; then
  _sy_bin=$(command -v -- "$_sy_first" 2>/dev/null) || _sy_bin=""
  case $_sy_bin in /*)
    program "$(dirname -- "$_sy_bin")"
    _sy_real=$(readlink -f -- "$_sy_bin" 2>/dev/null) && program "$(dirname -- "$_sy_real")"
  ;; esac
fi
for _sy_w in $_sy_cmd; do  # the folder of every absolute file the command names
  case $_sy_w in /*) [ -f "$_sy_w" ] && readonly_folder "$(dirname -- "$_sy_w")" ;; esac
done
if [ -n "$SY_CONFIG_DIR" ]; then  # the agent's configuration folder: writable, empty but
  eval "_sy_c=\${$SY_CONFIG_VAR:-}"  # for its login files, bound read-only from the host's
  [ -n "$_sy_c" ] || _sy_c=$HOME/$SY_CONFIG_DIR
  case $_sy_c/ in "$HOME"/*) folder "$_sy_c" ;; *) fresh "$_sy_c" ;; esac
  for _sy_f in $SY_CREDENTIALS; do [ -f "$_sy_c/$_sy_f" ] && ro "$_sy_c/$_sy_f" try; done
fi
for _sy_f in $SY_TOP_FILES; do [ -f "$HOME/$_sy_f" ] && ro "$HOME/$_sy_f" try; done
for _sy_e in $SY_READ_ONLY; do [ -e "$_sy_e" ] && ro "$_sy_e"; done
for _sy_e in $SY_WRITABLE; do [ -e "$_sy_e" ] && rw "$_sy_e"; done
if [ "$SY_WORKSPACE" = read-only ]; then ro "$_sy_ws"; else rw "$_sy_ws"; fi
if [ "$SY_WORKSPACE" != read-only ] && [ -d "$_sy_ws/.git" ] && [ ! -L "$_sy_ws/.git" ]; then
  rw "$_sy_ws/.git"  # a mount of its own: it cannot be renamed or replaced inside
  for _sy_g in config hooks info; do  # what decides what git runs stays as it is
    if [ -e "$_sy_ws/.git/$_sy_g" ]; then ro "$_sy_ws/.git/$_sy_g"
    elif [ "$_sy_g" != config ]; then fresh "$_sy_ws/.git/$_sy_g"; fi
  done
fi
if [ "$SY_KIND" = bwrap ] && [ "$(id -u)" = 0 ]; then
  # No rlimit binds a root login's processes: a pids cgroup of this launch's holds them
  # (empty ones of earlier launches are removed; rmdir leaves a cgroup in use alone).
  if [ -e /sys/fs/cgroup/pids/cgroup.procs ]; then _sy_h=/sys/fs/cgroup/pids
  elif grep -qw pids /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then _sy_h=/sys/fs/cgroup
  else echo "symphony: sandbox.pids cannot be enforced for root on $(uname -n)" >&2; exit 95; fi
  _sy_g=$_sy_h/symphony-sandbox/remote-$$
  { mkdir -p "$_sy_h/symphony-sandbox" &&
    if [ "$_sy_h" = /sys/fs/cgroup ]; then
      echo +pids > "$_sy_h/cgroup.subtree_control" &&
        echo +pids > "$_sy_h/symphony-sandbox/cgroup.subtree_control"
    fi &&
    rmdir "$_sy_h"/symphony-sandbox/remote-* 2>/dev/null
    mkdir "$_sy_g" && echo "$SY_PIDS" > "$_sy_g/pids.max" && echo $$ > "$_sy_g/cgroup.procs"
  } || { echo "symphony: cannot make a pids cgroup on $(uname -n)" >&2; exit 95; }
fi
if [ "$SY_KIND" = bwrap ]; then
  add --chdir "$_sy_ws" --setenv TMPDIR /tmp --setenv SYMPHONY_SANDBOX bwrap --
  if command -v prlimit >/dev/null 2>&1; then
    add prlimit "--data=$SY_MEMORY" "--nproc=$SY_PIDS" --
  fi
else
  add --rootfs "$_sy_rootfs"
fi
eval "exec $SY_KIND $a \"\$_sy_shell\" -lc \"\$_sy_cmd\""
"""


def launcher(settings: SandboxSettings, credentials: HomeCredentials) -> str:
    """The sh program that runs `$0 -lc "$1"` in `settings`' sandbox on an SSH host, in the
    workspace it is started in."""
    values = {
        "SY_KIND": settings.kind.value,
        "SY_NET": "full" if settings.network is Network.FULL else "none",
        "SY_WORKSPACE": "read-only"
        if settings.workspace is WorkspaceAccess.READ_ONLY
        else "writable",
        "SY_CONFIG_DIR": credentials.folder or "",
        "SY_CONFIG_VAR": credentials.variable or "SY_NONE",
        "SY_CREDENTIALS": " ".join(credentials.files),
        "SY_TOP_FILES": " ".join(credentials.top_files),
        "SY_READ_ONLY": " ".join(str(p) for p in settings.read_only),
        "SY_WRITABLE": " ".join(str(p) for p in settings.writable),
        "SY_MEMORY": str(settings.memory_mb * 1024 * 1024),
        "SY_MEMORY_MB": str(settings.memory_mb),
        "SY_PIDS": str(settings.pids),
    }
    head = "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())
    return head + _LAUNCHER
