"""The controllers' CSV files: a restarted controller goes on with its predecessor's file."""
import csv

from controller.channels import Csv


def test_a_successor_drops_the_half_row_its_killed_predecessor_left(tmp_path):
    path = tmp_path / "flow_stats.csv"
    # Killed in the middle of a row: the file ends without a newline.
    path.write_bytes(b"time,job,bytes\r\n1.0,0,100\r\n2.0,0,2")
    Csv(str(path), ["time", "job", "bytes"], append=True).write(["3.0", "0", "300"])
    rows = list(csv.DictReader(open(path, newline="")))
    assert [(r["time"], r["bytes"]) for r in rows] == [("1.0", "100"), ("3.0", "300")]


def test_a_successor_keeps_complete_rows_and_writes_a_header_only_into_a_new_file(tmp_path):
    path = tmp_path / "port_stats.csv"
    path.write_bytes(b"time,bytes\r\n1.0,100\r\n")
    Csv(str(path), ["time", "bytes"], append=True).write(["2.0", "200"])
    assert path.read_bytes() == b"time,bytes\r\n1.0,100\r\n2.0,200\r\n"
    # Killed before the header was complete: nothing is left, so the header is written again.
    half = tmp_path / "half.csv"
    half.write_bytes(b"ti")
    Csv(str(half), ["time", "bytes"], append=True).write(["1.0", "100"])
    assert half.read_bytes() == b"time,bytes\r\n1.0,100\r\n"
