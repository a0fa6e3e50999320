"""Small infrastructure shared across commscope's packages, with no knowledge of runs or traces: atomic
file output (`atomic`), the command-line grammar of step ranges (`step_range`) and numeric helpers for
JSON output and tensor sizes (`num`)."""
