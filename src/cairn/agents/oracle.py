"""The ``oracle`` agent: runs the task's reference solution (design §10).

Per step: uploads ``solution/`` then ``steps/<name>/solution/`` on top to ``/solution``, runs
``solve.sh`` (the step's, else the shared one) with bash and ``[solution].env``, as the step's
agent user in the working dir; the trial engine removes ``/solution`` after the phase. A non-zero
exit is ``agent_exit`` ``error``; the verifier still runs.
"""

from __future__ import annotations

import shlex

from cairn.agents.base import Agent, AgentContext
from cairn.layout import SOLUTION_DIR
from cairn.results.model import AgentExit
from cairn.sandbox.base import Sandbox


class OracleAgent(Agent):
    """Runs ``solve.sh``; takes no model.

    Attributes:
        solution_env: the resolved ``[solution].env`` (set by the trial engine before ``run``).
    """

    name = "oracle"
    ignores_instruction = True
    version = "1"
    needs_model = False

    def __init__(self, model: str | None = None, **kwargs: object) -> None:
        super().__init__(model, **kwargs)
        self.solution_env: dict[str, str] = {}

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Upload the solution and run ``solve.sh`` (the engine removes ``/solution`` after).

        Writes ``solve-stdout.txt`` and ``solve-stderr.txt`` into ``context.logs_dir``. A step with
        no solve.sh is an error exit (nothing to run).
        """
        step = context.step
        if step.solve_sh is None:
            (context.logs_dir / "solve-stderr.txt").write_text("no solve.sh for this step\n",
                                                              encoding="utf-8")
            context.exit = AgentExit.ERROR
            return
        # /solution exists only during this run: the engine removes it after every agent phase
        # (design §11), also when this run is cancelled by the step timeout.
        await sandbox.exec(f"rm -rf {SOLUTION_DIR} && mkdir -p {SOLUTION_DIR}", user="root")
        for d in step.solution_dirs:
            await sandbox.upload(d, SOLUTION_DIR)
        fixups = []
        if b"\r\n" in step.solve_sh.read_bytes():  # run like test.sh: CRLF normalised (§4.6)
            fixups.append(f"sed -i 's/\\r$//' {SOLUTION_DIR}/solve.sh")
        if context.user is not None:
            fixups.append(f"chown -R {shlex.quote(str(context.user))} {SOLUTION_DIR}")
        if fixups:
            await sandbox.exec(" && ".join(fixups), user="root")
        env = {**self.solution_env, **context.env}
        result = await sandbox.exec(
            ["bash", f"{SOLUTION_DIR}/solve.sh"], user=context.user, env=env,
            timeout_sec=context.timeout_sec)
        (context.logs_dir / "solve-stdout.txt").write_text(result.stdout, encoding="utf-8")
        (context.logs_dir / "solve-stderr.txt").write_text(result.stderr, encoding="utf-8")
        if result.timed_out:
            raise TimeoutError("solve.sh timed out")
        if result.exit_code != 0:
            context.exit = AgentExit.ERROR
            context.metadata["solve_exit_code"] = result.exit_code
