"""The fleet's event stream on a real nats-server (:mod:`the_loop.fleet.stream`): stored before it is
acknowledged, deduplicated by the provider's key, in order per work item, redelivered until handled, and kept
across a restart of NATS."""

from __future__ import annotations

import time
from typing import Any

import pytest

from the_loop.fleet.connection import FleetError, Nats
from the_loop.fleet.stream import EventStream

A, B = "fake-octo-repo-15", "fake-octo-repo-16"


@pytest.fixture
def nats(nats_client: Nats) -> Nats:
    return nats_client


def test_a_key_published_twice_is_stored_once(nats: Nats) -> None:
    stream = EventStream(nats)
    first = stream.publish(A, "github:comment:1", b"one")
    again = stream.publish(A, "github:comment:1", b"one")

    assert not first.duplicate and again.duplicate and again.sequence == first.sequence
    assert [m.key for m in stream.reader("all").fetch()] == ["github:comment:1"]


def test_each_items_events_come_back_in_the_order_they_were_accepted(nats: Nats) -> None:
    stream = EventStream(nats)
    for n in range(20):
        stream.publish(A, f"a-{n}", f"a{n}".encode())
        stream.publish(B, f"b-{n}", f"b{n}".encode())

    mine = stream.reader("worker-a", A).fetch(100)

    assert [m.data for m in mine] == [f"a{n}".encode() for n in range(20)]  # only A's, in order


def test_a_message_not_acknowledged_comes_back_and_an_acknowledged_one_does_not(nats: Nats) -> None:
    stream = EventStream(nats)
    stream.publish(A, "k1", b"one")
    stream.publish(A, "k2", b"two")
    reader = stream.reader("worker", A, ack_wait=1)
    first, second = reader.fetch(2)
    first.ack(nats)  # the worker handled k1 and then died before k2

    deadline = time.monotonic() + 10
    again = []
    while not again and time.monotonic() < deadline:
        again = reader.fetch(10, timeout=0.5)

    assert [m.key for m in again] == ["k2"]
    assert second.key == "k2"


def test_what_jetstream_acknowledged_survives_a_restart_of_nats(nats_server: Any) -> None:
    connection = Nats.connect([nats_server.url])
    try:
        EventStream(connection).publish(A, "k1", b"kept")
    finally:
        connection.close()
    nats_server.stop()
    nats_server.start()
    again = Nats.connect([nats_server.url])
    try:
        assert [m.data for m in EventStream(again).reader("after", A).fetch()] == [b"kept"]
    finally:
        again.close()


def test_a_publish_nobody_acknowledges_is_an_error_the_ingress_can_fall_back_on(nats_server: Any) -> None:
    connection = Nats.connect([nats_server.url], timeout=1)
    try:
        stream = EventStream(connection)
        nats_server.stop()
        with pytest.raises(FleetError, match="JetStream did not store k1"):
            stream.publish(A, "k1", b"lost?")
    finally:
        nats_server.start()
        connection.close()
