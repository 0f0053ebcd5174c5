"""The one convention of every user-facing command (testbed/bootstrap.py): set up what is missing, then continue
in .venv; and the test command's choice of interpreters (scripts/test.py). No root needed."""
import ast
import glob
import os
import subprocess
import sys

import pytest

from testbed import bootstrap

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = [os.path.join(PROJECT_DIR, "testbed", "run.py"), os.path.join(PROJECT_DIR, "cli", "main.py")] + sorted(
    path for folder in ("scripts", "bench", "research") for path in glob.glob(os.path.join(PROJECT_DIR, folder, "*.py"))
    if not path.endswith("__init__.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: os.path.relpath(p, PROJECT_DIR))
def test_every_command_sets_up_and_reexecutes_before_importing_dependencies(path):
    # ensure_env directly (testbed/run.py), or through the one preamble of the other commands (cli/entry.py).
    tree = ast.parse(open(path).read())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) in ("ensure_env", "set_up")]
    assert len(calls) == 1, f"{path} must call ensure_env (or cli.entry.set_up) once"
    # Nothing but the standard library and testbed.bootstrap is imported at module level before the call.
    third_party = {"numpy", "matplotlib", "yaml", "tqdm", "mininet", "ryu", "os_ken", "scapy", "psutil"}
    for node in tree.body:
        if node.lineno >= calls[0].lineno:
            break
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not any(n.split(".")[0] in third_party for n in names), (path, names)
            ours = ("testbed", "controller", "workloads", "cli", "analysis", "twin", "core", "experiment")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(ours):
                assert node.module in ("testbed.bootstrap", "cli.entry"), (path, node.module)


def test_a_command_started_outside_the_environment_reexecutes_in_it():
    # The venv's base interpreter has none of the project's packages: plot.py must still answer --help.
    base = os.path.join(sys.base_prefix, "bin", "python3")
    if os.path.realpath(sys.prefix) == os.path.realpath(sys.base_prefix):
        pytest.fail("the tests must run in the project's virtual environment (scripts/test.py does)")
    env = dict(os.environ, FLUX_VENV=sys.prefix)
    r = subprocess.run([base, os.path.join(PROJECT_DIR, "scripts", "plot.py"), "--help"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "usage: plot.py" in r.stdout


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    files = []
    for name in ("install.sh", "setup.cfg"):
        path = tmp_path / name
        path.write_text(f"{name} v1\n")
        files.append(str(path))
    monkeypatch.setattr(bootstrap, "RECIPE_FILES", tuple(files))
    return files


def make_venv(path, stamp):
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    if stamp is not None:
        (path / bootstrap.STAMP_NAME).write_text(stamp + "\n")
    return str(path)


def test_an_environment_is_current_only_with_the_recipes_stamp(tmp_path, recipe):
    stamp = bootstrap.recipe_stamp()
    assert bootstrap.venv_problem(str(tmp_path / "none")).startswith("no Python environment")
    assert bootstrap.venv_problem(make_venv(tmp_path / "unstamped", None)) is not None
    current = make_venv(tmp_path / "current", stamp)
    assert bootstrap.venv_problem(current) is None
    with open(recipe[1], "a") as f:  # a new dependency in setup.cfg
        f.write("numpy>=2\n")
    assert bootstrap.recipe_stamp() != stamp
    assert "does not match" in bootstrap.venv_problem(current)


def test_without_root_a_missing_setup_is_one_line_and_exit_2(tmp_path, recipe, monkeypatch, capsys):
    monkeypatch.setenv("FLUX_VENV", str(tmp_path / "absent"))
    monkeypatch.delenv("FLUX_BOOTSTRAPPED", raising=False)
    monkeypatch.setattr(bootstrap.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exc:
        bootstrap.ensure_env("run.py", needs_fabric=False, script=os.path.join(PROJECT_DIR, "testbed", "run.py"))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("run.py: set-up needed (no Python environment in")
    assert err[0].endswith("run it once as root: sudo python " + os.path.relpath(
        os.path.join(PROJECT_DIR, "testbed", "run.py"), os.getcwd()))


def test_a_setup_that_did_not_help_is_not_retried_forever(tmp_path, recipe, monkeypatch, capsys):
    monkeypatch.setenv("FLUX_VENV", str(tmp_path / "absent"))
    monkeypatch.setenv("FLUX_BOOTSTRAPPED", "1")  # we are the re-executed command
    with pytest.raises(SystemExit) as exc:
        bootstrap.ensure_env("run.py", needs_fabric=False)
    assert exc.value.code == 2
    assert "set-up finished but" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- scripts/test.py
def load_test_command():
    import importlib.util
    spec = importlib.util.spec_from_file_location("test_command", os.path.join(PROJECT_DIR, "scripts", "test.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_other_interpreters_are_one_per_minor_version_and_never_this_one():
    command = load_test_command()
    here = sys.version_info[:2]
    found = command.other_interpreters(here)
    assert here not in found
    for version, path in found.items():
        assert version in command.SUPPORTED and command.interpreter_version(path) == version
    assert command.parse_pythons("none", here) == {}
    assert command.parse_pythons(sys.executable, None) == {here: sys.executable}
    with pytest.raises(ValueError, match="not a Python 3.10-3.13 interpreter"):
        command.parse_pythons("/bin/true", here)
