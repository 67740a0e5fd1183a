"""Bad input to MultiKueue (issue 12): broken or unsafe worker kubeconfigs, credentials a worker
rejects, a MultiKueueConfig naming missing clusters, a worker without our Workload CRD (or with
one of another version), a worker without Kueue at all or with no Kueue version the manager
speaks, an LWS no worker can fit. Each gets its documented condition or message
while a healthy worker in the same test keeps admitting (docs/reliability.md, "Bad input")."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from admission_kit import consistently, running_agent
from multikueue_kit import (
    CONFIG_NAMESPACE,
    JOB_SET_FRAMEWORKS,
    LWS_FRAMEWORKS,
    TEST_OPTIONS,
    check_state,
    condition,
    eventually,
    job_set,
    lws,
    mk_job,
    multikueue,
)

from kube_runtime.client import Invalid, KubeClient, NotFound
from kueue_domain import api
from manager.config import parse_manager_config
from manager.manager import Manager

pytestmark = pytest.mark.realcluster

CLUSTER_PROFILE_CRD = Path(__file__).parent / "fixtures" / "clusterprofile-crd.yaml"
SECRET_MARKER = "not-a-real-token-4d1f"  # a value that must never reach a condition or a log


def load_path(env, worker: str) -> dict:
    return yaml.safe_load(env.worker_kubeconfig_text(worker))


def expired_client_cert_kubeconfig(fleet, good: dict) -> dict:
    """`good` with a client certificate the fleet's CA signed, for the same user, expired yesterday."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pki = Path(fleet.state["runDir"]) / "pki"
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-multikueue")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=2))
        .not_valid_after(now - dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    config = yaml.safe_load(yaml.safe_dump(good))
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode(),
        "client-key-data": base64.b64encode(key_pem).decode(),
    }
    return config


async def put_raw_secret(env, name: str, data: dict[str, str]) -> None:
    await env.create(
        env.manager_kube,
        api.SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": CONFIG_NAMESPACE},
            "stringData": data,
        },
    )


async def use_clusters(env, names: list[str]) -> None:
    await env.manager_kube.patch_merge(api.MULTIKUEUE_CONFIG, env.config_name, {"spec": {"clusters": names}})


def cluster_state_is(env, name: str, expected: tuple[str, str, str]):
    async def check():
        return await env.cluster_active(name) == expected or None

    return check


async def admitted_on_a_worker(env, job: str, body: dict | None = None) -> str:
    """Submit a Job on the manager; the MultiKueueCluster whose worker admitted it."""
    await env.manager_kube.create(api.JOB, body or mk_job(job), namespace=env.namespace)

    async def ready():
        wl = await env.job_workload(job)
        state = check_state(wl, env.check)
        return wl["status"]["clusterName"] if state and state["state"] == "Ready" else None

    return await eventually(ready, timeout=40)


async def test_broken_kubeconfig_secrets_and_missing_clusters_leave_a_healthy_worker_admitting(
    fleet, kube, namespace
):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (good,) = env.clusters
        good_config = load_path(env, "worker1")
        cluster_name = good_config["clusters"][0]["name"]

        def variant(change) -> str:
            config = yaml.safe_load(yaml.safe_dump(good_config))
            change(config)
            return yaml.safe_dump(config)

        exec_plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}}
        secrets = {
            # A token line that is not YAML: the parse error must not quote it.
            "notyaml": f"users:\n- name: x\n  user:\n    token: {SECRET_MARKER}: x\n",
            "exec": variant(lambda c: c["users"][0].update(user=exec_plugin)),
            "tokenfile": variant(lambda c: c["users"][0].update(user={"tokenFile": "/var/run/token"})),
            "insecure": variant(
                lambda c: c["clusters"][0]["cluster"].update({"insecure-skip-tls-verify": True})
            ),
        }
        expected = {
            "notyaml": (
                "InsecureKubeConfig",
                "failed to parse kubeconfig(apiconfig): yaml: line 4: mapping values are not allowed here",
            ),
            "exec": ("InsecureKubeConfig", "exec plugins are not allowed"),
            "tokenfile": ("InsecureKubeConfig", "tokenFile is not allowed"),
            "insecure": (
                "InsecureKubeConfig",
                f"insecure TLS verification is not allowed for cluster {cluster_name}",
            ),
            "nokey": ("BadKubeConfig", f'key "kubeconfig" not found in secret "{env.prefix}-nokey-secret"'),
        }
        for kind, text in secrets.items():
            await env.put_secret(f"{env.prefix}-{kind}-secret", text)
        # The kubeconfig under another key, as `kubectl create secret --from-file=config` would store it.
        await put_raw_secret(
            env, f"{env.prefix}-nokey-secret", {"config": env.worker_kubeconfig_text("worker1")}
        )
        bad = sorted(f"{env.prefix}-{kind}" for kind in expected)
        for name in bad:
            await env.add_cluster(name)
        missing = f"{env.prefix}-never-created"
        await use_clusters(env, [good, *bad, missing])

        for kind, (reason, error) in expected.items():
            message = f"load client config failed: {error}"
            await eventually(cluster_state_is(env, f"{env.prefix}-{kind}", ("False", reason, message)))
        mkc = await env.get(kube, api.MULTIKUEUE_CLUSTER, f"{env.prefix}-notyaml")
        assert SECRET_MARKER not in str(mkc["status"])
        assert await env.cluster_active(good) == ("True", "Active", "Connected")
        check_message = f"Missing clusters: [{missing}], Inactive clusters: [{' '.join(bad)}]"
        assert await eventually(
            lambda: _equals(env.check_active(), ("True", "SomeActiveClusters", check_message))
        )
        assert await admitted_on_a_worker(env, "healthy") == good

        # Fixing one Secret in place brings its cluster up without a restart.
        await env.put_secret(f"{env.prefix}-exec-secret", env.worker_kubeconfig_text("worker1"))
        await eventually(cluster_state_is(env, f"{env.prefix}-exec", ("True", "Active", "Connected")))


async def _equals(awaitable, expected):
    return await awaitable == expected


async def test_credentials_the_worker_rejects_are_named_in_the_condition(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (good,) = env.clusters
        good_config = load_path(env, "worker1")
        expired = expired_client_cert_kubeconfig(fleet, good_config)
        token = yaml.safe_load(yaml.safe_dump(good_config))
        token["users"][0]["user"] = {"token": SECRET_MARKER}
        await env.put_secret(f"{env.prefix}-expired-secret", yaml.safe_dump(expired))
        await env.put_secret(f"{env.prefix}-token-secret", yaml.safe_dump(token))
        for kind in ("expired", "token"):
            await env.add_cluster(f"{env.prefix}-{kind}")
        await use_clusters(env, [good, f"{env.prefix}-expired", f"{env.prefix}-token"])

        server = good_config["clusters"][0]["cluster"]["server"]
        not_after = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).strftime("%Y-%m-%d")
        hints = {
            "expired": f"the client certificate expired at {not_after}T",
            "token": "the worker does not accept the token (expired or revoked?)",
        }
        for kind, hint in hints.items():

            async def rejected(name=f"{env.prefix}-{kind}"):
                state = await env.cluster_active(name)
                return state if state and state[1] == "ClientConnectionFailed" else None

            status, _, message = await eventually(rejected, timeout=30)
            assert status == "False"
            prefix = f"{server}: the worker rejected the kubeconfig's credentials (401 Unauthorized): "
            assert message.startswith(prefix + hint), message
            assert "; connection attempts: 1, next connection attempt: " in message
            assert SECRET_MARKER not in message
        assert await admitted_on_a_worker(env, "healthy") == good


async def test_a_worker_without_our_workload_crd_is_inactive_until_it_is_back(fleet, kube, namespace):
    """worker2 loses the Workload CRD, then serves a Workload CRD of another version only, then
    gets ours back; worker1 admits throughout. (No worker_agent runs on worker2 in this test.)"""
    crd_name = f"{api.WORKLOAD.plural}.{api.GROUP}"
    async with (
        multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env,
        await KubeClient.from_kubeconfig_file(fleet.kubeconfig("worker2")) as worker2,
    ):
        (good,) = env.clusters
        crd = await worker2.get(api.CUSTOM_RESOURCE_DEFINITION, crd_name)
        if "v1beta2" not in _versions(crd):
            pytest.fail(f"worker2's {crd_name} serves {_versions(crd)}: restore it before running this test")
        await env.put_secret(f"{env.prefix}-nocrd-secret", env.worker_kubeconfig_text("worker2"))
        try:
            await _delete_crd(worker2, crd_name)
            nocrd = f"{env.prefix}-nocrd"
            await env.add_cluster(nocrd)
            await use_clusters(env, [good, nocrd])
            missing = f"the worker does not serve workloads.{api.GROUP}/v1beta2: install Kueue's CRDs there"

            async def inactive_with(text):
                state = await env.cluster_active(nocrd)
                return (
                    state
                    if state and state[1] == "ClientConnectionFailed" and state[2].startswith(text)
                    else None
                )

            await eventually(lambda: inactive_with(missing), timeout=30)
            assert await admitted_on_a_worker(env, "healthy") == good

            # A Workload CRD that serves only an older version: the same clear message.
            await worker2.create(api.CUSTOM_RESOURCE_DEFINITION, _alpha_workload_crd(crd))

            async def alpha_served():
                found = await env.get(worker2, api.CUSTOM_RESOURCE_DEFINITION, crd_name)
                established = condition(found, "Established")
                return established and established["status"] == "True"

            await eventually(alpha_served)
            await consistently(lambda: inactive_with(missing), duration=2)
            await _delete_crd(worker2, crd_name)
        finally:
            await _restore_crd(worker2, crd)
        # Back: connected again after the reconnect backoff (5 s, 10 s, ...).
        await eventually(cluster_state_is(env, nocrd, ("True", "Active", "Connected")), timeout=60)


LOCALFLEET = Path(__file__).resolve().parents[2] / "hack" / "localfleet.py"


async def _localfleet(run_dir: Path, *args: str) -> None:
    cmd = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir), *args]
    res = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd[1:])} failed: {res.stderr[-2000:]}"


async def test_a_manager_cluster_without_an_enabled_kinds_crd_starts_and_watches_it_once_installed():
    """A manager cluster of its own without the JobSet, TrainJob and ClusterProfile CRDs
    (`up --workers 0 --no-jobset`), its manager configured for JobSets and TrainJobs and with the
    MultiKueueClusterProfile gate on: the manager still becomes ready and leads (it once waited for
    those caches forever), and the ClusterProfile watch starts when its CRD is installed."""
    run_dir = Path(f"/dev/shm/kf-nocrd-{uuid.uuid4().hex[:8]}")
    try:
        await _localfleet(run_dir, "up", "--workers", "0", "--no-smoke", "--no-jobset")
        admin = await asyncio.to_thread((run_dir / "manager" / "admin.kubeconfig").read_text)
        async with await KubeClient.from_kubeconfig_dict(yaml.safe_load(admin)) as bare:
            for kind in (api.JOB_SET, api.TRAIN_JOB, api.CLUSTER_PROFILE):
                assert not await bare.serves(kind), kind.plural
            config = parse_manager_config(
                {
                    "namespace": CONFIG_NAMESPACE,
                    "leaderElection": {"leaderElect": False},
                    "integrations": {"frameworks": [*JOB_SET_FRAMEWORKS, api.FRAMEWORK_TRAIN_JOB]},
                    "featureGates": {"MultiKueueClusterProfile": True},
                }
            )
            manager = Manager(
                bare, config, options=TEST_OPTIONS, metrics_bind_address="0", health_bind_address="0"
            )
            task = asyncio.get_running_loop().create_task(manager.run())
            try:
                async with asyncio.timeout(30):
                    await manager.leading.wait()
                assert manager.ready.is_set()
                waiting = (manager.jobsets, manager.trainjobs, manager.profiles)
                assert all(i is not None and i not in manager.informers for i in waiting)

                crd = yaml.safe_load(await asyncio.to_thread(CLUSTER_PROFILE_CRD.read_text))
                await bare.create(api.CUSTOM_RESOURCE_DEFINITION, crd)

                async def watching_profiles():
                    profiles = manager.profiles
                    return (profiles in manager.informers and profiles.has_synced) or None

                await eventually(watching_profiles, timeout=60)
                assert manager.jobsets not in manager.informers and not task.done()
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await _localfleet(run_dir, "down")


async def test_a_worker_without_kueue_or_with_no_version_we_speak_is_named(fleet, kube, namespace):
    """A cluster of its own (one kube-apiserver started without Kueue's CRDs; the shared workers keep
    theirs) first serves no kueue.x-k8s.io group at all, then only a v1alpha1 Workload: each time its
    MultiKueueCluster says which, while worker1 admits throughout."""
    run_dir = Path(f"/dev/shm/kf-bare-{uuid.uuid4().hex[:8]}")  # localfleet creates it
    try:
        # Started without them, not emptied of them: deleting a CRD took over 180 s at times on CI.
        await _localfleet(run_dir, "up", "--workers", "0", "--no-smoke", "--no-kueue-crds")
        admin = await asyncio.to_thread((run_dir / "manager" / "admin.kubeconfig").read_text)
        async with (
            await KubeClient.from_kubeconfig_dict(yaml.safe_load(admin)) as bare,
            multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env,
        ):
            (good,) = env.clusters
            crds, _ = await bare.list(api.CUSTOM_RESOURCE_DEFINITION)
            assert not [c["metadata"]["name"] for c in crds if c["spec"]["group"] == api.GROUP]
            workload_crd = await env.worker_kubes["worker1"].get(
                api.CUSTOM_RESOURCE_DEFINITION, f"{api.WORKLOAD.plural}.{api.GROUP}"
            )

            name = f"{env.prefix}-bare"
            await env.put_secret(f"{name}-secret", admin)
            await env.add_cluster(name)
            await use_clusters(env, [good, name])

            async def inactive_with(text):
                state = await env.cluster_active(name)
                return state if state and state[1] == "ClientConnectionFailed" and text in state[2] else None

            no_group = f"the worker does not serve {api.GROUP}: install Kueue's CRDs there"
            await eventually(lambda: inactive_with(no_group), timeout=40)
            assert await admitted_on_a_worker(env, "healthy") == good

            # Only a version this manager does not speak: the served and the spoken versions, named.
            await bare.create(api.CUSTOM_RESOURCE_DEFINITION, _alpha_workload_crd(workload_crd))
            other = (
                f"the worker serves {api.GROUP} versions [v1alpha1], none of which this manager speaks "
                "([v1beta1 v1beta2])"
            )
            state = await eventually(lambda: inactive_with(other), timeout=60)
            assert state[0] == "False", state

            async def check_names_it_inactive():
                active = await env.check_active()
                return active if active and f"Inactive clusters: [{name}]" in active[2] else None

            await eventually(check_names_it_inactive, timeout=30)
    finally:
        await _localfleet(run_dir, "down")


async def test_a_worker_without_the_jobset_crd_takes_jobs_but_no_jobsets(fleet, kube, namespace):
    """A cluster of its own without the JobSet CRD (`up --workers 0 --no-jobset`), our agent on it:
    its MultiKueueCluster stays Active and Jobs are dispatched there, while a JobSet goes to worker1
    only; with that cluster alone, a JobSet waits and its check names the missing CRD."""
    run_dir = Path(f"/dev/shm/kf-nojs-{uuid.uuid4().hex[:8]}")
    try:
        await _localfleet(run_dir, "up", "--workers", "0", "--no-smoke", "--no-jobset")
        admin = await asyncio.to_thread((run_dir / "manager" / "admin.kubeconfig").read_text)
        async with (
            await KubeClient.from_kubeconfig_dict(yaml.safe_load(admin)) as bare,
            multikueue(
                fleet, kube, namespace, worker_cpu={"worker1": "4"}, frameworks=JOB_SET_FRAMEWORKS
            ) as env,
        ):
            (good,) = env.clusters
            await bare.create(
                api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            await env.add_queues(bare, "4")
            name = f"{env.prefix}-nojs"
            async with running_agent(bare, {"integrations": {"frameworks": JOB_SET_FRAMEWORKS}}):
                await env.put_secret(f"{name}-secret", admin)
                await env.add_cluster(name)
                await use_clusters(env, [good, name])
                await eventually(cluster_state_is(env, name, ("True", "Active", "Connected")), timeout=40)

                # It keeps running (3 of worker1's 4 CPUs), so that the Job below fits only on the other.
                body = job_set("js", keep_running=True)
                body["spec"].update(suspend=True, managedBy=api.MANAGED_BY_MULTIKUEUE)
                await kube.create(api.JOB_SET, body, namespace=namespace)
                await eventually(lambda: _jobset_workload(env, "js"), timeout=30)
                wl = await _jobset_workload(env, "js")

                async def placed():
                    current = await env.get(kube, api.WORKLOAD, wl["metadata"]["name"], namespace)
                    return (current.get("status") or {}).get("clusterName")

                assert await eventually(placed, timeout=60) == good
                assert not [w for w in (await bare.list(api.WORKLOAD, namespace=namespace))[0]]

                # Jobs still go there: a Job's Workload copy reaches the cluster without the CRD. (It
                # needs 2 CPUs: worker1 cannot admit it, so its copy there is not removed at once.)
                await kube.create(api.JOB, mk_job("plain", cpu="2", keep_running=True), namespace=namespace)

                async def copy_there():
                    items, _ = await bare.list(api.WORKLOAD, namespace=namespace)
                    return items or None

                await eventually(copy_there, timeout=40)
                plain = await eventually(lambda: env.job_workload("plain"))
                await kube.delete(api.JOB, "plain", namespace)

                async def plain_gone():
                    """Deleted, or finished (OwnerNotFound) by the manager's agent: this fleet's manager
                    cluster runs no garbage collector."""
                    current = await env.get(kube, api.WORKLOAD, plain["metadata"]["name"], namespace)
                    return current is None or condition(current, api.WORKLOAD_FINISHED) is not None or None

                await eventually(plain_gone, timeout=60)
                # Its copy on worker1 goes although the finished Workload lost its owner reference.
                await env.wait_copies_gone(good, plain["metadata"]["name"])

                # That cluster alone: the next JobSet waits, its check naming the missing CRD.
                await use_clusters(env, [name])
                body = job_set("waits")
                body["spec"].update(suspend=True, managedBy=api.MANAGED_BY_MULTIKUEUE)
                await kube.create(api.JOB_SET, body, namespace=namespace)
                waiting = await eventually(lambda: _jobset_workload(env, "waits"), timeout=30)
                expected = api.kind_not_served_message(api.JOB_SET, name)
                assert expected == (
                    f'JobSet is not served on "{name}": the CRD jobsets.jobset.x-k8s.io '
                    "(jobset.x-k8s.io/v1alpha2) is not installed there"
                )

                async def says_why():
                    current = await env.get(kube, api.WORKLOAD, waiting["metadata"]["name"], namespace)
                    state = check_state(current, env.check)
                    return state if state and state["message"] == expected else None

                state = await eventually(says_why, timeout=40)
                assert state["state"] == "Pending"
                await kube.delete(api.JOB_SET, "waits", namespace)
                await use_clusters(env, [good])
    finally:
        await _localfleet(run_dir, "down")


async def _jobset_workload(env, name: str) -> dict | None:
    items, _ = await env.manager_kube.list(api.WORKLOAD, namespace=env.namespace)
    for wl in items:
        if any(
            r.get("kind") == "JobSet" and r.get("name") == name
            for r in wl["metadata"].get("ownerReferences") or ()
        ):
            return wl
    return None


def _versions(crd: dict) -> list[str]:
    return [v["name"] for v in crd["spec"]["versions"]]


async def _restore_crd(kube: KubeClient, saved: dict) -> None:
    """Whatever the test left (nothing, the stand-in, or the original), end with the original."""
    name = saved["metadata"]["name"]
    found = await _get_or_none(kube, api.CUSTOM_RESOURCE_DEFINITION, name)
    if found is not None and _versions(found) == _versions(saved):
        return
    if found is not None:
        await _delete_crd(kube, name)
    await kube.create(api.CUSTOM_RESOURCE_DEFINITION, _fresh(saved))


async def _get_or_none(kube: KubeClient, resource: api.Resource, name: str) -> dict | None:
    try:
        return await kube.get(resource, name)
    except NotFound:
        return None


def _fresh(obj: dict) -> dict:
    meta = obj["metadata"]
    kept = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": kept, "spec": obj["spec"]}


def _alpha_workload_crd(crd: dict) -> dict:
    alpha = _fresh(crd)
    alpha["spec"] = {
        "group": crd["spec"]["group"],
        "names": crd["spec"]["names"],
        "scope": crd["spec"]["scope"],
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    }
    return alpha


async def _delete_crd(kube: KubeClient, name: str) -> None:
    """Delete a CRD and wait until it is gone (its objects go with it: release their finalizers)."""
    try:
        items, _ = await kube.list(api.WORKLOAD)
    except NotFound:  # the v1alpha1 stand-in serves no v1beta2 Workloads
        items = []
    for wl in items:
        if wl["metadata"].get("finalizers"):
            try:
                await kube.patch_merge(
                    api.WORKLOAD,
                    wl["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    wl["metadata"]["namespace"],
                )
            except NotFound:
                pass
    await kube.delete(api.CUSTOM_RESOURCE_DEFINITION, name)

    async def gone():
        return await _get_or_none(kube, api.CUSTOM_RESOURCE_DEFINITION, name) is None

    # The apiserver deletes a CRD only after its objects and its own finalizer: over a minute
    # at times on a loaded 2-core machine (CI saw it).
    await eventually(gone, timeout=180)


async def test_an_lws_larger_than_any_worker_stays_pending_and_is_never_created_on_a_worker(
    fleet, kube, namespace
):
    async with multikueue(fleet, kube, namespace, frameworks=LWS_FRAMEWORKS) as env:
        await kube.create(api.LEADER_WORKER_SET, lws("huge", replicas=1, size=6), namespace=namespace)
        await kube.create(api.LEADER_WORKER_SET, lws("fits", replicas=1, size=2), namespace=namespace)

        async def pending_everywhere():
            items, _ = await kube.list(api.WORKLOAD, namespace=namespace)
            huge = [
                w
                for w in items
                if (w["metadata"].get("annotations") or {}).get(api.ANNOTATION_JOB_OWNER_NAME) == "huge"
            ]
            if not huge:
                return None
            remote = [await env.remote(c, api.WORKLOAD, huge[0]["metadata"]["name"]) for c in env.clusters]
            reserved = [condition(r, api.WORKLOAD_QUOTA_RESERVED) for r in remote]
            return (huge[0], remote) if all(c and c["status"] == "False" for c in reserved) else None

        local, remote = await eventually(pending_everywhere, timeout=40)
        # Each worker's copy says why it cannot be admitted there.
        for copy in remote:
            message = condition(copy, api.WORKLOAD_QUOTA_RESERVED)["message"]
            assert message.startswith("couldn't assign flavors to pod set main: insufficient quota for cpu")
            assert message.endswith("current podset request (6) > maximum capacity (4)"), message

        # On the manager the quota is reserved and the MultiKueue check stays Pending; beyond
        # upstream (which leaves it empty), its message quotes the workers' reasons after a few seconds.
        async def explained():
            items, _ = await kube.list(api.WORKLOAD, namespace=namespace)
            wl = next(w for w in items if w["metadata"]["name"] == local["metadata"]["name"])
            state = check_state(wl, env.check)
            return state if state["message"].startswith("Not admitted by any worker cluster yet: ") else None

        state = await eventually(explained, timeout=30)
        assert state["state"] == "Pending"
        for cluster in env.clusters:
            assert (
                f'"{cluster}": couldn\'t assign flavors to pod set main: insufficient quota for cpu'
                in state["message"]
            )

        async def no_remote_lws():
            return all([await env.remote(c, api.LEADER_WORKER_SET, "huge") is None for c in env.clusters])

        # The LWS that fits is placed meanwhile; the one that does not is never created on a worker.
        async def fits_placed():
            return any([await env.remote(c, api.LEADER_WORKER_SET, "fits") for c in env.clusters])

        await eventually(fits_placed, timeout=40)
        await consistently(no_remote_lws, duration=3)


async def test_a_job_near_the_size_limit_is_dispatched_and_too_many_pod_sets_are_refused(
    fleet, kube, namespace
):
    """A 1.2 MiB Job (the apiserver stores objects up to 1.5 MiB) goes through: its Workload, the
    Workload's copy and the Job's copy on the worker carry the whole template. A Workload with
    more pod sets than the API allows (18) is refused naming the field."""
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (good,) = env.clusters
        big = mk_job("big")
        filler = "x" * (1200 * 1024)
        big["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "FILLER", "value": filler}]
        assert await admitted_on_a_worker(env, "big", body=big) == good
        remote_job = await eventually(lambda: env.remote(good, api.JOB, "big"))
        assert remote_job["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == filler

        pod_set = {"count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        many = {
            "apiVersion": api.API_VERSION,
            "kind": "Workload",
            "metadata": {"name": "many-pod-sets"},
            "spec": {"queueName": "main", "podSets": [{**pod_set, "name": f"ps{i}"} for i in range(19)]},
        }
        with pytest.raises(Invalid) as info:
            await kube.create(api.WORKLOAD, many, namespace=namespace)
        assert "spec.podSets: Too many: 19: must have at most 18 items" in info.value.message
