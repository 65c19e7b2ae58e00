"""Benchmark erl-serve's bounds: how fast an oversized request is refused, what the costliest allowed reset takes,
and whether a busy session delays the others.

    python benchmarks/speed/bench_serve_bounds.py            # full run (about three minutes on 2 cores)
    python benchmarks/speed/bench_serve_bounds.py --quick    # a smoke run
    python benchmarks/speed/bench_serve_bounds.py --render   # rewrite the .md from the committed .json only

Servers are real ``erl-serve`` processes on 127.0.0.1 (started here, stopped with SIGTERM); the client shares the
machine. Four measurements, raw timings in benchmarks/results/serve_bounds.json, the table in serve_bounds.md:

1. **Refusals.** A reset whose FrozenLake ``map`` is 4 MB, sent ``--trials`` times to a session and to OpenEnv's
   stateless ``POST /reset``: refused by the body cap (413, default 1 MiB), and on a server started with an 8 MiB cap
   by the map bound (400), in both cases before any cell is read. Baseline: the work the bound now prevents,
   ``frozen_lake_maps._prepare_map`` (validation and path search, which the env ran before its size check) on an
   ``--baseline-side`` x side map, timed once in this process.
2. **Costliest allowed resets** (in this process, ``--trials`` each): a full 16 x 16 FrozenLake map; a 20 x 20
   Sokoban level with five boxes, solved within the 20,000 solver states a reset-given level gets; generator
   options whose levels cannot be found, which stop when those 20,000 states are spent.
3. **A busy session.** One client resets a Sokoban session with those unsatisfiable generator options back to back
   for ``--busy-seconds``; meanwhile another client times ``GET /health``, ``GET /info`` and a step of a second
   session every 100 ms. The same probes on the idle server are the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
UNSATISFIABLE = {"size": 20, "num_boxes": 4, "min_moves": 50, "max_moves": 60}


def _start(env_id: str, *flags: str) -> tuple[subprocess.Popen, str]:
    url, port = free_port_url()
    process = subprocess.Popen([sys.executable, "-m", "erl_envs.integrations.openenv_server", "--env", env_id,
                                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *flags],
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            requests.get(url + "/health", timeout=1)
            return process, url
        except requests.RequestException:
            time.sleep(0.25)
    process.kill()
    raise RuntimeError(f"erl-serve for {env_id} did not start")


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def _timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def refusals(trials: int) -> dict:
    huge = {"seed": 0, "options": {"map": "S" + "F" * 4_000_000 + "G"}}
    body = json.dumps(huge)
    out = {}
    for cap, flags in (("1 MiB (default)", ()), ("8 MiB", ("--max-body-bytes", str(8 << 20)))):
        process, url = _start("ERL-FrozenLake-v0", *flags)
        try:
            sid = requests.post(url + "/sessions").json()["session_id"]
            for route in (f"/sessions/{sid}/reset", "/reset"):
                seconds, statuses = [], set()
                for _ in range(trials):
                    elapsed, response = _timed(lambda: requests.post(url + route, data=body,
                                                                     headers={"content-type": "application/json"}))
                    seconds.append(elapsed)
                    statuses.add(response.status_code)
                label = "POST /reset (stateless)" if route == "/reset" else "POST /sessions/{id}/reset"
                out[f"{cap}, {label}"] = {"cap": cap, "route": label, "seconds": seconds,
                                          "status": sorted(statuses)}
        finally:
            _stop(process)
    return out


def baseline_prevented_work(side: int) -> dict:
    from erl_envs.grid import frozen_lake_maps

    rows = ["S" + "F" * (side - 1)] + ["F" * side] * (side - 2) + ["F" * (side - 1) + "G"]
    elapsed, _ = _timed(lambda: frozen_lake_maps._prepare_map("\n".join(rows)))
    return {"side": side, "bytes": side * (side + 1), "seconds": elapsed}


def costliest_resets(trials: int) -> dict:
    import gymnasium as gym

    import erl_envs  # noqa: F401

    side = 16
    lake_map = ["S" + "F" * (side - 1)] + ["F" * side] * (side - 2) + ["F" * (side - 1) + "G"]
    level = [list("#" * 20)] + [list("#" + " " * 18 + "#") for _ in range(18)] + [list("#" * 20)]
    level[2][2] = "@"
    for r, c in [(5, 5), (7, 9), (10, 4), (12, 12), (15, 6)]:
        level[r][c], level[r + 1][c + 2] = "$", "."
    level = ["".join(row) for row in level]
    cases = {
        "FrozenLake, a 16x16 map": ("ERL-FrozenLake-v0", {"map": lake_map}),
        "Sokoban, a 20x20 level with 5 boxes": ("ERL-Sokoban-v0", {"level": level}),
        "Sokoban, generator options no level meets": ("ERL-Sokoban-v0", UNSATISFIABLE),
    }
    out = {}
    for name, (env_id, options) in cases.items():
        seconds = []
        for trial in range(trials):
            env = gym.make(env_id)  # a fresh env: nothing cached from the last trial
            try:
                seconds.append(_timed(lambda: env.reset(seed=trial, options=options))[0])
            except ValueError:
                seconds.append(_timed(lambda: _refused(env, trial, options))[0])
        out[name] = {"seconds": seconds}
    return out


def _refused(env, seed: int, options: dict) -> None:
    try:
        env.reset(seed=seed, options=options)
    except ValueError:
        pass


def busy_session(busy_seconds: float) -> dict:
    process, url = _start("ERL-Sokoban-v0")
    try:
        busy = requests.post(url + "/sessions").json()["session_id"]
        other = requests.post(url + "/sessions").json()["session_id"]
        requests.post(f"{url}/sessions/{other}/reset", json={"seed": 0})
        probes = {"GET /health": lambda: requests.get(url + "/health"),
                  "GET /info": lambda: requests.get(url + "/info"),
                  "step of another session": lambda: requests.post(f"{url}/sessions/{other}/step",
                                                                   json={"action": {"text": "```Up```"}})}

        def sample(seconds: float) -> dict[str, list[float]]:
            found = {name: [] for name in probes}
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for name, call in probes.items():
                    found[name].append(_timed(call)[0])
                time.sleep(0.1)
            return found

        idle = sample(min(busy_seconds, 5.0))
        stop, resets = threading.Event(), []

        def keep_busy() -> None:
            while not stop.is_set():
                elapsed, response = _timed(lambda: requests.post(f"{url}/sessions/{busy}/reset",
                                                                 json={"seed": 0, "options": UNSATISFIABLE}))
                resets.append((elapsed, response.status_code))

        worker = threading.Thread(target=keep_busy)
        worker.start()
        time.sleep(0.3)
        loaded = sample(busy_seconds)
        stop.set()
        worker.join()
        return {"idle": idle, "busy": loaded, "busy_resets": [{"seconds": s, "status": c} for s, c in resets]}
    finally:
        _stop(process)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{1000 * statistics.median(ordered):.1f} / {1000 * p95:.1f} / {1000 * ordered[-1]:.1f}"


def render(data: dict) -> str:
    meta = data["meta"]
    lines = ["# erl-serve: bounded work per request", "",
             f"`{meta['command']}`; {meta['cpus']} CPU cores ({meta['machine']}), Python {meta['python']}, client "
             f"and server on the same machine (127.0.0.1). Load average (1 min) {meta['load_before']:.1f} before the "
             f"run and {meta['load_after']:.1f} after it, on {meta['cpus']} cores: the machine was shared, so "
             "absolute times are slower than on a quiet one. Times are median / 95th percentile / max over the "
             "trials, in milliseconds, from the raw timings in serve_bounds.json.", "",
             "## 1. A 4 MB FrozenLake map at reset", "",
             "| server | route | answer | trials | ms (median / p95 / max) |", "|---|---|---|---|---|"]
    for row in data["refusals"].values():
        lines.append(f"| body cap {row['cap']} | {row['route']} | {', '.join(map(str, row['status']))} | "
                     f"{len(row['seconds'])} | {_ms(row['seconds'])} |")
    base = data["baseline"]
    slowest = max(max(row["seconds"]) for row in data["refusals"].values())
    lines += ["", f"Baseline, the work the bound prevents: validating and searching one {base['side']} x "
              f"{base['side']} map ({base['bytes']:,} bytes) took {base['seconds']:.1f} s, "
              f"{base['seconds'] / slowest:,.1f} times the slowest refusal above; the search grows faster than the "
              "map, so a 4 MB one takes minutes.", "",
              "## 2. The costliest resets the bounds allow", "",
              "| reset | trials | ms (median / p95 / max) |", "|---|---|---|"]
    for name, row in data["costliest"].items():
        lines.append(f"| {name} | {len(row['seconds'])} | {_ms(row['seconds'])} |")
    busy = data["busy"]
    statuses = sorted({r["status"] for r in busy["busy_resets"]})
    lines += ["", "## 3. Other clients while one session is busy", "",
              f"One session ran {len(busy['busy_resets'])} resets with generator options no level meets, back to "
              f"back (answers {', '.join(map(str, statuses))}; "
              f"{_ms([r['seconds'] for r in busy['busy_resets']])} ms each).", "",
              "| probe | idle server: n, ms (median / p95 / max) | busy session: n, ms (median / p95 / max) |",
              "|---|---|---|"]
    for name in busy["idle"]:
        lines.append(f"| {name} | {len(busy['idle'][name])}, {_ms(busy['idle'][name])} | "
                     f"{len(busy['busy'][name])}, {_ms(busy['busy'][name])} |")
    return "\n".join(lines) + "\n"


def free_port_url() -> tuple[str, int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}", port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few trials and a small baseline, a smoke run")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--baseline-side", type=int, default=800, help="side of the baseline map (its work grows "
                                                                         "faster than its size)")
    parser.add_argument("--busy-seconds", type=float, default=15.0)
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the committed .json")
    parser.add_argument("--out", default=str(RESULTS / "serve_bounds.md"))
    args = parser.parse_args()
    out = Path(args.out)
    raw = out.with_suffix(".json")
    if args.render:
        out.write_text(render(json.loads(raw.read_text())))
        print(f"wrote {out}")
        return
    trials, side, busy_seconds = (2, 100, 3.0) if args.quick else (args.trials, args.baseline_side, args.busy_seconds)
    command = "python benchmarks/speed/bench_serve_bounds.py" + (" --quick" if args.quick else "")
    load_before = os.getloadavg()[0]
    data = {"refusals": refusals(trials), "baseline": baseline_prevented_work(side),
            "costliest": costliest_resets(trials), "busy": busy_session(busy_seconds)}
    data["meta"] = {"command": command, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "load_before": load_before,
                    "load_after": os.getloadavg()[0], "trials": trials}
    raw.write_text(json.dumps(data, indent=1) + "\n")
    out.write_text(render(data))
    print(f"wrote {out} and {raw}")


if __name__ == "__main__":
    main()
