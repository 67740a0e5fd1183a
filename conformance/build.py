"""Upstream Kueue's e2e suites as test binaries (`go test -c`), built from the Go module of
KUEUE_VERSION (hack/versions.env) with our one patch (hack/patches/kueue-<version>-conformance-server-
address.patch: test/util.GetClusterServerAddress reads the fleet's apiserver addresses) and cached
under ~/.cache/kueue-federation, keyed by the version and the patch's digest.

The suites run from the patched source tree (they find upstream's repository root by its Makefile)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from localfleet.binaries import Binaries, Builder, copy_module_source, read_versions
from localfleet.common import CACHE, REPO, FleetError, log

PATCH_NAME = "conformance-server-address.patch"
# The suite with a spec that runs upstream's kubectl-kueue (built with it).
KUEUECTL_SUITE = "singlecluster-baseline"


def suite_package(suite: str) -> str:
    """A suite's Go package: the MultiKueue suites by their directory's name (`baseline`), the others
    as family-directory (`singlecluster-baseline`: test/e2e/singlecluster/baseline)."""
    family, _, name = suite.rpartition("-")
    return f"./test/e2e/{family or 'multikueue'}/{name}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:8]


@dataclass(frozen=True)
class SuiteBinaries:
    version: str

    @property
    def patch(self) -> Path:
        return REPO / "hack" / "patches" / f"kueue-{self.version}-{PATCH_NAME}"

    @property
    def key(self) -> str:
        return f"{self.version}-{digest(self.patch)}"

    @property
    def source(self) -> Path:
        """The patched copy of upstream's module: where the suites are built and run."""
        return CACHE / "build" / f"kueue-conformance-src-{self.key}"

    @property
    def bin_dir(self) -> Path:
        return CACHE / "bin" / f"kueue-{self.version}" / f"conformance-{digest(self.patch)}"

    @property
    def kueuectl(self) -> Path:
        """Upstream's kubectl-kueue, where the baseline suite's kueuectl spec runs it (bin/ of the
        repository root it finds)."""
        return self.source / "bin" / "kubectl-kueue"

    def path(self, suite: str) -> Path:
        return self.bin_dir / f"{suite}.test"


def suite_binaries() -> SuiteBinaries:
    return SuiteBinaries(read_versions()["KUEUE_VERSION"])


def build(suites: list[str], force: bool = False) -> SuiteBinaries:
    """Each suite's test binary, built unless cached."""
    sb = suite_binaries()
    if not sb.patch.is_file():
        raise FleetError(f"no patch {sb.patch.relative_to(REPO)} for upstream Kueue {sb.version}")
    todo = [s for s in suites if force or not sb.path(s).is_file()]
    kueuectl = KUEUECTL_SUITE in suites and (force or not sb.kueuectl.is_file())
    if not todo and not kueuectl and sb.source.is_dir():
        log(f"conformance suites cached under {sb.bin_dir}")
        return sb
    builder = Builder(Binaries(read_versions()))
    builder.check_go()
    if force or not (sb.source / ".patched").is_file():
        work = sb.source
        copy_module_source(builder.module_dir(f"sigs.k8s.io/kueue@{sb.version}"), work)
        builder.run(
            f"patch kueue {sb.version} tests", ["patch", "-p1", "--forward", "-i", str(sb.patch)], cwd=work
        )
        (work / ".patched").write_text(sb.key + "\n")
    sb.bin_dir.mkdir(parents=True, exist_ok=True)
    for suite in todo:
        out = sb.path(suite)
        partial = out.with_name(out.name + ".partial")
        builder.run(
            f"build kueue {sb.version} {suite} suite",
            ["go", "test", "-c", "-trimpath", "-o", str(partial), suite_package(suite)],
            cwd=sb.source,
        )
        partial.rename(out)
    if kueuectl:
        sb.kueuectl.parent.mkdir(parents=True, exist_ok=True)
        builder.run(
            f"build kueue {sb.version} kubectl-kueue",
            ["go", "build", "-trimpath", "-o", str(sb.kueuectl), "./cmd/kueuectl"],
            cwd=sb.source,
        )
    return sb


def cluster_profile_crd(sb: SuiteBinaries) -> Path:
    """The ClusterProfile CRD (multicluster.x-k8s.io) of the cluster-inventory-api module version Kueue's
    go.mod requires: upstream's e2e setup installs it on the manager cluster."""
    module = "sigs.k8s.io/cluster-inventory-api"
    version = next(
        (
            line.split()[1]
            for line in (sb.source / "go.mod").read_text().splitlines()
            if line.strip().startswith(module + " ")
        ),
        None,
    )
    if version is None:
        raise FleetError(f"{module} is not in sigs.k8s.io/kueue@{sb.version}'s go.mod")
    builder = Builder(Binaries(read_versions()))
    builder.check_go()
    crd = (
        builder.module_dir(f"{module}@{version}")
        / "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml"
    )
    if not crd.is_file():
        raise FleetError(f"{module}@{version} has no ClusterProfile CRD at {crd}")
    return crd
