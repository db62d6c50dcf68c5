"""The Kubernetes deployment under deploy/: schemas, security settings, and drift from the CLI.

Offline and fast: the manifests are checked against the Kubernetes OpenAPI schemas shipped with
kubernetes-validate, the image's recipe and its hash-pinned lock, and every ``dkpca`` command
line against dkpca's own parser. What the dask-kubernetes operator makes of the custom
resources (its CRDs, its pod builders, the network policies on its pods) is checked in
test_deploy_operator.py; what is particular to the GPU workers, in test_deploy_gpu.py.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
#: Optional, for clusters with cert-manager: its kinds are not Kubernetes' own.
CERT_MANAGER = DEPLOY / "certificates.cert-manager.yaml"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml")
                   if p.name != "kustomization.yaml" and p != CERT_MANAGER)
#: The TLS Secret each kind of pod mounts: every role holds only its own key.
ROLE_SECRETS = {"scheduler": "dkpca-tls-scheduler", "worker": "dkpca-tls-worker",
                "job-runner": "dkpca-tls-client", "dask-client": "dkpca-tls-client"}

#: Kubernetes version whose schemas (shipped with kubernetes-validate) the manifests must meet.
K8S_VERSION = "1.30.0"
DASK_API = "kubernetes.dask.org/v1"
TLS_DIR = "/etc/dkpca/tls"
TLS_FLAGS = {
    "--tls-ca-file": f"{TLS_DIR}/ca.crt",
    "--tls-cert": f"{TLS_DIR}/tls.crt",
    "--tls-key": f"{TLS_DIR}/tls.key",
}
UID = 10001

# ---- reading the manifests -------------------------------------------------------------------


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in MANIFESTS:
        with path.open() as file:
            docs += [(path.name, doc) for doc in yaml.safe_load_all(file) if doc is not None]
    return docs


DOCS = _documents()


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in DOCS if doc["kind"] == kind]


def _pod_specs() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield (manifest name, role, PodSpec) for every pod the manifests make."""
    for _, doc in DOCS:
        name, kind = doc["metadata"]["name"], doc["kind"]
        clusters = []
        if kind == "DaskCluster":
            clusters.append(doc["spec"])
        elif kind == "DaskJob":
            clusters.append(doc["spec"]["cluster"]["spec"])
            yield name, "job-runner", doc["spec"]["job"]["spec"]
        elif kind == "Job":
            yield name, "dask-client", doc["spec"]["template"]["spec"]
        elif kind == "DaskWorkerGroup":  # more workers for a DaskCluster
            yield name, "worker", doc["spec"]["worker"]["spec"]
        for cluster in clusters:
            yield name, "scheduler", cluster["scheduler"]["spec"]
            yield name, "worker", cluster["worker"]["spec"]


def _containers() -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    for name, role, pod in _pod_specs():
        for container in pod.get("initContainers", []) + pod["containers"]:
            yield name, role, pod, container


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _expanded_args(container: dict[str, Any], cluster_name: str, namespace: str) -> list[str]:
    """The container's command line as the kubelet runs it: $(VAR) replaced from its env."""
    fields = {
        "metadata.labels['dask.org/cluster-name']": cluster_name,
        "metadata.namespace": namespace,
    }
    env: dict[str, str] = {"DASK_WORKER_NAME": f"{cluster_name}-default-worker-0123456789"}

    def expand(text: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), text)

    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"])
        else:
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return [expand(arg) for arg in container.get("command", []) + container.get("args", [])]


def _cluster_of(manifest: str) -> tuple[str, str]:
    """The cluster name and namespace a manifest's pods belong to."""
    (doc,) = [doc for _, doc in DOCS if doc["metadata"]["name"] == manifest
              and doc["kind"] in ("DaskCluster", "DaskJob", "Job", "DaskWorkerGroup")]
    if doc["kind"] == "Job":  # a client of the long-lived DaskCluster
        return _of_kind("DaskCluster")[0]["metadata"]["name"], doc["metadata"]["namespace"]
    if doc["kind"] == "DaskWorkerGroup":  # workers of the DaskCluster it names
        return doc["spec"]["cluster"], doc["metadata"]["namespace"]
    return doc["metadata"]["name"], doc["metadata"]["namespace"]


def _quantity(text: str | int) -> float:
    """A Kubernetes quantity (cpu "500m", memory "8Gi") as a number."""
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    assert match, text
    return float(match[1]) * (units[match[2]] if match[2] else 1)


def _option(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} must appear once in {argv}"
    return argv[argv.index(flag) + 1]


# ---- 1. schemas ------------------------------------------------------------------------------


def test_manifests_exist_and_parse():
    kinds = {doc["kind"] for _, doc in DOCS}
    assert {"DaskCluster", "DaskJob", "DaskWorkerGroup", "NetworkPolicy", "Secret",
            "ConfigMap", "Namespace", "Job"} <= kinds
    for path in MANIFESTS:
        with path.open() as file:
            assert all(isinstance(doc, dict) for doc in yaml.safe_load_all(file)), path
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (DEPLOY / resource).is_file(), resource
    # Not applied by default: cert-manager's kinds need its CRDs, the template holds no keys,
    # GPU workers need GPU nodes (and a `--device cuda` fit, a cluster of GPU workers only).
    optional = {CERT_MANAGER.name, "tls-secret.template.yaml"} | {
        f for f, d in DOCS if d["kind"] == "DaskWorkerGroup"}
    assert "daskworkergroup-gpu.yaml" in optional
    assert not optional & set(kustomization["resources"])


@pytest.mark.parametrize(
    ("manifest", "doc"),
    [(f, d) for f, d in DOCS if d["apiVersion"] != DASK_API],
    ids=lambda v: v if isinstance(v, str) else f"{v['kind']}/{v['metadata']['name']}",
)
def test_core_manifests_validate(manifest, doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_embedded_pod_and_service_specs():
    """The operator's PodSpecs and ServiceSpecs, validated as a Pod and a Service.

    Against Kubernetes 1.30's schemas: types, required fields, no unknown field. That no field
    is newer than the PodSpec the operator's CRDs embed (1.21's) is checked by
    test_deploy_operator.py, on the pods the operator builds.
    """
    for name, role, pod in _pod_specs():
        wrapped = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{name}-{role}"}, "spec": pod}
        kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)
    clusters = [d["spec"] for d in _of_kind("DaskCluster")]
    clusters += [d["spec"]["cluster"]["spec"] for d in _of_kind("DaskJob")]
    for cluster in clusters:
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "scheduler"},
                   "spec": cluster["scheduler"]["service"]}
        kubernetes_validate.validate(service, K8S_VERSION, strict=True)
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": {"containers": [{"name": "x", "image": "x", "comand": ["dask"]}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


# ---- 2. security and consistency -------------------------------------------------------------


def test_every_container_is_locked_down():
    seen = 0
    for name, role, pod, container in _containers():
        where = f"{name}/{role}/{container['name']}"
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, where
        assert context["runAsUser"] == UID, where
        assert context["allowPrivilegeEscalation"] is False, where
        assert context["capabilities"] == {"drop": ["ALL"]}, where
        assert context["readOnlyRootFilesystem"] is True, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert "privileged" not in context, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["automountServiceAccountToken"] is False, where
        # Writable places are emptyDirs; the TLS Secret is mounted read-only.
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]], where
        assert "emptyDir" in volumes[mounts["/home/dkpca"]["name"]], where
        tls = mounts[TLS_DIR]
        assert tls["readOnly"] is True, where
        assert volumes[tls["name"]]["secret"]["secretName"] == ROLE_SECRETS[role], where
        secrets = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
        assert secrets == {ROLE_SECRETS[role]}, where  # workers never see the client key
        # Requests equal limits: Guaranteed QoS, no eviction or OOM kill by overcommit.
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], where
        assert {"cpu", "memory", "ephemeral-storage"} <= resources["limits"].keys(), where
        # The pod asks for the disk its emptyDirs may fill: filling them never evicts it.
        disk = sum(_quantity(v["emptyDir"]["sizeLimit"]) for v in volumes.values()
                   if "emptyDir" in v)
        assert _quantity(resources["limits"]["ephemeral-storage"]) >= disk, where
        seen += 1
    assert seen >= 8


def test_role_certificates_from_one_ca():
    """The template and the cert-manager example make exactly the Secrets the pods mount."""
    templates = [d for _, d in DOCS if d["kind"] == "Secret"]
    assert {d["metadata"]["name"] for d in templates} == set(ROLE_SECRETS.values())
    for secret in templates:
        assert set(secret["stringData"]) == {"ca.crt", "tls.crt", "tls.key"}
    documents = list(yaml.safe_load_all(CERT_MANAGER.read_text()))
    certificates = {d["spec"]["secretName"]: d["spec"] for d in documents
                    if d["kind"] == "Certificate" and not d["spec"].get("isCA")}
    assert set(certificates) == set(ROLE_SECRETS.values())
    (ca,) = [d for d in documents if d["kind"] == "Issuer" and "ca" in d["spec"]]
    (root,) = [d["spec"] for d in documents if d["kind"] == "Certificate" and d["spec"].get("isCA")]
    assert ca["spec"]["ca"]["secretName"] == root["secretName"]
    for name, spec in certificates.items():
        assert spec["issuerRef"]["name"] == ca["metadata"]["name"], name
        assert "client auth" in spec["usages"], name  # every peer dials out
        assert ("server auth" in spec["usages"]) == (name != "dkpca-tls-client"), name


def test_identity_credentials_and_image_pulls():
    (account,) = [d for d in _of_kind("ServiceAccount") if d["metadata"]["name"] == "dkpca"]
    assert account["automountServiceAccountToken"] is False
    for name, role, pod, container in _containers():
        where = f"{name}/{role}"
        assert pod["serviceAccountName"] == "dkpca", where
        # A mutable tag is pulled every time, so a node never runs a stale image.
        assert container["imagePullPolicy"] == "Always", where
        refs = [e["secretRef"] for e in container.get("envFrom", []) if "secretRef" in e]
        if role == "scheduler":
            assert refs == [], where  # reads no data
        else:  # they read s3://: without credentials they must not start
            assert refs == [{"name": "dkpca-storage-credentials", "optional": False}], where


def _failure_action(job: dict[str, Any], exit_code: int, conditions: set[str] = frozenset()
                    ) -> str:
    """What the Job controller does when the pod fails with ``exit_code``.

    The first rule of ``podFailurePolicy`` that matches (an exit code of the named container,
    or a pod condition that is "True"), else ``Count``: retried while failures stay within
    ``backoffLimit``.
    """
    (container,) = job["spec"]["template"]["spec"]["containers"]
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if codes is not None and codes.get("containerName", container["name"]) == container[
                "name"] and (exit_code in codes["values"]) == (codes["operator"] == "In"):
            return rule["action"]
        if any(c["type"] in conditions and c.get("status", "True") == "True"
               for c in rule.get("onPodConditions", [])):
            return rule["action"]
    return "Count"


def check_job_retries(job: dict[str, Any]) -> None:
    """A user error fails the Job, a transient failure is retried, a disruption not counted."""
    from dkpca._errors import EXIT_INTERRUPTED, EXIT_TRANSIENT, EXIT_USAGE

    name = job["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never", name  # podFailurePolicy
    assert job["spec"]["backoffLimit"] >= 2, f"{name}: too few retries"
    assert _failure_action(job, EXIT_USAGE) == "FailJob", f"{name}: exit 2 would be retried"
    for status in (EXIT_TRANSIENT, 1):  # 1: an unexpected crash
        assert _failure_action(job, status) == "Count", f"{name}: exit {status} not retried"
    for status in (EXIT_INTERRUPTED, EXIT_TRANSIENT):  # evicted, preempted, node drained
        assert _failure_action(job, status, {"DisruptionTarget"}) == "Ignore", (
            f"{name}: a disruption (exit {status}) counts against backoffLimit")


def test_jobs_retry_what_is_transient():
    jobs = _of_kind("Job")
    assert jobs
    for job in jobs:
        check_job_retries(job)
    # The DaskJobs' runners are bare pods that never restart: the operator marks the job Failed
    # (deploy/README.md, "Resilience"); OnFailure would restart a user error forever.
    for job in _of_kind("DaskJob"):
        assert job["spec"]["job"]["spec"]["restartPolicy"] == "Never", job["metadata"]["name"]


def _rule(job: dict[str, Any], key: str) -> dict[str, Any]:
    return next(r for r in job["spec"]["podFailurePolicy"]["rules"] if key in r)


RETRY_MISTAKES = {
    "exit-code rule on another container":
        lambda job: _rule(job, "onExitCodes")["onExitCodes"].update(containerName="main"),
    "75 made fatal": lambda job: _rule(job, "onExitCodes")["onExitCodes"]["values"].append(75),
    "disruptions counted": lambda job: job["spec"]["podFailurePolicy"]["rules"].remove(
        _rule(job, "onPodConditions")),
    "no retries": lambda job: job["spec"].update(backoffLimit=0),
}


@pytest.mark.parametrize("mistake", RETRY_MISTAKES)
def test_job_retry_mistakes_are_caught(mistake):
    job = copy.deepcopy(_of_kind("Job")[0])
    RETRY_MISTAKES[mistake](job)
    with pytest.raises(AssertionError):
        check_job_retries(job)


def test_worker_threads_memory_and_disk_match_its_limits():
    from dask.utils import parse_bytes

    from dkpca.cluster import WORKER_ENV

    workers = [(n, p, c) for n, role, p, c in _containers() if role == "worker"]
    assert workers
    for name, pod, container in workers:
        argv = container["command"] + container["args"]
        assert argv[:2] == ["dask", "worker"]
        limits = container["resources"]["limits"]
        assert int(_option(argv, "--nthreads")) == _quantity(limits["cpu"]), name
        # The nanny and the interpreter live in the container too: dask's limit leaves room.
        share = parse_bytes(_option(argv, "--memory-limit")) / _quantity(limits["memory"])
        assert 0.75 <= share <= 0.9, name
        assert container["resources"]["requests"] == limits, name
        # Spilling goes to an emptyDir, within its size; the pod asks for all its volumes'
        # disk, so spilling never gets it evicted.
        volumes = {v["name"]: v for v in pod["volumes"]}
        local = _option(argv, "--local-directory")
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == local]
        scratch = volumes[mount["name"]]["emptyDir"]
        sizes = sum(_quantity(v["emptyDir"]["sizeLimit"]) for v in volumes.values()
                    if "emptyDir" in v)
        assert _quantity(limits["ephemeral-storage"]) >= sizes, name
        env = {e["name"]: e.get("value") for e in container["env"]}
        memory = "DASK_DISTRIBUTED__WORKER__MEMORY__"
        assert parse_bytes(env[memory + "MAX_SPILL"]) < _quantity(scratch["sizeLimit"]), name
        fractions = [float(env[memory + k]) for k in ("TARGET", "SPILL", "PAUSE", "TERMINATE")]
        assert fractions == sorted(fractions) and fractions[-1] < 1, name
        assert (_option(argv, "--worker-port"), _option(argv, "--nanny-port")) == ("8788", "8789")
        for variable, value in WORKER_ENV.items():  # as the embedded cluster's workers
            assert env[variable] == value, name


def test_scheduler_ports_and_service():
    clusters = [(d["metadata"]["name"], d["spec"]) for d in _of_kind("DaskCluster")]
    clusters += [(d["metadata"]["name"], d["spec"]["cluster"]["spec"])
                 for d in _of_kind("DaskJob")]
    for name, cluster in clusters:
        (container,) = cluster["scheduler"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
        argv = container["command"] + container["args"]
        assert argv[:2] == ["dask", "scheduler"]
        assert _option(argv, "--port") == "8786"
        assert _option(argv, "--protocol") == "tls"
        service = cluster["scheduler"]["service"]
        assert {p["name"]: p["port"] for p in service["ports"]} == ports
        assert service["selector"] == {"dask.org/cluster-name": name,
                                       "dask.org/component": "scheduler"}
        assert service.get("type", "ClusterIP") == "ClusterIP"  # never exposed outside


def _asks_for_gpus(worker: dict[str, Any]) -> bool:
    return any("nvidia.com/gpu" in c["resources"]["limits"] for c in worker["spec"]["containers"])


def test_jobs_embed_the_daskcluster_spec():
    """The DaskJobs' clusters are daskcluster.yaml's, but for their own name.

    A GPU job's workers are the GPU worker group's (daskworkergroup-gpu.yaml) instead.
    """
    (reference,) = _of_kind("DaskCluster")
    (gpu_group,) = _of_kind("DaskWorkerGroup")
    assert gpu_group["spec"]["cluster"] == reference["metadata"]["name"]
    assert gpu_group["metadata"]["namespace"] == reference["metadata"]["namespace"]
    gpu_jobs = 0
    for job in _of_kind("DaskJob"):
        spec = copy.deepcopy(job["spec"]["cluster"]["spec"])
        spec["scheduler"]["service"]["selector"]["dask.org/cluster-name"] = (
            reference["metadata"]["name"])
        if _asks_for_gpus(spec["worker"]):
            assert spec["worker"] == gpu_group["spec"]["worker"], job["metadata"]["name"]
            spec["worker"] = reference["spec"]["worker"]
            gpu_jobs += 1
        assert spec == reference["spec"], job["metadata"]["name"]
    assert gpu_jobs == 1


def test_tls_everywhere():
    for manifest, doc in DOCS:
        for text in _strings(doc):
            assert "tcp://" not in text, f"{manifest}: {text}"
    dask_commands = 0
    for name, role, _, container in _containers():
        cluster, namespace = _cluster_of(name)
        argv = _expanded_args(container, cluster, namespace)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "True", name
        if "DASK_SCHEDULER_ADDRESS" in env or role != "scheduler":
            # Set by us, so the operator does not inject its tcp:// address.
            assert env["DASK_SCHEDULER_ADDRESS"].startswith("tls://"), name
        for flag, path in TLS_FLAGS.items():
            assert _option(argv, flag) == path, f"{name}/{role}"
        if argv[0] == "dask":
            dask_commands += 1
        addresses = [a for a in argv if "://" in a and not a.startswith("s3://")]
        assert addresses == (
            [] if role == "scheduler" else [f"tls://{cluster}-scheduler.{namespace}.svc:8786"]
        ), f"{name}/{role}"
    assert dask_commands >= 6


def test_network_policies():
    """Their shape; test_deploy_operator.py evaluates them on the operator's pods."""
    policies = {p["metadata"]["name"]: p["spec"] for p in _of_kind("NetworkPolicy")}
    # A default deny, both directions, for the whole namespace.
    deny = [p for p in policies.values()
            if p["podSelector"] == {} and not p.get("ingress") and not p.get("egress")]
    assert any(set(p["policyTypes"]) == {"Ingress", "Egress"} for p in deny)
    # Nothing else allows ingress to all pods.
    assert all(not p.get("ingress") for p in policies.values() if p["podSelector"] == {})
    for name, spec in policies.items():
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for rule in spec.get(direction, []):
                assert rule.get("ports"), f"{name}: a rule without ports opens every port"
                assert rule.get(peers), f"{name}: a rule without peers opens to everyone"
                blocks = [p["ipBlock"]["cidr"] for p in rule[peers] if "ipBlock" in p]
                assert direction == "egress" or not blocks, name
                assert "0.0.0.0/0" not in blocks, f"{name}: the whole internet"
    # Address blocks only for object storage, in one place.
    with_blocks = {name for name, spec in policies.items() for rule in spec.get("egress", [])
                   if any("ipBlock" in peer for peer in rule["to"])}
    assert with_blocks == {"allow-object-storage"}


#: The base image, pinned by the digest of its multi-platform index (deploy/Containerfile says
#: how to refresh it).
BASE_IMAGE = re.compile(r"python:3\.11-slim@sha256:[0-9a-f]{64}")
#: What the image adds to dkpca[plot]: object storage, the dashboard's plots, /metrics.
IMAGE_EXTRAS = {"s3fs", "aiobotocore", "botocore", "aiohttp", "bokeh", "prometheus-client"}


def _lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """A hash-pinned requirements file: {name: (version, [sha256...])}, one per requirement."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    text = path.read_text()
    logical = re.sub(r"\\\n\s*", " ", text)  # join the continuation lines
    pins = {}
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split(" --")
        parsed = Requirement(requirement)
        (specifier,) = parsed.specifier
        assert specifier.operator == "==" and "*" not in specifier.version, line
        assert not parsed.extras and parsed.marker is None, line
        hashes = [o.removeprefix("hash=sha256:") for o in options]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
        key = canonicalize_name(parsed.name)
        assert key not in pins, f"{path.name}: {key} twice"
        pins[key] = (specifier.version, hashes)
    return pins


#: Each image's recipe, and the hash-pinned locks its third-party wheels come from: the CPU
#: image, and the GPU workers' image (the CPU one plus CuPy and the CUDA libraries).
IMAGES = {
    "Containerfile": {"/src/build-requirements.lock", "/opt/dkpca/requirements.lock"},
    "Containerfile.gpu": {"/src/build-requirements.lock", "/opt/dkpca/requirements.lock",
                          "/opt/dkpca/requirements-gpu.lock"},
}


def instructions(path: Path) -> list[str]:
    """A Containerfile's instructions, one a line (continuations joined), comments left out."""
    logical = re.sub(r"\\\n\s*", " ", path.read_text())
    return [line.strip() for line in logical.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("recipe", IMAGES)
def test_containerfile(recipe):
    lines = instructions(DEPLOY / recipe)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users, "no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) == UID
    for instruction in ("ENTRYPOINT", "CMD"):
        (line,) = [line for line in lines if line.startswith(instruction + " ")]
        assert "pip" not in line and "install" not in line, line
    assert '["dkpca"]' in [line.split(None, 1)[1] for line in lines
                           if line.startswith("ENTRYPOINT ")]
    # Every stage starts from the base image pinned by digest.
    (default,) = [line.split("=", 1)[1] for line in lines if line.startswith("ARG PYTHON_IMAGE=")]
    assert BASE_IMAGE.fullmatch(default), default
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2 and all(f in ("${PYTHON_IMAGE}", default) for f in froms), froms
    # Third-party wheels only from the hash-pinned locks; dkpca's own offline, built here.
    commands = [c.strip() for line in lines if line.startswith("RUN ")
                for c in line.split("&&") if "pip install" in c or "pip wheel" in c]
    hashed = [c for c in commands if "--require-hashes" in c]
    assert {lock for c in hashed for lock in re.findall(r" -r (\S+)", c)} == IMAGES[recipe]
    for command in commands:
        assert "--no-deps" in command, command
        assert command in hashed or "--no-index" in command, command
        assert "-c " not in command and "--upgrade" not in command, command
    assert any("pip wheel" in c and "--no-build-isolation" in c for c in commands)
    assert "python -m pip check" in " ".join(lines)
    # Each lock is copied from deploy/, which the build context lets through.
    ignored = (DEPLOY / f"{recipe}.dockerignore").read_text().split()
    for lock in IMAGES[recipe]:
        name = posixpath.basename(lock)
        assert f"COPY deploy/{name} {lock}" in lines, lock
        assert f"!deploy/{name}" in ignored, lock


def test_lock_pins_every_runtime_dependency():
    import tomllib
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    pins = _lock(DEPLOY / "requirements.lock")
    for text in requires("dkpca") or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "plot"}):
            name = canonicalize_name(requirement.name)
            assert name in pins, name
            assert Version(pins[name][0]) in requirement.specifier, (name, pins[name][0])
    assert IMAGE_EXTRAS <= pins.keys()
    assert not {"pytest", "ruff", "kubernetes-validate", "setuptools", "pip"} & pins.keys()
    # The build stage's setuptools, hashed too, satisfies pyproject.toml's build-system.
    build = _lock(DEPLOY / "build-requirements.lock")
    pyproject = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())
    for text in pyproject["build-system"]["requires"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert Version(build[name][0]) in requirement.specifier, name


def test_lock_parser_refuses_a_line_without_hash(tmp_path):
    (tmp_path / "ok.lock").write_text("a==1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    assert _lock(tmp_path / "ok.lock") == {"a": ("1", ["0" * 64])}
    for bad in ("a==1\n", "a>=1 --hash=sha256:" + "0" * 64 + "\n",
                "a==1 --hash=sha256:abc\n"):
        (tmp_path / "bad.lock").write_text(bad)
        with pytest.raises(AssertionError):
            _lock(tmp_path / "bad.lock")


# ---- 3. the dkpca command lines parse with dkpca's own parser --------------------------------


def test_dkpca_commands_parse():
    from dkpca.cli._arguments import build_parser
    from dkpca.cluster import SCHEDULER_TIMEOUT

    parsed = {}
    for name, _, _, container in _containers():
        argv = _expanded_args(container, *_cluster_of(name))
        if argv[0] != "dkpca":
            continue
        args = build_parser().parse_args(argv[1:])
        assert args.scheduler.startswith("tls://"), name
        assert (args.tls_ca_file, args.tls_cert, args.tls_key) == tuple(TLS_FLAGS.values())
        parsed[args.command] = args
    assert {"fit", "select", "transform"} <= parsed.keys()
    assert parsed["fit"].out.endswith(".zarr") and "://" in parsed["fit"].input
    # The figure and the table go beside the data: a pod's own disk is gone when it ends.
    select = parsed["select"]
    folder = posixpath.dirname(select.input)
    assert folder.startswith("s3://")
    assert posixpath.dirname(select.plot) == folder and select.plot.endswith(".png")
    assert posixpath.dirname(select.table) == folder and select.table.endswith(".zarr")
    for args in parsed.values():  # a cold scheduler pod is waited for
        assert (args.scheduler_timeout or SCHEDULER_TIMEOUT) >= 300, args.command


def dask_command(argv: list[str], tls_dir: Path) -> dict[str, Any]:
    """``dask scheduler`` / ``dask worker`` arguments as dask's own parser reads them.

    ``argv`` is the expanded command line; the TLS files, which the parser requires to exist,
    are looked for in ``tls_dir``. An unknown or misspelt option raises (the parser refuses
    what it would otherwise take for a preload's arguments).
    """
    from distributed.cli import dask_scheduler, dask_worker

    assert argv[0] == "dask", argv
    command = {"scheduler": dask_scheduler.main, "worker": dask_worker.main}[argv[1]]
    args = [str(tls_dir / posixpath.basename(a)) if a.startswith(f"{TLS_DIR}/") else a
            for a in argv[2:]]
    return command.make_context(f"dask {argv[1]}", args).params


def test_dask_commands_parse(tmp_path):
    for path in TLS_FLAGS.values():
        (tmp_path / posixpath.basename(path)).write_text("")
    parsed = 0
    for name, role, _, container in _containers():
        argv = _expanded_args(container, *_cluster_of(name))
        if argv[0] != "dask":
            continue
        params = dask_command(argv, tmp_path)
        assert params["preload_argv"] == (), f"{name}/{role}"
        if role == "worker":
            assert params["scheduler"].startswith("tls://"), name
            assert params["dashboard"] is False, name  # no HTTP port on the workers
        else:
            assert params["protocol"] == "tls", name
        parsed += 1
    assert parsed >= 8
    from click.exceptions import NoSuchOption

    with pytest.raises(NoSuchOption, match="--nthread"):  # a misspelt option is refused
        dask_command(["dask", "worker", "tls://s:8786", "--nthread", "2"], tmp_path)
