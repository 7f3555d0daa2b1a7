"""Output schemas of the kcp tools (spec A1). Structured content must be an
object, so arrays are wrapped: ``{"workspaces": [...]}``, ``{"resources": [...]}``.

Kubernetes objects are described loosely: kubectl's JSON passes through
whole, whatever else it holds. The schemas name the fields people ask about
(a pod's phase, node and restarts, a deployment's replicas and image, an
event's type and reason, a configmap's data), since a model that is not told
where a value lives guesses (``containerRestartCount``, ``ready_replicas``);
no field is required, as each belongs to some kinds only. Code mode shows
these schemas as ``Returns:`` sketches four containers deep, so the fields
that matter sit near the top.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KCPS", "OBJECT", "OBJECT_LIST", "RESOURCES", "WORKSPACES"]

_STR: dict[str, Any] = {"type": "string"}
_STRS: dict[str, Any] = {"type": "array", "items": _STR}

_STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": _STR}
_INT: dict[str, Any] = {"type": "integer"}
_CONTAINERS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "properties": {"name": _STR, "image": _STR}},
}

OBJECT: dict[str, Any] = {
    "type": "object",
    "description": (
        "A Kubernetes object as `kubectl -o json` prints it. Pods: spec.nodeName, "
        "spec.containers, status.phase, status.containerStatuses[].restartCount; "
        "deployments: spec.replicas, spec.template.spec.containers[].image, "
        "status.readyReplicas; events: type, reason, message, involvedObject.name; "
        "configmaps: data."
    ),
    "properties": {
        "kind": _STR,
        "metadata": {
            "type": "object",
            "properties": {"name": _STR, "namespace": _STR, "labels": _STR_MAP},
        },
        "spec": {
            "type": "object",
            "properties": {
                "nodeName": _STR,
                "containers": _CONTAINERS,
                "replicas": _INT,
                "template": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {"containers": _CONTAINERS}}
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": _STR,
                "containerStatuses": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": _STR,
                            "ready": {"type": "boolean"},
                            "restartCount": _INT,
                        },
                    },
                },
                "replicas": _INT,
                "readyReplicas": _INT,
            },
        },
        "data": _STR_MAP,
        "type": _STR,
        "reason": _STR,
        "message": _STR,
        "involvedObject": {
            "type": "object",
            "properties": {"kind": _STR, "name": _STR, "namespace": _STR},
        },
    },
}

OBJECT_LIST: dict[str, Any] = {
    "type": "object",
    "description": "A Kubernetes list as `kubectl get -o json` prints it.",
    "properties": {
        "apiVersion": _STR,
        "kind": _STR,
        "metadata": {"type": "object"},
        "items": {"type": "array", "items": OBJECT},
    },
    "required": ["items"],
}

KCPS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kcps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": _STR,
                    "kubeconfig": _STR,
                    "server": {"type": ["string", "null"]},
                    "running": {"type": "boolean"},
                },
                "required": ["id", "kubeconfig", "server", "running"],
            },
        },
        "errors": _STRS,
    },
    "required": ["kcps", "errors"],
}

WORKSPACES: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspaces": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": _STR,
                    "path": _STR,
                    "type": {"type": ["string", "null"]},
                    "phase": {"type": ["string", "null"]},
                    "url": {"type": ["string", "null"]},
                },
                "required": ["name", "path", "type", "phase", "url"],
            },
        }
    },
    "required": ["workspaces"],
}

RESOURCES: dict[str, Any] = {
    "type": "object",
    "properties": {
        "resources": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": _STR,
                    "short_names": _STRS,
                    "api_version": _STR,
                    "namespaced": {"type": "boolean"},
                    "kind": _STR,
                    "verbs": _STRS,
                    "categories": _STRS,
                },
                "required": [
                    "name",
                    "short_names",
                    "api_version",
                    "namespaced",
                    "kind",
                    "verbs",
                    "categories",
                ],
            },
        }
    },
    "required": ["resources"],
}
