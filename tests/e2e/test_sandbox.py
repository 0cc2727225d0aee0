"""The sandbox's egress proxy beside a real Temporal server: what is listed gets through,
the worker's own services never do.

The rest of the sandbox runner, which needs no server, is in tests/unit/test_sandbox.py.
"""

from __future__ import annotations

import json

import pytest
from temporalio.testing import WorkflowEnvironment

from activities.host import sandbox
from activities.host.toolbox import execute
from loop.contracts import SandboxPolicy, ToolPolicy
from tests.support.levels import LEVELS
from tests.support.sandbox import Listener, Tree, fetch

pytestmark = [pytest.mark.timeout(90)]


@pytest.mark.parametrize("mode", LEVELS)
async def test_the_egress_proxy_lets_through_only_what_is_listed(
    tree: Tree, mode: str, listener: Listener, env: WorkflowEnvironment
) -> None:
    temporal = env.client.service_client.config.target_host.rsplit(":", 1)[1]
    sandbox.protect([f"127.0.0.1:{temporal}"])
    other = Listener()
    try:
        allowed = f"127.0.0.1:{listener.port}"
        policy = SandboxPolicy(mode=mode, allow_hosts=[allowed, f"127.0.0.1:{temporal}"])
        ran = await tree.run(
            fetch(
                f"http://{allowed}/",
                f"http://127.0.0.1:{other.port}/",
                f"http://127.0.0.1:{temporal}/",
                "https://example.com/",
            )
            + "; "
            + fetch(f"http://{allowed}/", direct=True),
            policy,
        )
        codes = ran.output_tail.split()
        assert codes[:3] == ["200", "403", "403"], ran.output_tail
        assert codes[3] == "000" and codes[4] == "000", ran.output_tail  # no way around it
        refused = "\n".join(ran.network_refused)
        assert f"127.0.0.1:{other.port}: 127.0.0.1:{other.port} is not in" in refused
        assert "the worker's own service" in refused and "example.com:443" in refused
        # The run tool (the model's commands) and a gate given the proxy: the same rules.
        out = await execute(
            "run",
            json.dumps({"command": fetch(f"http://{allowed}/", f"http://127.0.0.1:{other.port}/")}),
            tree.wt,
            ToolPolicy(),
            [],
            tree.attempt,
            sandbox=policy,
            task_id=tree.task_id,
            home=tree.home,
        )
        assert out.text.split()[-2:] == ["200", "403"], out.text
        gate = await tree.run(
            fetch(f"http://{allowed}/"),
            SandboxPolicy(mode=mode, gate_network="proxy", allow_hosts=[allowed]),
            kind="gate",
        )
        assert gate.output_tail.split() == ["200"]
    finally:
        other.close()
