"""The Kubernetes manifests in examples/deploy/kubernetes/, checked offline: each document
against the Kubernetes OpenAPI schema (kubernetes-validate's bundled copy, strict: an unknown
field is an error), and against what the daemon needs: one replica recreated, never rolled;
its probes on /livez and /readyz; the tokens from the Secret; the WORKFLOW.md the ConfigMap
holds loading with its state, workspaces and notes on the volume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from symphony.config.load import load_settings

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "deploy" / "kubernetes"
VERSION = "1.30.0"


def documents() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        (doc,) = list(yaml.safe_load_all((FOLDER / name).read_text()))
        found[doc["kind"]] = doc
    return found


@pytest.mark.parametrize("kind", ["Deployment", "PersistentVolumeClaim", "ConfigMap", "Secret"])
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
