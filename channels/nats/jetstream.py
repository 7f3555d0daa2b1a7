"""The JetStream side of :class:`~channels.nats.channel.NatsChannel`: a channel's stream
(found, or created with the hub's retention), where a consumer starts, and how
a JetStream call's failure becomes a channels error (:func:`answered_within`).

Kept apart from the transport so that each stays one concern: this module
talks to JetStream's API; the transport owns the connection, the readers and
the inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext, api

from channels.errors import ChannelBrokenError, ChannelTimeoutError, ProtocolError
from channels.frames import ErrorCode
from channels.nats import mapping

__all__ = ["Retention", "StreamRef", "answered_within", "consumer_config", "ensure_stream"]

log = structlog.get_logger("channels.nats")


@dataclass(frozen=True)
class Retention:
    """What a stream this client creates keeps: the hub's options, and the dedupe window."""

    count: int
    age: float
    duplicate_window: float


@dataclass(frozen=True)
class StreamRef:
    """A channel's stream as this client knows it: its name and the prefix of its ids."""

    name: str
    epoch: str
    created: datetime


async def ensure_stream(
    js: JetStreamContext, channel: str, retention: Retention
) -> tuple[StreamRef, api.StreamInfo]:
    """The stream of ``channel``, created when missing, and its info read now.

    Retries while JetStream does not answer (a server restarting); the
    caller bounds the wait. An existing stream is used as it is.
    """
    name = mapping.stream_name(channel)
    info: api.StreamInfo | None = None
    while info is None:
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            info = await _create(js, channel, name, retention)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            await asyncio.sleep(0.05)  # JetStream not ready: try again
    if info.created is None:
        raise ProtocolError(ErrorCode.INTERNAL, f"stream {name} has no creation time")
    return StreamRef(name, mapping.stream_epoch(name, info.created), info.created), info


async def _create(
    js: JetStreamContext, channel: str, name: str, retention: Retention
) -> api.StreamInfo:
    config = api.StreamConfig(
        name=name,
        subjects=[mapping.channel_filter(channel)],
        storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.OLD,
        max_msgs=retention.count,
        max_age=retention.age,
        duplicate_window=min(retention.duplicate_window, retention.age),
    )
    try:
        info = await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        # made meanwhile by another client, or refused (its subjects overlap another's)
        try:
            return await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            raise ProtocolError(
                ErrorCode.INTERNAL, f"NATS refused to create stream {name}: {exc}"
            ) from exc
    log.info("channels.stream_created", channel=channel, stream=name)
    return info


def consumer_config(start: mapping.Start, state: api.StreamState) -> api.ConsumerConfig:
    """The ordered consumer's start for ``start``, given the stream's state now.

    "new" starts just after the current last sequence rather than with
    JetStream's ``new``, so a message stored between reading the state and
    creating the consumer is delivered, not skipped (as the hub's ``head``).
    """
    config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL)
    if start.policy == "new":
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = state.last_seq + 1
    elif start.policy == "seq":
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start.seq
    elif start.policy == "time":
        config.deliver_policy = api.DeliverPolicy.BY_START_TIME
        config.opt_start_time = start.time
    return config


@contextlib.asynccontextmanager
async def answered_within(
    seconds: float, what: str, url: str, check_usable: Callable[[], None]
) -> AsyncIterator[None]:
    """Bound a JetStream exchange and turn its failures into channels errors.

    No answer in time: :class:`ChannelTimeoutError`; JetStream refused:
    ``ProtocolError("internal")`` (the daemon retries those later); the
    connection failed: whatever ``check_usable`` raises (closed, broken),
    else :class:`ChannelBrokenError`.
    """
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as exc:
        raise ChannelTimeoutError(f"NATS did not answer for {what} within {seconds:g}s") from exc
    except nats.js.errors.APIError as exc:
        raise ProtocolError(ErrorCode.INTERNAL, f"NATS refused {what}: {exc}") from exc
    except nats.errors.Error as exc:
        check_usable()
        raise ChannelBrokenError.of(url, exc) from exc
