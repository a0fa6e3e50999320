"""A rank's status.json as the launcher and `compare` read it (rundir.io.read_status): missing is None,
anything that is not a small status document is ValueError, never a blocked read or a huge one."""
from __future__ import annotations

import json
import os

import pytest

from commscope.rundir.io import STATUS_MAX_BYTES, read_status


def test_status_is_read_bounded_and_only_from_a_regular_file(tmp_path):
    assert read_status(str(tmp_path)) is None
    (tmp_path / "status.json").write_text(json.dumps({"status": "completed", "error": None, "last_step": 3}))
    assert read_status(str(tmp_path))["status"] == "completed"
    (tmp_path / "status.json").write_bytes(b" " * (STATUS_MAX_BYTES + 1))
    with pytest.raises(ValueError, match="over 1 MiB"):
        read_status(str(tmp_path))
    os.remove(tmp_path / "status.json")
    os.mkfifo(tmp_path / "status.json")  # opening it for reading would block until a writer came
    with pytest.raises(ValueError, match="not a regular file"):
        read_status(str(tmp_path))
