"""The agent's command line: every flag parses into its setting, AGENT_* variables still count."""

from __future__ import annotations

import subprocess
import sys

import pytest

from remote_agent.settings import AgentSettings, parse_allow

URL = "sqlite:////tmp/legacy.db"


@pytest.fixture(autouse=True)
def _no_agent_environment(monkeypatch):
    for name in AgentSettings.model_fields:
        monkeypatch.delenv(f"AGENT_{name.upper()}", raising=False)


def test_every_flag_sets_its_setting():
    settings = AgentSettings.from_command_line(
        [
            *("--db-url", URL, "--cache-dir", "/tmp/cache", "--host", "0.0.0.0", "--port", "9000"),
            *("--token", "secret", "--allow", "students", "--allow", "grades:sid,course"),
            *("--statement-timeout-s", "1.5", "--chunk-rows", "10", "--target-chunk-s", "0.5"),
            *("--max-rows-per-s", "100", "--sketch-table-mib", "8", "--no-read-ahead", "--no-arrow-reads"),
            *("--max-concurrent-extractions", "3", "--max-body-bytes", "2048", "--log-level", "warning"),
            *("--ssl-certfile", "agent.crt", "--ssl-keyfile", "agent.key", "--no-sqlite-arrow-reads"),
        ]
    )
    assert settings.db_url == URL and settings.cache_dir == "/tmp/cache"
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)
    assert settings.token is not None and settings.token.get_secret_value() == "secret"
    assert parse_allow(settings.allow) == {"students": None, "grades": {"sid", "course"}}
    assert (settings.statement_timeout_s, settings.chunk_rows) == (1.5, 10)
    assert (settings.target_chunk_s, settings.max_rows_per_s, settings.sketch_table_mib) == (0.5, 100.0, 8)
    assert (settings.read_ahead, settings.arrow_reads, settings.sqlite_arrow_reads) == (False, False, False)
    assert (settings.max_concurrent_extractions, settings.max_body_bytes) == (3, 2048)
    assert (settings.log_level, settings.ssl_certfile, settings.ssl_keyfile) == ("warning", "agent.crt", "agent.key")


def test_defaults_and_the_environment(monkeypatch):
    settings = AgentSettings.from_command_line(["--db-url", URL])
    assert (settings.host, settings.port, settings.allow, settings.token) == ("127.0.0.1", 8765, [], None)
    assert (settings.read_ahead, settings.arrow_reads, settings.sqlite_arrow_reads) == (True, True, True)
    monkeypatch.setenv("AGENT_DB_URL", URL)
    monkeypatch.setenv("AGENT_ALLOW", "students; grades:sid,course")
    monkeypatch.setenv("AGENT_PORT", "9001")
    monkeypatch.setenv("AGENT_READ_AHEAD", "false")
    settings = AgentSettings.from_command_line(["--port", "9002"])
    assert (settings.db_url, settings.port, settings.read_ahead) == (URL, 9002, False)
    assert settings.allow == ["students", "grades:sid,course"]
    assert AgentSettings.from_command_line(["--allow", "items"]).allow == ["items"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--db-url", URL, "--port", "many"], "--port"),
        (["--db-url", URL, "--chunk-rows", "0"], "chunk_rows"),
        (["--db-url", URL, "--unknown"], "unrecognized arguments"),
        ([], "db_url"),
        (["--db-url", URL, "--ssl-certfile", "agent.crt"], "--ssl-certfile and --ssl-keyfile go together"),
    ],
)
def test_bad_flags_print_the_usage_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exited:
        AgentSettings.from_command_line(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m remote_agent") and says in err


def test_help_lists_every_flag_with_its_default_once(capsys):
    with pytest.raises(SystemExit) as exited:
        AgentSettings.from_command_line(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    flags = [f"--{name.replace('_', '-')}" for name in AgentSettings.model_fields]
    assert [f for f in flags if f not in shown] == []
    assert "--no-read-ahead" in shown and "(default: 8765)" in shown and shown.count("8765") == 1


ALLOCATOR_PROBE = """
import sys
from remote_agent.__main__ import main
code = main(["--db-url", "sqlite:////nonexistent/legacy.db"])  # loads the app, then fails on the missing file
import pyarrow
print(code, pyarrow.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize("asked, backend", [(None, "system"), ("jemalloc", "jemalloc")])
def test_the_agent_process_allocates_with_malloc_unless_told_otherwise(asked, backend, monkeypatch):
    """`python -m remote_agent` picks pyarrow's allocator before pyarrow loads (an import of
    it first would leave mimalloc in place); ARROW_DEFAULT_MEMORY_POOL set by the user wins."""
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    if asked:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", asked)
    done = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", backend], done.stderr
