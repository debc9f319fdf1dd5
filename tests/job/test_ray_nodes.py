"""Placement of ``--executor ray`` trials from what is known of the nodes (issue 29), without a
cluster: the options handed to Ray for a plain cluster, one with custom resources, and one
where some nodes were found without the trial's backend. The same options run on a real
cluster in tests/job/test_ray_plain.py."""

from __future__ import annotations

import pytest

from cairn.job.executors.ray_nodes import NODE_ID_LABEL, SLOT, NodeMap, placement

A, B, C = "a" * 56, "b" * 56, "c" * 56  # Ray node ids are 56 hex digits


def test_a_plain_cluster_places_by_cpus_and_memory_only():
    nodes = NodeMap()
    for n in (A, B):
        nodes.record(n, "h", "docker", None)
        nodes.record(n, "h", "local", None)
    assert placement(nodes, "docker", 1.0, None) == {"num_cpus": 1.0, "resources": {}}
    assert placement(nodes, "local", 2.0, 512) == {
        "num_cpus": 2.0,
        "resources": {},
        "memory": 512 * 1024 * 1024,
    }


def test_nodes_without_the_backend_are_left_out_by_their_node_id_label():
    nodes = NodeMap()
    nodes.record(A, "h1", "docker", None)
    nodes.record(C, "h3", "docker", "-e docker: no Docker engine answers")
    nodes.record(B, "h2", "docker", "-e docker: no Docker engine answers")
    opts = placement(nodes, "docker", 1.0, None)
    assert opts["label_selector"] == {NODE_ID_LABEL: f"!in({B},{C})"}
    assert nodes.able("docker") == [A] and nodes.lacking("docker") == [B, C]
    assert nodes.why_not("docker").startswith("h2 (bbbbbbbbbbbb): -e docker: no Docker")
    assert "label_selector" not in placement(nodes, "local", 1.0, None)  # not known to lack it
    label_utils = pytest.importorskip("ray._private.label_utils")
    assert label_utils.validate_label_selector(opts["label_selector"]) is None  # Ray takes it


def test_custom_resources_stay_an_option():
    nodes = NodeMap(uses_slots=True, pinned=frozenset({"docker"}))
    nodes.record(B, "h2", "docker", "no engine")  # pinned: the resource decides, not a probe
    assert placement(nodes, "docker", 1.0, None) == {
        "num_cpus": 1.0,
        "resources": {SLOT: 1.0, "cairn_backend_docker": 0.001},
    }
    assert placement(nodes, "local", 1.0, None) == {"num_cpus": 1.0, "resources": {SLOT: 1.0}}
