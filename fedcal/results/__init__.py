"""Run identity and the run store: which directory a config's results live in, and what is in it.

The package's modules: :mod:`~fedcal.results.files` (the files of a run directory, the errors),
:mod:`~fedcal.results.identity` (run identity), :mod:`~fedcal.results.store` (the writer) and
:mod:`~fedcal.results.reading` (the readers; pandas is imported only when a reader needs it, so
the ClientApp, which imports the writer, never loads it).

Run identity (:func:`config_hash`, :func:`collection_hash`, :func:`default_run_name`,
:func:`run_dir_for`): a run is named after the keys that change what it computes, so a finished
run is recognised (and skipped) whichever machine or folder produced it. Committed results are
identified by these names: the hashes below must never change for an existing task.

A run directory holds

* ``config.json`` — the resolved run config, its hash and the code and package versions that
  made the run (:mod:`fedcal.provenance`);
* ``metrics.csv`` — tidy rows ``run_id, round, metric, value, config_hash``, appended and
  flushed after every round, so an interrupted run keeps every finished round;
* ``reliability.csv`` — reliability-diagram bins of the final global model;
* ``model.pt`` — the final global model's state dict (for post-hoc calibration, triage, CKA);
* ``timings.csv`` — wall-clock seconds per round (``run_id, round, metric, value``): kept out of
  ``metrics.csv`` so that two runs of one config have byte-identical metrics;
* ``run.log`` — one timestamped line per event of the run's life: started, resumed from round N,
  checkpoint, failed (with the reason), finished; appended across attempts, never truncated;
* ``checkpoint.pt`` — while a run is unfinished, everything it needs to continue after its last
  checkpointed round (:meth:`RunStore.save_checkpoint`; removed when the run finishes);
* ``.lock`` — held (``fcntl.flock``) by the one process writing the run, holding its pid;
* ``DONE`` — written last; a run with a ``DONE`` matching its config hash is finished.

A run directory has one writer at a time: :meth:`RunStore.start` and :meth:`RunStore.session`
take the lock and a second writer fails at once (:class:`RunLocked`, naming the directory and
the holder's pid). A run resumes from its checkpoint (:meth:`RunStore.session`): the files it
appends to are cut back to their length at the checkpoint and the tables it rewrites are put
back as they were, so a resumed run's files equal an uninterrupted run's. A checkpoint is
untrusted input: one whose round, file names (:data:`CHECKPOINTED_FILES`, plain names inside the
run) or entries do not fit the run, or whose state the task refuses (:meth:`RunStore.resumable`),
is said in one warning and the run starts over.

Tables and plots are built from these files only (:func:`load_metrics`; the final metrics of runs:
:func:`fedcal.reports.final_metrics`).

Unfinished runs (no ``DONE`` matching the hash of the config in their ``config.json``:
interrupted, crashed, or still running) are never reported as final: :func:`run_status` tells
finished from unfinished and how far an unfinished run got, :func:`load_metrics` flags every
per-round row with ``finished``, and every final table (:mod:`fedcal.reports`) leaves unfinished
runs out and logs one line for each run it left out. A ``DONE`` run whose files are not whole (a
torn ``metrics.csv``, …: :func:`fedcal.results.checks.check_run`) is finished for no reader:
the reports leave it out and ``fedcal runs`` calls it damaged. A run's id is the one its
``config.json`` recorded (:func:`run_id_of`), whatever its folder is called now.

A run directory belongs to one config: :meth:`RunStore.start` refuses (:class:`RunNameConflict`)
to start a run in a directory that holds a run of a different config (the same ``run-name``
reused), instead of overwriting it.
"""

from fedcal.results.files import (AUDIT_FILE, CHECKPOINT_FILE, CHECKPOINT_FORMAT, CHECKPOINTED_FILES, CODE, COLUMNS,
                                  CONFIG_FILE, DONE_FILE, FINISHED, LOCK_FILE, METRICS_FILE, MODEL_FILE, POISONING_FILE,
                                  REJECTIONS_FILE, RUN_LOG,
                                  RunFailed, RunLocked, RunNameConflict, TIMINGS_FILE, TIMING_COLUMNS, UNRECORDED,
                                  UnfinishedRunError, atomic_write, failure_reason)
from fedcal.results.identity import (aggregator_hash, check_run_dir, collection_hash, config_hash, default_run_name,
                                     hashed_keys, load_config, load_run_config, run_dir_for, run_id_of,
                                     stored_identity)
from fedcal.results.store import (Checkpoint, RunStore)
from fedcal.results.reading import (RunState, RunStatus, code_of, find_run_dirs, is_finished, load_metrics, load_model,
                                    load_timings, lock_holder, reuse_note, run_events, run_state, run_status,
                                    stored_provenance, warn_reused)

__all__ = [
    "METRICS_FILE", "MODEL_FILE", "CONFIG_FILE", "DONE_FILE", "AUDIT_FILE", "POISONING_FILE", "REJECTIONS_FILE",
    "TIMINGS_FILE", "RUN_LOG", "CHECKPOINT_FILE", "CHECKPOINTED_FILES", "LOCK_FILE", "TIMING_COLUMNS",
    "CHECKPOINT_FORMAT", "COLUMNS",
    "FINISHED", "CODE",
    "UNRECORDED", "RunNameConflict", "RunFailed", "RunLocked", "UnfinishedRunError", "failure_reason",
    "atomic_write", "hashed_keys", "config_hash", "collection_hash", "aggregator_hash", "default_run_name",
    "run_dir_for", "run_id_of", "load_run_config", "load_config", "check_run_dir", "stored_identity", "Checkpoint",
    "RunStore",
    "RunStatus", "run_status", "is_finished", "stored_provenance", "code_of", "reuse_note", "warn_reused",
    "load_metrics", "load_timings", "load_model", "RunState", "run_events", "lock_holder", "run_state",
    "find_run_dirs",
]
