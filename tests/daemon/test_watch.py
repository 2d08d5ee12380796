"""WORKFLOW.md's watch sees a Kubernetes ConfigMap update: the kubelet swaps the volume's
`..data` symlink to a new folder, and the file itself gets no event of its own."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from symphony.daemon.watch import watch_workflow


def configmap_volume(root: Path, text: str) -> Path:
    first = root / "..2026_12_04_10_00_00.1"
    first.mkdir()
    (first / "WORKFLOW.md").write_text(text)
    (root / "..data").symlink_to(first.name)
    (root / "WORKFLOW.md").symlink_to("..data/WORKFLOW.md")
    return root / "WORKFLOW.md"


def swap(root: Path, text: str) -> None:
    """What the kubelet does: a new folder, a new symlink renamed over `..data`."""
    second = root / "..2026_12_04_10_01_00.2"
    second.mkdir()
    (second / "WORKFLOW.md").write_text(text)
    (root / "..data_tmp").symlink_to(second.name)
    os.replace(root / "..data_tmp", root / "..data")


async def test_a_configmap_swap_is_seen_as_a_change(tmp_path: Path) -> None:
    path = configmap_volume(tmp_path, "---\n---\nfirst\n")
    changed = asyncio.Event()
    watch = asyncio.create_task(watch_workflow(path, changed.set))
    try:
        await asyncio.sleep(0.3)  # the watch is set up
        swap(tmp_path, "---\n---\nsecond\n")
        await asyncio.wait_for(changed.wait(), 10)
    finally:
        watch.cancel()
    assert path.read_text().endswith("second\n")
