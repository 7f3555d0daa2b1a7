"""A stdio MCP server with a catalog of 40 tools (issue 19: search instead of a wall of stubs).

Eight resources (widgets, orders, invoices, customers, shipments, tickets,
backups, servers) times five verbs (list, get, create, update, delete). Every
tool answers with JSON text and declares no output schema, except
``get_server``, which declares one (structured output), so tests can see a
declared schema win over a learned shape. ``--version`` sets the server's
``serverInfo.version``; ``--shape wide`` makes every record lose its ``owner``
and gain a ``revision`` (a result that no longer fits the shape learned before).

Run: ``python tests/fakes/mcp_catalog_server.py [--version 1.0] [--shape wide]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

RESOURCES = {
    "widgets": "widget: a part kept in a warehouse bin, with its stock count",
    "orders": "customer order: its lines, totals and payment state",
    "invoices": "invoice: the amount billed for an order, due date and paid flag",
    "customers": "customer account: contact details and loyalty tier",
    "shipments": "shipment: a parcel's carrier, tracking number and delivery state",
    "tickets": "support ticket: its subject, priority and the agent assigned",
    "backups": "database backup: its size, the database it saved and when it ran",
    "servers": "server of the fleet: hostname, region and whether it is up",
}


class ServerInfo(BaseModel):
    """What get_server declares it returns."""

    id: str
    hostname: str
    region: str
    up: bool


def _record(resource: str, i: int, wide: bool) -> dict[str, Any]:
    singular = resource[:-1]
    out: dict[str, Any] = {
        "id": f"{singular}-{i}",
        "name": f"{singular} number {i}",
        "status": ["active", "pending", "closed"][i % 3],
        "region": ["north", "south"][i % 2],
        "owner": {"name": f"owner{i}", "email": f"owner{i}@example.org"},
        "tags": [f"t{i}", "demo"],
    }
    if wide:  # a later release: one key gone, one new
        del out["owner"]
        out["revision"] = i
    return out


def _functions(resource: str, wide: bool) -> tuple[Any, ...]:
    """The five tool functions of one resource (closures: the schema sees only their arguments)."""
    singular = resource[:-1]

    def list_fn(region: str, status: str | None = None, limit: int = 20) -> str:
        rows = [_record(resource, i, wide) for i in range(1, 6)]
        rows = [r for r in rows if r["region"] == region]
        if status is not None:
            rows = [r for r in rows if r["status"] == status]
        return json.dumps({"items": rows[:limit], "total": len(rows)})

    def get_fn(id: str) -> str:
        tail = id.rsplit("-", 1)[-1]
        return json.dumps(_record(resource, int(tail) if tail.isdigit() else 0, wide))

    def create_fn(name: str, region: str) -> str:
        return json.dumps({"created": f"{singular}-99", "name": name, "region": region})

    def update_fn(id: str, fields: dict[str, Any]) -> str:
        return json.dumps({"updated": id, "fields": sorted(fields)})

    def delete_fn(id: str) -> str:
        return json.dumps({"deleted": id})

    return list_fn, get_fn, create_fn, update_fn, delete_fn


def build(version: str, wide: bool) -> MCPServer:
    """The 40-tool server at ``version``."""
    server = MCPServer("catalog-40", version=version, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True)
    writes = ToolAnnotations(read_only_hint=False)
    for resource, what in RESOURCES.items():
        singular = resource[:-1]

        list_fn, get_fn, create_fn, update_fn, delete_fn = _functions(resource, wide)

        server.add_tool(
            list_fn,
            name=f"list_{resource}",
            description=(
                f"List the {resource} of one region, newest first. Each item is a {what}.\n"
                f"Example: await list_{resource}(region='north', status='active')"
            ),
            annotations=read_only,
            structured_output=False,
        )
        if resource == "servers":

            def get_server(id: str) -> ServerInfo:
                return ServerInfo(id=id, hostname=f"{id}.example.org", region="north", up=True)

            server.add_tool(
                get_server,
                name="get_server",
                description=f"Get one {what}, by its id.",
                annotations=read_only,
            )
        else:
            server.add_tool(
                get_fn,
                name=f"get_{singular}",
                description=f"Get one {what}, by its id (e.g. '{singular}-3').",
                annotations=read_only,
                structured_output=False,
            )
        server.add_tool(
            create_fn,
            name=f"create_{singular}",
            description=f"Create a {singular} with a name, in a region; returns its new id.",
            annotations=writes,
            structured_output=False,
        )
        server.add_tool(
            update_fn,
            name=f"update_{singular}",
            description=f"Change fields of one {singular}: fields maps field names to values.",
            annotations=writes,
            structured_output=False,
        )
        server.add_tool(
            delete_fn,
            name=f"delete_{singular}",
            description=f"Delete one {singular} for good, by its id.",
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
            structured_output=False,
        )
    return server


def main() -> None:
    """Serve over stdio until stdin closes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default="1.0")
    parser.add_argument("--shape", choices=("narrow", "wide"), default="narrow")
    args = parser.parse_args()
    build(args.version, args.shape == "wide").run("stdio")


if __name__ == "__main__":
    main()
