"""Shared fixtures. Area fixtures live in their test modules or tests/fakes/."""
