"""Task and lease ids drawn from the pooled CSPRNG bytes (``records.RandomPool``) have the
format of the reference functions they replace (``uuid.uuid4().hex``,
``secrets.token_urlsafe(16)``) and never repeat, across pool refills and across a fork."""

from __future__ import annotations

import base64
import os
import re
import uuid

import pytest

from desched.service.records import RandomPool, new_lease_id, new_task_id


def test_task_ids_are_uuid4_hex_and_distinct() -> None:
    ids = [new_task_id() for _ in range(5000)]  # more than one pool chunk (4,096 bytes)
    assert len(set(ids)) == len(ids)
    for x in ids:
        u = uuid.UUID(hex=x)
        assert u.hex == x
        assert u.version == 4
        assert u.variant == uuid.RFC_4122


def test_lease_ids_are_token_urlsafe_16_and_distinct() -> None:
    ids = [new_lease_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    for x in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", x)
        assert len(base64.urlsafe_b64decode(x + "==")) == 16


def test_pool_hands_out_each_byte_once() -> None:
    pool = RandomPool(chunk=64)
    taken = [pool.take(16) for _ in range(40)]  # ten refills
    assert all(len(b) == 16 for b in taken)
    assert len(set(taken)) == len(taken)
    assert len(pool.take(100)) == 100  # larger than a chunk


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_repeat_the_parents_bytes() -> None:
    pool = RandomPool(chunk=4096)
    pool.take(16)  # the parent's pool now holds unused bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send what it draws next, and leave at once
        os.write(write, pool.take(16))
        os._exit(0)
    os.close(write)
    child = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 16
    assert child != pool.take(16)
