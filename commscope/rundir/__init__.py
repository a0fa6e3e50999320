"""The run directory (docs/run_format.md): the one home of its schema — file names and version
(`schema`), where things are in it (`layout`), and the readers and writers of its small JSON files
(`io`). Recorders write through these names, the loader reads through them; nothing else spells a run
directory's file name.

Torch-free and pandas-free: the launcher and the trainer's exit paths import it.
"""
from commscope.rundir.io import (check_doc, check_schema, read_run_marker, read_status, write_config,
                                  write_run_marker, write_status)
from commscope.rundir.layout import flight_recorder_files, has_run_marker, is_run_dir, launcher_log_tails, rank_dirs
from commscope.rundir.schema import FLIGHT_RECORDER_DIR, SCHEMA_VERSION

__all__ = ["FLIGHT_RECORDER_DIR", "SCHEMA_VERSION", "check_doc", "check_schema", "flight_recorder_files",
           "has_run_marker", "is_run_dir", "launcher_log_tails", "rank_dirs", "read_run_marker", "read_status", "write_config",
           "write_run_marker", "write_status"]
