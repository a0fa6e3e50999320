"""The run-directory schema (docs/run_format.md): its version and the name of every file and folder in
it. The one place these names are spelled; writers (recorder, watchdog, launcher, trainer) and readers
(loader, compare, doctor's evidence) take them from here.

Invariants: constants only, no imports beyond the standard library, so any process (the launcher, a
trainer before torch is imported) can use it; a new file in the run directory gets its name here first.
"""
from __future__ import annotations

import re

SCHEMA_VERSION = 1  # of the run directory and every file in it; readers accept <= this and refuse newer

# RUN/
RUN_MARKER = "commscope-run.json"  # written first: says the folder is a commscope run, and which one
PREVIOUS_RUN_PREFIX = ".commscope-previous-"  # RUN/.commscope-previous-<run id>/: a run being replaced
# RUN/.commscope-unfinished-<run id>/: a replacing run that finished no step (the replaced run is back in RUN)
UNFINISHED_RUN_PREFIX = ".commscope-unfinished-"
SUMMARY = "summary.json"  # the launcher's verdict and rank 0's losses and step times
NOT_STARTED = "not started"  # summary.json's status of a rank that left no rank folder
# What an error says when the run directory could not take a write (errno 28, 30, 122): the launcher
# watches the ranks' output for it and words it from STORAGE_ERRORS in summary.json's message; the doctor
# reads both (any case)
STORAGE_ERRORS = {"28": "no space left on device", "30": "read-only file system", "122": "disk quota exceeded"}
STORAGE_ERROR = re.compile(r"\[Errno (28|30|122)\]|"
                           r"(No space left on device|Read-only file system|Disk quota exceeded)", re.I)
CONFIG = "config.json"  # the trainer's configuration, written by rank 0
LAUNCHER_LOG = "launcher.log"  # stdout/stderr of torch.distributed.run, on one node
# With several nodes sharing the folder each node's launcher writes its own log (launcher_log_name); the
# readers take every file this matches
LAUNCHER_LOGS = re.compile(r"^launcher(\.[A-Za-z0-9_.-]+)?\.log\Z")
# The line a node's launcher writes into its log when the user's signal stops it (several nodes): the node
# that writes summary.json reads it there, since that signal reached only the one node
NODE_INTERRUPTED = re.compile(r"^commscope run: this node was interrupted by (SIG[A-Z]+)$", re.M)
# The last line of a node's launcher log once its part of the job has ended: a node starting into a
# folder whose logs hold it is not joining that job
NODE_ENDED = "commscope run: this node's job ended"
PROGRESS = "progress.jsonl"  # the reference trainer's rank 0: one line per event
# `commscope hooks` without a run records its capture run in $TMPDIR/commscope-hooks-<pid>-*/ (deleted as
# it ends, short of a SIGKILL; `commscope run`'s launcher sweeps those of processes that are gone)
CAPTURE_DIR_PREFIX = "commscope-hooks-"
FLIGHT_RECORDER_DIR = "flight_recorder"  # NCCL Flight Recorder dumps (docs/faults.md)
FLIGHT_RECORDER_PREFIX = "rank_"  # FLIGHT_RECORDER_DIR/rank_<R>

# The label under which readers show a collective recorded without one (`"label": null`): reserved, so no
# recorded label is ever shown as the unlabelled ones' (the recorder refuses it)
NO_LABEL = "(no label)"

# RUN/rank<R>/
# the rank in ASCII decimal without leading zeros, as the recorder writes it, and nothing after it (`\Z`, not
# `$`, which also matches before a final newline): a stray `rank01/` or `rank1\n/` beside `rank1/` is another
# folder, not a second rank 1 that would replace the first
RANK_DIR = re.compile(r"^rank(0|[1-9][0-9]*)\Z")
META = "meta.json"  # written once at start, after clock alignment
EVENTS = "events.jsonl"  # append-only records, one step at a time
STATUS = "status.json"  # written when the rank ends
# status.json values of a rank that ended without a fault of its own: "exited" is a recording script that
# ended without closing its Recorder (and without an unhandled exception); its records are all there
ENDED_STATUSES = ("completed", "exited")
# every status.json status a recorder writes (Recorder.close refuses others; readers refuse them too)
RANK_STATUSES = ("completed", "failed", "interrupted", "exited")
# summary.json: the job's status, and each rank's (its status.json's, or what the launcher found instead)
JOB_STATUSES = ("completed", "failed", "crashed", "hung", "interrupted")
SUMMARY_RANK_STATUSES = (*RANK_STATUSES, "crashed", "hung", NOT_STARTED)
WATCHDOG = "watchdog.json"  # only when the hang watchdog fired
INFLIGHT = "inflight.json"  # only on an abnormal end with collectives still in flight
KINETO_TRACE = "trace.json.gz"  # only with --profile: the profiler window's Kineto trace
# The files a recording leaves in its rank folder: one of them there means the folder holds a recording.
RECORDING_FILES = (EVENTS, STATUS, META, WATCHDOG, INFLIGHT, KINETO_TRACE)
# A step record's `loss_nonfinite`, beside `"loss": null` (JSON has no NaN): the loss the loop saw, as
# Python's repr writes it
LOSS_NONFINITE = ("nan", "inf", "-inf")

# status.json `ended_ns` of ranks ended by one signal to the whole job (torch.distributed.run signalled,
# a closed terminal) lie this close together; one rank killed first and the others torn down after it
# come hundreds of ms apart (docs/faults.md, "A job that was stopped"). The launcher's summary and the
# doctor (analyze.doctor_stopped) read ends with this one bar.
SIGNALLED_TOGETHER_NS = 50_000_000


def signalled_together_bar(clock_errors_ns) -> int:
    """The bar two ranks' `ended_ns` must be within to have begun together: SIGNALLED_TOGETHER_NS widened by
    twice the largest of the ranks' clock alignment errors (meta.json `clock.error_ns`), as two ranks'
    errors can add up in opposite directions."""
    return SIGNALLED_TOGETHER_NS + 2 * max(clock_errors_ns, default=0)


# status.json `error` of a rank a signal ended, as recording.termguard.signal_words writes it
SIGNAL_ENDED = re.compile(r"terminated by signal \d+ \((SIG\w+)\)")


def ending_signal(status: dict) -> str | None:
    """The signal ("SIGTERM") that ended a rank or began its end, from its status.json: named in its error,
    else its `signal` (a rank in a collective's wait whose peer, stopped by the same signal, closed the
    connection ends by that error, not by the signal's own). None where neither names one. The launcher's
    summary and the doctor read how a rank ended with this one rule."""
    m = SIGNAL_ENDED.search(str(status.get("error") or ""))
    if m:
        return m.group(1)
    return status.get("signal") if isinstance(status.get("signal"), str) else None


def rank_dir_name(rank: int) -> str:
    """The folder of `rank` inside a run directory."""
    return f"rank{rank}"


def launcher_log_name(node: str | None) -> str:
    """The launcher's log in the run directory: LAUNCHER_LOG on one node; with several, one per node,
    `launcher.<node>.log`, where `node` is `node<K>` (--node-rank K with a static rendezvous) or
    `<host>.<pid>` (the c10d rendezvous assigns node ranks only after the launch), its characters outside
    [A-Za-z0-9_.-] replaced by `_`."""
    if node is None:
        return LAUNCHER_LOG
    return f"launcher.{re.sub(r'[^A-Za-z0-9_.-]', '_', node)}.log"


def flight_recorder_name(rank: int) -> str:
    """The file name of `rank`'s Flight Recorder dump inside FLIGHT_RECORDER_DIR."""
    return f"{FLIGHT_RECORDER_PREFIX}{rank}"
