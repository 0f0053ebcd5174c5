#!/usr/bin/env python3
"""Where Open vSwitch's hash put an ECMP run's flows, what those links lost, and how each job fared; JSON.

Question: Where did Open vSwitch's hash put an ECMP run's flows, what did those links lose, and is that why BERT d
leads on same-model?
Answer: Yes: the hash puts one uplink of each leaf at 0.58-0.63 of its bytes, those uplinks drop 5.0-10.1% of their
packets against 0.7-2.6%, and the job whose buckets partly avoid them runs faster; the twin's hash model predicts
each leaf's split within 0.001.
Cited in: docs/twin-log.md, Against the suite; docs/findings.md, The twin against the emulation.

    python research/ecmp_paths.py RUN_DIR [--out FILE.json]

RUN_DIR is a run folder of either engine (its ``summary.json``) under ``ecmp`` on a fabric with a path choice.
The switches hash every connection's fixed 5-tuple onto one spine (docs/twin.md, hash model); the twin's hash
model (``twin.network.hashed_path``) says which, so the flows that share a link are known before the run. Output:

* ``ports``: every switch port that carries more than one job's ring traffic (leaf uplinks, spine downlinks),
  with the payload bytes the run's rings put there by the hash model, the flows (job, rank, bucket) that cross
  it and, where the run's fidelity record lists the port (the ports that dropped most), the bytes it sent, the
  packets it dropped and their fraction of its packets;
* ``uplink_split``: per leaf, the share of its uplink bytes sent to its first spine, predicted and, where both
  ports are listed, measured (the twin's hash model against the switches);
* ``jobs``: per job, its GPU utilisation, mean iteration time and TCP timeouts as the run recorded them, the
  share of its ring bytes that cross a lossy port (one whose drop fraction is at least ``--lossy``), and per
  bucket how many of its ranks cross one (a ring step is as slow as its slowest rank).

A job whose buckets avoid the lossy ports loses fewer packets and waits for fewer timers. Reads only: needs no
root. Exit codes: 0, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any, Dict, List, Mapping, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from core.ring import ring_bytes_per_rank
from core.queues import MTU_BYTES

#: A port dropping at least this fraction of its packets is lossy (the same-model run's busiest uplinks drop
#: 4-11%, the others 1-2%; docs/twin.md).
DEFAULT_LOSSY = 0.04


class BadInput(Exception):
    pass


def port_name(switch: str, port: int) -> str:
    """The interface name Mininet gives a switch's port, as the fidelity record names it."""
    return f"{switch}-eth{port}"


def flow_ports(config: Mapping[str, Any]) -> Tuple[list, Dict[str, dict]]:
    """The run's jobs, and per switch port that carries ring traffic between leaves: the hash model's payload
    bytes there and the flows (job, rank, bucket) that cross it."""
    from twin import prepare_recorded
    from twin.network import hashed_path
    resolved = prepare_recorded(config)
    layout, jobs = resolved.layout, resolved.jobs
    view = layout.view()
    ports: Dict[str, dict] = defaultdict(lambda: {"bytes_predicted": 0.0, "flows": []})
    for job in jobs:
        for b, bucket in enumerate(job.model.buckets):
            sent = ring_bytes_per_rank(bucket.nbytes, job.workers) * job.iterations
            for rank in range(job.workers):
                flow = job.flow(rank, b)
                choices = view.paths(flow.src_ip, flow.dst_ip)
                if len(choices) < 1:
                    continue
                path = hashed_path(flow, len(choices), int(config.get("seed") or 1), "ovs")
                for (a, z), _share in view.hop_links(flow.src_ip, flow.dst_ip, path):
                    if view.is_host_link((a, z)):
                        continue
                    name = port_name(a, layout.port(a, z))
                    ports[name]["bytes_predicted"] += sent
                    ports[name]["flows"].append([job.name, rank, b])
                    ports[name]["towards"] = z
    return jobs, ports


def analyse(summary: Mapping[str, Any], lossy: float = DEFAULT_LOSSY) -> dict:
    config = summary.get("config") or {}
    if config.get("scheduler") != "ecmp":
        raise BadInput(f"the run's scheduler is {config.get('scheduler')!r}: its paths are hashed only under ecmp")
    jobs, ports = flow_ports(config)
    if not ports:
        raise BadInput("no ring traffic crosses a switch-to-switch link in this run")
    fidelity = summary.get("fidelity") or {}
    listed = {p["port"]: p for p in ((fidelity.get("classes") or {}).get("most_drops") or [])}
    out_ports = {}
    for name, p in sorted(ports.items()):
        row = {"towards": p["towards"], "bytes_predicted": round(p["bytes_predicted"]),
               "jobs": sorted({f[0] for f in p["flows"]}), "flows": p["flows"]}
        if name in listed:
            sent, dropped = listed[name]["bytes"], listed[name]["dropped"]
            row.update(bytes=sent, dropped=dropped, drop_fraction=dropped / max(sent / MTU_BYTES + dropped, 1))
        out_ports[name] = row
    # Per leaf: the uplinks (ports towards a spine) in port order.
    uplinks: Dict[str, List[str]] = defaultdict(list)
    for name, row in out_ports.items():
        if row["towards"].startswith("sp"):
            uplinks[name.split("-eth")[0]].append(name)
    split = {}
    for leaf, names in sorted(uplinks.items()):
        names.sort(key=lambda n: int(n.split("-eth")[1]))
        predicted = [out_ports[n]["bytes_predicted"] for n in names]
        entry = {"ports": names, "first_share_predicted": predicted[0] / sum(predicted) if sum(predicted) else None}
        if all("bytes" in out_ports[n] for n in names):
            measured = [out_ports[n]["bytes"] for n in names]
            entry["first_share_measured"] = measured[0] / sum(measured)
        split[leaf] = entry
    lossy_ports = {n for n, row in out_ports.items() if row.get("drop_fraction", 0.0) >= lossy}
    tcp = fidelity.get("tcp_by_job") or {}
    by_name = {j.get("name"): j for j in summary.get("jobs") or []}
    out_jobs = {}
    for job in jobs:
        total = crossing = 0.0
        per_bucket = []
        for b, bucket in enumerate(job.model.buckets):
            ranks = {rank for name in lossy_ports for (j, rank, bb) in out_ports[name]["flows"]
                     if j == job.name and bb == b}
            per_bucket.append(len(ranks))
            total += bucket.nbytes * job.workers
            crossing += bucket.nbytes * len(ranks)
        recorded = by_name.get(job.name) or {}
        timeouts = (tcp.get(job.name) or {}).get("timeouts", recorded.get("timeouts"))
        out_jobs[job.name] = {"gpu_utilization": recorded.get("gpu_utilization"),
                              "iteration_time_mean_s": recorded.get("iteration_time_mean_s"),
                              "tcp_timeouts": timeouts,
                              "ring_bytes_share_on_lossy_ports": crossing / total if total else None,
                              "ranks_on_lossy_ports_per_bucket": per_bucket}
    return {"run": summary.get("run_id"), "engine": config.get("engine", "emulation"), "lossy_drop_fraction": lossy,
            "lossy_ports": sorted(lossy_ports), "uplink_split": split, "jobs": out_jobs, "ports": out_ports}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (summary.json) of an ecmp run")
    p.add_argument("--lossy", type=float, default=DEFAULT_LOSSY,
                   help="drop fraction from which a port counts as lossy (default %(default)s)")
    p.add_argument("--out", help="write the JSON here instead of stdout")
    args = p.parse_args(argv)
    path = os.path.join(args.run, "summary.json")
    try:
        if not 0 < args.lossy < 1:
            raise BadInput(f"--lossy must be between 0 and 1 (got {args.lossy:g})")
        if not os.path.isfile(path):
            raise BadInput(f"no summary.json in {args.run}")
        with open(path) as f:
            summary = json.load(f)
        result = analyse(summary, args.lossy)
    except (BadInput, ValueError, KeyError) as exc:
        sys.stderr.write(f"ecmp_paths.py: {exc}\n")
        return 2
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
