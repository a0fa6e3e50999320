"""commscope: see why communication does not overlap with compute in distributed PyTorch training."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1  # of the run directory and every file in it (docs/run_format.md); readers check it
FLIGHT_RECORDER_DIR = "flight_recorder"  # RUN/flight_recorder/rank_<R>: NCCL Flight Recorder dumps (docs/faults.md)
