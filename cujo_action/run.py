"""Run a sandbox review: prepare → arm → checks → bundle, writing everything to one folder.

The sandbox never decides: it only produces reports. A failure before the checks
(not a repository, unknown ref, malformed ``.cujo.yml``) is written as ``failure.json``
so the deciding side can say why the run is ``error``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cujo_action.arm import arm
from cujo_action.bundle import (
    attach_egress,
    copy_evidence,
    report_path,
    write_failure,
    write_manifest,
)
from cujo_action.checks.harness import write_report
from cujo_action.prepare import PrepareError, prepare
from cujo_action.proxy import ProxyError, read_egress_log
from cujo_action.schema import CheckName, Failure, Plan, PolicyError, Report, utcnow

# Beyond a check's own command timeouts, how long its process may take to set up and report.
PROCESS_SLACK_S = 180.0


def _say(message: str) -> None:
    print(f"cujo: {message}", file=sys.stderr, flush=True)


class _Check:
    """A check process and its deadline."""

    def __init__(self, name: CheckName, context: Path, out: Path, budget: float) -> None:
        self.name = name
        self.out = report_path(out, name)
        self.deadline = time.monotonic() + budget + PROCESS_SLACK_S
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                f"cujo_action.checks.{name}",
                "--context",
                str(context),
                "--out",
                str(self.out),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait(self) -> None:
        """Wait for the process until its deadline; kill it past the deadline."""
        try:
            self.proc.wait(timeout=max(self.deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


def _placeholder(plan: Plan, check: CheckName, status: str, summary: str) -> Report:
    now = utcnow()
    return Report.model_validate(
        {
            "run_id": plan.run_id,
            "check": check,
            "head_sha": plan.head_sha,
            "base_sha": plan.base_sha,
            "status": status,
            "summary": summary,
            "started_at": now,
            "finished_at": now,
            "isolation": "partial",
            "evidence_complete": status == "skipped",
        }
    )


def _collect(check: _Check, plan: Plan) -> Report:
    """Return the check's report, or an error report when it wrote none or a bad one."""
    try:
        return Report.model_validate_json(check.out.read_bytes())
    except (OSError, ValueError) as exc:
        code = check.proc.returncode
        return _placeholder(
            plan,
            check.name,
            "error",
            f"the {check.name} check process ended (exit {code}) without a valid report: "
            f"{type(exc).__name__}",
        )


def run_sandbox(
    repo: str,
    base: str,
    head: str,
    run_id: str,
    out: Path,
    *,
    workdir: Path | None = None,
    keep: bool = False,
) -> int:
    """Review head against base in the sandbox; write reports to ``out``; return 0 or 3."""
    out.mkdir(parents=True, exist_ok=True)
    work = workdir or Path(tempfile.mkdtemp(prefix=f"cujo-{run_id}-"))
    try:
        return _run(repo, base, head, run_id, out, work)
    except Exception as exc:  # nothing is lost: the bundle says the run fell over, and why
        write_failure(out, Failure(run_id=run_id, stage="checks", reason=f"{exc!r}"))
        _say(f"the run fell over: {exc!r}")
        return 3
    finally:
        if workdir is None and not keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(repo: str, base: str, head: str, run_id: str, out: Path, work: Path) -> int:
    started = time.monotonic()
    _say(f"run {run_id}: preparing {repo} ({base} → {head})")
    try:
        plan = prepare(repo, base, head, run_id, work / "checkout")
    except PolicyError as exc:
        write_failure(
            out,
            Failure(
                run_id=run_id,
                stage="policy",
                reason=str(exc),
                path=exc.path,
                line=exc.line,
                key=exc.key or None,
            ),
        )
        _say(f"policy error: {exc}")
        return 3
    except PrepareError as exc:
        write_failure(out, Failure(run_id=run_id, stage="prepare", reason=str(exc)))
        _say(f"cannot prepare: {exc}")
        return 3
    _say(
        f"plan ({plan.ecosystem}): install `{plan.install or '-'}`, test `{plan.test or '-'}`, "
        f"smoke `{plan.smoke or '-'}`; policy from base {plan.policy_from[:12]}"
    )
    try:
        armed, proxy = arm(plan, work / "run")
    except (ProxyError, OSError) as exc:
        write_failure(
            out,
            Failure(
                run_id=run_id,
                stage="arm",
                reason=str(exc),
                head_sha=plan.head_sha,
                base_sha=plan.base_sha,
            ),
        )
        _say(f"cannot arm the sandbox: {exc}")
        return 3
    context = Path(armed.run_dir) / "context.json"
    timeouts = plan.policy.timeouts
    try:
        _say("detonation and install starting")
        detonation = _Check("detonation", context, out, 2 * timeouts.install + 60 * 26)
        install = _Check("install", context, out, timeouts.install)
        install.wait()
        installed = _collect(install, plan)
        later: list[CheckName] = ["tests", "probes", "smoke"]
        budgets = {"tests": timeouts.test, "probes": timeouts.probes, "smoke": timeouts.smoke}
        running: list[_Check] = []
        if installed.status in ("ok", "skipped"):
            _say(f"install {installed.status}; tests, probes and smoke starting")
            running = [_Check(n, context, out, budgets[n]) for n in later]
        else:
            _say(f"install {installed.status}: {installed.summary}")
            for name in later:
                write_report(
                    _placeholder(
                        plan,
                        name,
                        "skipped",
                        f"not run: the repository's install {installed.status}",
                    ),
                    report_path(out, name),
                )
        for check in [*running, detonation]:
            check.wait()
        reports = [installed] + [_collect(c, plan) for c in [*running, detonation]]
        if not running:
            reports += [Report.model_validate_json(report_path(out, n).read_bytes()) for n in later]
    finally:
        proxy_ok = proxy.alive()
        proxy.stop()
    lines, bad = read_egress_log(Path(armed.egress_log), None)
    for report in reports:
        final = attach_egress(report, lines, proxy_ok=proxy_ok, bad_lines=bad)
        write_report(final, report_path(out, report.check))
    (out / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
    copy_evidence(Path(armed.egress_log), out)
    write_manifest(out, run_id, plan.head_sha, plan.base_sha)
    _say(f"run {run_id}: bundle written to {out} in {time.monotonic() - started:.1f}s")
    return 0
