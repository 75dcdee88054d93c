"""Start-up cost: ``import agentloop_nb`` against its dependency floor, in one run, interleaved.

    .venv/bin/python benchmarks/bench_import.py                  # this tree, 21 rounds
    .venv/bin/python benchmarks/bench_import.py --instructions   # + callgrind counts
    .venv/bin/python benchmarks/bench_import.py --load-ext       # + ``%load_ext`` in IPython
    .venv/bin/python benchmarks/bench_import.py --ref 8c89743    # another version (git ref)
    .venv/bin/python benchmarks/bench_import.py --refs 8c89743 HEAD   # import instructions per
                                                                     # git ref (bisecting)
    .venv/bin/python benchmarks/bench_import.py --against main   # + ``main``'s package and its
                                                                 # floor in the same rounds

Every sample is a fresh interpreter (``python -c``) that times its own imports (wall and process
CPU time) and reports its resident set size afterwards. The contenders of a round run one after
the other in a rotating order, so a loaded machine slows them alike:

- ``package``: ``import agentloop_nb``;
- ``floor``: the dependency floor, the exact set of third-party modules (everything outside the
  standard library) that ``import agentloop_nb`` loads, imported in the same order without it;
- ``floor + stdlib``: the floor plus the standard-library modules the package loads itself, so
  ``package`` over it is the cost of the package's own code;
- ``bare``: an empty interpreter (its RSS is what every process starts with).

The module sets are read from a first probe of the package, so the floor follows the package
as its imports change. ``.pyc`` files are compiled first (``compileall``: this environment sets
``PYTHONDONTWRITEBYTECODE=1``, so a plain run would time the compiler).

``--instructions`` counts each contender's instructions under valgrind's callgrind (the whole
process, ``PYTHONHASHSEED=0``; deterministic where timings on a shared machine swing 2-5x) and
prints the import's own count (the process's count minus an empty interpreter's).
"""

from __future__ import annotations

import argparse
import compileall
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The probe a fresh interpreter runs: ``BODY`` is timed; the report is printed as one JSON line.
PROBE = """
import sys, time
_before = set(sys.modules)
_c0 = time.process_time(); _t0 = time.perf_counter()
{body}
_t1 = time.perf_counter(); _c1 = time.process_time()
_new = [m for m in sys.modules if m not in _before]
with open("/proc/self/status") as _f:
    _rss = next(int(l.split()[1]) for l in _f if l.startswith("VmRSS:"))
import json
print("PROBE" + json.dumps({{"wall": _t1 - _t0, "cpu": _c1 - _c0, "rss_kib": _rss, "new": _new}}))
"""

LOAD_EXT_SETUP = """
from IPython.core.interactiveshell import InteractiveShell
_shell = InteractiveShell.instance()
"""


def floor_body(modules: list[str]) -> str:
    return f"import importlib\nfor _m in {modules!r}:\n    importlib.import_module(_m)\n"


def probe(body: str, path: Path, cwd: Path, setup: str = "") -> dict[str, object]:
    """Run ``body`` in a fresh interpreter that imports the package from ``path``."""
    code = setup + PROBE.format(body=body)
    env = {**os.environ, "PYTHONPATH": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE")), None)
    if done.returncode or line is None:
        raise SystemExit(f"probe failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(line[5:])
    return result


def callgrind(body: str, path: Path, cwd: Path, setup: str = "") -> int:
    """Instructions of a whole ``python -c`` process running ``setup`` then ``body``."""
    env = {**os.environ, "PYTHONPATH": str(path), "PYTHONHASHSEED": "0"}
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*valgrind, sys.executable, "-c", setup + body],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or not found:
        raise SystemExit(f"callgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def export(ref: str, into: Path) -> Path:
    """``ref``'s package under ``into/<ref>/agentloop_nb`` (``WORKTREE``: this tree), compiled."""
    if ref == "WORKTREE":
        path = ROOT
    else:
        path = into / ref
        blob = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "agentloop_nb"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(path, filter="data")
    compileall.compile_dir(path / "agentloop_nb", quiet=1)
    return path


def package_sets(path: Path, cwd: Path) -> tuple[list[str], list[str]]:
    """(third-party modules, standard-library modules) that ``import agentloop_nb`` loads."""
    new = probe("import agentloop_nb", path, cwd)["new"]
    assert isinstance(new, list)
    outside = [m for m in new if m != "agentloop_nb" and not m.startswith("agentloop_nb.")]
    stdlib = sys.stdlib_module_names
    third = [m for m in outside if m.split(".")[0] not in stdlib]
    return third, [m for m in outside if m.split(".")[0] in stdlib]


def floors(path: Path, cwd: Path) -> tuple[list[str], list[str]]:
    """(the floor, the floor + stdlib) of the package at ``path``."""
    third, std = package_sets(path, cwd)
    floor_std = probe(floor_body(third), path, cwd)["new"]
    assert isinstance(floor_std, list)
    return third, third + [m for m in std if m not in floor_std]


def timings(
    path: Path, cwd: Path, rounds: int, load_ext: bool, against: tuple[str, Path] | None = None
) -> None:
    third, std = package_sets(path, cwd)
    tops = sorted({m.split(".")[0] for m in third})
    print(f"floor: {len(third)} third-party modules from {', '.join(tops)}")
    print(f"the package also loads {len(std)} standard-library modules itself or through them")
    floor_std = probe(floor_body(third), path, cwd)["new"]
    assert isinstance(floor_std, list)
    own_std = [m for m in std if m not in floor_std]
    print(f"  of which {len(own_std)} the floor does not load: {', '.join(own_std[:40])}")
    contenders = {
        "package": ("import agentloop_nb\n", "", path),
        "floor": (floor_body(third), "", path),
        "floor + stdlib": (floor_body(third + own_std), "", path),
        "bare": ("pass\n", "", path),
    }
    if load_ext:
        contenders["%load_ext"] = (
            "_shell.run_line_magic('load_ext', 'agentloop_nb')\n",
            LOAD_EXT_SETUP,
            path,
        )
        contenders["IPython shell only"] = ("pass\n", LOAD_EXT_SETUP, path)
    if against is not None:  # another version's package and floor, in the same rounds
        ref, ref_path = against
        _, ref_floor_std = floors(ref_path, cwd)
        contenders[f"package @{ref}"] = ("import agentloop_nb\n", "", ref_path)
        contenders[f"floor + stdlib @{ref}"] = (floor_body(ref_floor_std), "", ref_path)
    names = list(contenders)
    samples: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    for r in range(rounds + 1):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            body, setup, where = contenders[name]
            with tempfile.TemporaryDirectory() as d:  # %load_ext creates .agentloop/ in its cwd
                result = probe(body, where, Path(d), setup)
            if r:  # round 0 warms the file cache
                samples[name].append(result)

    def med(name: str, key: str) -> float:
        return statistics.median(float(s[key]) for s in samples[name])  # type: ignore[arg-type]

    print(f"\nmedian of {rounds} interleaved rounds (each a fresh interpreter)")
    print(
        f"{'contender':20} {'wall ms':>8} {'cpu ms':>8} {'RSS MiB':>8}   package / it (wall, cpu, RSS)"
    )
    for name in names:
        wall, cpu, rss = med(name, "wall"), med(name, "cpu"), med(name, "rss_kib")
        ratio = ""
        if name in ("floor", "floor + stdlib"):
            ratio = (
                f"   {med('package', 'wall') / wall:.2f}x {med('package', 'cpu') / cpu:.2f}x "
                f"{med('package', 'rss_kib') / rss:.2f}x"
            )
        print(f"{name:20} {wall * 1e3:8.1f} {cpu * 1e3:8.1f} {rss / 1024:8.1f}{ratio}")
    if against is not None:
        ref = against[0]
        for key in ("wall", "cpu"):
            print(
                f"package / floor + stdlib, {key}: {med('package', key) / med('floor + stdlib', key):.3f}x"
                f" here, {med(f'package @{ref}', key) / med(f'floor + stdlib @{ref}', key):.3f}x"
                f" @{ref}"
            )
    if load_ext:
        extra = med("%load_ext", "rss_kib") - med("IPython shell only", "rss_kib")
        print(f"%load_ext adds {extra / 1024:.1f} MiB to the shell's RSS")


def instructions(path: Path, cwd: Path, load_ext: bool) -> None:
    third, std = package_sets(path, cwd)
    floor_std = probe(floor_body(third), path, cwd)["new"]
    assert isinstance(floor_std, list)
    own_std = [m for m in std if m not in floor_std]
    bare = callgrind("pass", path, cwd)
    counts = {
        "package": callgrind("import agentloop_nb", path, cwd) - bare,
        "floor": callgrind(floor_body(third), path, cwd) - bare,
        "floor + stdlib": callgrind(floor_body(third + own_std), path, cwd) - bare,
    }
    print(f"\ninstructions (callgrind, minus an empty interpreter's {bare / 1e6:,.0f} M)")
    for name, count in counts.items():
        print(
            f"  {name:20} {count / 1e6:9,.1f} M   (package / it: {counts['package'] / count:.2f}x)"
        )
    if load_ext:
        shell = callgrind("pass", path, cwd, LOAD_EXT_SETUP)
        with tempfile.TemporaryDirectory() as d:
            ext = callgrind(
                "_shell.run_line_magic('load_ext', 'agentloop_nb')", path, Path(d), LOAD_EXT_SETUP
            )
        print(f"  {'%load_ext':20} {(ext - shell) / 1e6:9,.1f} M   (over an IPython shell's)")


def refs(names: list[str], tmp: Path) -> None:
    """Import instructions of each git ref (bisecting start-up growth)."""
    print("ref        import agentloop_nb, M instructions (callgrind, minus an empty interpreter)")
    for ref in names:
        path = export(ref, tmp)
        bare = callgrind("pass", path, tmp)
        count = callgrind("import agentloop_nb", path, tmp) - bare
        print(f"{ref:10} {count / 1e6:9,.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--instructions", action="store_true", help="also count (callgrind)")
    parser.add_argument("--load-ext", action="store_true", help="also time %%load_ext in IPython")
    parser.add_argument("--ref", default="WORKTREE", help="measure this git ref instead")
    parser.add_argument("--refs", nargs="+", help="only count import instructions of these refs")
    parser.add_argument("--against", help="also time this git ref's package and floor (A/B)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.refs:
            refs(args.refs, tmp)
            return
        path = export(args.ref, tmp)
        against = None if args.against is None else (args.against, export(args.against, tmp))
        timings(path, tmp, args.rounds, args.load_ext, against)
        if args.instructions:
            instructions(path, tmp, args.load_ext)


if __name__ == "__main__":
    main()
