"""``flux-testbed report``: regenerate the generated tables and pages of README.md and docs/ from the committed
results, or ``--check`` that each still matches what those results give.

    flux-testbed report            # rewrite every generated part
    flux-testbed report --check    # exit 1 naming each part that differs (CI runs this through the tests)
    flux-testbed report --list     # each part, its page and the command that prints it

A generated part is a whole page (``docs/scale.md``) or a block of a page between ``<!-- report:NAME -->`` and
``<!-- /report:NAME -->``. ``PARTS`` names, for each, the command (run from the project's folder, with this
interpreter) whose standard output it is; a page's reader sees the command beside the part, so a number in it
traces to a command and a committed file. A marker with no part, or a part whose marker is missing, is an error.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"<!-- report:([\w-]+) -->\n(.*?)<!-- /report:\1 -->", re.S)


@dataclass(frozen=True)
class Part:
    name: str
    page: str                 # relative to the project
    command: Tuple[str, ...]  # a script relative to the project, then its arguments
    whole_page: bool = False


PARTS: Tuple[Part, ...] = (
    Part("scale", "docs/scale.md", (
        "research/scale_map.py", "report", "results/scale/map", "--confirm", "results/scale/confirm-16",
        "--suite", "results/suite/fluid-flux-paths", "--suite-before", "results/suite/fluid",
        "--before", "results/scale/map-256", "--confirm-churn", "results/scale/confirm-16-churn",
        "--suite-contended", "results/suite/fluid-flux-contended",
        "--suite-in-place", "results/suite/fluid-flux-in-place"), whole_page=True),
    Part("suite-twin", "docs/suite.md", ("cli/suite.py", "--table", "results/suite/fluid")),
    Part("suite-emulation", "docs/suite.md", ("cli/suite.py", "--table", "results/suite/emulation")),
    Part("fidelity-verdict", "docs/fidelity.md", (
        "bench/fidelity.py", "--verdict-table", "results/fidelity/verdict-wait-set.json",
        "results/fidelity/verdict-wait-check-headline.json", "results/fidelity/verdict-wait-check-same-model.json")),
    Part("fidelity-rate", "docs/fidelity.md", (
        "bench/fidelity.py", "--rate-table", "results/fidelity/bench_fidelity_tcp_3seeds_ack_class.json")),
    Part("fidelity-rate-fixed", "docs/fidelity.md", (
        "bench/fidelity.py", "--rate-table", "results/fidelity/bench_fidelity_tcp_fixed_s1.json",
        "results/fidelity/bench_fidelity_tcp_fixed_s2.json")),
    Part("fidelity-rate-before", "docs/fidelity.md", (
        "bench/fidelity.py", "--rate-table", "results/fidelity/bench_fidelity_tcp_3seeds.json")),
)


def render(part: Part, root: str = PROJECT_DIR) -> str:
    """What the part's command prints now (raises RuntimeError with its last error line if it fails)."""
    script, *args = part.command
    r = subprocess.run([sys.executable, os.path.join(root, script), *args], cwd=root, capture_output=True,
                       text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise RuntimeError(f"{part.name}: {' '.join(part.command)} failed: {last}")
    return r.stdout


def page_markers(text: str) -> Dict[str, str]:
    """Block name -> its current content, for every generated block of a page."""
    return {m.group(1): m.group(2) for m in MARKER.finditer(text)}


def replace_block(text: str, name: str, content: str) -> str:
    if content and not content.endswith("\n"):
        content += "\n"
    return MARKER.sub(lambda m: m.group(0) if m.group(1) != name else
                      f"<!-- report:{name} -->\n{content}<!-- /report:{name} -->", text)


def unregistered_markers(parts: Sequence[Part], root: str) -> List[str]:
    """``page: NAME`` of every block in README.md and docs/ that no part generates."""
    known = {(p.page, p.name) for p in parts if not p.whole_page}
    pages = ["README.md"] + [os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(root, "docs")))
                             if n.endswith(".md")]
    out = []
    for page in pages:
        path = os.path.join(root, page)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            names = page_markers(f.read())
        out += [f"{page}: {name}" for name in names if (page, name) not in known]
    return out


def run(parts: Sequence[Part], root: str, check: bool) -> Tuple[List[str], List[str]]:
    """(what differs or is broken, what was rewritten); with ``check`` nothing is written."""
    problems = [f"{m}: a generated block that no part of cli/report.py makes"
                for m in unregistered_markers(parts, root)]
    written = []
    for part in parts:
        path = os.path.join(root, part.page)
        try:
            with open(path, encoding="utf-8") as f:
                old = f.read()
        except OSError as exc:
            problems.append(f"{part.page}: {exc.strerror}")
            continue
        if not part.whole_page and part.name not in page_markers(old):
            problems.append(f"{part.page}: no block <!-- report:{part.name} --> ... <!-- /report:{part.name} -->")
            continue
        try:
            content = render(part, root)
        except RuntimeError as exc:
            problems.append(str(exc))
            continue
        new = content if part.whole_page else replace_block(old, part.name, content)
        if new == old:
            continue
        if check:
            diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), part.page, "from results", n=0,
                                             lineterm=""))
            first = next((line for line in diff[2:] if line[:1] in "+-"), "")
            problems.append(f"{part.page}: part {part.name} differs from what its results give "
                            f"({len([d for d in diff[2:] if d[:1] in '+-'])} lines; first: {first[:100]})")
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            written.append(f"{part.page} ({part.name})")
    return problems, written


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="flux-testbed report", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if any generated part differs")
    p.add_argument("--list", action="store_true", help="list the generated parts and their commands")
    args = p.parse_args(argv)
    if args.list:
        for part in PARTS:
            where = part.page if part.whole_page else f"{part.page} <!-- report:{part.name} -->"
            print(f"{part.name}: {where}\n    python {' '.join(part.command)}")
        return 0
    problems, written = run(PARTS, PROJECT_DIR, args.check)
    for line in written:
        print(f"report: rewrote {line}")
    for line in problems:
        sys.stderr.write(f"report: {line}\n")
    if not problems and args.check:
        print(f"report: all {len(PARTS)} generated parts match the committed results")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
