"""Errors of the sessions package.

The tree::

    StoreError                   root of everything sessions/ raises; wraps aiosqlite's
    └── MigrationError           the database's schema is newer or broken
"""

from __future__ import annotations

__all__ = ["MigrationError", "StoreError"]


class StoreError(Exception):
    """Root of every error raised by the sessions package (wraps the driver's errors)."""


class MigrationError(StoreError):
    """The database cannot be migrated to this version's schema."""
