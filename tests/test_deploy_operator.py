"""The manifests under deploy/ as the dask-kubernetes operator will see them.

Offline, from what the operator's wheel ships: its generated CRDs validate our custom
resources, with the API server's pruning of unknown fields made an error; its own builders
(``build_scheduler_deployment_spec`` and friends in ``controller.py``) render our pods and
services, and the checks below run on what they produce. Each check is a function of the
loaded manifests, so ``test_each_breakage_is_caught`` can apply a known mistake to a copy and
show that the check fails.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")
controller = pytest.importorskip("dask_kubernetes.operator.controller.controller")

import dask_kubernetes

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
CRDS = (Path(dask_kubernetes.__file__).parent
        / "operator/deployment/helm/dask-kubernetes-operator/crds")
DASK_API = "kubernetes.dask.org/v1"

#: The Kubernetes version the core manifests target (as in test_deploy.py).
K8S_VERSION = "1.30.0"

#: The routes that the scheduler's HTTP server must serve: /health for the probes, the API
#: the operator calls to retire workers on scale-down, /metrics for monitoring.
SCALE_DOWN_ROUTE = "distributed.http.scheduler.api"
ROUTE_PATHS = {"distributed.http.health": ["/health"],
               "distributed.http.scheduler.prometheus": ["/metrics"],
               "distributed.http.scheduler.info": ["/info"],
               "distributed.http.scheduler.json": ["/json"],
               SCALE_DOWN_ROUTE: ["/api/v1"]}

Manifests = dict[str, list[dict[str, Any]]]


def load_manifests() -> Manifests:
    """Every YAML document under deploy/, by file name."""
    return {path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
            for path in sorted(DEPLOY.glob("*.yaml")) if path.name != "kustomization.yaml"}


def _docs(manifests: Manifests, kind: str | None = None) -> Iterator[dict[str, Any]]:
    for docs in manifests.values():
        for doc in docs:
            if kind is None or doc["kind"] == kind:
                yield doc


# ---- the CRDs, closed as the API server's pruning closes them --------------------------------


def _closed(schema: Any) -> Any:
    """A CRD's openAPIV3Schema as a JSON schema that rejects what pruning would drop."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: _closed(v) for k, v in schema.items()
              if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        result.pop("type", None)
        result["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        result["additionalProperties"] = False
    return result


def crd_schemas() -> dict[str, dict[str, Any]]:
    schemas = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schema = _closed(version["schema"]["openAPIV3Schema"])
        schema["properties"] |= {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                 "metadata": {"type": "object"}}  # the API server's own
        schemas[crd["spec"]["names"]["kind"]] = schema
    return schemas


CRD_SCHEMAS = crd_schemas()


def check_against_crds(manifests: Manifests) -> None:
    resources = [d for d in _docs(manifests) if d["apiVersion"] == DASK_API]
    assert resources
    for doc in resources:
        try:
            jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
        except jsonschema.ValidationError as err:
            raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']}: {err.message} "
                                 f"at {list(err.absolute_path)}") from err


# ---- rendering with the operator's own builders ----------------------------------------------


@dataclass
class Pod:
    """A pod as it will run: the operator's (or the Job controller's) rendering of ours."""

    role: str  # scheduler, worker, job-runner or client
    cluster: str  # the Dask cluster it belongs to or talks to
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]
    source: str = ""

    @property
    def name(self) -> str:
        return f"{self.source}:{self.role}"


@dataclass
class Rendered:
    pods: list[Pod] = field(default_factory=list)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)  # by cluster name


def _merged(labels: dict[str, str], part: dict[str, Any]) -> dict[str, str]:
    return {**labels, **part.get("metadata", {}).get("labels", {})}


def _render_cluster(cluster: dict[str, Any], namespace: str, source: str, out: Rendered) -> None:
    """What controller.daskcluster_create and the worker group handler build from a cluster."""
    name = cluster["metadata"]["name"]
    labels = dict(cluster["metadata"].get("labels", {}))
    scheduler, worker = cluster["spec"]["scheduler"], cluster["spec"]["worker"]
    deployment = controller.build_scheduler_deployment_spec(
        name, scheduler["spec"], {}, _merged(labels, scheduler))
    template = deployment["spec"]["template"]
    out.pods.append(Pod("scheduler", name, namespace, template["metadata"]["labels"],
                        template["spec"], source))
    out.services[name] = controller.build_scheduler_service_spec(
        name, scheduler["service"], {}, _merged(labels, scheduler))
    group = controller.build_default_worker_group_spec(name, worker, {}, _merged(labels, worker))
    deployment = controller.build_worker_deployment_spec(
        group["metadata"]["name"], namespace, name, "0123456789", worker["spec"], {},
        _merged(group["metadata"]["labels"], worker))
    template = deployment["spec"]["template"]
    out.pods.append(Pod("worker", name, namespace, template["metadata"]["labels"],
                        template["spec"], source))


def render(manifests: Manifests) -> Rendered:
    out = Rendered()
    for source, docs in manifests.items():
        for doc in docs:
            namespace = doc["metadata"].get("namespace", "default")
            if doc["kind"] == "DaskCluster":
                _render_cluster(doc, namespace, source, out)
            elif doc["kind"] == "DaskJob":
                name = doc["metadata"]["name"]
                labels = dict(doc["metadata"].get("labels", {}))
                cluster_spec = doc["spec"]["cluster"]
                cluster = controller.build_cluster_spec(
                    name, cluster_spec["spec"]["worker"], cluster_spec["spec"]["scheduler"], {},
                    _merged(labels, cluster_spec))
                _render_cluster(cluster, namespace, source, out)
                job = doc["spec"]["job"]
                pod = controller.build_job_pod_spec(name, name, namespace, job["spec"], {},
                                                    _merged(labels, job))
                out.pods.append(Pod("job-runner", name, namespace, pod["metadata"]["labels"],
                                    pod["spec"], source))
            elif doc["kind"] == "Job":  # a client of the long-lived cluster
                template = doc["spec"]["template"]
                labels = {**template["metadata"]["labels"],
                          "batch.kubernetes.io/job-name": doc["metadata"]["name"]}
                (cluster,) = [d["metadata"]["name"] for d in _docs(manifests, "DaskCluster")]
                out.pods.append(Pod("client", cluster, namespace, labels, template["spec"],
                                    source))
    return out


def _containers(pod: Pod) -> Iterator[dict[str, Any]]:
    yield from pod.spec.get("initContainers", [])
    yield from pod.spec["containers"]


# ---- checks on what runs ---------------------------------------------------------------------


def _crd_pod_spec() -> dict[str, Any]:
    """The PodSpec schema the CRDs embed, closed: a field it lacks is pruned by the server."""
    return CRD_SCHEMAS["DaskJob"]["properties"]["spec"]["properties"]["job"]["properties"]["spec"]


def check_pod_specs_survive_pruning(manifests: Manifests) -> None:
    """Every field of every operator-made PodSpec exists in the PodSpec the CRDs embed."""
    schema = _crd_pod_spec()
    for pod in render(manifests).pods:
        if pod.role == "client":
            continue  # a batch Job: the API server's own PodSpec, checked in test_deploy.py
        try:
            jsonschema.validate(pod.spec, schema)
        except jsonschema.ValidationError as err:
            raise AssertionError(f"{pod.name}: {err.message} at {list(err.absolute_path)} "
                                 "(the operator's CRD would drop it)") from err


def _env(container: dict[str, Any]) -> list[dict[str, Any]]:
    return container.get("env", [])


def check_env_references_are_defined_first(manifests: Manifests) -> None:
    """``$(VAR)`` expands only to a variable defined earlier in the final env list."""
    for pod in render(manifests).pods:
        for container in _containers(pod):
            defined: set[str] = set()
            for variable in _env(container):
                for used in re.findall(r"\$\((\w+)\)", str(variable.get("value", ""))):
                    assert used in defined, f"{pod.name}: {variable['name']} uses $({used})"
                defined.add(variable["name"])
            for text in container.get("command", []) + container.get("args", []):
                for used in re.findall(r"\$\((\w+)\)", text):
                    assert used in defined, f"{pod.name}: {text} uses undefined $({used})"


def _routes(container: dict[str, Any]) -> list[str]:
    (routes,) = [v["value"] for v in _env(container)
                 if v["name"] == "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"]
    return yaml.safe_load(routes)


def check_scale_down_works(manifests: Manifests) -> None:
    """The operator retires a worker through the scheduler's HTTP API, by the worker's name."""
    pods = render(manifests).pods
    for pod in pods:
        (container,) = pod.spec["containers"]
        if pod.role == "scheduler":
            assert SCALE_DOWN_ROUTE in _routes(container), f"{pod.name}: no {SCALE_DOWN_ROUTE}"
        if pod.role == "worker":
            args = container["args"]
            assert "--name" in args, f"{pod.name}: no --name"
            assert args[args.index("--name") + 1] == "$(DASK_WORKER_NAME)", pod.name
            names = [v for v in _env(container) if v["name"] == "DASK_WORKER_NAME"]
            assert names, f"{pod.name}: the operator sets DASK_WORKER_NAME"
    assert {p.role for p in pods} >= {"scheduler", "worker"}


def check_probes_point_at_something(manifests: Manifests) -> None:
    """Probe ports name a container port; HTTP probe paths are served by a configured route."""
    seen = 0
    for pod in render(manifests).pods:
        for container in pod.spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = container.get(kind)
                if probe is None:
                    continue
                seen += 1
                action = probe.get("httpGet") or probe.get("tcpSocket")
                port = action["port"]
                assert port in ports or port in ports.values(), f"{pod.name} {kind}: {port}"
                if "httpGet" in probe:
                    served = [p for route in _routes(container) for p in ROUTE_PATHS.get(route, [])]
                    path = probe["httpGet"]["path"]
                    assert any(path == p or path.startswith(f"{p}/") for p in served), (
                        f"{pod.name} {kind}: {path} is not served")
    assert seen >= 3


# ---- network policies, evaluated -------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection: a pod (labels, namespace and its labels) or an address."""

    name: str
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    namespace_labels: tuple[tuple[str, str], ...] = ()
    ip: str | None = None


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get(
            "values", [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _peer_matches(peer: dict[str, Any], endpoint: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return endpoint.ip is not None and _in_cidr(endpoint.ip, peer["ipBlock"])
    if endpoint.ip is not None:
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], dict(endpoint.namespace_labels)):
            return False
    elif endpoint.namespace != policy_namespace:
        return False
    return _selects(peer.get("podSelector", {}), dict(endpoint.labels))


def _in_cidr(ip: str, block: dict[str, Any]) -> bool:
    import ipaddress

    address = ipaddress.ip_address(ip)
    return (address in ipaddress.ip_network(block["cidr"])
            and not any(address in ipaddress.ip_network(c) for c in block.get("except", [])))


def _port_allowed(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("protocol", "TCP") == protocol and p.get("port") in (port, None)
                            for p in ports)


def allowed(policies: list[dict[str, Any]], source: Endpoint, target: Endpoint, port: int,
            protocol: str = "TCP") -> bool:
    """Whether Kubernetes lets ``source`` open ``port`` on ``target`` under ``policies``."""

    def side(pod: Endpoint, direction: str, peer: Endpoint) -> bool:
        if pod.ip is not None:
            return True  # outside the namespace: not ours to restrict
        selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                     and direction.capitalize() in p["spec"].get("policyTypes", ["Ingress"])
                     and _selects(p["spec"]["podSelector"], dict(pod.labels))]
        if not selecting:
            return True
        key = "to" if direction == "egress" else "from"
        return any(
            _port_allowed(rule, port, protocol)
            and (key not in rule or any(_peer_matches(x, peer, policy["metadata"]["namespace"])
                                        for x in rule[key]))
            for policy in selecting for rule in policy["spec"].get(direction, []))

    return side(source, "egress", target) and side(target, "ingress", source)


NAMESPACE_LABEL = "kubernetes.io/metadata.name"


def _endpoint(pod: Pod) -> Endpoint:
    return Endpoint(pod.name, pod.namespace, tuple(sorted(pod.labels.items())),
                    ((NAMESPACE_LABEL, pod.namespace),))


DNS = Endpoint("kube-dns", "kube-system", (("k8s-app", "kube-dns"),),
               ((NAMESPACE_LABEL, "kube-system"),))
OPERATOR = Endpoint("operator", "dask-operator",
                    (("app.kubernetes.io/name", "dask-kubernetes-operator"),),
                    ((NAMESPACE_LABEL, "dask-operator"),))
MONITORING = Endpoint("prometheus", "monitoring", (("dkpca.io/monitoring", "true"),),
                      ((NAMESPACE_LABEL, "monitoring"),))
METADATA_SERVICE = Endpoint("cloud metadata", ip="169.254.169.254")
INTERNET = Endpoint("internet", ip="93.184.215.14")


def _object_store(manifests: Manifests) -> tuple[Endpoint, int]:
    """An address in the block allow-object-storage opens, and its port."""
    import ipaddress

    (policy,) = [p for p in _docs(manifests, "NetworkPolicy")
                 if p["metadata"]["name"] == "allow-object-storage"]
    (rule,) = policy["spec"]["egress"]
    (peer,) = rule["to"]
    (port,) = rule["ports"]
    host = next(ipaddress.ip_network(peer["ipBlock"]["cidr"]).hosts())
    return Endpoint("object store", ip=str(host)), port["port"]


def connections(manifests: Manifests) -> tuple[list[tuple], list[tuple]]:
    """The connections a Dask cluster needs, and some it must not be allowed."""
    pods = render(manifests).pods
    by = {(p.role, p.cluster): _endpoint(p) for p in pods}
    stranger = Endpoint("unlabelled pod", pods[0].namespace, (),
                        ((NAMESPACE_LABEL, pods[0].namespace),))
    needed, forbidden = [], []
    clusters = sorted({p.cluster for p in pods})
    for cluster in clusters:
        scheduler, worker = by[("scheduler", cluster)], by[("worker", cluster)]
        clients = [e for (role, c), e in by.items() if c == cluster
                   and role in ("job-runner", "client")]
        needed += [(worker, scheduler, 8786), (scheduler, worker, 8788),
                   (scheduler, worker, 8789), (worker, worker, 8788),
                   (OPERATOR, scheduler, 8787)]
        needed += [(client, scheduler, 8786) for client in clients]
        forbidden += [(client, worker, 8788) for client in clients]
        forbidden += [(worker, scheduler, 8787), (stranger, scheduler, 8786),
                      (stranger, worker, 8788), (INTERNET, scheduler, 8786)]
        forbidden += [(client, scheduler, 8787) for client in clients]
        for other in clusters:
            if other != cluster:  # clusters of the namespace cannot reach each other
                forbidden += [(worker, by[("scheduler", other)], 8786),
                              (by[("scheduler", other)], worker, 8788)]
    needed += [(by[key], DNS, 53, "UDP") for key in by]
    store, port = _object_store(manifests)
    for (role, _), endpoint in by.items():
        if role == "scheduler":  # reads no data; its dashboard is opt-in
            needed.append((MONITORING, endpoint, 8787))
            forbidden += [(endpoint, store, port), (stranger, endpoint, 8787)]
        else:
            needed.append((endpoint, store, port))
        forbidden += [(endpoint, INTERNET, 443), (endpoint, INTERNET, port),
                      (endpoint, METADATA_SERVICE, 80)]
    return needed, forbidden


def check_network_policies(manifests: Manifests) -> None:
    policies = list(_docs(manifests, "NetworkPolicy"))
    needed, forbidden = connections(manifests)
    for source, target, port, *protocol in needed:
        assert allowed(policies, source, target, port, *protocol), (
            f"blocked: {source.name} -> {target.name}:{port}")
    for source, target, port in forbidden:
        assert not allowed(policies, source, target, port), (
            f"open: {source.name} -> {target.name}:{port}")


CHECKS: dict[str, Callable[[Manifests], None]] = {
    "crds": check_against_crds,
    "pruning": check_pod_specs_survive_pruning,
    "env order": check_env_references_are_defined_first,
    "scale-down": check_scale_down_works,
    "probes": check_probes_point_at_something,
    "network": check_network_policies,
}


@pytest.fixture(scope="module")
def manifests() -> Manifests:
    return load_manifests()


@pytest.mark.parametrize("check", CHECKS)
def test_manifests_pass(check, manifests):
    CHECKS[check](manifests)


def test_crd_pod_spec_predates_kubernetes_1_23():
    """The CRDs embed an old PodSpec (Kubernetes 1.21's): newer fields would be dropped."""
    fields = set(_crd_pod_spec()["properties"])
    current = _pod_spec_fields(K8S_VERSION)
    assert fields < current
    assert "setHostnameAsFQDN" in fields  # Kubernetes 1.20
    assert not {"os", "hostUsers", "schedulingGates", "resourceClaims"} & fields  # 1.23-1.26
    with pytest.raises(AssertionError, match="'os' was unexpected"):
        check_pod_specs_survive_pruning({"x.yaml": [{
            "apiVersion": DASK_API, "kind": "DaskCluster",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"scheduler": {"spec": {"containers": [], "os": {"name": "linux"}},
                                   "service": {}},
                     "worker": {"spec": {"containers": []}}}}]})


def _pod_spec_fields(version: str) -> set[str]:
    import json

    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    schema = json.loads((folder / "podspec-v1.json").read_text())
    return set(schema["properties"])


def _job(manifests: Manifests, kind: str) -> dict[str, Any]:
    return next(_docs(manifests, kind))


def _scheduler_container(manifests: Manifests) -> dict[str, Any]:
    return _job(manifests, "DaskCluster")["spec"]["scheduler"]["spec"]["containers"][0]


def _worker_container(manifests: Manifests) -> dict[str, Any]:
    return _job(manifests, "DaskCluster")["spec"]["worker"]["spec"]["containers"][0]


def _drop_route(m: Manifests) -> None:
    env = _env(_scheduler_container(m))
    (routes,) = [v for v in env if v["name"] == "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"]
    routes["value"] = routes["value"].replace(f', "{SCALE_DOWN_ROUTE}"', "")


def _drop_worker_name(m: Manifests) -> None:
    args = _worker_container(m)["args"]
    del args[args.index("--name"):args.index("--name") + 2]


def _probe_path(m: Manifests) -> None:
    _scheduler_container(m)["readinessProbe"]["httpGet"]["path"] = "/healthz"


def _probe_port(m: Manifests) -> None:
    _worker_container(m)["readinessProbe"]["tcpSocket"]["port"] = "tcp-wroker"


def _policy(m: Manifests, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return next(p for p in _docs(m, "NetworkPolicy") if predicate(p))


def _drop_dns(m: Manifests) -> None:
    for policy in _docs(m, "NetworkPolicy"):
        policy["spec"]["egress"] = [
            rule for rule in policy["spec"].get("egress", [])
            if not any(port.get("port") == 53 for port in rule.get("ports", []))]


def _drop_worker_to_scheduler(m: Manifests) -> None:
    for policy in _docs(m, "NetworkPolicy"):
        if policy["spec"]["podSelector"].get("matchLabels", {}).get(
                "dask.org/component") == "worker":
            policy["spec"]["egress"] = [
                rule for rule in policy["spec"].get("egress", [])
                if not any(port.get("port") == 8786 for port in rule.get("ports", []))]


def _drop_client_label(m: Manifests) -> None:
    job = _job(m, "Job")
    del job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]


def _newer_pod_field(m: Manifests) -> None:
    _job(m, "DaskCluster")["spec"]["worker"]["spec"]["os"] = {"name": "linux"}


def _cluster_metadata(m: Manifests) -> None:
    _job(m, "DaskJob")["spec"]["cluster"]["metadata"] = {"labels": {"team": "a"}}


def _open_internet(m: Manifests) -> None:
    policy = _policy(m, lambda p: p["metadata"]["name"] == "allow-object-storage")
    policy["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] = "0.0.0.0/0"


def _clusters_share_a_scheduler(m: Manifests) -> None:
    """Policies by component only, as before: any cluster's workers reach any scheduler."""
    for name in ("dkpca-scheduler", "dkpca-fit-worker"):
        policy = _policy(m, lambda p, name=name: p["metadata"]["name"] == name)
        for rules, side in ((policy["spec"].get("ingress", []), "from"),
                            (policy["spec"].get("egress", []), "to")):
            for rule in rules:
                for peer in rule[side]:
                    peer.get("podSelector", {}).get("matchLabels", {}).pop(
                        "dask.org/cluster-name", None)


BREAKAGES: dict[str, tuple[Callable[[Manifests], None], str]] = {
    "object storage opened to the internet": (_open_internet, "network"),
    "workers of any cluster admitted to a scheduler": (_clusters_share_a_scheduler, "network"),
    "scheduler API route removed": (_drop_route, "scale-down"),
    "worker --name removed": (_drop_worker_name, "scale-down"),
    "probe on a wrong path": (_probe_path, "probes"),
    "probe on a wrong port name": (_probe_port, "probes"),
    "DNS egress deleted": (_drop_dns, "network"),
    "worker to scheduler egress deleted": (_drop_worker_to_scheduler, "network"),
    "dask-client label dropped from the Job": (_drop_client_label, "network"),
    "PodSpec field newer than the CRD's": (_newer_pod_field, "pruning"),
    "spec.cluster.metadata in a DaskJob": (_cluster_metadata, "crds"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_each_breakage_is_caught(breakage, manifests):
    mutate, check = BREAKAGES[breakage]
    broken = copy.deepcopy(manifests)
    mutate(broken)
    assert broken != manifests
    with pytest.raises(AssertionError):
        CHECKS[check](broken)
