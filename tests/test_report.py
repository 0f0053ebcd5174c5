"""cli/report.py: generated parts rewritten from their commands, ``--check`` failing on any difference, and the
committed pages matching the committed results (what CI checks)."""
from cli import report
from cli.report import Part


def _project(tmp_path, page_text: str, printed: str):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page_text)
    (tmp_path / "make.py").write_text(f"print({printed!r}, end='')\n")
    return str(tmp_path)


def test_a_block_is_rewritten_from_its_command_and_check_names_it(tmp_path):
    root = _project(tmp_path, "intro\n<!-- report:t -->\nold | table\n<!-- /report:t -->\nafter\n", "| new |\n")
    parts = [Part("t", "docs/page.md", ("make.py",))]
    problems, written = report.run(parts, root, check=True)
    assert len(problems) == 1 and "part t differs" in problems[0] and not written
    problems, written = report.run(parts, root, check=False)
    assert not problems and written == ["docs/page.md (t)"]
    text = (tmp_path / "docs" / "page.md").read_text()
    assert text == "intro\n<!-- report:t -->\n| new |\n<!-- /report:t -->\nafter\n"
    assert report.run(parts, root, check=True) == ([], [])


def test_whole_pages_missing_blocks_unknown_markers_and_failing_commands(tmp_path):
    root = _project(tmp_path, "<!-- report:stray -->\nx\n<!-- /report:stray -->\n", "# page\n")
    problems, _ = report.run([Part("p", "docs/page.md", ("make.py",), whole_page=True)], root, check=True)
    assert any("stray" in p and "no part" in p for p in problems)
    assert any("part p differs" in p for p in problems)
    problems, _ = report.run([Part("gone", "docs/page.md", ("make.py",))], root, check=True)
    assert any("no block <!-- report:gone -->" in p for p in problems)
    (tmp_path / "fail.py").write_text("import sys\nsys.exit('results/x.csv: no such file')\n")
    problems, _ = report.run([Part("stray", "docs/page.md", ("fail.py",))], root, check=True)
    assert problems == ["stray: fail.py failed: results/x.csv: no such file"]


def test_the_committed_pages_match_the_committed_results():
    problems, written = report.run(report.PARTS, report.PROJECT_DIR, check=True)
    assert problems == [] and written == []
