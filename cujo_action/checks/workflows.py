"""Review what the pull request changes about CI, and what its own text does to the base's CI.

A check process like the others (one report, its own evidence ids), though it runs no
pull-request code (``static_check``): it reads the CI files of base and head from git objects
(``ci_files``), and

* **audits** what the pull request changes (when it changes anything under
  ``.github/``, an ``action.yml`` anywhere, or a script a workflow runs by path): the
  hazards of ``workflow/audit.py`` that head has and base has not (a privileged trigger
  checking out the head, a stranger's text pasted into a script, a secret handed to a
  sender), zizmor's findings that head introduces (``zizmor_audit``), and each changed
  file with what changed in it (``workflow_changes``);
* reads **the pull request as the payload**: where each base workflow with a privileged
  trigger pastes the pull request's title, body or branch into a shell, and how the shell
  reads it there (an observation per place, judged by the relay against the text it read
  itself), and what the head commit's message becomes there (judged here: the commit is
  in the clone);
* says where **the base already runs pull-request code**: each base workflow with a
  privileged trigger that checks out the head (``untrusted_checkouts``), whatever this
  pull request changes, since such a job meets the head's code with secrets before any
  merge.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from cujo_action.checks.ci_files import (
    CiTree,
    is_ci_path,
    is_workflow_path,
    read_ci,
    scripts_run,
)
from cujo_action.checks.evidence_record import EvidenceRecord
from cujo_action.checks.static_check import static_check_main
from cujo_action.checks.workflow_changes import Change, describe
from cujo_action.checks.zizmor_audit import (
    AuditError,
    AuditFinding,
    audit,
    findings,
    introduced,
    version,
    zizmor_binary,
)
from cujo_action.limits import WORKFLOW_AUDIT_TIME, WORKFLOW_CHANGE_PHRASES, WORKFLOW_GIT_TIME
from cujo_action.prepare.git import Git, PrepareError, git_env
from cujo_action.schema import (
    MAX_TEXT,
    PR_FIELDS,
    WORKFLOW_AUDIT,
    WORKFLOW_BASE_CHECKOUT,
    WORKFLOW_CHANGE,
    WORKFLOW_INJECTION,
    Plan,
    Status,
    clip,
    pr_sink,
    shell_hazards,
)
from cujo_action.workflow.audit import (
    Hazard,
    Sink,
    hazards,
    pr_sinks,
    untrusted_checkouts,
)
from cujo_action.workflow.parse import Workflow, is_action_file, parse

_SHOWN_FIELD = {"title": "title", "body": "body", "branch": "branch name"}


def _readable(tree: CiTree) -> dict[str, Workflow]:
    """Return the workflows and actions of a tree, parsed."""
    return {
        path: parse(path, text)
        for path, text in tree.texts.items()
        if is_workflow_path(path) or is_action_file(path)
    }


class WorkflowsReview:
    """The workflows check of one run: what it read, and the evidence it records."""

    def __init__(self, plan: Plan, record: EvidenceRecord, git: Git) -> None:
        self.plan, self.record, self.git = plan, record, git
        self.clone = Path(plan.head_dir)
        self.notes: list[str] = []

    def run(self) -> tuple[Status, str]:
        """Read base and head, record the evidence, and return the status and summary."""
        base = read_ci(self.git, self.clone, self.plan.base_sha)
        head = read_ci(self.git, self.clone, self.plan.head_sha)
        self._cut_unread(base, "base")
        self._cut_unread(head, "head")
        base_flows, head_flows = _readable(base), _readable(head)
        changed = self._ci_changes(base, head, head_flows)
        introduced_hazards = self._introduced(base_flows, head_flows, changed) if changed else []
        for hazard in introduced_hazards:
            self.record.observe(hazard.kind, hazard.detail, path=hazard.path, line=hazard.line)
        sinks = [s for wf in base_flows.values() if wf.kind == "workflow" for s in pr_sinks(wf)]
        self._commit_payload(sinks)
        for sink in sinks:
            self._observe_sink(sink)
        runs_head = [
            h for _, wf in sorted(base_flows.items()) if wf.kind == "workflow"
            for h in untrusted_checkouts(wf)
        ]  # fmt: skip
        for hazard in runs_head:
            self.record.observe(
                WORKFLOW_BASE_CHECKOUT, hazard.detail, path=hazard.path, line=hazard.line
            )
        if runs_head:
            self.notes.append(
                f"{len(runs_head)} step(s) of base workflows with a privileged trigger already "
                "check out the pull request's head"
            )
        audited = self._audit(base, head, base_flows, head_flows) if changed else []
        for change in changed:
            self.record.observe(WORKFLOW_CHANGE, change.detail, path=change.path, line=change.line)
        return "ok", self._summary(changed, introduced_hazards, sinks, audited)

    # ------------------------------------------------------------------ reading

    def _cut_unread(self, tree: CiTree, which: str) -> None:
        if tree.unread:
            self.record.cut(
                "workflow-files", dropped=len(tree.unread), kept=len(tree.texts),
                detail=f"at {which}, not read: {', '.join(tree.unread[:10])}",
            )  # fmt: skip
        if tree.too_large:
            self.record.cut(
                "workflow-file-size", dropped=len(tree.too_large),
                detail=f"at {which}, over the size read: {', '.join(tree.too_large[:10])}",
            )  # fmt: skip
        for link in tree.links:
            self.notes.append(f"{link} is a link or a submodule at {which}: not read")

    def _ci_changes(
        self, base: CiTree, head: CiTree, head_flows: dict[str, Workflow]
    ) -> list[Change]:
        """Return each changed file that decides what runs in CI, with what changed."""
        changed = set(self.plan.changed_files)
        scripts = scripts_run(head_flows.values(), head.tracked)
        paths = sorted(p for p in changed if is_ci_path(p) or p in scripts)
        out = []
        for path in paths:
            yaml = is_workflow_path(path) or is_action_file(path)
            before = base.texts.get(path) if path in base.texts else self._text(base, path)
            after = head.texts.get(path) if path in head.texts else self._text(head, path)
            change = describe(path, before, after, yaml=yaml)
            if path in scripts:
                runs = "; ".join(scripts[path][:3])
                change = Change(
                    path, change.line, f"{change.detail}; run by CI ({runs})", change.unsaid
                )
            if change.unsaid:
                self.record.cut(
                    "workflow-change-phrases", dropped=change.unsaid,
                    kept=WORKFLOW_CHANGE_PHRASES, detail=f"the account of {path}",
                )  # fmt: skip
            out.append(change)
        return out

    def _text(self, tree: CiTree, path: str) -> str | None:
        return tree.read(self.git, self.clone, path)

    # ------------------------------------------------------------------ the audit

    def _introduced(
        self,
        base: dict[str, Workflow],
        head: dict[str, Workflow],
        changed: Iterable[Change],
    ) -> list[Hazard]:
        """Return the hazards of changed files at head that base does not have."""
        known = {h.key for wf in base.values() for h in hazards(wf)}
        paths = {c.path for c in changed}
        return [
            h
            for path, wf in sorted(head.items())
            if path in paths
            for h in hazards(wf)
            if h.key not in known
        ]

    def _audit(
        self,
        base: CiTree,
        head: CiTree,
        base_flows: dict[str, Workflow],
        head_flows: dict[str, Workflow],
    ) -> list[AuditFinding]:
        """Record zizmor's findings that head introduces; a failure is a cut, said."""
        binary = zizmor_binary()
        try:
            if binary is None:
                raise AuditError("zizmor is not installed beside the harness")
            said = version(binary)
            before = findings(audit(binary, base.texts, WORKFLOW_AUDIT_TIME), base_flows)
            after = findings(audit(binary, head.texts, WORKFLOW_AUDIT_TIME), head_flows)
        except AuditError as exc:
            self.record.cut(exc.limit, dropped=1, detail=str(exc))
            self.notes.append(f"zizmor did not audit: {exc}")
            return []
        self.notes.append(f"audited with {said} (offline, regular persona, no config)")
        new = introduced(before, after)
        for finding in new:
            self.record.observe(
                WORKFLOW_AUDIT, finding.detail(), path=finding.path, line=finding.line
            )
        return new

    # ------------------------------------------------------------------ the pull request as payload

    def _observe_sink(self, sink: Sink) -> None:
        for field in PR_FIELDS:
            if field not in sink.carries:
                continue
            self.record.observe(
                pr_sink(field, sink.context),
                f"{sink.path} ({', '.join(sink.triggers)}): step `{sink.step}` of job "
                f"`{sink.job}` pastes `${{{{ {sink.expression} }}}}`, the pull request's "
                f"{_SHOWN_FIELD[field]}, into its shell ({sink.context})",
                path=sink.path,
                line=sink.line,
            )

    def _commit_payload(self, sinks: list[Sink]) -> None:
        """Record where the head commit's message becomes shell code in a base workflow."""
        carrying = [s for s in sinks if "commits" in s.carries]
        if not carrying:
            return
        got = self.git.run("log", "-1", "--format=%B", self.plan.head_sha, cwd=self.clone)
        message = got.out.decode("utf-8", "replace").rstrip("\n") if got.code == 0 else ""
        for sink in carrying:
            found = shell_hazards(message, sink.context)
            if not found:
                continue
            shown = ", ".join(repr(m) for m in found)
            self.record.observe(
                WORKFLOW_INJECTION,
                f"{sink.path} ({', '.join(sink.triggers)}): step `{sink.step}` of job "
                f"`{sink.job}` pastes `${{{{ {sink.expression} }}}}` into its shell "
                f"({sink.context}), and this pull request's head commit message "
                f"{clip(repr(message), 300)} holds {shown} there: it becomes shell code in a "
                "job that holds the repository's secrets",
                path=sink.path,
                line=sink.line,
            )

    # ------------------------------------------------------------------ saying it

    def _summary(
        self,
        changed: list[Change],
        found: list[Hazard],
        sinks: list[Sink],
        audited: list[AuditFinding],
    ) -> str:
        parts = []
        if changed:
            parts.append(
                f"{len(changed)} file(s) deciding what runs in CI changed; "
                f"{len(found)} hazard(s) and {len(audited)} zizmor finding(s) introduced"
            )
        else:
            parts.append("the pull request changes nothing that runs in CI")
        if sinks:
            flows = len({s.path for s in sinks})
            parts.append(
                f"{flows} base workflow(s) with a privileged trigger paste this pull "
                f"request's text into a shell at {len(sinks)} place(s)"
            )
        return clip("; ".join(parts + self.notes), MAX_TEXT)


def review(plan: Plan, record: EvidenceRecord) -> tuple[Status, str]:
    """Run the workflows check on ``plan`` into ``record``; return its status and summary."""
    with tempfile.TemporaryDirectory(prefix="git-") as home:
        git = Git(git_env(Path(home)), WORKFLOW_GIT_TIME, shown=plan.repo, raw=plan.repo)
        try:
            return WorkflowsReview(plan, record, git).run()
        except PrepareError as exc:
            return "error", f"the CI files could not be read from git: {exc}"


if __name__ == "__main__":
    raise SystemExit(static_check_main("workflows", review))
