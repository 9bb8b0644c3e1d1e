"""One pass of the gate's reads against the loopback fake GitHub, through real PyGithub calls."""

from __future__ import annotations

from dataclasses import replace

from fakegithub import required_checks_rules
from fakegithub.merging import add_check_run, merge_queue_rule, push_head
from fakegithub.merging import merge_world as merging_of
from mergeworld import HEAD, NUMBER, REPO, MergeWorld, set_strict_rules

from app_relay.merge.gate import GateReading
from app_relay.merge.reading import read_gate


class StepClock:
    """A clock that moves only when the pass pauses (or by ``tick`` on every look)."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now = 1000.0
        self.tick = tick
        self.paused: list[float] = []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def pause(self, seconds: float) -> None:
        self.paused.append(seconds)
        self.now += seconds


def gate(w: MergeWorld, login: str = "maria", clock: StepClock | None = None) -> GateReading:
    c = clock or StepClock()
    return read_gate(w.gw, w.token(login), w.run, app_id=w.fake.app_id, clock=c, pause=c.pause)


def codes(reading: GateReading) -> list[str]:
    return [b.code for b in reading.blockers]


def test_a_ready_pull_request_reads_ready(merge_world: MergeWorld) -> None:
    reading = gate(merge_world)
    assert reading.ready, reading.blockers
    assert reading.head_sha == HEAD
    assert reading.base_sha == merge_world.fake.state.repos[REPO].branches["main"]
    assert reading.methods == ("merge", "squash", "rebase")
    assert not reading.queue
    assert reading.pull_node_id.startswith("PR_")
    # The person was asked about with their own token, the rest as the App.
    state = merge_world.fake.state
    assert [c.auth for c in state.calls("GET", r"^/user$")] == ["user:maria"]
    assert all(c.auth.startswith("installation:") for c in state.calls("GET", r"^/repos/"))


def test_nothing_is_cached_between_passes(merge_world: MergeWorld) -> None:
    gate(merge_world)
    gate(merge_world)
    state = merge_world.fake.state
    assert len(state.calls("GET", rf"^/repos/{REPO}/pulls/{NUMBER}$")) == 2
    assert len(state.calls("GET", rf"^/repos/{REPO}/rules/branches/main$")) == 2


def test_a_pushed_head_blocks_naming_the_new_head(merge_world: MergeWorld) -> None:
    new = push_head(merge_world.fake.state, REPO, NUMBER, "d" * 40)
    reading = gate(merge_world)
    assert codes(reading) == ["head-moved"]
    assert "`ddddddd`" in reading.blockers[0].words
    assert reading.head_sha == new


def test_mergeable_null_is_read_again_until_github_knows(merge_world: MergeWorld) -> None:
    state = merge_world.fake.state
    merging_of(state).pending[(REPO, NUMBER)] = 2  # as a push leaves it
    clock = StepClock()
    reading = gate(merge_world, clock=clock)
    assert reading.ready, reading.blockers
    assert len(state.calls("GET", rf"^/repos/{REPO}/pulls/{NUMBER}$")) == 3
    assert len(clock.paused) == 2


def test_mergeable_null_until_the_deadline_blocks_as_unknown(merge_world: MergeWorld) -> None:
    merging_of(merge_world.fake.state).pending[(REPO, NUMBER)] = 1_000
    clock = StepClock()
    reading = gate(merge_world, clock=clock)
    assert codes(reading) == ["mergeable-unknown"]
    assert sum(clock.paused) <= 6.0
    assert len(clock.paused) >= 3  # it did wait, within the deadline


def test_a_pass_that_runs_out_of_time_stops_and_blocks(merge_world: MergeWorld) -> None:
    reading = gate(merge_world, clock=StepClock(tick=1.0))
    assert codes(reading) == ["deadline"]
    # It stopped: the reads after the deadline were never made.
    assert merge_world.fake.state.calls("GET", rf"^/repos/{REPO}$") == []


def test_a_check_pinned_to_this_app_but_reported_by_another_blocks(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    state.repos[REPO].check_runs.clear()
    add_check_run(state, REPO, HEAD, "cujo/guard", app_id=31337)  # a workflow job, say
    add_check_run(state, REPO, HEAD, "ci", app_id=15368)
    reading = gate(merge_world)
    assert codes(reading) == ["check-pinned"]
    assert "`cujo/guard`" in reading.blockers[0].words


def test_a_failing_required_check_blocks(merge_world: MergeWorld) -> None:
    add_check_run(merge_world.fake.state, REPO, HEAD, "ci", app_id=15368, conclusion="failure")
    assert codes(gate(merge_world)) == ["check-failing"]


def test_no_strict_rule_and_no_queue_leaves_no_base_guard(merge_world: MergeWorld) -> None:
    set_strict_rules(merge_world.fake, strict=False)
    reading = gate(merge_world)
    assert codes(reading) == ["base-guard"]
    assert "require branches to be up to date, or a merge queue" in reading.blockers[0].words


def test_a_merge_queue_is_ready_to_enqueue(merge_world: MergeWorld) -> None:
    fake = merge_world.fake
    rules = required_checks_rules(
        REPO, {"context": "cujo/guard", "integration_id": fake.app_id}, strict=False
    )
    fake.state.set_rules(REPO, "main", [*rules, merge_queue_rule(REPO)])
    reading = gate(merge_world)
    assert reading.ready, reading.blockers
    assert reading.queue


def test_a_queue_rule_without_readable_parameters_is_unknown(merge_world: MergeWorld) -> None:
    fake = merge_world.fake
    queue = merge_queue_rule(REPO, method="OCTOPUS")
    fake.state.set_rules(REPO, "main", [*fake.state.repos[REPO].rules["main"], queue])
    assert codes(gate(merge_world)) == ["queue-unknown"]


def test_a_reader_is_refused(merge_world: MergeWorld) -> None:
    reading = gate(merge_world, "rita")
    assert codes(reading) == ["no-write"]
    assert "`read`" in reading.blockers[0].words


def test_the_author_without_write_is_refused(merge_world: MergeWorld) -> None:
    assert codes(gate(merge_world, "alice")) == ["no-write"]


def test_a_bot_is_refused_before_its_permission_is_read(merge_world: MergeWorld) -> None:
    reading = gate(merge_world, "helper[bot]")
    assert codes(reading) == ["bot"]
    assert merge_world.fake.state.calls("GET", "/collaborators/") == []
    assert merge_world.fake.state.calls("GET", rf"/pulls/{NUMBER}$") == []


def test_a_malformed_ruleset_blocks_as_unreadable(merge_world: MergeWorld) -> None:
    merge_world.fake.state.set_rules(REPO, "main", [{"type": "required_status_checks"}])
    reading = gate(merge_world)
    assert codes(reading) == ["unreadable"]
    assert "parameters" in reading.blockers[0].words
    assert "rulesets" in reading.blockers[0].words


def test_a_failed_read_blocks_naming_it(merge_world: MergeWorld) -> None:
    merge_world.fake.state.fail_next(3, status=502, path=r"/commits/[0-9a-f]+/status$")
    reading = gate(merge_world)
    assert codes(reading) == ["unreadable"]
    assert "commit statuses" in reading.blockers[0].words


def test_a_dismissed_block_may_merge_but_a_reinstated_one_may_not(merge_world: MergeWorld) -> None:
    lifted = replace(merge_world.run, state="dismissed", lifted="blocked")
    clock = StepClock()
    reading = read_gate(
        merge_world.gw, merge_world.token("maria"), lifted, app_id=merge_world.fake.app_id,
        clock=clock, pause=clock.pause,
    )  # fmt: skip
    assert reading.ready
    back = replace(lifted, state="blocked")
    reading = read_gate(
        merge_world.gw, merge_world.token("maria"), back, app_id=merge_world.fake.app_id,
        clock=clock, pause=clock.pause,
    )  # fmt: skip
    assert codes(reading) == ["verdict"]


def test_rules_changed_between_two_passes_are_seen_by_the_second(merge_world: MergeWorld) -> None:
    """Each pass reads GitHub anew: a ruleset loosened after the first pass blocks the second."""
    fake = merge_world.fake
    fake.state.after_request(
        lambda: set_strict_rules(fake, strict=False),
        method="GET",
        path=rf"^/repos/{REPO}/rules/branches/main$",
    )
    assert gate(merge_world).ready
    assert codes(gate(merge_world)) == ["base-guard"]


def test_a_base_branch_that_cannot_be_read_blocks(merge_world: MergeWorld) -> None:
    merge_world.fake.state.fail_next(
        3, status=502, method="GET", path=rf"^/repos/{REPO}/branches/main$"
    )
    reading = gate(merge_world)
    assert codes(reading) == ["unreadable"]
    assert "the base branch" in reading.blockers[0].words
    assert reading.base_sha == ""
