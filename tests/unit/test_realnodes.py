"""The real nodes' configuration files (localfleet.realnodes) and the OCI image tars
(localfleet.ociimage), as written; the nodes themselves run in tests/e2e/test_real_nodes_e2e.py."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

from localfleet import nodehost, ociimage, realnodes

INFO = {"subnet": "172.29.7.0/24", "gateway": "172.29.7.1", "bridge": "kfdeadbeef", "network": "kf-deadbeef"}
NODE = {
    "ip": "172.29.7.2",
    "kubeletPort": 21000,
    "healthzPort": 21001,
    "cgroupRoot": "/kueue-federation/deadbeef/worker1-real-0",
    "containerdSocket": "/run/x/containerd.sock",
}


def test_each_node_gets_its_own_pod_addresses_on_the_bridge_without_masquerading_or_forwarding(tmp_path):
    subnet = ipaddress.ip_network(INFO["subnet"])
    seen: set = set()
    for k in range(realnodes.MAX_NODES):
        (plugin,) = realnodes.cni_config(tmp_path, INFO, k)["plugins"]
        assert (plugin["type"], plugin["bridge"]) == ("bridge", INFO["bridge"])
        assert plugin["ipMasq"] is False and plugin["isGateway"] is False
        ((rng,),) = plugin["ipam"]["ranges"]
        first, last = ipaddress.ip_address(rng["rangeStart"]), ipaddress.ip_address(rng["rangeEnd"])
        addresses = {ipaddress.ip_address(i) for i in range(int(first), int(last) + 1)}
        assert len(addresses) == 16 and all(a in subnet for a in addresses)
        assert not addresses & seen
        assert ipaddress.ip_address(INFO["gateway"]) not in addresses
        seen |= addresses
        assert plugin["ipam"]["dataDir"] == str(tmp_path / "cni-ipam")


def test_kubelet_runs_on_cgroup_v1_with_its_own_root_and_a_taint(tmp_path):
    cfg = realnodes.kubelet_config(tmp_path, NODE, Path("/ca.crt"))
    assert cfg["failCgroupV1"] is False
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["cgroupRoot"] == NODE["cgroupRoot"]
    assert cfg["containerRuntimeEndpoint"] == "unix:///run/x/containerd.sock"
    assert cfg["address"] == NODE["ip"] and cfg["readOnlyPort"] == 0
    assert cfg["authorization"] == {"mode": "Webhook"}
    assert cfg["authentication"]["anonymous"] == {"enabled": False}
    assert cfg["registerWithTaints"] == [
        {"key": realnodes.REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}
    ]
    for key in ("podLogsDir", "volumePluginDir", "tlsCertFile"):
        assert cfg[key].startswith(str(tmp_path))
    command = realnodes.kubelet_command({**NODE, "dir": str(tmp_path), "name": "n", "kubelet": "/k"})
    assert f"--node-labels={realnodes.REAL_NODE_KEY}=true" in command
    assert f"--root-dir={tmp_path / 'kubelet'}" in command


def test_a_pod_asks_for_a_real_node_by_the_label_and_the_toleration():
    scheduling = realnodes.REAL_NODE_SCHEDULING
    assert scheduling["nodeSelector"] == {realnodes.REAL_NODE_KEY: "true"}
    (toleration,) = scheduling["tolerations"]
    assert (toleration["key"], toleration["value"], toleration["effect"]) == (
        realnodes.REAL_NODE_KEY,
        "true",
        "NoSchedule",
    )


def test_containerd_keeps_everything_under_the_node_directory(tmp_path):
    cfg = tomllib.loads(realnodes.containerd_config(tmp_path, "localfleet.local/pause:3.10.2"))
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == "localfleet.local/pause:3.10.2"
    assert cri["cni"]["bin_dir"] == str(realnodes.CNI_BIN)
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    paths = [
        cfg["root"],
        cfg["state"],
        cfg["grpc"]["address"],
        cfg["ttrpc"]["address"],
        cfg["plugins"]["io.containerd.internal.v1.opt"]["path"],
        cri["cni"]["conf_dir"],
        cri["containerd"]["runtimes"]["runc"]["options"]["Root"],
    ]
    assert all(p.startswith(str(tmp_path) + "/") for p in paths), paths


def test_an_image_tar_is_an_oci_layout_named_for_containerd(tmp_path):
    layer = ociimage.layer_tar({"bin/hello": b"#!/bin/sh\n"}, ["bin", "tmp"], {"bin/hi": "hello"})
    out = ociimage.write_image_tar(
        tmp_path / "i.tar", "localfleet.local/x:1.0", layer, {"Cmd": ["/bin/hello"]}
    )
    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (desc,) = json.loads(files["index.json"])["manifests"]
    assert desc["annotations"] == {
        "io.containerd.image.name": "localfleet.local/x:1.0",
        "org.opencontainers.image.ref.name": "1.0",
    }
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(files[f"blobs/sha256/{desc['digest'].removeprefix('sha256:')}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"])
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    assert config["config"] == {"Cmd": ["/bin/hello"]}
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["tmp"].mode == 0o1777 and members["bin/hi"].linkname == "hello"
    assert all(m.mtime == 0 and m.uid == 0 for m in members.values())


def test_a_fleet_has_a_bridge_name_linux_accepts():
    name = nodehost.bridge_name(Path("/dev/shm/some-fleet-directory-with-a-long-name"))
    assert len(name) <= 15 and name.startswith("kf")
    assert name != nodehost.bridge_name(Path("/dev/shm/another"))
