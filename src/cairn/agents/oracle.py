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
from cairn.sandbox.base import Sandbox, UploadItem


class OracleAgent(Agent):
    """Runs ``solve.sh`` with the task's ``[solution].env`` (``context.solution_env``); takes
    no model."""

    name = "oracle"
    ignores_instruction = True
    version = "1"
    needs_model = False
    known_options = ()  # an --ak it does not take is refused before start (design §10)

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Upload the solution and run ``solve.sh`` (the engine removes ``/solution`` after).

        Writes ``solve-stdout.txt`` and ``solve-stderr.txt`` into ``context.logs_dir``. A step with
        no solve.sh is an error exit (nothing to run).
        """
        step = context.step
        if step.solve_sh is None:
            (context.logs_dir / "solve-stderr.txt").write_text(
                "no solve.sh for this step\n", encoding="utf-8"
            )
            context.exit = AgentExit.ERROR
            return
        # /solution exists only during this run: a sandbox starts without it and the engine
        # removes it after every agent phase (design §11), also when this run is cancelled by
        # the step timeout — so one archive lands it fresh, CRLF of solve.sh normalised as
        # test.sh's is (§4.6).
        crlf = ("solve.sh",) if b"\r\n" in step.solve_sh.read_bytes() else ()
        await sandbox.upload_many([UploadItem(d, SOLUTION_DIR, crlf=crlf) for d in step.solution_dirs])
        if context.user is not None and str(context.user) not in ("0", "root"):
            await sandbox.exec(f"chown -R {shlex.quote(str(context.user))} {SOLUTION_DIR}", user="root")
        env = {**context.solution_env, **context.env}
        result = await sandbox.exec(
            ["bash", f"{SOLUTION_DIR}/solve.sh"], user=context.user, env=env, timeout_sec=context.timeout_sec
        )
        (context.logs_dir / "solve-stdout.txt").write_text(result.stdout, encoding="utf-8")
        (context.logs_dir / "solve-stderr.txt").write_text(result.stderr, encoding="utf-8")
        if result.timed_out:
            raise TimeoutError("solve.sh timed out")
        if result.exit_code != 0:
            context.exit = AgentExit.ERROR
            context.metadata["solve_exit_code"] = result.exit_code
