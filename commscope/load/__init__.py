"""Loading run directories and Kineto traces into the frames of docs/frames.md: `load_path(path) -> Trace`."""
from commscope.load.frames import COLUMNS, Trace, frame
from commscope.load.loader import load_path

__all__ = ["COLUMNS", "Trace", "frame", "load_path"]
