"""The GPU workers under deploy/: one GPU and one thread each, on GPU nodes, with the GPU image.

What every pod must meet (locked-down containers, TLS, resources equal to dask's settings,
command lines that parse) is checked by test_deploy.py, whose helpers read the GPU worker group
and the GPU DaskJob as well; test_deploy_operator.py renders the GPU DaskJob with the operator's
builders. Here, what is particular to GPUs: the worker group and its rendering by the operator,
the GPU image and its lock, and the ``--device cuda`` fit.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import socket
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("yaml")
pytest.importorskip("kubernetes_validate")

from test_deploy import (  # tests/ is on sys.path (pytest's rootdir import)
    DEPLOY,
    TLS_FLAGS,
    _cluster_of,
    _containers,
    _expanded_args,
    _lock,
    _of_kind,
    _quantity,
    dask_command,
    instructions,
)

GPU = "nvidia.com/gpu"
#: The taints GPU node pools carry: GKE's, and the same key with other values elsewhere.
GPU_TAINTS = [{"key": GPU, "value": "present", "effect": "NoSchedule"},
              {"key": GPU, "value": "true", "effect": "NoSchedule"}]
#: Taints a GPU worker must not tolerate: a wildcard toleration would put it anywhere.
OTHER_TAINTS = [{"key": "dedicated", "value": "database", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
#: The CPU image's tag plus this is the GPU image's (deploy/Containerfile.gpu).
GPU_TAG_SUFFIX = "-cuda13"
#: What the GPU image adds to the CPU one; all else must stay equal.
GPU_LOCK = "/opt/dkpca/requirements-gpu.lock"
GPU_ENV = {"NVIDIA_DRIVER_CAPABILITIES", "CUPY_CACHE_DIR"}
GPU_DESCRIPTION = " (CUDA 13 GPUs, CuPy)"


def gpu_workers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(manifest, PodSpec, container) of every worker container that asks for a GPU."""
    return [(name, pod, container) for name, role, pod, container in _containers()
            if role == "worker" and GPU in container["resources"]["limits"]]


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Whether a pod with ``tolerations`` may run on a node with ``taint`` (Kubernetes' rule)."""
    for toleration in tolerations:
        operator = toleration.get("operator", "Equal")
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if not toleration.get("key"):  # an empty key with Exists tolerates every taint
            if operator == "Exists":
                return True
            continue
        if toleration["key"] != taint["key"]:
            continue
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _dask_resources(text: str) -> dict[str, float]:
    """``dask worker --resources`` as dask's command line reads it (``"GPU=1 MEM=1e9"``)."""
    pairs = text.replace(",", " ").split()
    return {key: float(value) for key, value in (pair.split("=") for pair in pairs)}


# ---- the workers -----------------------------------------------------------------------------


def test_gpu_workers_one_gpu_one_thread(tmp_path):
    """Each GPU worker: exactly one GPU, one thread, and the GPU declared to the scheduler."""
    for path in TLS_FLAGS.values():
        (tmp_path / Path(path).name).write_text("")
    workers = gpu_workers()
    assert {name for name, _, _ in workers} == {"dkpca-gpu", "dkpca-gpu-fit"}
    for name, pod, container in workers:
        resources = container["resources"]
        assert _quantity(resources["limits"][GPU]) == 1, name  # one worker per GPU
        assert resources["requests"][GPU] == resources["limits"][GPU], name
        params = dask_command(_expanded_args(container, *_cluster_of(name)), tmp_path)
        assert params["nthreads"] == 1, name  # the GPU parallelises each product
        assert _quantity(resources["limits"]["cpu"]) == 1, name
        assert params["n_workers"] in (None, 1), name  # one process: one GPU each
        assert _dask_resources(params["resources"]) == {"GPU": 1.0}, name
        assert len(pod["containers"]) == 1 and not pod.get("initContainers"), name


def test_gpu_workers_run_on_gpu_nodes_only():
    for name, pod, _ in gpu_workers():
        tolerations = pod.get("tolerations", [])
        for taint in GPU_TAINTS:
            assert _tolerates(tolerations, taint), f"{name}: not on a node tainted {taint}"
        for taint in OTHER_TAINTS:
            assert not _tolerates(tolerations, taint), f"{name}: on a node tainted {taint}"
        # The image's wheels are linux/amd64 (deploy/requirements*.lock); some GPU nodes
        # (GH200) are arm64.
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux",
                                       "kubernetes.io/arch": "amd64"}, name
    # No other pod asks for a GPU or tolerates GPU nodes: they would take a GPU node's room.
    gpu_ids = {id(c) for _, _, c in gpu_workers()}
    for name, role, pod, container in _containers():
        if id(container) in gpu_ids:
            continue
        assert GPU not in container["resources"]["limits"], f"{name}/{role}"
        assert not any(_tolerates(pod.get("tolerations", []), t) for t in GPU_TAINTS), name


def test_gpu_image_only_on_gpu_workers():
    images = {c["image"] for _, role, _, c in _containers() if role == "scheduler"}
    (cpu_image,) = images
    gpu_ids = {id(c) for _, _, c in gpu_workers()}
    for name, role, _, container in _containers():
        wanted = cpu_image + GPU_TAG_SUFFIX if id(container) in gpu_ids else cpu_image
        assert container["image"] == wanted, f"{name}/{role}"
    recipe = (DEPLOY / "Containerfile.gpu").read_text()
    assert f"-t {cpu_image}{GPU_TAG_SUFFIX} ." in recipe  # the tag the build command gives


def test_gpu_worker_group_joins_the_long_lived_cluster():
    """The group's workers are the default group's, with the GPU changes only."""
    (cluster,) = _of_kind("DaskCluster")
    (group,) = _of_kind("DaskWorkerGroup")
    assert group["spec"]["cluster"] == cluster["metadata"]["name"]
    assert group["metadata"]["namespace"] == cluster["metadata"]["namespace"]
    gpu, cpu = copy.deepcopy(group["spec"]["worker"]), copy.deepcopy(cluster["spec"]["worker"])
    assert gpu["metadata"] == cpu["metadata"]  # the same labels: the same network policies
    for worker in (gpu, cpu):
        del worker["replicas"]
        for key in ("nodeSelector", "tolerations"):
            worker["spec"].pop(key, None)
        (container,) = worker["spec"]["containers"]
        container.pop("image")
        for side in ("requests", "limits"):
            for key in ("cpu", "memory", GPU):
                container["resources"][side].pop(key, None)
        args = container["args"]
        for flag in ("--nthreads", "--memory-limit", "--resources"):
            if flag in args:
                del args[args.index(flag):args.index(flag) + 2]
    assert gpu == cpu


def test_operator_renders_the_gpu_worker_group():
    """The worker group's pods as the operator builds them pass every operator check.

    Rendered by ``build_worker_deployment_spec`` as ``daskworkergroup_replica_update`` calls
    it, they carry the labels of the default group's workers that the network policies select
    on. Then the long-lived cluster with GPU workers only (the default group scaled to zero,
    as a ``--device cuda`` fit needs) goes through all of test_deploy_operator.py's checks:
    the CRDs, pruning to the operator's PodSpec, env order, scale-down, probes, and the network
    policies evaluated connection by connection.
    """
    import test_deploy_operator as operator  # skips this test where the operator is missing

    manifests = operator.load_manifests()
    (group,) = operator._docs(manifests, "DaskWorkerGroup")
    (cluster,) = operator._docs(manifests, "DaskCluster")
    namespace = group["metadata"]["namespace"]
    deployment = operator.controller.build_worker_deployment_spec(
        group["metadata"]["name"], namespace, group["spec"]["cluster"], "0123456789",
        group["spec"]["worker"]["spec"], *operator._meta(group, group["spec"]["worker"]))
    for key, value in cluster["metadata"].get("labels", {}).items():  # kopf.label
        deployment["metadata"]["labels"].setdefault(key, value)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["dask.org/workergroup-name"] == "dkpca-gpu"
    (default,) = [p for p in operator.render(manifests).pods
                  if p.role == "worker" and p.cluster == cluster["metadata"]["name"]]
    policies = list(operator._docs(manifests, "NetworkPolicy"))

    def selecting(pod_labels: dict[str, str]) -> set[str]:
        return {p["metadata"]["name"] for p in policies
                if operator._selects(p["spec"]["podSelector"], pod_labels)}

    assert selecting(labels) == selecting(default.labels) >= {"dkpca-worker",
                                                              "allow-object-storage"}
    gpu_only = copy.deepcopy(manifests)
    (cluster,) = operator._docs(gpu_only, "DaskCluster")
    cluster["spec"]["worker"] = copy.deepcopy(group["spec"]["worker"])
    for check in operator.CHECKS.values():
        check(gpu_only)


# ---- the image -------------------------------------------------------------------------------


def _env(lines: list[str]) -> dict[str, str]:
    """The runtime stage's environment (the last ENV; the build stage has its own)."""
    line = [line for line in lines if line.startswith("ENV ")][-1]
    return dict(pair.split("=", 1) for pair in line.split()[1:])


def test_gpu_containerfile_is_the_cpu_one_plus_cuda():
    """Containerfile.gpu is Containerfile with the GPU lock, the CuPy check, two variables."""
    gpu = instructions(DEPLOY / "Containerfile.gpu")
    cpu = instructions(DEPLOY / "Containerfile")
    env = _env(gpu)
    # Left unset, the NVIDIA runtime mounts only `utility`: no libcuda, no CUDA.
    assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(","))
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it to the GPU it gives
    assert env["CUPY_CACHE_DIR"].startswith("/tmp/")  # writable: the root file system is not
    assert GPU_ENV | _env(cpu).keys() == env.keys()
    (check,) = [c for line in gpu for c in line.split("&&") if "import cupy" in c]
    assert "load_nvidia_dynamic_lib" in check and "nvrtc" in check  # the wheels' CUDA loads
    stripped = []
    for line in gpu:
        if line == f"COPY deploy/requirements-gpu.lock {GPU_LOCK}":
            continue
        line = line.replace(f" -r {GPU_LOCK}", "").replace(GPU_DESCRIPTION, "")
        if line.startswith("ENV "):
            line = " ".join(w for w in line.split() if w.split("=")[0] not in GPU_ENV)
        line = "&&".join(c for c in line.split("&&") if "import cupy" not in c)
        stripped.append(" ".join(line.split()))
    assert stripped == [" ".join(line.split()) for line in cpu]


def test_gpu_lock():
    """CuPy of dkpca's `gpu` extra and the CUDA 13 libraries, hash-pinned, none twice."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    cpu = _lock(DEPLOY / "requirements.lock")
    gpu = _lock(DEPLOY / "requirements-gpu.lock")
    assert not cpu.keys() & gpu.keys()  # installed together, each package once
    pyproject = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["gpu"]
    assert extra
    for text in extra:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in gpu, name
        assert Version(gpu[name][0]) in requirement.specifier, (name, gpu[name][0])
    assert "cupy-cuda13x" in gpu
    # What CuPy loads for dkpca's kernels (the runtime, NVRTC for its elementwise kernels,
    # cuBLAS for the products), for CUDA 13, and what finds them; numpy is the CPU lock's.
    for name in ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cublas"):
        assert Version(gpu[name][0]).major == 13, name
    assert "cuda-pathfinder" in gpu and "numpy" in cpu
    assert not {"pytest", "cupy-cuda12x", "setuptools", "pip"} & gpu.keys()


# ---- the fit ---------------------------------------------------------------------------------


def _gpu_fits() -> list[tuple[str, Any]]:
    from dkpca.cli._arguments import build_parser

    fits = []
    for name, _, _, container in _containers():
        argv = _expanded_args(container, *_cluster_of(name))
        if argv[0] == "dkpca":
            args = build_parser().parse_args(argv[1:])
            if getattr(args, "device", "cpu") == "cuda":
                fits.append((name, args))
    return fits


def test_gpu_fit_command():
    """A fit on GPUs: ``--device cuda``, the randomized solver, a kernel that runs on GPUs."""
    from dkpca.cli._shared import kernel_pca

    fits = _gpu_fits()
    assert [name for name, _ in fits] == ["dkpca-gpu-fit"]
    for name, args in fits:
        assert args.command == "fit" and args.solver == "randomized", name
        assert kernel_pca(args)._resolve_kernel(1).runs_on_gpu, name
        assert args.scheduler.startswith("tls://"), name
        assert args.out.endswith(".zarr") and "://" in args.out, name


def test_gpu_fits_run_on_gpu_workers_only():
    """Tiles go to every worker of the cluster: a ``--device cuda`` fit needs all of them GPUs.

    So it runs on a cluster of its own (a DaskJob), not on the long-lived one, whose default
    workers have none; its runner is a client, and neither needs nor takes a GPU.
    """
    jobs = {d["metadata"]["name"]: d for d in _of_kind("DaskJob")}
    for name, _ in _gpu_fits():
        assert name in jobs, f"{name}: a --device cuda fit on a cluster with CPU workers"
        cluster = jobs[name]["spec"]["cluster"]["spec"]
        for container in cluster["worker"]["spec"]["containers"]:
            assert GPU in container["resources"]["limits"], name
        for container in jobs[name]["spec"]["job"]["spec"]["containers"]:
            assert GPU not in container["resources"]["limits"], name
            assert not container["image"].endswith(GPU_TAG_SUFFIX), name


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_gpu_fit_client_needs_no_gpu(tmp_path, capsys):
    """With --scheduler, the client of a ``--device cuda`` fit runs without CuPy or a GPU.

    Against a scheduler that is not there, it must fail as any client does (status 75, the
    scheduler was not reachable), not refuse to start for want of CuPy (status 2).
    """
    import numpy as np
    import zarr

    from dkpca._errors import EXIT_TRANSIENT
    from dkpca.cli import main

    if "cupy" in sys.modules or importlib.util.find_spec("cupy") is not None:
        pytest.skip("a client without CuPy is what this checks")

    data = tmp_path / "x.zarr"
    zarr.create_array(data, data=np.random.default_rng(0).normal(size=(40, 3)))
    status = main(["fit", str(data), "--out", str(tmp_path / "m.zarr"), "--device", "cuda",
                   "--solver", "randomized", "--scheduler", f"tcp://127.0.0.1:{_closed_port()}",
                   "--scheduler-timeout", "0.5"])
    assert "CuPy" not in capsys.readouterr().err
    assert status == EXIT_TRANSIENT


def _console_commands(text: str) -> list[list[str]]:
    """The ``$ ...`` commands of a Markdown text's console blocks, continuations joined."""
    import shlex

    commands = []
    for block in re.findall(r"```console\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [shlex.split(line[2:], comments=True) for line in joined.splitlines()
                     if line.startswith("$ ")]
    return commands


def test_readme_gpu_commands():
    """deploy/README.md's GPU commands name these manifests, and its fit parses."""
    from dkpca.cli._arguments import build_parser

    readme = (DEPLOY / "README.md").read_text()
    section = readme[readme.index("## 8. GPU workers"):readme.index("## Security model")]
    commands = _console_commands(section)
    (group,) = _of_kind("DaskWorkerGroup")
    (cluster,) = _of_kind("DaskCluster")
    namespace = cluster["metadata"]["namespace"]
    gpu_jobs = [d["metadata"]["name"] for d in _of_kind("DaskJob")
                if any(GPU in c["resources"]["limits"]
                       for c in d["spec"]["cluster"]["spec"]["worker"]["spec"]["containers"])]
    assert ["kubectl", "apply", "-f", "deploy/daskworkergroup-gpu.yaml"] in commands
    assert ["kubectl", "-n", namespace, "scale", "daskworkergroup", group["metadata"]["name"],
            "--replicas", "2"] in commands
    assert ["kubectl", "-n", namespace, "scale", "daskcluster", cluster["metadata"]["name"],
            "--replicas", "0"] in commands
    assert ["kubectl", "-n", namespace, "logs", "-f", f"{gpu_jobs[0]}-runner"] in commands
    builds = [c for c in commands if c[:2] == ["docker", "build"]]
    (image,) = {c["image"] for _, _, c in gpu_workers()}
    assert builds and all(c[c.index("-f") + 1] == "deploy/Containerfile.gpu"
                          and c[c.index("-t") + 1] == image for c in builds)
    (fit,) = [c for c in commands if c[:2] == ["dkpca", "fit"]]
    args = build_parser().parse_args(fit[1:])
    assert args.device == "cuda" and args.solver == "randomized"
    assert args.scheduler == (f"tls://{cluster['metadata']['name']}-scheduler."
                              f"{namespace}.svc:8786")
    assert (args.tls_ca_file, args.tls_cert, args.tls_key) == tuple(TLS_FLAGS.values())
