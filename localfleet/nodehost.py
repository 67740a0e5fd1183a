"""What real nodes (localfleet.realnodes) change on the machine, and how `down` takes it back: one
bridge per fleet on a private /24 (no masquerading, no forwarding), a cgroup subtree per fleet in
every cgroup v1 hierarchy, and the kernel settings kubelet writes. `teardown` kills every container
and shim of the fleet's containerds, unmounts whatever is mounted under the run directory, removes
the cgroups, the bridge, CNI's cached results and kubelet's log symlinks, and restores the settings."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from localfleet.common import FleetError, log

CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_TOP = "kueue-federation"  # every fleet's subtree: /kueue-federation/<fleet id>/<node>
# kubelet sets these at start (container_manager_linux.go's setupKernelTunables) unless it is told to
# fail instead; they are machine-wide (panic_on_oops=1 turns an oops into a panic), so the values they
# had before the first real node on this machine are kept in SYSCTL_FILE and put back once a node is
# Ready, and again by `down`.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
SYSCTL_FILE = Path("/run/kueue-federation/sysctl-before-kubelet.json")
# kubelet needs this many inotify instances (128 by default): raised, never lowered, not persisted.
INOTIFY_INSTANCES = ("fs/inotify/max_user_instances", 512)
SUBNETS = ipaddress.ip_network("172.29.0.0/16")  # one /24 of it per fleet; kwok's pods use 10.244/16
SHIM_SOCKETS = Path("/run/containerd/s")  # containerd 1.6's shims put their sockets here, whatever root
CNI_CACHE = Path("/var/lib/cni/results")
CONTAINER_LOGS = Path("/var/log/containers")  # kubelet's symlinks to the pods' logs


def fleet_id(run_dir: Path) -> str:
    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:8]


def bridge_name(run_dir: Path) -> str:
    return f"kf{fleet_id(run_dir)}"  # at most 15 characters, as Linux wants


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise FleetError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
    return res


def networks_in_use() -> list[ipaddress.IPv4Network]:
    used = []
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines() + _ip("-4", "route").stdout.splitlines():
        for word in line.split():
            try:
                used.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
    return [n for n in used if n.version == 4 and n.prefixlen > 0]


def make_bridge(run_dir: Path, addresses: int) -> dict:
    """The fleet's bridge with the first free /24 of SUBNETS: .1 is the pods' gateway, .2 on the
    nodes' addresses (`addresses` of them). No forwarding or masquerading is turned on."""
    name = bridge_name(run_dir)
    start = int(fleet_id(run_dir), 16) % 256
    used = networks_in_use()
    for i in range(256):
        subnet = list(SUBNETS.subnets(new_prefix=24))[(start + i) % 256]
        if any(subnet.overlaps(u) for u in used):
            continue
        hosts = list(subnet.hosts())
        _ip("link", "add", name, "type", "bridge")
        for host in hosts[: 1 + addresses]:
            _ip("addr", "add", f"{host}/24", "dev", name)
        _ip("link", "set", name, "up")
        return {
            "bridge": name,
            "subnet": str(subnet),
            "gateway": str(hosts[0]),
            "nodeIPs": [str(h) for h in hosts[1 : 1 + addresses]],
        }
    raise FleetError(f"no free /24 in {SUBNETS} for the real nodes' bridge")


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, pids, ..., name=systemd)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mount, fstype, *_ = line.split()
        if fstype == "cgroup" and Path(mount).parent == CGROUP_FS:
            found.append(Path(mount))
    return found


def make_cgroup(path: str) -> None:
    """`path` (/kueue-federation/<fleet>/<node>) in every hierarchy; cpuset's cpus and mems copied from
    the parent at each new level, as a new cpuset starts empty."""
    for h in cgroup_hierarchies():
        parent = h
        for part in path.strip("/").split("/"):
            d = parent / part
            if not d.is_dir():
                d.mkdir()
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if (parent / knob).is_file():
                        (d / knob).write_text((parent / knob).read_text())
            parent = d


def _cgroup_dirs(top: str) -> list[Path]:
    """Every directory of `top`'s subtree in every hierarchy, deepest first."""
    dirs = []
    for h in cgroup_hierarchies():
        root = h / top.strip("/")
        if root.is_dir():
            dirs += [root, *(p for p in root.rglob("*") if p.is_dir())]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def remove_cgroup(top: str) -> None:
    """SIGKILL whatever runs in `top`'s subtree, then remove it (and /kueue-federation when empty)."""
    deadline = time.monotonic() + 15
    while True:
        pids = set()
        for d in _cgroup_dirs(top):
            try:
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise FleetError(f"processes {sorted(pids)} are still in cgroup {top} after SIGKILL")
        time.sleep(0.2)
    for d in _cgroup_dirs(top):
        _rmdir(d)
    for h in cgroup_hierarchies():
        _rmdir(h / CGROUP_TOP)


def _rmdir(d: Path) -> None:
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno == 39:  # ENOTEMPTY: a child of another fleet (only for CGROUP_TOP)
                return
            time.sleep(0.1)  # EBUSY: the last task is still exiting


def _read_sysctl(name: str) -> str:
    return (Path("/proc/sys") / name).read_text().strip()


def prepare_sysctls() -> None:
    """Keep the values kubelet would change (once per boot), and raise the inotify instances."""
    if not SYSCTL_FILE.exists():
        SYSCTL_FILE.parent.mkdir(parents=True, exist_ok=True)
        SYSCTL_FILE.write_text(json.dumps({k: _read_sysctl(k) for k in KUBELET_SYSCTLS}))
    name, wanted = INOTIFY_INSTANCES
    if int(_read_sysctl(name)) < wanted:
        (Path("/proc/sys") / name).write_text(str(wanted))


def restore_sysctls() -> None:
    try:
        before = json.loads(SYSCTL_FILE.read_text())
    except (OSError, json.JSONDecodeError):
        return
    for name, value in before.items():
        if _read_sysctl(name) != value:
            (Path("/proc/sys") / name).write_text(value)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _socket_paths(pid: int) -> list[Path]:
    """The unix sockets a process has open (by inode, from /proc/net/unix)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    paths = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[6] in inodes:
            paths.append(Path(parts[7].lstrip("@")))
    return paths


def kill_shims(sockets: list[str]) -> list[Path]:
    """SIGKILL the containerd shims started by the containerds at `sockets`; returns the shims' own
    sockets, which a killed shim leaves behind."""
    marks = [f"-address {s} " for s in sockets] + [f"-address {s}" for s in sockets]
    shims, left = [], []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmd = _cmdline(int(entry.name)) + " "
            if "containerd-shim" in cmd and any(m in cmd for m in marks):
                shims.append(int(entry.name))
    for pid in shims:
        left += [p for p in _socket_paths(pid) if SHIM_SOCKETS in p.parents]
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def mounts_under(root: Path) -> list[str]:
    """Mount points at or under `root`, deepest first."""
    found = []
    prefix = str(root.resolve()).rstrip("/") + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount = line.split()[4].encode().decode("unicode_escape")
        if (mount + "/").startswith(prefix):
            found.append(mount)
    return sorted(set(found), key=lambda m: m.count("/"), reverse=True)


def unmount_all(root: Path) -> None:
    for _ in range(3):
        mounts = mounts_under(root)
        if not mounts:
            return
        for m in mounts:
            subprocess.run(["umount", "-l", m], capture_output=True)
    left = mounts_under(root)
    if left:
        raise FleetError(f"still mounted under {root}: {', '.join(left)}")


def teardown(run_dir: Path, info: dict) -> None:
    """Take back everything `localfleet.realnodes` made for the fleet in `run_dir` (its state's
    `realNodes`): safe to run twice, and on a half-made fleet."""
    nodes = info.get("nodes", [])
    shim_sockets = kill_shims([n["containerdSocket"] for n in nodes])
    # CNI caches each sandbox's result by container id (the bridge's and the loopback's).
    tasks = [Path(n["dir"]) / "containerd/state/io.containerd.runtime.v2.task/k8s.io" for n in nodes]
    ids = [t.name for d in tasks if d.is_dir() for t in d.iterdir()]
    if info.get("cgroup"):
        remove_cgroup(info["cgroup"])
    for s in shim_sockets:
        s.unlink(missing_ok=True)
    unmount_all(run_dir)
    if info.get("bridge") and _ip("link", "show", info["bridge"], check=False).returncode == 0:
        _ip("link", "delete", info["bridge"])
    if CNI_CACHE.is_dir():
        for f in CNI_CACHE.iterdir():
            if any(f"-{i}-" in f.name for i in ids) or f.name.startswith(f"{info.get('network')}-"):
                f.unlink(missing_ok=True)
    if CONTAINER_LOGS.is_dir():
        prefix = str(run_dir.resolve()) + "/"
        for link in CONTAINER_LOGS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink()
    restore_sysctls()
    log(f"real nodes: removed bridge {info.get('bridge')}, cgroup {info.get('cgroup')} and their mounts")
