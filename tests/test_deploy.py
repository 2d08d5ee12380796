"""The Kubernetes manifests in examples/deploy/kubernetes/, checked offline: each document
against the Kubernetes OpenAPI schema (kubernetes-validate's bundled copy, strict: an unknown
field is an error), and against what the daemon needs: one replica recreated, never rolled;
its probes on /livez and /readyz; the tokens from the Secret; the WORKFLOW.md the ConfigMap
holds loading with its state, workspaces and notes on the volume. The same for
examples/deploy/kubernetes-agent-pods/, the overlay that runs every agent in a pod of its own:
its Role granting what the daemon's kubectl asks and no more, the pods reaching the daemon's
two ports through its Service and its NetworkPolicy, the agents' namespace fenced and sized."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from symphony.config.kubernetes import DEFAULT_GATEWAY_PORT, DEFAULT_TOOL_PORT, KubernetesSettings
from symphony.config.load import load_settings
from symphony.config.sandbox import Network
from symphony.hosts.kubernetes.kubectl import Kubectl, KubectlResult
from symphony.hosts.kubernetes.manifests import MANAGED_BY, daemon_rule, labels, pod_manifest
from symphony.hosts.kubernetes.pods import Pods
from tests.hosts.test_kubectl_host import READY, FakeKubectl, statuses

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "deploy" / "kubernetes"
VERSION = "1.30.0"


def documents() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        (doc,) = list(yaml.safe_load_all((FOLDER / name).read_text()))
        found[doc["kind"]] = doc
    return found


@pytest.mark.parametrize(
    "kind",
    ["Namespace", "Deployment", "PersistentVolumeClaim", "ConfigMap", "Secret", "NetworkPolicy"],
)
def test_each_manifest_is_valid_kubernetes(kind: str) -> None:
    kubernetes_validate.validate(documents()[kind], VERSION, strict=True)


def test_an_unknown_field_would_be_caught() -> None:
    broken = documents()["Deployment"]
    broken["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)


def test_one_daemon_recreated_with_probes_tokens_and_its_volumes() -> None:
    docs = documents()
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    pod = deployment["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    secret_keys = set(docs["Secret"]["stringData"])
    referenced = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]}
    assert referenced == secret_keys
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {v["name"]: v for v in pod["volumes"]}
    assert claims["data"]["persistentVolumeClaim"]["claimName"] == docs[
        "PersistentVolumeClaim"]["metadata"]["name"]  # fmt: skip
    assert claims["workflow"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    assert container["args"][0] == f"{mounts['workflow']}/WORKFLOW.md"
    assert container["resources"]["requests"]["memory"]


def test_the_configmaps_workflow_keeps_everything_it_writes_on_the_volume(tmp_path: Path) -> None:
    docs = documents()
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(docs["ConfigMap"]["data"]["WORKFLOW.md"])
    env = {
        "GITHUB_TOKEN": "ghp_example_token_0001",
        "SYMPHONY_TOKEN": "a-token-of-16-chars-or-more",
    }
    settings = load_settings(workflow, env)
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    volume = Path(next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data"))
    assert settings.state is not None and settings.memory is not None
    for path in (settings.state.path, settings.workspace.root, settings.memory.folder):
        assert volume in path.parents, path
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
    assert settings.server.port == port and settings.server.host == "0.0.0.0"
    assert settings.server.auth_token == env["SYMPHONY_TOKEN"]


def test_the_daemon_pod_is_locked_down_and_fenced() -> None:
    docs = documents()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"]["cpu"]
    # Read-only root: the home and /tmp are volumes, so the daemon and its agents can write.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/home/symphony", "/tmp", "/var/lib/symphony"} <= mounts
    namespaces = {d["metadata"].get("namespace") for k, d in docs.items() if k != "Namespace"}
    assert namespaces == {docs["Namespace"]["metadata"]["name"]}
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == docs["Deployment"]["spec"]["selector"][
        "matchLabels"]  # fmt: skip
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": container["ports"][0]["containerPort"]}]


# Checks that cannot apply, each for its reason:
SKIPPED_FOR_ALL = {
    # The image is the user's own build (examples/deploy/Containerfile, or the agent image a
    # workflow names); a fixed tag is required, a digest is the user's choice to pin.
    "CKV_K8S_43",
}
SKIPPED_FOR_SHIPPED = {
    # The daemon reads its tokens from its environment ($GITHUB_TOKEN in WORKFLOW.md), the
    # one way a workflow names a secret.
    "CKV_K8S_35",
}
SKIPPED_FOR_RUN_PODS = {
    # A run's pod holds only a waiting process; nothing serves traffic to probe. The daemon
    # watches the run itself (stall detection) and deletes the pod when it ends.
    "CKV_K8S_8",
    "CKV_K8S_9",
}


def checkov() -> str:
    """The policy scanner: `$CHECKOV`, `checkov` on PATH, or the repository's
    `.venv-checkov` (it pins an older `packaging` than the test tools, so it lives apart)."""
    found = os.environ.get("CHECKOV") or shutil.which("checkov")
    local = ROOT / ".venv-checkov" / "bin" / "checkov"
    if found is None and local.exists():
        found = str(local)
    if found is None:
        if os.environ.get("SYMPHONY_REQUIRE_CHECKOV") == "1":
            pytest.fail("checkov is required (SYMPHONY_REQUIRE_CHECKOV=1) but not installed")
        pytest.skip("checkov is not installed (python -m venv .venv-checkov && "
                    ".venv-checkov/bin/pip install checkov==3.3.30)")  # fmt: skip
    return found


def scan(folder: Path, skipped: set[str]) -> dict[str, Any]:
    result = subprocess.run(
        [checkov(), "-d", str(folder), "--framework", "kubernetes", "--output", "json",
         "--quiet", "--skip-download", "--skip-check", ",".join(sorted(skipped))],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def failed(report: dict[str, Any]) -> list[str]:
    return [f"{c['check_id']} {c['resource']}" for c in report["results"]["failed_checks"]]


def test_the_shipped_manifests_pass_the_policy_scanner() -> None:
    report = scan(FOLDER, SKIPPED_FOR_ALL | SKIPPED_FOR_SHIPPED)
    assert failed(report) == []
    assert report["summary"]["passed"] >= 80  # the scanner did look at them


def test_the_scanner_catches_what_the_hardening_fixed(tmp_path: Path) -> None:
    docs = documents()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    pod["automountServiceAccountToken"] = True
    del pod["containers"][0]["resources"]["limits"]["cpu"]
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(docs["Deployment"]))
    ids = {
        line.split()[0] for line in failed(scan(tmp_path, SKIPPED_FOR_ALL | SKIPPED_FOR_SHIPPED))
    }
    assert {"CKV_K8S_38", "CKV_K8S_11"} <= ids


# The second example: the same daemon, every agent run in a pod of its own (worker.kubernetes).
# It is a kustomize overlay of the first; `rendered` builds what `kubectl apply -k` would send,
# so each test reads the documents the cluster would get.
AGENT_PODS = ROOT / "examples" / "deploy" / "kubernetes-agent-pods"
AGENTS_NAMESPACE = "symphony-agents"


def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patched(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902's `add` and `replace` (what the overlay uses), applied in place."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] == "replace":
            assert (last in node) if isinstance(node, dict) else int(last) < len(node), op
            node[last if isinstance(node, dict) else int(last)] = op["value"]
        elif op["op"] == "add" and isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        elif op["op"] == "add":
            node[last] = op["value"]
        else:
            raise AssertionError(f"an operation the renderer does not know: {op}")


def rendered(folder: Path) -> list[dict[str, Any]]:
    """The kustomization's resources (a folder is a kustomization of its own) with its
    patches applied; anything else kustomize can do is refused, so it cannot go unseen."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "patches"}
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        path = folder / name
        if path.is_dir():
            docs += rendered(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        (doc,) = [d for d in docs if d["kind"] == target["kind"]
                  and d["metadata"]["name"] == target["name"]]  # fmt: skip
        _patched(doc, yaml.safe_load((folder / patch["path"]).read_text()))
    return docs


def agent_pods() -> dict[tuple[str, str], dict[str, Any]]:
    """The overlay's documents by kind and namespace (each pair is one document)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in rendered(AGENT_PODS):
        key = (doc["kind"], doc["metadata"].get("namespace") or doc["metadata"]["name"])
        assert key not in found, key
        found[key] = doc
    return found


def the_workflow(tmp_path: Path) -> Any:
    docs = agent_pods()
    workflow = tmp_path / "WORKFLOW.md"
    workflow.write_text(docs["ConfigMap", "symphony"]["data"]["WORKFLOW.md"])
    env = {
        "GITHUB_TOKEN": "ghp_example_token_0001",
        "SYMPHONY_TOKEN": "a-token-of-16-chars-or-more",
    }
    return load_settings(workflow, env)


def test_the_renderer_applies_patches_as_kustomize_would(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (tmp_path / "base" / "cm.yaml").write_text(
        "kind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1', l: [a]}\n"
    )
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [base]\npatches: [{target: {kind: ConfigMap, name: a}, path: p.yaml}]\n"
    )
    (tmp_path / "p.yaml").write_text(
        "- {op: replace, path: /data/x, value: '2'}\n- {op: add, path: /data/l/-, value: b}\n"
        "- {op: add, path: /data/y~1z, value: c}\n"
    )
    (doc,) = rendered(tmp_path)
    assert doc["data"] == {"x": "2", "l": ["a", "b"], "y/z": "c"}
    (tmp_path / "p.yaml").write_text("- {op: replace, path: /data/missing, value: '2'}\n")
    with pytest.raises(AssertionError):
        rendered(tmp_path)


def test_every_agent_pods_document_is_valid_kubernetes() -> None:
    docs = agent_pods()
    assert {kind for kind, _ in docs} == {
        "Namespace", "Deployment", "PersistentVolumeClaim", "ConfigMap", "Secret",
        "NetworkPolicy", "ResourceQuota", "LimitRange", "ServiceAccount", "Role",
        "RoleBinding", "Service",
    }  # fmt: skip
    for doc in docs.values():
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_agent_pods_workflow_runs_every_agent_in_the_agents_namespace(
    tmp_path: Path,
) -> None:
    docs = agent_pods()
    settings = the_workflow(tmp_path)
    assert settings.warnings == ()
    cluster = settings.worker.kubernetes
    assert cluster is not None and cluster.daemon is not None
    assert cluster.context is None  # kubectl's in-cluster configuration, the service account's
    assert cluster.service_account is None  # the runs' pods get no token
    assert cluster.namespace == AGENTS_NAMESPACE and (
        "Namespace", AGENTS_NAMESPACE) in docs  # fmt: skip
    service = docs["Service", "symphony"]
    deployment = docs["Deployment", "symphony"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert cluster.daemon.address == f"{name}.{namespace}.svc"
    assert dict(cluster.daemon.pod_labels) == pod_labels
    assert cluster.daemon.namespace == deployment["metadata"]["namespace"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # Everything it writes stays on the daemon's volume, as in the first example.
    assert settings.state is not None and settings.state.path.is_relative_to("/var/lib/symphony")
    pods = settings.agent.max_concurrent_agents
    assert cluster.max_pods is not None and cluster.max_pods <= pods


def test_the_service_forwards_the_workflows_ports_to_the_daemons_container(
    tmp_path: Path,
) -> None:
    docs = agent_pods()
    daemon = the_workflow(tmp_path).worker.kubernetes.daemon
    assert (daemon.tool_port, daemon.gateway_port) == (DEFAULT_TOOL_PORT, DEFAULT_GATEWAY_PORT)
    (container,) = docs["Deployment", "symphony"]["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    forwarded = {
        p["port"]: named[p["targetPort"]] for p in docs["Service", "symphony"]["spec"]["ports"]
    }
    # The same port numbers on both sides: the pods dial the Service on the daemon's own ports.
    assert forwarded == {8080: 8080, DEFAULT_TOOL_PORT: DEFAULT_TOOL_PORT,
                         DEFAULT_GATEWAY_PORT: DEFAULT_GATEWAY_PORT}  # fmt: skip


def test_the_daemon_lets_in_the_runs_pods_on_its_two_ports_only(tmp_path: Path) -> None:
    docs = agent_pods()
    daemon = the_workflow(tmp_path).worker.kubernetes.daemon
    policy = docs["NetworkPolicy", "symphony"]["spec"]
    assert policy["podSelector"]["matchLabels"] == dict(daemon.pod_labels)
    dashboard, from_runs = policy["ingress"]
    assert dashboard == {"ports": [{"protocol": "TCP", "port": 8080}]}
    assert from_runs["ports"] == [{"protocol": "TCP", "port": p} for p in daemon.ports]
    (peer,) = from_runs["from"]
    namespace = peer["namespaceSelector"]["matchLabels"]
    assert namespace == {"kubernetes.io/metadata.name": AGENTS_NAMESPACE}
    # Every run's pod carries the selected label, and its own policy lets out to the same two
    # ports of the pods this policy selects.
    run_labels = labels("instance", "ABC-1", "run-1")
    assert peer["podSelector"]["matchLabels"].items() <= run_labels.items()
    assert peer["podSelector"]["matchLabels"] == {MANAGED_BY: "symphony"}
    egress = daemon_rule(daemon, AGENTS_NAMESPACE, ())
    assert egress["ports"] == from_runs["ports"]
    (to,) = egress["to"]
    assert to["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": docs["Deployment", "symphony"]["metadata"]["namespace"]
    }
    assert to["podSelector"] == policy["podSelector"]


def test_only_the_daemons_pod_mounts_the_service_account_token() -> None:
    docs = agent_pods()
    pod = docs["Deployment", "symphony"]["spec"]["template"]["spec"]
    account = docs["ServiceAccount", "symphony"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    assert account["automountServiceAccountToken"] is False
    # The rest of the first example's hardening holds in the second.
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def nothing_listed(argv: Sequence[str], stdin: bytes | None) -> KubectlResult | None:
    """No earlier daemon's pods or claims in the namespace."""
    return (
        KubectlResult(0, json.dumps({"items": []}), "") if "get" in argv and "-l" in argv else None
    )


RESOURCES = {
    "Pod": ("", "pods"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
}


def requests_of(argv: Sequence[str], stdin: bytes | None) -> set[tuple[str, str, str]]:
    """The API requests (group, resource, verb) one kubectl command line makes."""
    verb, *rest = argv[argv.index("-n") + 2 :]
    if verb == "apply":  # client-side apply: get, then create or patch each object
        items = json.loads(stdin or b"")["items"]
        return {(*RESOURCES[i["kind"]], v) for i in items for v in ("get", "create", "patch")}
    if verb == "get":
        resource = "persistentvolumeclaims" if rest[0] == "pvc" else "pods"
        return {("", resource, "list" if "-l" in rest else "get")}
    if verb == "exec":  # the pod is read first; the stream is a POST (SPDY) or a GET (WebSocket)
        return {("", "pods", "get"), ("", "pods/exec", "create"), ("", "pods/exec", "get")}
    if verb == "delete":
        kinds = {"pod": "Pod", "networkpolicy": "NetworkPolicy", "pvc": "PersistentVolumeClaim"}
        return {(*RESOURCES[kinds[o.split("/")[0]]], "delete") for o in rest if "/" in o}
    raise AssertionError(f"a kubectl command the Role does not account for: {argv}")


def test_the_role_grants_what_the_daemons_kubectl_does_and_nothing_more(
    tmp_path: Path,
) -> None:
    settings = the_workflow(tmp_path).worker.kubernetes
    # What a run does through kubectl: its pod made and waited for, a command in it, the pod
    # deleted; and the listing of an earlier daemon's pods at start-up and in `check`. The
    # daemon resolves its address when it makes a pod; an address stands in for the Service's
    # name, which resolves only in the cluster.
    # With `workspace: pvc:<claim>` (the Role serves either) the daemon also makes the
    # ticket's claim with its first run, lists its claims at start-up and deletes a terminal
    # ticket's.
    settings = replace(settings, daemon=replace(settings.daemon, address="10.0.0.7"))
    fake = FakeKubectl([nothing_listed, statuses(READY)])  # a pod Ready, a claim not yet made

    async def a_run(cluster: KubernetesSettings) -> None:
        pods = Pods(Kubectl(cluster, {"PATH": "/bin"}, fake), "instance", poll_s=0,
                    workflow="wf")  # fmt: skip
        host = await pods.start("ABC-1", "run-1", Network.MODEL)
        await host.command("true")
        await pods.delete(host.pod)
        await pods.listed()
        await pods.claims.listed()
        await pods.claims.delete("ws-abc-1")

    asyncio.run(a_run(settings))
    asyncio.run(a_run(replace(settings, workspace_claim="ws")))
    assert {argv[argv.index("-n") + 1] for argv, _ in fake.calls} == {AGENTS_NAMESPACE}
    needed = set().union(*(requests_of(argv, stdin) for argv, stdin in fake.calls))

    docs = agent_pods()
    assert not {kind for kind, _ in docs} & {"ClusterRole", "ClusterRoleBinding"}
    role, binding = docs["Role", AGENTS_NAMESPACE], docs["RoleBinding", AGENTS_NAMESPACE]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not any("*" in part for grant in granted for part in grant)
    # No nonResourceURLs, nothing but these rules' resources and verbs.
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    assert granted == needed
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    account = docs["ServiceAccount", "symphony"]["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def _quantity(text: str) -> float:
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    return float(text)


def test_the_agents_quota_holds_max_pods_runs_and_each_fits_the_limits(tmp_path: Path) -> None:
    docs = agent_pods()
    cluster = the_workflow(tmp_path).worker.kubernetes
    assert cluster is not None and cluster.max_pods is not None
    (container,) = pod_manifest(cluster, "instance", "ABC-1", "run-1")["spec"]["containers"]
    quota = docs["ResourceQuota", AGENTS_NAMESPACE]["spec"]["hard"]
    assert int(quota["pods"]) >= cluster.max_pods
    for kind in ("requests", "limits"):
        for name, value in container["resources"][kind].items():
            assert _quantity(quota[f"{kind}.{name}"]) >= cluster.max_pods * _quantity(value)
    (limits,) = docs["LimitRange", AGENTS_NAMESPACE]["spec"]["limits"]
    for name, value in container["resources"]["limits"].items():
        assert _quantity(value) <= _quantity(limits["max"][name])
    assert _quantity("500m") == 0.5 and _quantity("4Gi") == 4 * 2**30


def test_the_agents_namespace_enforces_the_restricted_pod_profile_the_runs_meet(
    tmp_path: Path,
) -> None:
    docs = agent_pods()
    namespace = docs["Namespace", AGENTS_NAMESPACE]["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"
    cluster = the_workflow(tmp_path).worker.kubernetes
    pod = pod_manifest(cluster, "instance", "ABC-1", "run-1", ("10.0.0.7",))
    kubernetes_validate.validate(pod, VERSION, strict=True)
    spec = pod["spec"]
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    allowed = {"emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected"}
    assert all(set(v) - {"name"} <= allowed for v in spec["volumes"])
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    assert spec["automountServiceAccountToken"] is False
    # And the agents' namespace fences what the daemon did not make.
    deny = docs["NetworkPolicy", AGENTS_NAMESPACE]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


SKIPPED_FOR_AGENT_PODS = {
    # The daemon's pod mounts its service account's token: its kubectl makes and deletes the
    # runs' pods with it (in-cluster), bound by a Role to the agents' namespace alone.
    "CKV_K8S_38",
}


def test_the_agent_pods_manifests_pass_the_policy_scanner(tmp_path: Path) -> None:
    docs = rendered(AGENT_PODS)
    for i, doc in enumerate(docs):
        (tmp_path / f"{i:02}-{doc['kind'].lower()}.yaml").write_text(yaml.safe_dump(doc))
    report = scan(tmp_path, SKIPPED_FOR_ALL | SKIPPED_FOR_SHIPPED | SKIPPED_FOR_AGENT_PODS)
    assert failed(report) == []
    assert report["summary"]["resource_count"] >= len(docs)  # the scanner read every one
    assert report["summary"]["passed"] >= 100
    # The one check skipped for this example fails for the daemon's token and nothing else.
    report = scan(tmp_path, SKIPPED_FOR_ALL | SKIPPED_FOR_SHIPPED)
    assert failed(report) == ["CKV_K8S_38 Deployment.symphony.symphony"]


def test_the_scanner_catches_a_role_grown_beyond_the_runs(tmp_path: Path) -> None:
    role = agent_pods()["Role", AGENTS_NAMESPACE]
    role["rules"].append({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
    (tmp_path / "role.yaml").write_text(yaml.safe_dump(role))
    report = scan(tmp_path, SKIPPED_FOR_ALL | SKIPPED_FOR_SHIPPED | SKIPPED_FOR_AGENT_PODS)
    assert {line.split()[0] for line in failed(report)} >= {"CKV_K8S_157", "CKV_K8S_158"}


def kubectl_step(bin_dir: Path) -> str:
    """The image's kubectl step (examples/deploy/Containerfile) as a shell script installing
    into `bin_dir`."""
    lines = (ROOT / "examples" / "deploy" / "Containerfile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "url=" in line and "dl.k8s.io" in line) - 1
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "fi; \\")
    step = " ".join(line.strip().removesuffix("\\") for line in lines[start : end + 1])
    assert step.startswith('if [ -n "$KUBECTL_VERSION" ]; then')
    return "set -eu; " + step.replace("/usr/local/bin/", f"{bin_dir}/")


@pytest.mark.parametrize(
    ("version", "pinned", "published", "installed"),
    [
        ("1.30.4", "", "right", True),
        ("v1.30.4", "", "right", True),
        ("1.30.4", "", "wrong", False),  # a binary that is not the one published
        ("1.30.4", "right", "wrong", True),  # a pin is trusted over what is published
        ("1.30.4", "0" * 64, "right", False),
        ("", "", "right", False),  # no version: no kubectl, and nothing fetched
    ],
)
def test_the_image_installs_kubectl_only_as_published(
    tmp_path: Path, version: str, pinned: str, published: str, installed: bool
) -> None:
    """The step runs with a `curl` that serves a stand-in binary (no network here) and a
    `dpkg` that names the architecture; what it fetched is recorded."""
    stubs, target = tmp_path / "stubs", tmp_path / "bin"
    stubs.mkdir(), target.mkdir()
    binary = tmp_path / "kubectl-release"
    binary.write_bytes(b"\x7fELF a stand-in kubectl\n")
    right = subprocess.run(["sha256sum", str(binary)], capture_output=True, text=True,
                           check=True).stdout.split()[0]  # fmt: skip
    sums = {"right": right, "wrong": "f" * 64}
    (stubs / "curl").write_text(
        "#!/bin/sh\n"
        'out=""; while [ $# -gt 1 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        f'echo "$1" >> {tmp_path}/fetched\n'
        f'case "$1" in *.sha256) echo {sums[published]} ;; *) cp {binary} "$out" ;; esac\n'
    )
    (stubs / "dpkg").write_text("#!/bin/sh\necho arm64\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "KUBECTL_VERSION": version,
           "KUBECTL_SHA256": sums.get(pinned, pinned)}  # fmt: skip
    done = subprocess.run(["sh", "-c", kubectl_step(target)], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    kubectl = target / "kubectl"
    assert (done.returncode == 0) == (installed or not version), done.stderr
    assert (kubectl.exists() and os.access(kubectl, os.X_OK) and done.returncode == 0) == installed
    fetched = (tmp_path / "fetched").read_text().split() if version else []
    if version:
        url = "https://dl.k8s.io/release/v1.30.4/bin/linux/arm64/kubectl"
        assert fetched[0] == url
        assert fetched[1:] == ([] if pinned else [f"{url}.sha256"])
    else:
        assert not (tmp_path / "fetched").exists()
