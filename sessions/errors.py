"""Errors of the sessions package.

The tree::

    StoreError                   root of everything sessions/ raises; wraps aiosqlite's
    ├── MigrationError           the database's schema is newer or broken
    ├── StoreClosedError         the store is not open (never opened, or closed)
    ├── ThreadLookupError        a thread given by its id is unknown or ambiguous
    │                            (the same id in several channels: name the channel)
    └── RuleLookupError          no approval rule in force has the id given
"""

from __future__ import annotations

__all__ = [
    "MigrationError",
    "RuleLookupError",
    "StoreClosedError",
    "StoreError",
    "ThreadLookupError",
]


class StoreError(Exception):
    """Root of every error raised by the sessions package (wraps the driver's errors)."""


class MigrationError(StoreError):
    """The database cannot be migrated to this version's schema."""


class StoreClosedError(StoreError):
    """The store was used before ``open()`` or after ``aclose()``."""


class ThreadLookupError(StoreError):
    """No thread has this id, or several channels do and none was named."""


class RuleLookupError(StoreError):
    """No approval rule in force has this id (unknown, or revoked already)."""
