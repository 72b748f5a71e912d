"""The ports the tier gives Ray's listeners: free, each one new, and outside the kernel's
ephemeral range, so that no outgoing socket takes one between its choice and Ray's bind."""

from __future__ import annotations

import socket

import harness


def test_listener_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    ports = [harness.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    low = harness._ephemeral_low()
    assert all(harness.LISTENER_PORTS_FROM <= port < low for port in ports), (low, ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((harness.LOOPBACK, ports[-1]))  # still free: nothing held it


def test_a_port_held_by_another_socket_is_skipped() -> None:
    held_port = harness.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind((harness.LOOPBACK, held_port))
        held.listen()
        harness._port_cursor[0] = held_port  # the next candidate is the held port
        assert harness.free_port() != held_port
