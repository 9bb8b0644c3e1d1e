"""Install and test the head again in the job of a base workflow that already runs it.

Where a base workflow with a privileged trigger (``pull_request_target``, ``workflow_run``,
``issue_comment``) checks out the pull request's head, the head's code meets the
repository's secrets and a token that can write before any merge: in that job, not the
post-merge push the other checks read as. This check runs the head's install and tests
once more, checked out at the head commit, in a job that reads as that workflow's
(``arm/pullevent.py``), under the same arming as every check (decoys, proxy, resolver,
its own uid, HOME and network namespaces). What it does is judged as any check of the
head: a decoy leaving here blocks, whatever the post-merge checks saw. Where the base has
no such workflow (``Plan.privileged`` is None) it has nothing to run: ok, saying so.
"""

from __future__ import annotations

from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.checks.tests import no_test_ran
from cujo_action.schema import Report

NOT_RUN = "no base workflow with a privileged trigger runs the pull request's code"


def body(run: CheckRun) -> Report:
    """Install the head into its own environment, then run its tests, in the privileged job."""
    plan, target = run.plan, run.plan.privileged
    if target is None or not plan.privileged_dir:
        return run.finish("ok", NOT_RUN)  # nothing to run here: no gap
    where = f"in {target.workflow}'s job ({target.trigger}, read as pull_request_target)"
    if not plan.install:
        return run.finish("skipped", f"nothing to install at head {where}")
    venv = run.venv_for(plan.ecosystem)
    timeouts = plan.policy.timeouts
    installed = run.run(
        plan.install, phase="install", timeout=timeouts.install, cwd=run.src, venv=venv
    )
    if status_of(installed) != "ok":
        code = installed.exit_code
        return run.finish("failed", f"the head's install failed {where} (exit {code})")
    if not plan.test:
        return run.finish("ok", f"installed the head {where}; it has no tests to run")
    tested = run.run(plan.test, phase="test", timeout=timeouts.test, cwd=run.src, venv=venv)
    if none := no_test_ran(plan.test, tested):
        return run.finish("skipped", f"installed the head {where}; no test ran: {none}")
    status = "failed" if tested.timed_out else status_of(tested)
    said = {"ok": "passes", "failed": "fails", "error": "flooded its output"}.get(status, status)
    return run.finish(status, f"installed and tested the head {where}: the suite {said}")


if __name__ == "__main__":
    raise SystemExit(check_main("privileged", body))
