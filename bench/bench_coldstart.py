"""Issue 8 benchmark: the API function's cold `import app`, from the built package, each run in a fresh process.

    .venv/bin/python bench/bench_coldstart.py [--runs 15] [--out out] [--build]

Scenarios, interleaved run by run (each a new `python -I -S` whose path is only the API function's code, its
layers and the SDK the python3.11 runtime provides, with the function's environment as deployed):
  package            the zips as `make package` builds them: bytecode shipped (unchecked-hash .pyc)
  package, no .pyc   the same files without their bytecode, run with -B: what every cold start paid when the
                     zip had no .pyc (a Lambda's /var/task is read-only, so nothing is cached between starts)
  source, no .pyc    app.py + chalicelib from the work tree without bytecode (-B), the dependencies from the
                     virtualenv with theirs: the compile cost of our own code alone
  package + deps     `import app` and then `get_deps()` (what the first request adds: PynamoDB models, the
                     boto3 clients), from the package
The time is measured inside the process around the import (interpreter start-up is the runtime's, not ours).
Then one `-X importtime` run of the package says where the time goes (self time per top-level package).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
GOAL_MS = 300.0
#: the modules whose direct imports the report breaks down (cumulative ms each)
BREAKDOWN = ("app", "chalicelib.api.routes")


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "scripts" / "build_lambda.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_lambda"] = module
    spec.loader.exec_module(module)
    return module


PROGRAM = """
import json, sys, time
sys.path[:0] = json.loads(sys.argv[1])
first_request = sys.argv[2] == "1"
start = time.perf_counter()
import app
if first_request:
    from chalicelib.bootstrap import get_deps
    get_deps()
print((time.perf_counter() - start) * 1000)
"""


def without_bytecode(tree: Path, into: Path) -> Path:
    shutil.copytree(tree, into, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


def run_once(paths: list[str], env: dict[str, str], *, no_bytecode: bool, first_request: bool) -> float:
    flags = ["-I", "-S", *(["-B"] if no_bytecode else [])]
    result = subprocess.run(
        [sys.executable, *flags, "-c", PROGRAM, json.dumps(paths), "1" if first_request else "0"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


def importtime(
    paths: list[str], env: dict[str, str], *, first_request: bool
) -> tuple[list[tuple[str, float]], dict[str, list[tuple[str, float]]]]:
    """(self ms per top-level package, {module in BREAKDOWN: cumulative ms of each module it imports})."""
    program = f"import json, sys; sys.path[:0] = json.loads({json.dumps(json.dumps(paths))}); import app"
    if first_request:
        program += "; from chalicelib.bootstrap import get_deps; get_deps()"
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", program],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    by_package: dict[str, float] = defaultdict(float)
    rows: list[tuple[int, str, float]] = []  # (nesting, module, cumulative ms); children come first
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, raw_name = line.removeprefix("import time:").split("|")
        name = raw_name.strip()
        top = name.split(".")[0]
        key = "chalicelib." + name.split(".")[1] if top == "chalicelib" and "." in name else top
        by_package[key] += int(self_us) / 1000
        rows.append(((len(raw_name) - len(raw_name.lstrip())) // 2, name, int(cumulative) / 1000))

    def imports_of(module: str) -> list[tuple[str, float]]:
        at = next(i for i, row in enumerate(rows) if row[1] == module)
        found = []
        for level, name, ms in reversed(rows[:at]):
            if level <= rows[at][0]:
                break
            if level == rows[at][0] + 1:
                found.append((name, ms))
        return sorted(found, key=lambda c: -c[1])

    return sorted(by_package.items(), key=lambda item: -item[1]), {m: imports_of(m) for m in BREAKDOWN}


def summary(name: str, times: list[float]) -> str:
    median = statistics.median(times)
    return (
        f"{name:<20} median {median:7.1f} ms   spread {min(times):6.1f}–{max(times):6.1f} ms   n={len(times)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "out")
    parser.add_argument("--build", action="store_true", help="build the package first (make package)")
    args = parser.parse_args()
    builder = load_builder()
    out = args.out.resolve()
    if args.build or not (out / "sam.json").exists():
        builder.build(out, "dev")
    template = json.loads((out / "sam.json").read_text())
    _, zips = builder.zip_functions(template)["APIHandler"]
    with tempfile.TemporaryDirectory(prefix="weknora-coldstart-") as tmp:
        scratch = Path(tmp)
        runtime = str(builder.runtime_dir(scratch))
        package = [str(builder.unpacked(out, z, scratch)[0]) for z in zips]
        stripped = [
            str(without_bytecode(Path(p), scratch / "stripped" / str(i))) for i, p in enumerate(package)
        ]
        source = without_bytecode(ROOT / "chalicelib", scratch / "source" / "chalicelib").parent
        shutil.copy(ROOT / "app.py", source / "app.py")
        venv = next(Path(sys.prefix, "lib").glob("python3.*/site-packages"))
        env = builder.function_environment(template, "APIHandler", str(scratch / "state"))
        scenarios = {
            "package": ([*package, runtime], False, False),
            "package, no .pyc": ([*stripped, runtime], True, False),
            "source, no .pyc": ([str(source), str(venv)], True, False),
            "package + deps": ([*package, runtime], False, True),
        }
        times: dict[str, list[float]] = {name: [] for name in scenarios}
        for paths, no_bytecode, first in scenarios.values():  # one warm-up each (file cache)
            run_once(paths, env, no_bytecode=no_bytecode, first_request=first)
        for _ in range(args.runs):
            for name, (paths, no_bytecode, first) in scenarios.items():
                times[name].append(run_once(paths, env, no_bytecode=no_bytecode, first_request=first))
        print(f"cold `import app` of the API function ({args.runs} fresh processes per scenario)")
        for name, values in times.items():
            print(summary(name, values))
        packaged = statistics.median(times["package"])
        verdict = "met" if packaged <= GOAL_MS else "NOT met"
        print(f"goal ≤ {GOAL_MS:.0f} ms median from the package: {verdict} ({packaged:.0f} ms)")
        print(
            f"bytecode saves {statistics.median(times['package, no .pyc']) / packaged:.1f}× "
            f"({statistics.median(times['package, no .pyc']) - packaged:.0f} ms)"
        )
        for first, what in ((False, "`import app`"), (True, "`import app` + get_deps()")):
            packages, children = importtime([*package, runtime], env, first_request=first)
            print(f"\nwhere {what} from the package spends its import time (-X importtime, one run)")
            print("  self ms per package: " + ", ".join(f"{name} {ms:.0f}" for name, ms in packages[:12]))
            for module, imported in children.items() if not first else ():
                listed = ", ".join(f"{name} {ms:.0f}" for name, ms in imported[:10])
                print(f"  cumulative ms of what {module} imports: {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
