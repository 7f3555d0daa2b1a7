"""The operator's console (issue 30): a web app the daemon serves on its own event loop.

Login with a token of ``[web] tokens`` (:mod:`~daemon.web.tokens`, the hub's
format), sessions and CSRF (:mod:`~daemon.web.auth`), the console's state and
rendering (:mod:`~daemon.web.console`), the guarded ASGI app
(:mod:`~daemon.web.app`), its pages (:mod:`~daemon.web.site` puts them
together: :mod:`~daemon.web.threads`, :mod:`~daemon.web.approvals`,
:mod:`~daemon.web.audit`, :mod:`~daemon.web.usage` with its
:mod:`~daemon.web.charts`, :mod:`~daemon.web.health`, whose
:class:`HealthReport` the daemon fills), and uvicorn on the daemon's loop
(:mod:`~daemon.web.server`). Templates and the vendored htmx are files of the
package (``templates/``, ``static/``): nothing comes from another origin.

May import: ``daemon.config``, ``daemon.runtime`` (the approvals desk it
decides through), ``daemon.approvals``, ``daemon.errors``, ``channels`` (the
tokens file's parser), ``sessions``, ``daemon.asgi`` (how it is served), and
starlette, jinja2 and uvicorn;
nothing imports it but ``daemon.app`` and ``daemon.cli``.
"""

from daemon.web.audit import server_tools
from daemon.web.auth import Session, Sessions
from daemon.web.console import Console, Sources
from daemon.web.health import (
    ChannelHealth,
    EndpointHealth,
    HealthReport,
    MemberHealth,
    PoolHealth,
    ServerHealth,
    gather_health,
)
from daemon.web.server import WebServer
from daemon.web.site import console_app
from daemon.web.tokens import create_tokens, first_token, missing_tokens_help, read_tokens

__all__ = [
    "ChannelHealth",
    "Console",
    "EndpointHealth",
    "HealthReport",
    "MemberHealth",
    "PoolHealth",
    "ServerHealth",
    "Session",
    "Sessions",
    "Sources",
    "WebServer",
    "console_app",
    "create_tokens",
    "first_token",
    "gather_health",
    "missing_tokens_help",
    "read_tokens",
    "server_tools",
]
