"""Code mode: one ``run_code`` tool whose Python runs in Monty workers and calls inner tools."""

from daemon.code_mode.executor import CodeModeToolExecutor
from daemon.code_mode.limits import CodeModeLimits

__all__ = ["CodeModeLimits", "CodeModeToolExecutor"]
