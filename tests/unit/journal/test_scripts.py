"""The script kept with each dispatch (journal/scripts.py): copied before the row, read by every submit, removed
once the dispatch is final."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fellows_fsm import Config, FakeScheduler, Fellows, JobSpec, SlurmSettings, UsageError
from fellows_fsm.config.file import RouterConfig
from fellows_fsm.journal.scripts import MAX_SCRIPT_BYTES, ORPHAN_AGE_SECONDS, SCRIPTS, keep_script, sweep_scripts


def test_the_kept_copy_is_what_every_submit_reads(tmp_path: Path) -> None:
    """keep_script copies the script into the state dir; the spec reads the copy, whatever becomes of the original."""
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\necho original\n", encoding="utf-8")
    kept = keep_script(tmp_path / "state", "abc123", JobSpec("train", str(script), gpus=8))
    assert kept.script == str(script)
    assert kept.script_file == str(tmp_path / "state" / "scripts" / "abc123" / "train.sbatch")
    script.write_text("#!/bin/bash\necho edited\n", encoding="utf-8")
    script.unlink()
    assert Path(kept.script_file).read_text(encoding="utf-8") == "#!/bin/bash\necho original\n"


def test_a_script_over_sbatchs_limit_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    """A script over 4 MB: one usage line naming it, and no copy left in the state dir."""
    script = tmp_path / "huge.sbatch"
    script.write_bytes(b"#" * (MAX_SCRIPT_BYTES + 1))
    with pytest.raises(UsageError, match=r"huge.sbatch is over sbatch's 4 MB limit"):
        keep_script(tmp_path / "state", "abc123", JobSpec("train", str(script)))
    assert not (tmp_path / "state" / "scripts" / "abc123").exists()


def test_a_submit_keeps_the_script_until_the_dispatch_is_final(tmp_path: Path) -> None:
    """Fellows.submit journals the spec with its kept copy; the copy stays while the job runs (followed) and goes
    once it ended (final)."""
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\nsleep 1\n", encoding="utf-8")
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=60, poll_interval_seconds=5),
        router=RouterConfig(follow_interval_seconds=0.001),
        state_dir=tmp_path / "state",
    )
    fake = FakeScheduler(total_gpus=64)
    with Fellows(config, scheduler=fake) as fellows:
        handle = fellows.submit(JobSpec("train", str(script), gpus=8), check=False).handle
        [job] = fake.jobs.values()
        kept = tmp_path / "state" / "scripts" / handle.dispatch_id / "train.sbatch"
        assert job.spec.script_file == str(kept)
        assert kept.read_text(encoding="utf-8") == "#!/bin/bash\nsleep 1\n"
        fake.start(job.job_id)
        fellows.poll()
        assert fellows.handle(handle.dispatch_id).state == "RUNNING"
        assert kept.exists()
        fake.end(job.job_id)
        fellows.poll()
        assert fellows.handle(handle.dispatch_id).state == "ENDED"
    assert not kept.parent.exists()


def test_a_driver_start_sweeps_copies_no_dispatch_will_submit(tmp_path: Path) -> None:
    """At a restart, a final dispatch's copy and an old copy with no row go; a live one's and a young orphan stay."""
    state = tmp_path / "state"
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\nsleep 1\n", encoding="utf-8")
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=60, poll_interval_seconds=5),
        router=RouterConfig(follow_interval_seconds=0.001),
        state_dir=state,
    )
    fake = FakeScheduler(total_gpus=64)
    with Fellows(config, scheduler=fake) as fellows:
        live = fellows.submit(JobSpec("live", str(script), gpus=8), check=False).handle.dispatch_id
        ended = fellows.submit(JobSpec("ended", str(script), gpus=8), check=False).handle.dispatch_id
        job = next(j.job_id for j in fake.jobs.values() if j.spec.name == "ended")
        fake.start(job)
        fellows.poll()
        fake.end(job)
        fellows.poll()
        assert fellows.handle(ended).state == "ENDED"
    # What a process killed at the wrong moment leaves: a final dispatch's copy, a submit's copy with no row.
    for name in (ended, "0123456789ab", "ba9876543210"):
        (state / SCRIPTS / name).mkdir(parents=True, exist_ok=True)
        (state / SCRIPTS / name / "train.sbatch").write_text("x", encoding="utf-8")
    old = time.time() - ORPHAN_AGE_SECONDS - 60
    os.utime(state / SCRIPTS / "0123456789ab", (old, old))
    with Fellows(config, scheduler=fake) as fellows:
        assert fellows.drive()
    assert sorted(p.name for p in (state / SCRIPTS).iterdir()) == sorted([live, "ba9876543210"])


def test_sweep_scripts_returns_what_it_removed(tmp_path: Path) -> None:
    """sweep_scripts removes final and old row-less copies only, and names each one it removed."""
    for name in ("live", "final", "young", "old"):
        (tmp_path / SCRIPTS / name).mkdir(parents=True)
    states: dict[str, bool | None] = {"live": True, "final": False, "young": None, "old": None}
    os.utime(tmp_path / SCRIPTS / "old", (0, 0))
    removed = sweep_scripts(tmp_path, states.get, now=ORPHAN_AGE_SECONDS + 10)
    assert removed == ["final", "old"]
    assert sorted(p.name for p in (tmp_path / SCRIPTS).iterdir()) == ["live", "young"]
    assert sweep_scripts(tmp_path / "nowhere", states.get) == []
