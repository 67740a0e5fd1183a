"""Container images made on this machine, without a registry: an OCI image layout written as one tar
file, which `ctr -n k8s.io images import` loads into a real node's containerd. Two are made for the
real nodes (localfleet.realnodes): the pause image, compiled from the Kubernetes module's
build/pause/linux/pause.c, and a busybox image from Debian's statically linked busybox, which test
pods run (`sh -c 'echo done'`)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from localfleet.common import FleetError

LAYOUT_MEDIA = {
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": "application/vnd.oci.image.layer.v1.tar",
}
# Local names: nothing by these names is pulled, kubelet finds them in containerd (IfNotPresent).
PAUSE_IMAGE = "localfleet.local/pause:{version}"
BUSYBOX_IMAGE = "localfleet.local/busybox:{version}"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static


def _info(
    name: str, mode: int, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.size, info.linkname = mode, kind, size, link
    info.mtime = 0
    return info


def layer_tar(files: dict[str, bytes], dirs: list[str], links: dict[str, str]) -> bytes:
    """An uncompressed layer: directories, files (mode 0755) and symlinks, owned by root, mtime 0."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            tar.addfile(_info(d, 0o1777 if d == "tmp" else 0o755, tarfile.DIRTYPE))
        for name, data in files.items():
            tar.addfile(_info(name, 0o755, size=len(data)), io.BytesIO(data))
        for name, target in links.items():
            tar.addfile(_info(name, 0o777, tarfile.SYMTYPE, link=target))
    return out.getvalue()


def write_image_tar(out: Path, name: str, layer: bytes, config: dict) -> Path:
    """One image (a single layer) as an OCI image layout in a tar file, named `name` for containerd
    (annotation io.containerd.image.name) and by its tag (org.opencontainers.image.ref.name)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, kind: str) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": LAYOUT_MEDIA[kind], "digest": digest, "size": len(data)}

    layer_desc = blob(layer, "layer")
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": LAYOUT_MEDIA["manifest"],
        "config": blob(json.dumps(image_config).encode(), "config"),
        "layers": [layer_desc],
    }
    manifest_desc = blob(json.dumps(manifest).encode(), "manifest")
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
    }
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        **{f"blobs/sha256/{d.removeprefix('sha256:')}": data for d, data in blobs.items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_info(d, 0o755, tarfile.DIRTYPE))
        for fname, data in files.items():
            tar.addfile(_info(fname, 0o644, size=len(data)), io.BytesIO(data))
    partial.rename(out)
    return out


def build_pause_image(pause_c: Path, version: str, out: Path) -> Path:
    """The pause image: pause.c compiled as its Makefile does (`gcc -Os -Wall -Werror -static`)."""
    gcc = shutil.which("gcc")
    if not gcc:
        raise FleetError("gcc is needed to compile the pause image (apt-get install gcc libc6-dev)")
    binary = out.with_name("pause")
    out.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{version}", "-o", str(binary), str(pause_c)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise FleetError(f"compiling {pause_c} failed (is libc6-dev installed?):\n{res.stderr[-2000:]}")
    layer = layer_tar({"pause": binary.read_bytes()}, [], {})
    return write_image_tar(out, PAUSE_IMAGE.format(version=version), layer, {"Entrypoint": ["/pause"]})


def busybox_version() -> str:
    """Debian's busybox-static version (1:1.35.0-4+deb12u1 -> 1.35.0), or a FleetError naming the package."""
    res = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "busybox-static"], capture_output=True, text=True
    )
    if res.returncode != 0 or not BUSYBOX.is_file():
        raise FleetError("test pods run Debian's static busybox: apt-get install busybox-static")
    return res.stdout.split(":", 1)[-1].split("-", 1)[0]


def build_busybox_image(out: Path) -> Path:
    """busybox with a symlink per applet in /bin, PATH set, `sh` by default."""
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    links = {f"bin/{a}": "busybox" for a in applets if a != "busybox"}
    layer = layer_tar({"bin/busybox": BUSYBOX.read_bytes()}, ["bin", "etc", "tmp"], links)
    config = {"Env": ["PATH=/bin"], "Cmd": ["sh"]}
    return write_image_tar(out, BUSYBOX_IMAGE.format(version=busybox_version()), layer, config)
