"""The RabbitMQ cluster devserver's layout, without starting it (the failover test,
``tests/reliability/test_quorum_failover.py``, starts one, kills a node and checks the rest)."""

from __future__ import annotations

import stat

from devservers.rabbitmq import RabbitCluster


def test_three_nodes_share_a_cookie_and_nothing_else() -> None:
    cluster = RabbitCluster()
    try:
        nodes = cluster.nodes
        assert len(nodes) == 3
        assert len({n.node for n in nodes}) == len({n.port for n in nodes}) == 3
        assert len({n.dist_port for n in nodes} | {n.port for n in nodes}) == 6
        assert len({n.dir for n in nodes}) == 3
        cookies = {(n.dir / ".erlang.cookie").read_text() for n in nodes}
        assert len(cookies) == 1 and len(cookies.pop()) == 32
        modes = {stat.S_IMODE((n.dir / ".erlang.cookie").stat().st_mode) for n in nodes}
        assert modes == {0o400}, "Erlang refuses a cookie others may read"
        assert cluster.url == ";".join(n.url for n in nodes)
        assert all(n.process is None for n in nodes), "nothing started"
    finally:
        cluster.cleanup()
    assert not any(n.dir.exists() for n in nodes)
