"""Build the deployable artifact: `chalice package` with the merge template infra/stack.py generates, then the
Lambda layers the merged template declares, bytecode in every zip, and a check that each function's package
imports.

    python scripts/build_lambda.py [--out out] [--stage dev]        (or `make package`)

What comes out in `--out`: `sam.json` (deployable with `sam build -t out/sam.json && sam deploy`: it also
builds the docreader image from its Metadata), `deployment.zip` (app.py + chalicelib, shared by the Chalice
functions), one `layer-<name>.zip` per `AWS::Serverless::LayerVersion` of the template (built from
`requirements/layer-<name>.txt`), `statemachine/` (the ASL that `DefinitionUri` points at) and
`package-report.json` (per function: its zips, its unzipped size, what its package failed to import).

Which function gets which layer is written in infra/template.json (the functions' `Layers`). The check runs
each zip function in a fresh interpreter (`python -I -S`) whose path is only its code, its layers and what the
python3.11 runtime provides (boto3, botocore, s3transfer, jmespath, python-dateutil, six), with the function's
environment as deployed, and imports:
  - its handler module and handler;
  - every chalicelib module its entry points reach (the stage module its handler calls, or the API routes),
    following imports inside functions too, but not into local-only code;
  - the adapters the composition root builds on AWS: `build_services()` (what every handler's `get_deps()`
    does), then each `deps.<service>(...)` the reached code calls, once (clients are created, nothing sent);
  - every third-party module those chalicelib modules import (inside functions too), and the few imports that
    happen deeper than that (DEEP_IMPORTS).
The build fails if a function is over Lambda's 250 MB unzipped limit or its package misses an import.
"""

from __future__ import annotations

import argparse
import ast
import compileall
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"
PLATFORM = "manylinux2014_x86_64"  # the python3.11 runtime is Amazon Linux 2 (glibc 2.26)
UNZIPPED_LIMIT = 250 * 1024 * 1024
#: what the Lambda python3.11 runtime puts on the path (the SDK and its dependencies); urllib3 is ours
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six")
#: never on AWS: the local runtime, the local ONNX embedding model (Bedrock serves embeddings there)
LOCAL_ONLY = (
    "chalicelib.local",
    "chalicelib.adapters.memory",
    "chalicelib.adapters.models.local_onnx",
    "chalicelib.adapters.models.minilm_qint8",
    "chalicelib.adapters.models.embed_pool",
)
#: imports that happen below what the check reaches by itself, per function (logical id)
DEEP_IMPORTS: dict[str, tuple[str, ...]] = {
    # every handler is @traced: on Lambda, Powertools' Tracer loads the X-Ray SDK on the first call
    "*": (
        "aws_xray_sdk.core",
        # the named storage backends' clients (built only when WEKNORA_STORAGE_BACKENDS names one)
        "chalicelib.adapters.storage_backends",
        "botocore.config",
    ),
    # TextractOcr.recognize normalises GIF/BMP/WEBP/TIFF images with Pillow before sending them
    "MultimodalTask": ("PIL.Image",),
}
#: imports a function's code makes that its package cannot serve, known and reported (not failing the
#: build); the package test fails once one works, so the entry goes when the code is fixed
KNOWN_GAPS: dict[str, dict[str, str]] = {}
#: what `deps.<service>()` is called with on AWS (names from the template's default ModelCatalog)
SERVICE_CALLS = {
    "embedding_model": "deps.embedding_model()",
    "chat_model": "deps.chat_model('nova-lite')",
    "vision_model": "deps.vision_model('nova-lite')",
    "engine": "deps.engine('embedded'); importlib.import_module('chalicelib.adapters.index.opensearch')",
    "embedding_cache": "deps.embedding_cache()",
    "docreader": "deps.docreader()",
    "ocr": "deps.ocr()",
    "asr": "deps.asr()",
    "image_resolver": "deps.image_resolver(lambda data, ext: '')",
}
#: bytecode-free, build-machine-specific or local-only files that never go into a zip
EXCLUDED_DIRS = {"__pycache__", "tests", "local", "memory"}
EXCLUDED_SUFFIXES = (".pyc", ".so", ".c", ".o")
EXCLUDED_DIST_INFO = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


@dataclass
class FunctionReport:
    name: str
    handler: str
    zips: list[str]
    unzipped_bytes: int = 0
    checked: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- build


def run(cmd: list[str], **kwargs: Any) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def chalice_package(out: Path, stage: str) -> None:
    """`chalice package` with the merge template infra/stack.py generates (roles, log groups, alarms, ...)."""
    sys.path.insert(0, str(ROOT / "infra"))
    import stack

    stack.package(out, stage, project=ROOT)


def layer_zips(template: dict[str, Any]) -> dict[str, str]:
    """Logical id -> zip file name of every layer the template declares."""
    return {
        logical: spec["Properties"]["ContentUri"].removeprefix("./")
        for logical, spec in template["Resources"].items()
        if spec.get("Type") == "AWS::Serverless::LayerVersion"
    }


def build_layer(zip_name: str, out: Path, work: Path) -> None:
    name = zip_name.removeprefix("layer-").removesuffix(".zip")
    requirements = ROOT / "requirements" / f"layer-{name}.txt"
    target = work / zip_name / "python"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    pip += [
        "--no-compile",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        PYTHON_VERSION,
    ]
    run([*pip, "--platform", PLATFORM, "--target", str(target), "--requirement", str(requirements)])
    write_zip(target.parent, out / zip_name)


def rebuild_code_zip(path: Path, work: Path) -> None:
    """Chalice's zip without build-machine leftovers and with bytecode."""
    tree = work / path.name
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tree)
    write_zip(tree, path)


def prune(tree: Path) -> None:
    for directory in sorted((p for p in tree.rglob("*") if p.is_dir()), reverse=True):
        if not directory.exists():
            continue
        if directory.name in EXCLUDED_DIRS and _is_excluded_dir(tree, directory):
            shutil.rmtree(directory)
    for file in list(tree.rglob("*")):
        if not file.is_file():
            continue
        in_dist_info = file.parent.name.endswith(".dist-info")
        compiled_dependency = file.suffix == ".so" and not file.is_relative_to(tree / "chalicelib")
        if (file.name.endswith(EXCLUDED_SUFFIXES) and not compiled_dependency) or (
            in_dist_info and file.name in EXCLUDED_DIST_INFO
        ):
            file.unlink()


def _is_excluded_dir(tree: Path, directory: Path) -> bool:
    relative = directory.relative_to(tree).parts
    if directory.name in ("local", "memory"):  # only the local runtime and the in-memory fakes of the ports
        return relative in (("chalicelib", "local"), ("chalicelib", "adapters", "memory"))
    return True


def write_zip(tree: Path, path: Path) -> None:
    """Pruned, compiled to bytecode that never checks timestamps, zipped in a stable order."""
    prune(tree)
    if not compileall.compile_dir(
        str(tree),
        quiet=1,
        workers=0,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        # the bytecode names its source relative to the zip's root, not this build's temporary directory:
        # two builds of one commit give the same bytes, so a deploy updates only what changed
        stripdir=str(tree),
    ):
        raise SystemExit(f"compileall failed in {tree}")
    path.unlink(missing_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for file in sorted(p for p in tree.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(file.relative_to(tree).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(file, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, file.read_bytes())


def build(out: Path, stage: str) -> dict[str, Any]:
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("build with Python 3.11: the bytecode must match the python3.11 runtime")
    if out.exists():
        shutil.rmtree(out)
    chalice_package(out, stage)
    template = json.loads((out / "sam.json").read_text())
    with tempfile.TemporaryDirectory(prefix="weknora-build-") as tmp:
        work = Path(tmp)
        rebuild_code_zip(out / "deployment.zip", work)
        for zip_name in sorted(set(layer_zips(template).values())):
            build_layer(zip_name, out, work)
    shutil.copytree(ROOT / "infra" / "statemachine", out / "statemachine")
    return template


# ---------------------------------------------------------------- what each function must be able to import


def zip_functions(template: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Logical id -> (handler, zip names: code first, then its layers) of every zip function."""
    layers = layer_zips(template)
    functions = {}
    for logical, spec in template["Resources"].items():
        props = spec.get("Properties", {})
        if spec.get("Type") != "AWS::Serverless::Function" or props.get("PackageType") == "Image":
            continue
        zips = [props["CodeUri"].removeprefix("./")]
        zips += [layers[ref["Ref"]] for ref in props.get("Layers", [])]
        functions[logical] = (props["Handler"], zips)
    return functions


def module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = str(module_file(module)).endswith("__init__.py")
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, *([node.module] if node.module else [])])


def imports_of(module: str) -> Iterator[str]:
    """Every module `module` imports, at module level or inside functions (relative ones made absolute)."""
    path = module_file(module)
    if path is None:
        return
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            yield base
            for alias in node.names:  # `from package import module`
                if module_file(f"{base}.{alias.name}") is not None:
                    yield f"{base}.{alias.name}"


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but what sits under `if TYPE_CHECKING:` (imports for annotations only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                todo += child.orelse
                continue
            todo.append(child)


def reached(entries: Iterable[str]) -> list[str]:
    """The chalicelib modules the entry modules reach (their packages included), not stepping into local-only
    code, nor into the composition root's builders (those are what SERVICE_CALLS calls)."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen or module_file(module) is None or _local_only(module):
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        if module != "chalicelib.bootstrap":
            todo += [m for m in imports_of(module) if m.split(".")[0] == "chalicelib"]
    return sorted(seen)


def _local_only(module: str) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in LOCAL_ONLY)


def services_called(modules: Iterable[str]) -> list[str]:
    """The lazily built services (`deps.ocr()`, `self.deps.engine(...)`, ...) the modules call."""
    called = set()
    for module in modules:
        path = module_file(module)
        if path is None:
            raise ValueError(f"{module} is not a chalicelib module")
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if name == "deps" and node.func.attr in SERVICE_CALLS:
                    called.add(node.func.attr)
    return sorted(called)


def libraries_imported(modules: Iterable[str]) -> list[str]:
    """The third-party modules the chalicelib modules import, at module level or inside functions."""
    return sorted(
        {
            name
            for module in modules
            for name in imports_of(module)
            if name.split(".")[0] not in ("chalicelib", "app", *sys.stdlib_module_names)
        }
    )


def entry_modules(handler: str) -> list[str]:
    """The chalicelib modules a Chalice handler calls into: the API routes, or the stage module."""
    module, _, function = handler.rpartition(".")
    tree = ast.parse((ROOT / f"{module}.py").read_text(encoding="utf-8"))
    if function == "app":
        return ["chalicelib.api.routes", "chalicelib.api.service_routes"]
    (definition,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return sorted(
        f"chalicelib.stages.{node.attr}"
        for node in ast.walk(definition)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "stages"
    )


def function_environment(template: dict[str, Any], logical: str, state_dir: str) -> dict[str, str]:
    """The environment the function gets on AWS: the template's Globals and the function's own variables,
    with parameter defaults and placeholder names for what CloudFormation resolves at deploy time."""
    params = {k: str(v.get("Default", "")) for k, v in template.get("Parameters", {}).items()}
    conditions = {"HasOpenSearch": params.get("EnableOpenSearch") == "true"}

    def resolve(value: Any) -> str:
        if isinstance(value, dict) and "Ref" in value:
            return params.get(value["Ref"], f"resolved-{value['Ref']}")
        if isinstance(value, dict) and "Fn::If" in value:
            condition, yes, no = value["Fn::If"]
            return resolve(yes if conditions.get(condition, False) else no)
        if isinstance(value, dict):
            return "resolved-at-deploy"
        return str(value)

    variables = dict(
        template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    )
    own = template["Resources"][logical]["Properties"].get("Environment", {}).get("Variables", {})
    variables.update(own)
    env = {name: resolve(value) for name, value in variables.items()}
    env.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": f"weknora-{logical}",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "WEKNORA_STATE_DIR": state_dir,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
    )
    return env


CHECK_PROGRAM = """
import importlib, json, sys
paths, modules, handler, calls = json.loads(sys.argv[1])
sys.path[:0] = paths
failures = {}
def attempt(label, action):
    try:
        action()
    except BaseException as error:
        failures[label] = f"{type(error).__name__}: {error}"
module, _, attribute = handler.rpartition(".")
attempt(handler, lambda: getattr(importlib.import_module(module), attribute))
for name in modules:
    attempt(name, lambda: importlib.import_module(name))
try:  # every handler starts with get_deps()
    from chalicelib.bootstrap import build_services
    deps = build_services()
except BaseException as error:
    failures["build_services()"] = f"{type(error).__name__}: {error}"
else:
    for call in calls:
        attempt(call, lambda: exec(call, {"deps": deps, "importlib": importlib}))
print(json.dumps(failures))
"""


def runtime_dir(into: Path) -> Path:
    """A directory standing for what the python3.11 runtime provides: the SDK of the build environment."""
    import importlib.util

    runtime = into / "runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(f"{name} is not installed here: it stands for the Lambda runtime's copy")
        source = Path(spec.origin)
        source = source.parent if source.name == "__init__.py" else source
        link = runtime / source.name
        if not link.exists():
            link.symlink_to(source)
    return runtime


def unpacked(out: Path, zip_name: str, scratch: Path) -> tuple[Path, int]:
    """The zip extracted once under `scratch` (the directory Lambda would put on the path), and its
    unzipped size."""
    target = scratch / "unzipped" / zip_name
    with zipfile.ZipFile(out / zip_name) as archive:
        size = sum(info.file_size for info in archive.infolist())
        if not target.exists():
            archive.extractall(target)
    return (target / "python" if (target / "python").is_dir() else target), size


def check_function(
    template: dict[str, Any], logical: str, out: Path, scratch: Path, zips: list[str] | None = None
) -> FunctionReport:
    """Import what the function needs from its unzipped code and layers in a fresh, isolated interpreter.
    `zips` replaces the function's own list (to show what a missing layer does)."""
    handler, own_zips = zip_functions(template)[logical]
    report = FunctionReport(logical, handler, own_zips if zips is None else zips)
    paths = []
    for zip_name in report.zips:
        path, size = unpacked(out, zip_name, scratch)
        paths.append(str(path))
        report.unzipped_bytes += size
    paths.append(str(runtime_dir(scratch)))
    own_modules = reached(entry_modules(handler))
    deep = (*DEEP_IMPORTS["*"], *DEEP_IMPORTS.get(logical, ()))
    modules = [*own_modules, *libraries_imported(own_modules), *deep]
    calls = [SERVICE_CALLS[s] for s in services_called(own_modules)]
    report.checked = [handler, *modules, "build_services()", *calls]
    state_dir = Path(tempfile.mkdtemp(prefix=f"{logical}-state-", dir=scratch))
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", CHECK_PROGRAM, json.dumps([paths, modules, handler, calls])],
        env=function_environment(template, logical, str(state_dir)),
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        report.failures["interpreter"] = result.stderr[-2000:]
    else:
        report.failures = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def check(template: dict[str, Any], out: Path) -> list[FunctionReport]:
    with tempfile.TemporaryDirectory(prefix="weknora-check-") as tmp:
        return [check_function(template, logical, out, Path(tmp)) for logical in zip_functions(template)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out")
    parser.add_argument("--stage", default="dev")
    parser.add_argument("--check-only", action="store_true", help="check what an earlier build left in --out")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    template = json.loads((out / "sam.json").read_text()) if args.check_only else build(out, args.stage)
    reports = check(template, out)
    (out / "package-report.json").write_text(json.dumps([asdict(r) for r in reports], indent=2) + "\n")
    ok = True
    print(f"\n{'function':<18} {'unzipped MB':>11}  zips")
    for r in reports:
        print(f"{r.name:<18} {r.unzipped_bytes / 1e6:>11.1f}  {' + '.join(r.zips)}")
        if r.unzipped_bytes > UNZIPPED_LIMIT:
            ok = False
            print(f"  over Lambda's 250 MB unzipped limit: {r.unzipped_bytes / 2**20:.0f} MiB")
        for what, error in r.failures.items():
            known = KNOWN_GAPS.get(r.name, {}).get(what)
            ok = ok and known is not None
            print(f"  {'known gap' if known else 'cannot import'}: {what}: {error}")
            if known:
                print(f"    ({known})")
    print(f"\n{out}: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
