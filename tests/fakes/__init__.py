"""Fakes at the boundaries: a scripted OpenAI server (``fake_openai``), a fake kubectl,
an in-memory executor (``executor``), test MCP servers, the channel's and the model's
side of the runtime (``runtime_helpers``), a recording ``Backoff`` (``backoff``) and
the channel test clients (``channels_helpers``)."""
