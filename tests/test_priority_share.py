"""bench/priority_share.py without root: its analysis on hand-made sender reports, and its input checks."""
import pytest

from bench import priority_share as bench


def test_message_times_by_phase_and_the_shares_of_the_port():
    t0 = 1000.0
    # 40 ms messages alone, 50 ms ones once the low flow sends; one message straddles the phase boundary.
    alone = [(t0 + 1.0 + 0.1 * k, t0 + 1.04 + 0.1 * k) for k in range(30)]        # 1.0 .. 3.94
    straddling = [(t0 + 3.98, t0 + 4.03)]
    shared = [(t0 + 5.0 + 0.1 * k, t0 + 5.05 + 0.1 * k) for k in range(40)]       # 5.0 .. 8.95
    high = ({}, {"messages": alone + straddling + shared})
    lows = [({"measured_bytes": 1_000_000}, {}), ({"measured_bytes": 500_000}, {})]
    f = bench.analyse(high, lows, t0, shared_s=9.0, rate_mbps=8.0, message=10_000)
    assert f["messages_alone"] == 30 and f["messages_shared"] == 40
    assert f["message_alone_s"] == pytest.approx(0.04) and f["message_shared_s"] == pytest.approx(0.05)
    assert f["slowdown"] == pytest.approx(1.25)
    port = 8e6 / 8 * (9.0 - bench.SETTLE_S)                   # bytes the port carries in the measured span
    assert f["high_share"] == pytest.approx(40 * 10_000 / port)
    assert f["low_share"] == pytest.approx(1_500_000 / port)


def test_a_phase_without_messages_is_an_error():
    with pytest.raises(RuntimeError):
        bench.analyse(({}, {"messages": [(1.5, 1.6)]}), [], 0.0, shared_s=9.0, rate_mbps=5.0, message=10_000)


@pytest.mark.parametrize("args", [["--low-class", "6", "--high-class", "6"], ["--message", "100"],
                                  ["--idle", "-1"], ["--shared", "1"], ["--low-flows", "99"]])
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert bench.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench/priority_share.py: ")
