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
from types import SimpleNamespace
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
#: Validators made once: jsonschema.validate would check each large schema at every call.
CRD_VALIDATORS = {kind: jsonschema.Draft202012Validator(schema)
                  for kind, schema in CRD_SCHEMAS.items()}


def check_against_crds(manifests: Manifests) -> None:
    resources = [d for d in _docs(manifests) if d["apiVersion"] == DASK_API]
    assert resources
    for doc in resources:
        try:
            CRD_VALIDATORS[doc["kind"]].validate(doc)
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


def _meta(resource: dict[str, Any], part: dict[str, Any]) -> tuple[dict, dict]:
    """The annotations and labels the controller gives what it builds from ``part``.

    As its handlers do: the resource's own (through its ``_get_annotations`` and
    ``_get_labels`` filters), updated with those of the part's ``metadata``.
    """
    metadata = resource["metadata"]
    meta = SimpleNamespace(labels=metadata.get("labels", {}),
                           annotations=metadata.get("annotations", {}))
    annotations, labels = controller._get_annotations(meta), controller._get_labels(meta)
    annotations.update(part.get("metadata", {}).get("annotations", {}))
    labels.update(part.get("metadata", {}).get("labels", {}))
    return annotations, labels


def _render_cluster(cluster: dict[str, Any], namespace: str, source: str, out: Rendered) -> None:
    """What ``daskcluster_create_components`` and ``daskworkergroup_replica_update`` build."""
    name = cluster["metadata"]["name"]
    scheduler, worker = cluster["spec"]["scheduler"], cluster["spec"]["worker"]
    annotations, labels = _meta(cluster, scheduler)
    deployment = controller.build_scheduler_deployment_spec(
        name, scheduler["spec"], annotations, labels)
    template = deployment["spec"]["template"]
    out.pods.append(Pod("scheduler", name, namespace, template["metadata"]["labels"],
                        template["spec"], source))
    out.services[name] = controller.build_scheduler_service_spec(
        name, scheduler["service"], annotations, labels)
    group = controller.build_default_worker_group_spec(name, worker, *_meta(cluster, worker))
    annotations, labels = _meta(group, group["spec"]["worker"])
    deployment = controller.build_worker_deployment_spec(
        group["metadata"]["name"], namespace, name, "0123456789", worker["spec"], annotations,
        labels)
    # kopf.label(data, labels=cluster.labels): the Deployment's metadata, which is also its
    # pod template's (the same dict), gains the cluster's labels it does not have yet.
    template = deployment["spec"]["template"]
    for key, value in cluster["metadata"].get("labels", {}).items():
        deployment["metadata"]["labels"].setdefault(key, value)
    out.pods.append(Pod("worker", name, namespace, template["metadata"]["labels"],
                        template["spec"], source))


def render(manifests: Manifests) -> Rendered:
    out = Rendered()
    for source, docs in manifests.items():
        for doc in docs:
            namespace = doc["metadata"].get("namespace", "default")
            if doc["kind"] == "DaskCluster":
                _render_cluster(doc, namespace, source, out)
            elif doc["kind"] == "DaskJob":  # daskjob_create_components: the cluster, the runner
                name = doc["metadata"]["name"]
                cluster_spec = doc["spec"]["cluster"]
                cluster = controller.build_cluster_spec(
                    name, cluster_spec["spec"]["worker"], cluster_spec["spec"]["scheduler"],
                    *_meta(doc, cluster_spec))
                _render_cluster(cluster, namespace, source, out)
                job = doc["spec"]["job"]
                pod = controller.build_job_pod_spec(name, name, namespace, job["spec"],
                                                    *_meta(doc, job))
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
    validator = jsonschema.Draft202012Validator(_crd_pod_spec())
    for pod in render(manifests).pods:
        if pod.role == "client":
            continue  # a batch Job: the API server's own PodSpec, checked in test_deploy.py
        try:
            validator.validate(pod.spec)
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
            protocol: str = "TCP", sides: tuple[str, ...] = ("egress", "ingress")) -> bool:
    """Whether Kubernetes lets ``source`` open ``port`` on ``target`` under ``policies``.

    Both sides must allow it: the source's egress and the target's ingress; ``sides`` asks
    about one of them alone.
    """

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

    return (("egress" not in sides or side(source, "egress", target))
            and ("ingress" not in sides or side(target, "ingress", source)))


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
    rule = policy["spec"]["egress"][0]  # the store; any further rule is checked as unexpected
    (peer,) = rule["to"]
    (port,) = rule["ports"]
    assert "ipBlock" in peer, "allow-object-storage: the store as an address block"
    host = next(ipaddress.ip_network(peer["ipBlock"]["cidr"]).hosts())
    return Endpoint("object store", ip=str(host)), port["port"]


#: The ports probed between every pair of endpoints (the object store's is added).
PORTS = [(53, "UDP"), (53, "TCP"), (80, "TCP"), (443, "TCP"), (8786, "TCP"), (8787, "TCP"),
         (8788, "TCP"), (8789, "TCP")]

Connection = tuple[Endpoint, Endpoint, int, str]


def expected_connections(manifests: Manifests) -> tuple[set[Connection], list[Endpoint],
                                                        list[Endpoint], list[tuple[int, str]]]:
    """Exactly the connections a Dask cluster needs, with the endpoints and ports to probe.

    Per cluster: worker -> scheduler 8786, its clients (job runner, dask-client pods) ->
    scheduler 8786, scheduler -> worker 8788 and 8789, worker -> worker 8788, the operator and
    opted-in monitoring -> scheduler 8787; every pod -> DNS; pods that read data -> the object
    store. Nothing else: no connection between clusters, no client -> worker, no internet.
    """
    pods = render(manifests).pods
    by = {(p.role, p.cluster): _endpoint(p) for p in pods}
    assert len(by) == len(pods), "two pods of one role in one cluster"
    namespace = pods[0].namespace
    stranger = Endpoint("unlabelled pod", namespace, (), ((NAMESPACE_LABEL, namespace),))
    outsider = Endpoint("pod of another namespace", "elsewhere", (("app", "other"),),
                        ((NAMESPACE_LABEL, "elsewhere"),))
    store, store_port = _object_store(manifests)
    dns = {(53, "UDP"), (53, "TCP")}
    expected: set[Connection] = {(stranger, DNS, *port) for port in dns}
    for (role, cluster), pod in by.items():
        expected |= {(pod, DNS, *port) for port in dns}
        scheduler = by[("scheduler", cluster)]
        if role == "scheduler":
            worker = by[("worker", cluster)]
            expected |= {(OPERATOR, pod, 8787, "TCP"), (MONITORING, pod, 8787, "TCP"),
                         (pod, worker, 8788, "TCP"), (pod, worker, 8789, "TCP")}
            continue
        expected |= {(pod, scheduler, 8786, "TCP"), (pod, store, store_port, "TCP")}
        if role == "worker":
            expected.add((pod, pod, 8788, "TCP"))  # between the workers of one cluster
    ours = [*by.values(), stranger]
    others = [DNS, OPERATOR, MONITORING, outsider, store, METADATA_SERVICE, INTERNET]
    return expected, ours, others, [*PORTS, (store_port, "TCP")]


def check_network_policies(manifests: Manifests) -> None:
    """The policies allow exactly the expected connections, evaluated pair by pair.

    Each side on its own, too: the egress of our pods allows only expected connections, and so
    does their ingress, so that one policy's mistake is not hidden by the other side's.
    """
    policies = list(_docs(manifests, "NetworkPolicy"))
    expected, ours, others, ports = expected_connections(manifests)
    everything = ours + others

    def show(connections: set[Connection]) -> list[str]:
        return sorted(f"{s.name} -> {t.name}:{port}/{protocol}"
                      for s, t, port, protocol in connections)

    for sides, sources, targets in ((("egress", "ingress"), everything, everything),
                                    (("egress",), ours, everything),
                                    (("ingress",), everything, ours)):
        actual = {(source, target, *port) for source in sources for target in targets
                  if source in ours or target in ours
                  for port in ports if allowed(policies, source, target, *port, sides=sides)}
        wanted = {c for c in expected if c[0] in sources and c[1] in targets}
        what = " and ".join(sides)
        assert not wanted - actual, f"{what} blocks: {show(wanted - actual)}"
        assert not actual - wanted, f"{what} opens: {show(actual - wanted)}"


def _should_select(policy: str, pod: Pod) -> bool:
    if policy in ("default-deny", "allow-dns"):
        return True  # every pod of the namespace
    if policy == "allow-object-storage":
        return pod.role != "scheduler"  # the pods that read and write data
    if policy == "dkpca-client":
        return pod.role == "client"  # clients of the long-lived cluster
    return pod.role != "client" and policy == f"{pod.cluster}-{pod.role}"  # per cluster, role


def check_policy_selection(manifests: Manifests) -> None:
    """Every NetworkPolicy selects exactly the pods (as the operator labels them) it is for."""
    pods = render(manifests).pods
    for policy in _docs(manifests, "NetworkPolicy"):
        name = policy["metadata"]["name"]
        selected = {p.name for p in pods if p.namespace == policy["metadata"]["namespace"]
                    and _selects(policy["spec"]["podSelector"], p.labels)}
        expected = {p.name for p in pods if _should_select(name, p)}
        assert expected, f"{name}: a policy this test does not know"
        assert selected == expected, f"{name} selects {sorted(selected)}, not {sorted(expected)}"


CHECKS: dict[str, Callable[[Manifests], None]] = {
    "crds": check_against_crds,
    "pruning": check_pod_specs_survive_pruning,
    "env order": check_env_references_are_defined_first,
    "scale-down": check_scale_down_works,
    "probes": check_probes_point_at_something,
    "network": check_network_policies,
    "selection": check_policy_selection,
}


@pytest.fixture(scope="module")
def manifests() -> Manifests:
    return load_manifests()


@pytest.mark.parametrize("check", CHECKS)
def test_manifests_pass(check, manifests):
    CHECKS[check](manifests)


#: The Kubernetes version whose PodSpec the CRDs embed (dask-kubernetes generates them from
#: that version's OpenAPI schema); test_crd_pod_spec_is_kubernetes_1_21 finds it.
CRD_POD_SPEC_VERSION = (1, 21)

#: Fields of the PodSpec (and of what it holds) that came or went, with the Kubernetes minor
#: version, from the Kubernetes changelogs. Those from 1.25 on are checked against the schemas
#: kubernetes-validate ships (1.25 and later); the older ones bracket the CRD's version.
FIELD_HISTORY = {
    "setHostnameAsFQDN": ("added", (1, 19)),
    "containers[].readinessProbe.terminationGracePeriodSeconds": ("added", (1, 21)),
    "securityContext.windowsOptions.hostProcess": ("added", (1, 22)),
    "os": ("added", (1, 23)),
    "containers[].readinessProbe.grpc": ("added", (1, 23)),
    "topologySpreadConstraints[].minDomains": ("added", (1, 24)),
    "volumes[].ephemeral.volumeClaimTemplate.metadata.clusterName": ("removed", (1, 24)),
    "hostUsers": ("added", (1, 25)),
    "schedulingGates": ("added", (1, 26)),
    "containers[].resizePolicy": ("added", (1, 27)),
    "containers[].restartPolicy": ("added", (1, 28)),
}

_SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def _field_paths(schema: dict[str, Any], definitions: dict[str, Any], prefix: str = "",
                 depth: int = 0) -> set[str]:
    """Every field under ``schema`` as a dotted path (``containers[].ports[].name``)."""
    if "$ref" in schema:
        schema = definitions[schema["$ref"].rsplit("/", 1)[1]]
    if isinstance(schema.get("items"), dict):
        return _field_paths(schema["items"], definitions, f"{prefix}[]", depth)
    paths = set()
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        paths.add(path)
        if depth < 12:
            paths |= _field_paths(sub, definitions, path, depth + 1)
    return paths


def _kubernetes_pod_spec_fields() -> dict[tuple[int, int], set[str]]:
    """The PodSpec's fields in each Kubernetes version kubernetes-validate ships."""
    import json

    versions = {}
    for folder in _SCHEMAS.glob("v*-local-strict"):
        major, minor, _ = folder.name[1:].split("-")[0].split(".")
        definitions = json.loads((folder / "_definitions.json").read_text())["$defs"]
        versions[int(major), int(minor)] = _field_paths(
            definitions["io.k8s.api.core.v1.PodSpec"], definitions)
    return dict(sorted(versions.items()))


def test_crd_pod_spec_is_kubernetes_1_21():
    """The CRDs embed Kubernetes 1.21's PodSpec: anything newer is pruned (dropped silently)."""
    crd = _field_paths(_crd_pod_spec(), {})
    shipped = _kubernetes_pod_spec_fields()
    assert min(shipped) <= (1, 25)
    # Which fields it has and lacks puts it at 1.21: it has the probes' grace period (1.21),
    # lacks hostProcess (1.22), and still has ObjectMeta.clusterName (removed in 1.24).
    for path, (change, version) in FIELD_HISTORY.items():
        present = version <= CRD_POD_SPEC_VERSION if change == "added" else (
            version > CRD_POD_SPEC_VERSION)
        assert (path in crd) == present, (path, change, version)
    # The history agrees with the schemas shipped, where they reach.
    for path, (change, version) in FIELD_HISTORY.items():
        for shipped_version, fields in shipped.items():
            if version >= min(shipped):
                assert (path in fields) == (shipped_version >= version), (path, shipped_version)
            else:
                assert (path in fields) == (change == "added"), (path, shipped_version)
    # Against every version shipped: the CRD knows no field Kubernetes lacks but the removed
    # clusterName, so it is an older PodSpec, not another; each version has fields it lacks.
    for version, fields in shipped.items():
        removed = crd - fields
        assert removed == {"volumes[].ephemeral.volumeClaimTemplate.metadata.clusterName"}, version
        added = fields - crd
        assert {"hostUsers", "os", "securityContext.windowsOptions.hostProcess"} <= added, version
    # What the manifests, validated as K8S_VERSION in test_deploy.py, could hold in vain:
    newer = shipped[tuple(int(n) for n in K8S_VERSION.split(".")[:2])] - crd
    assert {"hostUsers", "containers[].resizePolicy", "containers[].restartPolicy"} <= newer


def test_operator_and_monitoring_reach_what_the_chart_expects(manifests):
    """The operator's helm chart: its pods' labels, and what its ServiceMonitor scrapes.

    The policies admit the operator by the labels the chart gives its pods; the chart's
    ServiceMonitor selects the scheduler Services by label and scrapes their port
    ``http-dashboard``, where the scheduler serves ``/metrics`` (prometheus_client is in the
    image).
    """
    chart = CRDS.parent
    name = yaml.safe_load((chart / "Chart.yaml").read_text())["name"]
    helpers = (chart / "templates" / "_helpers.tpl").read_text()
    assert 'app.kubernetes.io/name: {{ include "dask_kubernetes_operator.name" . }}' in helpers
    assert dict(OPERATOR.labels) == {"app.kubernetes.io/name": name}
    # A helm template, not YAML: read the two facts from its text.
    monitor = (chart / "templates" / "servicemonitor-scheduler.yaml").read_text()
    (port,) = re.findall(r"^ +port: ([\w-]+)$", monitor, re.MULTILINE)
    match = re.search(r"^  selector:\n    matchLabels:\n      ([\w./-]+): \"(\w+)\"$", monitor,
                      re.MULTILINE)
    assert match, "the chart's ServiceMonitor selector changed"
    rendered = render(manifests)
    assert rendered.services
    for cluster, service in rendered.services.items():
        assert service["metadata"]["labels"].get(match[1]) == match[2], cluster
        assert port in {p["name"] for p in service["spec"]["ports"]}, cluster
    for pod in rendered.pods:
        if pod.role == "scheduler":
            (container,) = pod.spec["containers"]
            assert "distributed.http.scheduler.prometheus" in _routes(container), pod.name


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
    _job(m, "DaskCluster")["spec"]["worker"]["spec"]["hostUsers"] = False  # Kubernetes 1.25


def _newer_container_field(m: Manifests) -> None:
    (container,) = _job(m, "DaskJob")["spec"]["job"]["spec"]["containers"]
    container["resizePolicy"] = [{"resourceName": "memory",  # Kubernetes 1.27
                                  "restartPolicy": "RestartContainer"}]


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


def _runner_reaches_workers(m: Manifests) -> None:
    policy = _policy(m, lambda p: p["metadata"]["name"] == "dkpca-fit-job-runner")
    policy["spec"]["egress"].append({
        "to": [{"podSelector": {"matchLabels": {"dask.org/cluster-name": "dkpca-fit",
                                                "dask.org/component": "worker"}}}],
        "ports": [{"protocol": "TCP", "port": 8788}]})


def _dashboard_to_the_namespace(m: Manifests) -> None:
    policy = _policy(m, lambda p: p["metadata"]["name"] == "dkpca-scheduler")
    (rule,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8787]
    rule["from"].append({"podSelector": {}})


def _policy_of_another_cluster(m: Manifests) -> None:
    policy = _policy(m, lambda p: p["metadata"]["name"] == "dkpca-fit-worker")
    policy["spec"]["podSelector"]["matchLabels"]["dask.org/cluster-name"] = "dkpca-select"


#: Each breakage, the check that catches it, and what that check's message must say.
BREAKAGES: dict[str, tuple[Callable[[Manifests], None], str, str]] = {
    "scheduler API route removed": (_drop_route, "scale-down", "no distributed.http.scheduler.api"),
    "worker --name removed": (_drop_worker_name, "scale-down", "no --name"),
    "probe on a wrong path": (_probe_path, "probes", "/healthz is not served"),
    "probe on a wrong port name": (_probe_port, "probes", "readinessProbe: tcp-wroker"),
    "DNS egress deleted": (_drop_dns, "network", "blocks: .*kube-dns:53/UDP"),
    "worker to scheduler egress deleted": (
        _drop_worker_to_scheduler, "network", r"blocks: .*worker -> [\w.:-]+scheduler:8786/TCP"),
    "dask-client label dropped from the Job": (
        _drop_client_label, "network", r"blocks: \['job-transform.yaml:client -> "),
    "PodSpec field newer than the CRD's (hostUsers)": (
        _newer_pod_field, "pruning", "'hostUsers' was unexpected"),
    "container field newer than the CRD's (resizePolicy)": (
        _newer_container_field, "pruning", "'resizePolicy' was unexpected"),
    "spec.cluster.metadata in a DaskJob": (
        _cluster_metadata, "crds", r"'metadata' was unexpected\) at \['spec', 'cluster'\]"),
    "object storage opened to the internet": (_open_internet, "network", "opens: .*internet"),
    "workers of any cluster admitted to a scheduler": (
        _clusters_share_a_scheduler, "network", "opens: .*daskjob-fit.yaml:worker"),
    "job runner allowed out to the workers": (
        _runner_reaches_workers, "network", "egress opens: .*job-runner -> .*worker:8788"),
    "dashboard opened to the whole namespace": (
        _dashboard_to_the_namespace, "network", "ingress opens: .*scheduler:8787"),
    "a policy selecting another cluster's pods": (
        _policy_of_another_cluster, "selection", "dkpca-fit-worker selects"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_each_breakage_is_caught(breakage, manifests):
    """A known mistake, applied to a copy of the manifests, fails its check, for its reason."""
    mutate, check, reason = BREAKAGES[breakage]
    broken = copy.deepcopy(manifests)
    mutate(broken)
    assert broken != manifests
    CHECKS[check](manifests)  # the same check passes on the manifests as they are
    with pytest.raises(AssertionError, match=reason):
        CHECKS[check](broken)
