"""The change feed's resume hint stays one line, whatever its length, on a pipe (deltasieve_cli/data.py)."""

from __future__ import annotations

from deltasieve_cli.data import report_resume
from deltasieve_cli.render import Output


def test_the_resume_hint_is_one_line_when_stderr_is_not_a_terminal(capsys):
    view, sync = "a_view_with_a_rather_long_name_from_mirroring_" + "x" * 40, "f" * 32
    report_resume(Output(as_json=False), view, {"last_sync": sync, "syncs": 12345, "more_syncs": True})
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"resume with: deltasieve changes {view} --after {sync}" in err
