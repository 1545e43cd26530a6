"""The sbatch options fellows-fsm sets or relies on, and the one test of a user's arguments against them
(``owned_option``), after ``--``, in ``JobSpec.extra_args`` and in ``#SBATCH`` lines. A leaf: it imports nothing of
the package, so the script reader (scheduler/script.py) and the port's ``JobSpec.from_script`` can both use it."""

from __future__ import annotations

__all__ = ["OWNED_OPTIONS", "SBATCH_LONG_OPTIONS", "SCRIPT_READ", "SHORT_FLAGS", "long_options", "owned_option"]

_GPUS = "give the GPU count with fellows-fsm submit --gpus or #SBATCH --gres=gpu:N (JobSpec.gpus in Python)"
_GPUS_COUNTED = "it asks for GPUs fellows-fsm would not count (the caps, the ladder and the paid lane count --gpus)"
_TIME = "give the wall time with fellows-fsm submit --time or #SBATCH --time (JobSpec.time_limit_seconds in Python)"
_WAITS = "it makes sbatch wait, which would stop the poll loop of every dispatch"
_REPLY = "it changes sbatch's reply, which fellows-fsm reads for the job id"
_NEVER_STARTS = "the job would pend on every rung for a reason no rung changes, and walk to the paid lane"

OWNED_OPTIONS: dict[str, str] = {
    # What fellows-fsm sets on every rung.
    "--qos": "the ladder sets the QoS of every rung; change [fellows] qos/qos_ladder, or use --pin fellows "
    + "(pin='fellows' in Python)",
    "--comment": "it carries the dispatch token that finds a job again after a lost reply",
    "--deadline": "it carries the rung's controller deadline ([router] controller_deadline)",
    "--job-name": "give the name with fellows-fsm submit --name (JobSpec.name in Python)",
    # What it counts: GPUs in any spelling, and the time limit.
    "--gres": _GPUS,
    "--gpus": _GPUS,
    "--gpus-per-node": _GPUS_COUNTED,
    "--gpus-per-socket": _GPUS_COUNTED,
    "--gpus-per-task": _GPUS_COUNTED,
    "--tres-per-task": _GPUS_COUNTED,
    "--time": _TIME,
    "--time-min": "SLURM may start the job with a shorter limit than the one fellows-fsm checks against MaxWall; "
    + _TIME,
    "--uid": "the job would be another user's, on another user's caps",
    "--gid": "the job would run as another group (root only), outside what fellows-fsm checked",
    # What makes sbatch wait.
    "--wait": _WAITS,
    "--get-user-env": _WAITS + " (it runs a login shell first, for up to its timeout)",
    # What changes the reply (or queues nothing, or queues elsewhere).
    "--parsable": "fellows-fsm already asks sbatch for its parsable output",
    "--quiet": _REPLY,
    "--clusters": "it queues the job on another cluster, where the ladder cannot follow it; " + _REPLY,
    "--test-only": "a test-only submit queues nothing for the ladder to follow",
    "--help": "sbatch prints its help and queues nothing",
    "--usage": "sbatch prints its usage and queues nothing",
    "--version": "sbatch prints its version and queues nothing",
    "--wrap": "fellows-fsm submits the script you give it",
    "--array": "a dispatch follows one job, not an array",
    # What holds the job on every rung.
    "--hold": "a held job never starts, so no rung could start it",
    "--begin": "a job deferred to a begin time: " + _NEVER_STARTS + "; submit it later instead",
    "--dependency": "a job waiting on another job: " + _NEVER_STARTS + "; submit it once that job ended",
}
"""sbatch options fellows-fsm sets or relies on, refused after ``--`` (and in ``#SBATCH`` lines, see
``SCRIPT_READ``), with what to do instead; docs/usage.md has the table."""
SCRIPT_READ = frozenset({"--qos", "--comment", "--job-name", "--gres", "--gpus", "--time", "--parsable"})
"""Options a script's ``#SBATCH`` line may carry: fellows-fsm reads them or sets them on the command line, which
sbatch lets win over the script."""
_NODES_WHY = "--gres and --gpus-per-node count per node: more than one node multiplies the GPUs fellows-fsm counts"
_OWNED_SHORT = {
    "q": "--qos",
    "J": "--job-name",
    "G": "--gpus",
    "t": "--time",
    "H": "--hold",
    "a": "--array",
    "W": "--wait",
    "Q": "--quiet",
    "M": "--clusters",
    "b": "--begin",
    "d": "--dependency",
    "h": "--help",
    "V": "--version",
}
# sbatch's short options that take no value: after one of these, the next letter is another option.
SHORT_FLAGS = frozenset("hHIkOQsuvVW")
SBATCH_LONG_OPTIONS = frozenset(
    """account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint container
    container-id contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot
    dependency distribution error exclude exclusive export export-file extra extra-node-info get-user-env gid
    gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags help hint hold
    ignore-pbs input job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind
    mem-per-cpu mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks
    ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket oom-kill-step open-mode output overcommit
    oversubscribe parsable partition power prefer priority profile propagate qos quiet reboot requeue
    reservation resv-ports segment signal sockets-per-node spread-job spread-segments switches test-only
    thread-spec threads-per-core time time-min tmp tres-bind tres-per-task uid usage use-min-nodes verbose
    version wait wait-all-nodes wckey wrap""".split()  # noqa: SIM905 - a word list reads best as words
)
"""Every long option of sbatch 22.05 and 24.11 (``man sbatch``), to read an abbreviation the way sbatch does."""


def long_options(name: str) -> list[str]:
    """The sbatch long options ``--name`` may mean: itself if exact, else every option it abbreviates."""
    bare = name[2:]
    if bare in SBATCH_LONG_OPTIONS:
        return [name]
    return [f"--{option}" for option in sorted(SBATCH_LONG_OPTIONS) if option.startswith(bare)]


def _many_nodes(value: str) -> bool:
    """True for a --nodes value that may mean more than one node (``2``, ``1-4``); ``1`` and ``1-1`` do not."""
    return value.strip() not in ("1", "1-1")


def owned_option(extra_args: tuple[str, ...] | list[str], *, in_script: bool = False) -> tuple[str, str] | None:
    """The first option in ``extra_args`` that fellows-fsm refuses, as (the argument, why), or None.

    sbatch takes unambiguous prefixes of long options (``--qo=x`` is ``--qos=x``), so an abbreviation that may
    mean a refused option counts too; short options may be clustered (``-vW``, ``-vq low``). ``:`` (a
    heterogeneous job's next component) is refused, and so is ``--nodes``/``-N`` over one node. With
    ``in_script`` (the words of ``#SBATCH`` lines) the options in ``SCRIPT_READ`` pass: the command line wins.
    """
    allowed = SCRIPT_READ if in_script else frozenset()
    args = list(extra_args)
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else ""
        if arg == ":":
            return arg, "a heterogeneous job has several components; a dispatch follows one job"
        if arg == "--":
            continue
        if arg.startswith("--"):
            name, equals, value = arg.partition("=")
            meant = long_options(name)
            for option in meant:
                if option in OWNED_OPTIONS and option not in allowed:
                    return arg, OWNED_OPTIONS[option]
            if meant == ["--nodes"] and _many_nodes(value if equals else following):
                return arg, _NODES_WHY
        elif arg.startswith("-") and len(arg) > 1:
            for j, letter in enumerate(arg[1:], 1):
                if letter in _OWNED_SHORT and _OWNED_SHORT[letter] not in allowed:
                    return arg, OWNED_OPTIONS[_OWNED_SHORT[letter]]
                if letter == "N" and _many_nodes(arg[j + 1 :] or following):
                    return arg, _NODES_WHY
                if letter not in SHORT_FLAGS:
                    break  # this letter takes a value: the rest of the word is that value
    return None
