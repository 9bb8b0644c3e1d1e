"""Name every cap on evidence, and what happens when one is reached.

A limit reached is itself evidence (docs/design.md section 6.6, the evidence rules). Each cap the
sandbox puts on what it records lives here once, with: what is kept first when it is
reached (evidence that carries a decoy or would trigger a rule is never the part
dropped), what is counted and named (a ``Cut`` in the report: which limit, how much was
dropped, ``evidence_complete: false``), and the verdict's answer:

* ``hides_danger``: what the cap dropped could have been dangerous, so the check is
  ``unproven`` naming the limit (``app_relay/decide/judge.py``). A cap whose dropped part
  is known to be harmless (lines the rules cannot tell apart from one that was kept)
  is named in the report and changes nothing else.
* ``flood``: reaching it is abnormal in itself (thousands of look-ups, readers or
  processes): the rule ``evidence-flood`` makes it a finding, critical during install
  and import, a warning later.

Pure data, no I/O: the harness (which enforces the caps) and the relay (which reads the
cuts) import it, through ``schema``. ``docs/limits.md`` says the same for people.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

MiB: Final = 1024 * 1024

LimitId = Literal[
    "report-bytes",
    "report-egress",
    "report-decoy-events",
    "decoy-readers",
    "report-observations",
    "report-commands",
    "report-field",
    "output-tail",
    "output-flood",
    "output-search",
    "file-command-read",
    "persistence-walk",
    "persistence-text",
    "body-size",
    "decode-depth",
    "decode-budget",
    "inflate-size",
    "tunnel-peek",
    "dns-reassembly",
    "dns-streams",
    "egress-log-copy",
    "egress-digest",
    "egress-log-line",
    "refused-packets",
    "watcher-queue",
    "exec-guard-queue",
    "harness-process",
    "harness-stop",
    "detonation-imports",
    "detonation-own-imports",
    "checkout-entries-read",
    "probe-count",
    "date-gate-read",
    "command-timeout",
    "dns-distinct",
    "record-read",
    "report-read",
    "sink-head",
    "answer-peek",
    "answer-body",
    "answer-echo",
    "workflow-files",
    "workflow-file-size",
    "workflow-audit",
    "workflow-audit-output",
    "workflows-check-time",
    "workflow-change-phrases",
    "workflow-jobs",
    "workflow-steps",
    "workflow-step-time",
    "workflow-job-time",
    "workflow-run-time",
    "workflow-expression",
]
LIMIT_IDS: Final[tuple[str, ...]] = get_args(LimitId)


@dataclass(frozen=True)
class Limit:
    """One cap on evidence: its size, where it is enforced, and what reaching it does."""

    id: LimitId
    value: int
    unit: str
    where: str  # the module that enforces it
    what: str  # what is capped
    kept_first: str  # what survives the cap, most important first
    when_reached: str  # what is counted and named
    hides_danger: bool  # a cut makes the check unproven
    flood: bool = False  # reaching it is evidence-flood


# Report sizes (schema.py): what the relay accepts of one report.
REPORT_BYTES: Final = 4 * MiB
REPORT_EGRESS: Final = 500
REPORT_DECOY_EVENTS: Final = 500
REPORT_OBSERVATIONS: Final = 500
REPORT_COMMANDS: Final = 50
# A harness process told to stop (helper_processes.StopClock) is waited for while it
# works: killed past this much of its CPU, or under this share of a core over the window
# (it ticks but does not work), or past the clock's ceiling. Never by the clock alone
# while it works: on a loaded machine a search under way gets a few percent of a core.
HARNESS_STOP_CPU: Final = 120
HARNESS_STOP_WINDOW: Final = 60
HARNESS_STOP_SHARE_PERCENT: Final = 1
HARNESS_STOP_CLOCK: Final = 900
# Every process that opened or read a decoy, kept beyond the events for correlation.
DECOY_READERS: Final = 8192
# Failing tests a failed suite names (checks/failures.py): the first in the runner's order,
# each cut to its first characters; past the count the rest is one "K more, not named"
# observation, compared with the base's as a count. Named only: the tests-fail finding
# is a warning whatever it holds, and never blocks.
FAILING_TESTS_NAMED: Final = 100
FAILING_TEST_NAME: Final = 300
# Git submodules a plan names (prepare/submodules.py): the first, "and K more".
SUBMODULES_NAMED: Final = 5
# Git submodules a checkout fetches (prepare/submodules.py), in path order; the rest are
# named as left out past the cap. It fetches test data, no evidence.
SUBMODULES_FETCHED: Final = 16
# Environment names a tox `env_list` expands to (prepare/toxenvs.py): the first, in tox's
# order; a list past it chooses among those, and the plan's notes say so. It chooses the
# test command, no evidence.
TOX_ENV_NAMES: Final = 512
# What a command printed: the tail kept in the report, the whole stream searched.
OUTPUT_TAIL: Final = 8_000
OUTPUT_FLOOD: Final = 64 * MiB
# What one file a step leaves for the runner (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT…) is
# read of, after each command, to search and judge: GitHub shows a summary only up to
# 1 MiB, so a bigger file is already odd.
FILE_COMMAND_READ: Final = 8 * MiB
# The generic walk for new files that run later (the execution points are enumerated
# directly, without a cap).
PERSISTENCE_WALK: Final = 50_000
PERSISTENCE_TEXT: Final = 64 * 1024
# Bodies: what the proxy holds of one request (the rest is refused), how deep encodings
# are undone, how much decoded data one input may produce, one decompression's output.
BODY_SIZE: Final = 64 * MiB
DECODE_DEPTH: Final = 6
DECODE_BUDGET: Final = 256 * MiB
INFLATE_SIZE: Final = 64 * MiB
TUNNEL_PEEK: Final = 1 * MiB
# DNS: the labels kept per process and parent domain to search reassembled (dns/flow.py),
# and how many such streams are followed at once (the latest used).
DNS_REASSEMBLY: Final = 16 * 1024
DNS_STREAMS: Final = 512
# Bounds whose reaching drops no evidence, only makes Cujo more suspicious or refuses:
# new DNS data strings remembered per stream (past it a repeat counts as new), bytes of a
# RECORD read to excuse an install's own .pth, the largest report read at all, and the
# request head the proxy's own answering server reads.
DNS_DISTINCT: Final = 4096
RECORD_READ: Final = 8 * MiB
REPORT_READ: Final = 4 * REPORT_BYTES
SINK_HEAD: Final = 1 * MiB
# The proxy's answers to sunk requests (net/lookalike/): the bytes of a request's body an
# answer reads (a worm's new repository name, a gist's files), and the largest answer.
ANSWER_PEEK: Final = 16 * 1024
ANSWER_BODY: Final = 256 * 1024
# What a look-alike answer echoes of a request's content (a gist's files), in all: the
# first bytes, in the request's order. It shapes the made-up answer only; the request
# itself is logged and searched whole (no evidence is cut).
ANSWER_ECHO: Final = 8 * 1024
# Coverage: modules (or npm dependencies) detonation imports; probes of the changed code.
DETONATION_IMPORTS: Final = 25
# The changed modules and the project's own distribution's, imported by detonation before
# any dependency: past this, what is left out may be the danger (the check is unproven).
DETONATION_OWN_IMPORTS: Final = 200
# Entries of a checkout folder (its root, src/) read for the project's own module names:
# past it the rest count as dependencies (imported to DETONATION_IMPORTS), and the check
# says so in an observation. It chooses an order, no evidence.
CHECKOUT_ENTRIES_READ: Final = 10_000
PROBE_COUNT: Final = 30
# What of one changed source file the search for date gates reads (checks/dategates.py).
DATE_GATE_READ: Final = 1 * MiB
EGRESS_LOG_COPY: Final = 8 * MiB
# The workflows check: the files that decide what runs in CI read at each commit (from git
# objects), the bytes read of each, and the time zizmor has to audit one commit's files.
WORKFLOW_FILES: Final = 300
WORKFLOW_FILE_SIZE: Final = 1 * MiB
WORKFLOW_AUDIT_TIME: Final = 120
# What zizmor may print as findings on one commit's files (its JSON), read whole.
WORKFLOW_AUDIT_OUTPUT: Final = 32 * MiB
# The time one git command of the workflows check may take, and the check's own process:
# reading git objects and the two audits (base and head).
WORKFLOW_GIT_TIME: Final = 120
WORKFLOWS_CHECK_TIME: Final = WORKFLOW_GIT_TIME + 2 * WORKFLOW_AUDIT_TIME
# The phrases one changed CI file's account (the workflow-change finding) lists.
WORKFLOW_CHANGE_PHRASES: Final = 8
# The changed jobs that run after the merge, run in the smoke check's sandbox
# (checks/workflow_runner.py): how many jobs per review, steps per job, and the time one
# step, one job and all of them may take.
WORKFLOW_JOBS: Final = 8
WORKFLOW_STEPS: Final = 40
WORKFLOW_STEP_TIME: Final = 300
WORKFLOW_JOB_TIME: Final = 600
WORKFLOW_RUN_TIME: Final = 900
# The egress log is read as a stream (egressdigest.py), keeping per check one digest of
# each kind of line the rules cannot tell apart: at most this many kinds. A whole record
# with a kind of its own takes at least 180 bytes, so only a log of 11 MiB or more for
# one check alone can reach it, never one the bundle's copy holds whole.
EGRESS_DIGEST: Final = 65_536
# One line of the egress log as read: the harness writes lines of a few KiB at most.
EGRESS_LOG_LINE: Final = 1 * MiB
REFUSED_PACKETS: Final = 50


LIMITS: Final[dict[str, Limit]] = {
    limit.id: limit
    for limit in (
        Limit(
            "report-bytes", REPORT_BYTES, "bytes", "cujo_action/evidence/reportfit.py",
            "one report as JSON",
            "decoy events, observations and decoy-bearing requests, never trimmed; then "
            "critical-making, warn-making and last expected requests; output tails",
            "trimmed at write time from expected requests, output tails, readers' paths, "
            "warn- then critical-making requests, decoy readers (hides danger only from "
            "warn-making on); the reader reads an over-size report whose hash matches, "
            "clipping what is over a cap, never refusing it",
            hides_danger=True,
        ),
        Limit(
            "report-egress", REPORT_EGRESS, "entries", "cujo_action/evidence/bundle.py",
            "egress entries in one report",
            "decoy-bearing lines, then by egress_rank (critical-making before warn-making "
            "before expected); forwarded registry reads folded per host and phase",
            "lines the rules cannot tell apart are folded; what is still over is dropped "
            "from the least telling end and counted",
            hides_danger=True,
            flood=True,
        ),
        Limit(
            "report-decoy-events", REPORT_DECOY_EVENTS, "entries",
            "cujo_action/checks/decoy_record.py",
            "decoy events in one report",
            "writes, deletes and the first access of each file, kind and phase; repeated "
            "readers fill at most half",
            "the rest are counted; every reader's pid stays in decoy_readers",
            hides_danger=False,
            flood=True,
        ),
        Limit(
            "decoy-readers", DECOY_READERS, "processes", "cujo_action/watch/watcher.py",
            "processes kept as decoy readers for correlation",
            "the earliest readers",
            "counted; the check is unproven (a sender may be among the dropped)",
            hides_danger=True,
            flood=True,
        ),
        Limit(
            "report-observations", REPORT_OBSERVATIONS, "entries",
            "cujo_action/checks/evidence_record.py",
            "observations in one report",
            "kinds a rule acts on before notes",
            "counted and named",
            hides_danger=True,
            flood=True,
        ),
        Limit(
            "report-commands", REPORT_COMMANDS, "entries", "cujo_action/checks/harness.py",
            "commands listed in one report",
            "the first commands (the plan's own)",
            "counted; their output is still searched",
            hides_danger=False,
        ),
        Limit(
            "report-field", 2_000, "bytes of JSON", "cujo_action/schema.py clip",
            "one string in a report (an executable, a command line, a URL); a control "
            "character costs six bytes; procinfo clips a process's names tighter",
            "the head of the value, marked cut",
            "clipped at write time, counted in one cut per report",
            hides_danger=False,
        ),
        Limit(
            "output-tail", OUTPUT_TAIL, "characters", "cujo_action/sandbox/output.py",
            "a command's output kept in the report",
            "the tail",
            "output_truncated on the command; the whole stream is still searched for decoys",
            hides_danger=False,
        ),
        Limit(
            "output-flood", OUTPUT_FLOOD, "bytes", "cujo_action/sandbox/output.py",
            "a command's output (each stream)",
            "everything up to the cap, searched for decoys as it arrived",
            "the command is killed, the check is an error and the cut is named",
            hides_danger=True,
        ),
        Limit(
            "output-search", OUTPUT_FLOOD, "bytes", "cujo_action/sandbox/output.py",
            "output searched for decoys, in overlapping 1 MiB windows",
            "every byte up to the flood cap; each window within the decode budget",
            "bytes of a window whose decoding ran out of budget (or a stream still being "
            "drained when the command ended) are counted; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "file-command-read", FILE_COMMAND_READ, "bytes", "cujo_action/watch/filecommands.py",
            "one file a step leaves for the runner (summary, outputs, state, env, path), read "
            "as root after each command",
            "the file's head, searched for decoys and judged",
            "the rest is not read, counted and named once per file; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "persistence-walk",
            PERSISTENCE_WALK,
            "entries",
            "cujo_action/watch/persistence_scan.py",
            "entries the generic walk for new files that run later looks at (the places "
            "walked whole, and the folders searched for virtual environments)",
            "the execution points, enumerated directly and never capped",
            "counted and named",
            hides_danger=True,
            flood=True,
        ),
        Limit(
            "persistence-text", PERSISTENCE_TEXT, "bytes", "cujo_action/watch/persistence_scan.py",
            "a file judged by its content (a git config, an npmrc)",
            "the file's head",
            "counted and named",
            hides_danger=True,
        ),
        Limit(
            "body-size", BODY_SIZE, "bytes", "cujo_action/net/proxy/spool.py",
            "one request body the proxy stores (streamed to its own disk) and searches",
            "the whole body up to the cap, streamed to disk, searched in windows",
            "the rest is read and dropped; the request is logged unsearched "
            "(unsearched-egress to an unexpected host), a sunk one answered 413 at once",
            hides_danger=True,
        ),
        Limit(
            "decode-depth", DECODE_DEPTH, "layers", "cujo_action/find/unwrap.py",
            "encodings undone one inside another",
            "every layer up to the depth",
            "a layer with more to peel at the depth is unsearched",
            hides_danger=True,
        ),
        Limit(
            "decode-budget", DECODE_BUDGET, "bytes", "cujo_action/find/unwrap.py",
            "decoded bytes one input may produce",
            "every layer, searched in windows",
            "what is left is unsearched",
            hides_danger=True,
        ),
        Limit(
            "inflate-size", INFLATE_SIZE, "bytes", "cujo_action/find/inflate.py",
            "what one compressed stream inflates to",
            "the stream's head",
            "the rest is unsearched",
            hides_danger=True,
        ),
        Limit(
            "tunnel-peek", TUNNEL_PEEK, "bytes", "cujo_action/net/proxy/addon.py",
            "bytes of a tunnel that carried no readable request",
            "the first bytes",
            "the tunnel is refused and logged with what was kept",
            hides_danger=False,
        ),
        Limit(
            "dns-reassembly", DNS_REASSEMBLY, "bytes", "cujo_action/net/dns/flow.py",
            "labels kept per process and parent domain for reassembly",
            "the latest labels (each query's data is searched as it arrives, so only a "
            "re-reading after the zone's labels change is bounded by it)",
            "older labels leave the window",
            hides_danger=False,
        ),
        Limit(
            "dns-streams", DNS_STREAMS, "streams", "cujo_action/net/dns/flow.py",
            "query streams (per label, process and parent domain; per process across "
            "parent domains) followed at once",
            "the latest used streams",
            "the least recently used stream is forgotten, with its window and tunnel count; "
            "a later query continuing a forgotten stream is logged unsearched "
            "(unsearched-egress to an unexpected host)",
            hides_danger=True,
        ),
        Limit(
            "egress-log-copy", EGRESS_LOG_COPY, "bytes", "cujo_action/evidence/bundle.py",
            "the raw egress log copied into the bundle",
            "the head of the log; the reports and the job log's record hold the rest",
            "the seal names the log's full size",
            hides_danger=False,
        ),
        Limit(
            "egress-digest",
            EGRESS_DIGEST,
            "kinds of lines",
            "cujo_action/evidence/egressdigest.py",
            "kinds of egress log lines (alike to the rules, or one decoy-bearing line each) "
            "digested per check while the log streams",
            "decoy-bearing and rule-triggering lines (by egress_rank), then the earliest",
            "the least telling kinds are only counted, into the report-egress cut; if "
            "decoy-bearing lines alone are over it, they are counted and the cut says so",
            hides_danger=True,
            flood=True,
        ),
        Limit(
            "egress-log-line", EGRESS_LOG_LINE, "bytes", "cujo_action/net/egress.py",
            "one line of the egress log as read",
            "the lines within it",
            "the line is skipped unread and counted; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "refused-packets", REFUSED_PACKETS, "entries", "cujo_action/checks/evidence_record.py",
            "refused packets listed per namespace",
            "the first ones",
            "counted",
            hides_danger=False,
        ),
        Limit(
            "watcher-queue", 0, "events", "cujo_action/watch/watcher.py",
            "the kernel's fanotify queue",
            "what the kernel delivered",
            "an overflow is named; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "exec-guard-queue", 0, "events", "cujo_action/watch/execguard.py",
            "the exec guard's queue",
            "what the kernel delivered",
            "lost events are named; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "harness-process", 0, "processes", "cujo_action/evidence/bundle.py",
            "the harness's own processes (proxy, resolver) staying up",
            "what they logged before they died",
            "named; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "harness-stop", HARNESS_STOP_CLOCK, "seconds",
            "cujo_action/sandbox/helper_processes.py",
            "how long a harness process told to stop (the proxy finishing a search, the "
            f"resolver) is waited for while it works; also {HARNESS_STOP_CPU} CPU-seconds, "
            f"under {HARNESS_STOP_SHARE_PERCENT}% of a core over "
            f"{HARNESS_STOP_WINDOW} seconds, or 5 seconds without any CPU",
            "every line it wrote before",
            "it is killed and the run says what it was still writing is not in its log: "
            "the evidence is not whole and the review ends in error",
            hides_danger=True,
        ),
        Limit(
            "detonation-imports", DETONATION_IMPORTS, "modules", "cujo_action/checks/detonation.py",
            "dependencies' top-level modules (or npm dependencies) imported by detonation, "
            "after the project's own",
            "the first by name (npm: in package.json's order)",
            "the rest are not imported, counted in a cut (the install itself ran them all)",
            hides_danger=False,
        ),
        Limit(
            "detonation-own-imports", DETONATION_OWN_IMPORTS, "modules",
            "cujo_action/checks/detonation.py",
            "the changed modules and the project's own distribution's (npm: the package's "
            "entry points), imported or loaded by detonation",
            "the changed modules, then the project's own, by name",
            "those left out are named; the check is unproven (what was not imported may be "
            "the danger)",
            hides_danger=True,
        ),
        Limit(
            "probe-count", PROBE_COUNT, "probes", "cujo_action/checks/probes.py",
            "probes run on the changed code",
            "imports of changed modules, then changed entry points and scripts",
            "the rest are not run, counted in a cut",
            hides_danger=False,
        ),
        Limit(
            "date-gate-read", DATE_GATE_READ, "bytes", "cujo_action/checks/dategates.py",
            "one changed source file searched for a comparison of the clock with a fixed date",
            "the file's head",
            "the rest is not searched, counted in a cut naming the file (the search only "
            "makes a warning visible; it proves nothing clean)",
            hides_danger=False,
        ),
        Limit(
            "command-timeout", 0, "seconds", "cujo_action/checks/harness.py",
            "a command's time (the policy's timeouts)",
            "what it did before it was killed",
            "the command says timed_out; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "dns-distinct", DNS_DISTINCT, "strings", "cujo_action/net/dns/flow.py",
            "new data strings remembered per DNS stream for tunnel counting",
            "the first distinct strings",
            "past it a repeat counts as new: a tunnel is only likelier, nothing is dropped",
            hides_danger=False,
        ),
        Limit(
            "record-read", RECORD_READ, "bytes", "cujo_action/watch/persistence_scan.py",
            "a distribution's RECORD read to excuse an install's own .pth",
            "the RECORD's head",
            "names past it stay unexcused, so a startup file among them is reported; a cut "
            "names the RECORD",
            hides_danger=False,
        ),
        Limit(
            "report-read", REPORT_READ, "bytes", "cujo_action/evidence/reportfit.py",
            "the largest report the relay reads at all (four times what a writer makes)",
            "nothing: such a report is no harness's",
            "the bundle is refused and the relay decides from the job log's record (a decoy "
            "there blocks)",
            hides_danger=True,
        ),
        Limit(
            "sink-head", SINK_HEAD, "bytes", "cujo_action/net/proxy/sink.py",
            "a request head the proxy's own answering server reads (mitmproxy parsed it first)",
            "the whole head (mitmproxy already logged and searched the request)",
            "the sink closes the connection; the request's log line is already written",
            hides_danger=False,
        ),
        Limit(
            "answer-peek", ANSWER_PEEK, "bytes", "cujo_action/net/proxy/addon.py",
            "the head of a sunk request's body the proxy's answer reads (a new repository's "
            "name, a gist's files), held in memory; the whole body is still spooled and searched",
            "the body's first bytes",
            "the answer is built from what was read: names and echoed content past it are "
            "left out, a blob's sha is made up; nothing of the evidence changes",
            hides_danger=False,
        ),
        Limit(
            "answer-echo", ANSWER_ECHO, "bytes", "cujo_action/net/lookalike/github_base.py",
            "what a look-alike answer echoes of a request's content (a gist's files), in all",
            "the first bytes, in the request's order",
            "the made-up answer echoes less; the request itself is logged and searched whole",
            hides_danger=False,
        ),
        Limit(
            "checkout-entries-read", CHECKOUT_ENTRIES_READ, "entries",
            "cujo_action/checks/detonation.py",
            "entries of a checkout folder (its root, src/) read for the project's own module names",
            "the first entries listed",
            "the rest count as dependencies (imported up to detonation-imports); the check "
            "says so in an observation",
            hides_danger=False,
        ),
        Limit(
            "answer-body", ANSWER_BODY, "bytes", "cujo_action/net/lookalike/pick.py",
            "one answer the proxy gives a sunk request (GitHub's JSON, a plain server's page)",
            "the whole answer (echoes are clipped well under it)",
            "the answer is the service's own 500 instead; the request's log line is unchanged",
            hides_danger=False,
        ),
        Limit(
            "workflow-files", WORKFLOW_FILES, "files", "cujo_action/checks/ci_files.py",
            "files that decide what runs in CI (under .github/, action.yml anywhere) read at "
            "one commit",
            "workflows first, then actions, then the rest, each by path",
            "the rest are not read (their names are counted in a cut); the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-file-size", WORKFLOW_FILE_SIZE, "bytes", "cujo_action/checks/ci_files.py",
            "one CI file read from git",
            "nothing: a file past it is not parsed, only named",
            "the file is named in a cut; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-audit", WORKFLOW_AUDIT_TIME, "seconds", "cujo_action/checks/zizmor_audit.py",
            "zizmor's audit of one commit's CI files (a failure to run it is cut the same way)",
            "the workflows check's own reading of the YAML, which every critical workflow rule "
            "rests on",
            "zizmor's findings are missing, named in a cut; the verdict stands on the rules",
            hides_danger=False,
        ),
        Limit(
            "workflow-audit-output", WORKFLOW_AUDIT_OUTPUT, "bytes",
            "cujo_action/checks/zizmor_audit.py",
            "zizmor's findings on one commit's CI files, as JSON",
            "the workflows check's own reading of the YAML, which every critical workflow rule "
            "rests on",
            "none of that commit's zizmor findings are read, named in a cut; the verdict "
            "stands on the rules",
            hides_danger=False,
        ),
        Limit(
            "workflows-check-time", WORKFLOWS_CHECK_TIME, "seconds",
            "cujo_action/checks/processes.py",
            "the workflows check's process (reading the CI files from git and auditing them "
            "at base and at head)",
            "nothing of the check's own: it is killed with what it started",
            "an error report stands in its place, saying it wrote none; the workflows check "
            "is unproven (the changed jobs still run in the smoke check)",
            hides_danger=True,
        ),
        Limit(
            "workflow-change-phrases", WORKFLOW_CHANGE_PHRASES, "phrases",
            "cujo_action/checks/workflow_changes.py",
            "what one changed CI file's `workflow-change` account lists (triggers, "
            "permissions, jobs, moved actions, steps)",
            "the first phrases: triggers, permissions and jobs before moved actions and steps",
            "the account ends with how many more there are, and a cut counts them (the file "
            "is listed all the same, and the diff shows every change)",
            hides_danger=False,
        ),
        Limit(
            "workflow-jobs", WORKFLOW_JOBS, "jobs", "cujo_action/checks/workflow_runner.py",
            "changed jobs that run after the merge, run in one review",
            "the jobs in the order of their files' paths and of the jobs in each file",
            "the rest are not run, each named in the cut; the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-steps", WORKFLOW_STEPS, "steps", "cujo_action/checks/workflow_runner.py",
            "steps of one job run",
            "the job's first steps, in order",
            "the later steps are not run (counted in the cut); the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-step-time", WORKFLOW_STEP_TIME, "seconds",
            "cujo_action/checks/workflow_runner.py",
            "one workflow step's run (less when the job's or the run's time is nearly spent)",
            "what the step did until then (its egress, output and file commands are searched)",
            "the step is killed (a `timeout` observation) and the job goes on as a failed step "
            "would; the check is unproven (a payload may wait past it)",
            hides_danger=True,
        ),
        Limit(
            "workflow-job-time", WORKFLOW_JOB_TIME, "seconds",
            "cujo_action/checks/workflow_runner.py",
            "one job's steps together",
            "the job's first steps",
            "the steps left are not run (counted in the cut); the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-run-time", WORKFLOW_RUN_TIME, "seconds",
            "cujo_action/checks/workflow_runner.py",
            "all the workflow jobs of one review together",
            "the first jobs",
            "the jobs left are not run (named in the cut); the check is unproven",
            hides_danger=True,
        ),
        Limit(
            "workflow-expression", 0, "expressions", "cujo_action/checks/workflow_expr.py",
            "`${{ }}` expressions of a run step, its env or its `if:` that Cujo does not "
            "evaluate (a function or context outside its subset)",
            "every expression it evaluates; the step still runs with '' in the place of each "
            "one it does not (an `if:` it cannot read counts as `success()`)",
            "each is named in the cut with why; the check is unproven",
            hides_danger=True,
        ),
    )
}  # fmt: skip

assert set(LIMITS) == set(LIMIT_IDS), "every LimitId has one Limit"


def table() -> str:
    """Return every limit as the Markdown table ``docs/limits.md`` shows."""
    rows = [
        "| Limit | Value | Enforced in | What is capped | Kept first | When reached | Verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for limit in LIMITS.values():
        value = "(not a fixed number)" if limit.value == 0 else f"{limit.value:,} {limit.unit}"
        verdict = "unproven" if limit.hides_danger else "named only"
        if limit.flood:
            verdict += ", `evidence-flood`"
        cells = [f"`{limit.id}`", value, f"`{limit.where}`", limit.what, limit.kept_first,
                 limit.when_reached, verdict]  # fmt: skip
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
