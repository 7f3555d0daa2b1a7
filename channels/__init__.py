"""atirc-style pub/sub channels: protocol, client, embedded hub, the `atirc` CLI."""
