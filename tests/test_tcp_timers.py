"""research/tcp_timers.py without root: parsing ``ss -tin``, the timer summary, and bad input refused before
anything starts."""
import pytest

from research import tcp_timers

SS = """0      0      10.0.0.6:10005 10.0.0.14:20320
\t cubic wscale:9,9 rto:204 rtt:0.493/0.246 ato:40 mss:1448 cwnd:10 bytes_received:8 minrtt:0.493 snd_wnd:42496
0      0      10.0.0.6:10006 10.0.0.14:20321
\t cubic wscale:9,9 rto:1380 backoff:1 rtt:94.229/51.013 mss:1448 cwnd:28 ssthresh:28 bytes_retrans:1216 \
busy:172ms unacked:22 retrans:1/3 dsack_dups:1 minrtt:0.491
"""


def test_ss_output_is_parsed_per_connection():
    idle, busy = tcp_timers.parse_ss(SS)
    assert idle["peer"] == "10.0.0.14:20320" and idle["rto_ms"] == 204 and idle["srtt_ms"] == 0.493
    assert "unacked" not in idle
    # minrtt and bytes_retrans are not rtt and retrans.
    assert busy["rto_ms"] == 1380 and busy["backoff"] == 1 and busy["unacked"] == 22
    assert busy["srtt_ms"] == 94.229 and busy["rttvar_ms"] == 51.013 and busy["retrans"] == 1


def test_the_summary_counts_only_connections_with_data_in_flight():
    idle, busy = tcp_timers.parse_ss(SS)
    calm = dict(busy, rto_ms=240.0, backoff=0.0, srtt_ms=40.0)
    samples = [(100.2, idle), (100.2, calm), (101.5, busy), (101.6, calm)]
    s = tcp_timers.summarize(samples, start=100.0)
    assert s["samples_in_flight"] == 3
    assert s["rto_ms"]["median"] == 240.0 and s["rto_ms"]["max"] == 1380.0
    assert s["share_above_300ms"] == pytest.approx(1 / 3) and s["share_backed_off"] == pytest.approx(1 / 3)
    assert [(b["second"], b["samples"], b["rto_ms_max"]) for b in s["per_second"]] == [(0, 1, 240.0), (1, 2, 1380.0)]
    assert tcp_timers.summarize([(1.0, idle)], start=0.0) == {"samples_in_flight": 0}


@pytest.mark.parametrize("argv, message", [
    (["--job", "bert_b"], "give the run's flags after --"),
    (["--job", "bert_b", "--", "--scheduler", "crux"], "give the run an --out folder"),
    (["--job", "bert_b", "--", "--engine", "fluid", "--out", "/tmp/x"], "--engine fluid has no sockets"),
    (["--job", "bert_b", "--interval", "0", "--", "--out", "/tmp/x"], "--interval must be positive"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(tcp_timers.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert tcp_timers.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not started
