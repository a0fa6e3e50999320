"""Small infrastructure shared across commscope's packages, with no knowledge of runs or traces: atomic
file output (`atomic`), the command-line grammar of step ranges (`step_range`), numeric helpers for
JSON output and tensor sizes (`num`) and the CPU cores a process may use (`cpus`)."""
