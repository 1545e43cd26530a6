"""The VM a GCP Batch job runs on, from the dispatch's GPU count and the lane's accelerator (and machine type):
accelerator-optimized families come with their GPUs, so the machine type follows from the count; N1 machines take
attached GPUs of a type the lane names. Pure data and arithmetic: nothing here calls Google.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from fellows_fsm.lanes.gcp_batch.errors import MachineRefused

__all__ = ["ATTACHED", "BUNDLED", "Machine", "machine_for"]


@attrs.frozen
class Machine:
    """The VM a job runs on: its machine type and the GPUs on it (no accelerator for a job with no GPU)."""

    machine_type: str
    accelerator: str | None
    count: int

    def words(self) -> str:
        """The machine in plain words, for a message."""
        if self.accelerator is None:
            return f"machine type {self.machine_type!r} with no GPU"
        return f"machine type {self.machine_type!r} with {self.count} x accelerator {self.accelerator!r}"


# Accelerator-optimized families come with their GPUs: the machine type follows from the count.
BUNDLED: Mapping[str, Mapping[int, str]] = {
    "nvidia-tesla-a100": {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g",
                          16: "a2-megagpu-16g"},
    "nvidia-a100-80gb": {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"},
    "nvidia-h100-80gb": {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"},
    "nvidia-h100-mega-80gb": {8: "a3-megagpu-8g"},
    "nvidia-h200-141gb": {8: "a3-ultragpu-8g"},
    "nvidia-b200": {8: "a4-highgpu-8g"},
    "nvidia-l4": {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
}  # fmt: skip
# GPUs attached to an N1 machine the user names (machine_type): the counts one VM can take.
ATTACHED: Mapping[str, tuple[int, ...]] = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-tesla-v100": (1, 2, 4, 8),
    "nvidia-tesla-p100": (1, 2, 4),
    "nvidia-tesla-p4": (1, 2, 4),
}


def _counts(counts: Iterable[int]) -> str:
    return ", ".join(str(n) for n in counts)


def machine_for(gpus: int, accelerator: str, machine_type: str | None = None) -> Machine:
    """The VM for a job of ``gpus`` GPUs on a lane of ``accelerator`` (and ``machine_type``, if the lane sets one);
    a count no single VM has, or an accelerator this table does not know with no machine type, is refused."""
    if gpus < 0:
        raise MachineRefused(f"a job cannot ask for {gpus} GPUs: give --gres=gpu:N with N of 0 or more")
    if gpus == 0:
        if not machine_type:
            raise MachineRefused("a job with no GPU needs the lane's machine_type (e.g. n2-standard-8): set it")
        return Machine(machine_type, None, 0)
    if accelerator in BUNDLED:
        by_count = BUNDLED[accelerator]
        if machine_type:
            owned = {machine: count for count, machine in by_count.items()}
            if machine_type in owned and owned[machine_type] != gpus:
                raise MachineRefused(
                    f"machine type {machine_type} has {owned[machine_type]} {accelerator} GPUs and this job asks for"
                    f" {gpus}: ask for {owned[machine_type]} or set no machine_type (it follows from the count)"
                )
            return Machine(machine_type, accelerator, gpus)
        if gpus not in by_count:
            raise MachineRefused(
                f"no GCP machine has exactly {gpus} {accelerator} GPUs (one VM has {_counts(by_count)}):"
                " ask for one of those counts"
            )
        return Machine(by_count[gpus], accelerator, gpus)
    if accelerator in ATTACHED:
        if gpus not in ATTACHED[accelerator]:
            raise MachineRefused(
                f"one VM takes {_counts(ATTACHED[accelerator])} {accelerator} GPUs, not {gpus}:"
                " ask for one of those counts"
            )
        if not machine_type:
            raise MachineRefused(f"{accelerator} GPUs attach to an N1 machine: set the lane's machine_type (n1-...)")
        return Machine(machine_type, accelerator, gpus)
    if not machine_type:
        known = ", ".join(sorted([*BUNDLED, *ATTACHED]))
        raise MachineRefused(
            f"unknown accelerator {accelerator!r} (known here: {known}): correct it, or set machine_type to send it"
            " to GCP as it is"
        )
    return Machine(machine_type, accelerator, gpus)
