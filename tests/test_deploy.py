"""The Kubernetes manifests in examples/deploy/kubernetes/, checked offline: each document
against the Kubernetes OpenAPI schema (kubernetes-validate's bundled copy, strict: an unknown
field is an error), and against what the daemon needs: one replica recreated, never rolled;
its probes on /livez and /readyz; the tokens from the Secret; the WORKFLOW.md the ConfigMap
holds loading with its state, workspaces and notes on the volume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from symphony.config.load import load_settings

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
