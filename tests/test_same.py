"""analysis/same.py: two results folders compared cell by cell."""
from analysis.same import compare


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_equal_tables_are_the_same_whatever_their_commit(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "x/summary.csv", "job,gpu_utilization,git_commit\nr,0.5,abc\n")
    write(b, "x/summary.csv", "job,gpu_utilization,git_commit\nr,0.5,def\n")
    out = compare(str(a), str(b))
    assert out["same"] and out["tables"] == 1 and out["cells"] == 2


def test_a_changed_cell_a_missing_table_and_a_tolerance(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "x/summary.csv", "job,gpu_utilization\nr,0.5\n")
    write(b, "x/summary.csv", "job,gpu_utilization\nr,0.5000001\n")
    write(a, "y/summary.csv", "job\nr\n")
    out = compare(str(a), str(b))
    assert not out["same"] and out["differences"] == 1 and out["only_in_reference"] == ["y/summary.csv"]
    assert out["listed"][0] == {"table": "x/summary.csv", "row": 0, "column": "gpu_utilization",
                                "reference": "0.5", "other": "0.5000001"}
    assert compare(str(a), str(b), tolerance=1e-6)["differences"] == 0


def test_a_column_one_side_has_is_listed_not_compared(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "suite.csv", "scenario,u_mean\nx,0.5\n")
    write(b, "suite.csv", "scenario,u_mean,u_capacity_bound\nx,0.5,0.7\n")
    out = compare(str(a), str(b))
    assert out["same"] and out["columns_on_one_side"] == {"suite.csv": ["u_capacity_bound"]}
