"""Fakes at the boundaries: a scripted OpenAI server, a fake kubectl, an in-memory executor."""
