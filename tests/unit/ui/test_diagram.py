"""The state diagram is generated from the machine definition and the committed page never drifts."""

from __future__ import annotations

import re
from pathlib import Path

from fellows_fsm import SlurmSettings
from fellows_fsm.ui.diagram import SPINE_TAIL, mermaid, spine_mermaid, state_diagram_page

PAGE = Path(__file__).resolve().parents[3] / "docs" / "state-diagram.md"


def test_committed_state_diagram_is_current() -> None:
    """docs/state-diagram.md equals what the code generates (regenerate with the README's command)."""
    assert PAGE.read_text(encoding="utf-8") == state_diagram_page(), (
        "docs/state-diagram.md is stale: run `fellows-fsm diagram --format markdown -o docs/state-diagram.md`"
    )


def test_mermaid_has_the_seven_states_with_labels() -> None:
    """The default ladder draws the seven states of the design plus WITHDRAWN, REFUSED and the handoff's, with
    identifier-safe ids and labels."""
    text = mermaid(SlurmSettings(park_cap_seconds=600).ladder)
    states = re.findall(r'^\s*state "([^"]+)" as (\S+)$', text, flags=re.MULTILINE)
    assert states == [
        ("SUBMITTED(high-eur)", "SUBMITTED_high_eur"),
        ("RESUBMITTED(normal-eur)", "RESUBMITTED_normal_eur"),
        ("RESUBMITTED(low-eur)", "RESUBMITTED_low_eur"),
        ("PARKED", "PARKED"),
        ("CANCELLED", "CANCELLED"),
        ("RUNNING", "RUNNING"),
        # Its job followed to its end (issue 38): requeued by SLURM, then ended.
        ("REQUEUED", "REQUEUED"),
        ("ENDED", "ENDED"),
        ("FAILED_TO_GCP", "FAILED_TO_GCP"),
        ("WITHDRAWN", "WITHDRAWN"),
        ("REFUSED", "REFUSED"),  # a first submit SLURM refused: a row of the table (refuse), no longer a view word
        # The handoff after the ladder: rows of the table (hand_off, handed_off, handoff_failed, handoff_unknown,
        # no_lane).
        ("HANDING_OFF", "HANDING_OFF"),
        ("HANDED_OFF", "HANDED_OFF"),
        ("HANDOFF_FAILED", "HANDOFF_FAILED"),
        ("HANDOFF_UNKNOWN", "HANDOFF_UNKNOWN"),
        ("NO_LANE_LEFT", "NO_LANE_LEFT"),
        # The paid run after the handoff to a followed lane, and the budget's refusal (issue 27).
        ("PAID_QUEUED", "PAID_QUEUED"),
        ("PAID_RUNNING", "PAID_RUNNING"),
        ("PAID_UNKNOWN", "PAID_UNKNOWN"),  # a lost command on a lane with status: followed by it (issue 36)
        ("PAID_DONE", "PAID_DONE"),
        ("PAID_FAILED", "PAID_FAILED"),
        ("NO_BUDGET", "NO_BUDGET"),
    ]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident) for _, ident in states)


def test_mermaid_edges_show_guards() -> None:
    """Every edge carries its trigger and guards, and the ladder edges go strictly downwards."""
    text = mermaid(SlurmSettings(park_cap_seconds=600).ladder)
    assert "CANCELLED --> RESUBMITTED_normal_eur: resubmit [walks_ladder & may_change_rung & left_high_eur]" in text
    assert "CANCELLED --> RESUBMITTED_low_eur: resubmit [walks_ladder & may_change_rung & left_normal_eur]" in text
    assert "CANCELLED --> FAILED_TO_GCP: give_up [walks_ladder & may_change_rung & budget_fits & left_low_eur]" in text
    assert "CANCELLED --> NO_BUDGET: no_budget [walks_ladder & may_change_rung & budget_refused & left_low_eur]" in text
    assert "PARKED --> RESUBMITTED_normal_eur: move [walks_ladder & moved_in_place & left_high_eur]" in text
    assert "PARKED --> RUNNING: start [job_started]" in text
    assert "[*] --> SUBMITTED_high_eur" in text
    # Only the start and the in-place steps of a hold (hold, release: no state change) lead into the first rung.
    rest = text.replace("[*] --> SUBMITTED_high_eur", "").replace("SUBMITTED_high_eur --> SUBMITTED_high_eur", "")
    assert "--> SUBMITTED_high_eur" not in rest
    assert text.startswith("---\ntitle: dispatch lifecycle\n---\nstateDiagram-v2\n")


def test_the_spine_holds_the_seeds_states_and_the_paid_tail() -> None:
    """`fellows-fsm diagram`'s spine draws exactly the seed's seven states, a free job's end and the paid tail, their
    loop (park, cancel, resubmit, move, give_up, start), the end and the tail's steps, each edge labelled by its
    triggers only."""
    text = spine_mermaid(SlurmSettings(park_cap_seconds=600).ladder)
    states = [label for label, _ in re.findall(r'^\s*state "([^"]+)" as (\S+)$', text, flags=re.MULTILINE)]
    seed = ["SUBMITTED(high-eur)", "RESUBMITTED(normal-eur)", "RESUBMITTED(low-eur)", "PARKED", "CANCELLED"]
    assert states == [*seed, "RUNNING", "ENDED", "FAILED_TO_GCP", *SPINE_TAIL]
    edges = re.findall(r"^\s*(\S+) --> (\S+): (.*)$", text, flags=re.MULTILINE)
    assert all("[" not in label and len(label) <= 40 for _, _, label in edges), edges
    assert all(src != dst for src, dst, _ in edges)  # no step that stays (hold, pause, ...): those are --full's
    triggers = {t for _, _, label in edges for t in label.split(" | ")}
    loop = {"park", "cancel", "resubmit", "move", "give_up", "start", "drop", "hand_off", "paid", "paid_start"}
    assert loop | {"end", "lost", "paid_end", "paid_fail", "paid_stuck", "paid_overrun"} == triggers
    assert ("RUNNING", "ENDED", "end | lost") in edges
    assert ("CANCELLED", "FAILED_TO_GCP", "give_up") in edges
    assert "[*] --> SUBMITTED_high_eur" in text


def test_the_page_holds_the_spine_and_every_row() -> None:
    """docs/state-diagram.md carries the spine first, then every row with its guards."""
    page = state_diagram_page()
    ladder = SlurmSettings(park_cap_seconds=600).ladder
    assert spine_mermaid(ladder).rstrip("\n") in page
    assert mermaid(ladder).rstrip("\n") in page
    assert page.index("## The spine") < page.index("## Every row")
