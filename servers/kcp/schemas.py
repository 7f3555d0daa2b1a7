"""Output schemas of the kcp tools (spec A1). Structured content must be an
object, so arrays are wrapped: ``{"workspaces": [...]}``, ``{"resources": [...]}``.

Kubernetes objects are described loosely (apiVersion, kind, metadata, items):
kubectl's JSON passes through whole, whatever else it holds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KCPS", "OBJECT", "OBJECT_LIST", "RESOURCES", "WORKSPACES"]

_STR: dict[str, Any] = {"type": "string"}
_STRS: dict[str, Any] = {"type": "array", "items": _STR}

OBJECT: dict[str, Any] = {
    "type": "object",
    "description": "A Kubernetes object as `kubectl -o json` prints it.",
    "properties": {
        "apiVersion": _STR,
        "kind": _STR,
        "metadata": {"type": "object"},
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
