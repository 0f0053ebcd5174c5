"""The ``flux-testbed`` dispatcher (cli/main.py) without root: its help lists every subcommand, bad names are one
line on stderr with exit code 2, and a subcommand's arguments and exit code pass through."""
import os
import subprocess
import sys

import pytest

from cli import main as cli

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, "-m", "cli.main"]


def tool(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True, cwd=PROJECT_DIR, timeout=120)


def test_help_lists_every_subcommand_with_one_line():
    r = tool("--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for name in ("run", "sweep", "suite", "plot", "bounds", "reanalyse", "report", "bench", "research", "test"):
        assert sum(line.split()[:1] == [name] for line in lines) == 1, name


@pytest.mark.parametrize("args", [["nope"], ["bench", "nope"], ["research", "nope"]])
def test_an_unknown_name_is_one_line_and_exit_code_2(args):
    r = tool(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("flux-testbed: unknown")


def test_no_subcommand_prints_the_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "commands:" in capsys.readouterr().err


def test_bench_help_lists_the_benchmarks(capsys):
    assert cli.main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("starvation", "twin", "fidelity"))


def test_a_subcommand_gets_its_arguments_and_gives_its_exit_code(capsys):
    assert cli.main(["sweep", "--help"]) == 0
    assert "--schedulers" in capsys.readouterr().out
    assert cli.main(["bench", "twin", "--help"]) == 0
    assert "usage: flux-testbed bench twin" in capsys.readouterr().out
    assert cli.main(["sweep", "--seeds", "x"]) == 2      # bad input, nothing run


def test_run_is_cli_run_main(monkeypatch):
    seen = []
    from cli import run as runner
    monkeypatch.setattr(runner, "main", lambda argv: seen.append(argv) or 7)
    assert cli.main(["run", "--engine", "fluid", "--scheduler", "ecmp"]) == 7
    assert seen == [["--engine", "fluid", "--scheduler", "ecmp"]]
