#!/usr/bin/env python3
"""``flux-testbed``: one command-line tool, one subcommand per job.

    flux-testbed run --scheduler flux                    # one experiment (cli/run.py)
    flux-testbed sweep --schedulers ecmp,crux,flux ...   # a grid of runs and its summary table (cli/sweep.py)
    flux-testbed bench starvation --help                 # a benchmark of the testbed itself (bench/starvation.py)

Each subcommand's arguments go to its module's ``main(argv)`` untouched, and its exit code is the tool's. The
scripts in scripts/ (``sudo python scripts/sweep.py``, ...) are the same commands for a checkout without the
environment: they set it up first (testbed/bootstrap.py), as this tool does when run as ``python cli/main.py``.
"""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path (set-up happens in main())
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from cli.entry import builds_fabric, set_up

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = "flux-testbed"
EXIT_BAD_INPUT = 2

#: subcommand -> (module whose main(argv) runs it, one line for --help)
COMMANDS: Dict[str, Tuple[str, str]] = {
    "run": ("cli.run", "one experiment, in the emulation or the flow-level twin"),
    "sweep": ("cli.sweep", "a grid of runs (schedulers x scenarios x seeds x --set axes) and one summary table"),
    "suite": ("cli.suite", "the scenario suite under every variant, with bounds; --compare against the other engine"),
    "plot": ("cli.plot", "figures and tables from a sweep folder or run folders"),
    "bounds": ("cli.bounds", "a scenario's upper bounds: each job alone, and all jobs within the links' capacity"),
    "reanalyse": ("cli.reanalyse", "rebuild the derived files of finished run folders"),
    "report": ("cli.report", "regenerate the generated tables and pages of README.md and docs/ (--check: compare)"),
    "bench": ("bench", "bench NAME: a benchmark of the testbed itself (bench/NAME.py; 'bench --help' lists them)"),
    "research": ("research", "research NAME: an investigation behind docs/ (research/NAME.py; 'research --help')"),
    "test": ("scripts/test.py", "the test suite (scripts/test.py; as root it includes the fabric tests)"),
}
#: Subcommands that take a module name from a folder first.
FOLDERS = ("bench", "research")


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [ARGS...]   ({PROG} COMMAND --help for a command's arguments)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {line}" for name, (_module, line) in COMMANDS.items()]
    return "\n".join(lines)


def folder_modules(folder: str) -> Dict[str, str]:
    """Module name -> first line of its docstring, for every module of bench/ or research/ (read, not imported:
    a benchmark's imports may need a fabric's packages)."""
    out = {}
    path = os.path.join(PROJECT_DIR, folder)
    for name in sorted(os.listdir(path)):
        if name.endswith(".py") and name != "__init__.py":
            with open(os.path.join(path, name), encoding="utf-8") as f:
                doc = ast.get_docstring(ast.parse(f.read())) or ""
            out[name[:-3]] = doc.strip().split("\n")[0]
    return out


def folder_usage(folder: str) -> str:
    modules = folder_modules(folder)
    width = max(len(name) for name in modules)
    return "\n".join([f"usage: {PROG} {folder} NAME [ARGS...]   ({PROG} {folder} NAME --help for its arguments)",
                      "", f"{folder}:"] + [f"  {name:<{width}}  {line}" for name, line in modules.items()])


def fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return EXIT_BAD_INPUT


def call(module: str, argv: Sequence[str], prog: str) -> int:
    """``module.main(argv)``'s exit code, also when it ends with SystemExit (argparse's --help and errors);
    its usage lines name it ``prog`` (argparse takes the name from sys.argv[0])."""
    argv0 = sys.argv[0]
    sys.argv[0] = prog
    try:
        code = importlib.import_module(module).main(list(argv))
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv[0] = argv0
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        return 1
    return int(code or 0)


def main(argv: Optional[List[str]] = None) -> int:
    command_line = argv is None
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:
        sys.stderr.write(usage() + "\n")
        return EXIT_BAD_INPUT
    command, rest = args[0], args[1:]
    if command in ("-h", "--help"):
        print(usage())
        return 0
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    name = None
    if command in FOLDERS:
        if not rest or rest[0] in ("-h", "--help"):
            print(folder_usage(command), file=sys.stdout if rest else sys.stderr)
            return 0 if rest else EXIT_BAD_INPUT
        name, rest = rest[0], rest[1:]
        known = folder_modules(command)
        if name.replace("-", "_") not in known:
            return fail(f"unknown {command} {name!r}; known: {', '.join(known)}")
        name = name.replace("-", "_")
    if command_line:
        # Set up what is missing and continue in .venv (a no-op when started there, e.g. as the console script).
        set_up(sys.argv[0], fabric=builds_fabric(command, rest, name))
    if command == "test":
        return subprocess.run([sys.executable, os.path.join(PROJECT_DIR, "scripts", "test.py"), *rest]).returncode
    if command in FOLDERS:
        return call(f"{command}.{name}", rest, f"{PROG} {command} {name}")
    return call(COMMANDS[command][0], rest, f"{PROG} {command}")


if __name__ == "__main__":
    sys.exit(main())
