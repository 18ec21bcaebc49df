"""How a multi-node job's progress is read from its nodes (launchpad.vm_progress). The same path end to end,
with a real full disk on one of two SSH hosts: tests/providers/ssh/test_ssh_node_failure.py."""

from __future__ import annotations

from launchpad.models import JobProgress
from launchpad.vm_progress import PEER_END_GRACE_S, NodeReport, job_progress

TRAINING = JobProgress(phase="training", step=7, running=True)
FULL = JobProgress(phase="failed", running=False, exit_code=1, error="disk full: No space left on device writing x")


def test_a_node_that_ended_badly_ends_the_job_once_rank_0_had_time_to_report_a_cause_of_its_own() -> None:
    late = job_progress(TRAINING, [("node 1 (b)", NodeReport(FULL, ended_s=PEER_END_GRACE_S + 1))])
    assert not late.running and late.phase == "failed" and late.exit_code == 1 and late.step == 7
    # the cause comes first, as the lifecycle reads it ("disk full: ..." fails the job rather than retrying it)
    assert late.error == "disk full: No space left on device writing x (on node 1 (b), while rank 0 was training)"
    assert job_progress(TRAINING, [("node 1 (b)", NodeReport(FULL, ended_s=3.0))]) == TRAINING  # too soon


def test_rank_0_speaks_for_the_job_otherwise() -> None:
    old = PEER_END_GRACE_S * 10
    done = JobProgress(phase="done", running=False, exit_code=0)
    pending = JobProgress()
    for peer in (None, NodeReport(done, ended_s=old), NodeReport(pending), NodeReport(TRAINING)):
        assert job_progress(TRAINING, [("node 1 (b)", peer)]) == TRAINING, peer
    ended = JobProgress(phase="failed", running=False, exit_code=1, error="CUDA out of memory")
    assert job_progress(ended, [("node 1 (b)", NodeReport(FULL, ended_s=old))]) == ended  # rank 0's own cause


def test_an_interruption_or_a_killed_agent_elsewhere_ends_the_job_too() -> None:
    old = PEER_END_GRACE_S + 5
    notice = JobProgress(phase="interrupted", running=False, exit_code=0, error="spot notice: saved at step 6")
    p = job_progress(TRAINING, [("node 1 (b)", None), ("node 2 (c)", NodeReport(notice, ended_s=old))])
    assert p.phase == "interrupted" and not p.running and "on node 2 (c)" in (p.error or "")  # the lifecycle resumes
    killed = JobProgress(phase="training", running=False, exit_code=-9)
    p = job_progress(TRAINING, [("node 1 (b)", NodeReport(killed, ended_s=old))])
    assert (p.phase, p.exit_code, p.error) == ("failed", -9, "its trainer exited with code -9 (on node 1 (b), "
                                                              "while rank 0 was training)")
