"""A PEP 517 build backend with no dependencies, so ``pip install agent/client/python`` works offline.

GPU nodes often have no route to a package index, and a setuptools backend
would make pip fetch setuptools first. This backend builds the pure-Python
wheel (and the ``pip install -e`` wheel) with the standard library alone.

Metadata comes from ``pyproject.toml``'s ``[project]`` table, read by a small
reader that accepts what that file uses: ``key = <JSON-compatible string or
array of strings>`` lines under ``[project]`` and ``[project.optional-dependencies]``.
It stops with the offending line for anything else.
"""
import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "agentd_client"
WHEEL_TAG = "py3-none-any"


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """The wheel holds the package's ``.py`` files."""
    files = [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in sorted((ROOT / PACKAGE).rglob("*.py"))]
    return _write_wheel(Path(wheel_directory), files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """The editable wheel holds a ``.pth`` file that puts this source directory on ``sys.path``."""
    return _write_wheel(Path(wheel_directory), [(f"{PACKAGE}.pth", (str(ROOT) + "\n").encode())])


def read_project(pyproject: Path = ROOT / "pyproject.toml") -> Dict[str, Any]:
    """``[project]`` of pyproject.toml, with ``optional-dependencies`` nested (the subset described above)."""
    project: Dict[str, Any] = {}
    table: Optional[Dict[str, Any]] = None
    for number, line in enumerate(pyproject.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("["):
            table = {"[project]": project}.get(text)
            if text == "[project.optional-dependencies]":
                table = project.setdefault("optional-dependencies", {})
            continue
        if table is None:
            continue  # [build-system] and tool tables are not metadata
        key, sep, raw = text.partition("=")
        try:
            if not sep:
                raise ValueError("expected key = value")
            value = json.loads(raw.strip())
            if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
                raise ValueError("expected a string or an array of strings")
        except ValueError as err:
            raise ValueError(f"{pyproject}:{number}: {err}; this backend reads only the subset its docstring names") from None
        table[key.strip()] = value
    return project


def _metadata(project: Dict[str, Any]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}", f"Requires-Python: {project.get('requires-python', '')}"]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines.extend(f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements)
    readme = ROOT / project["readme"] if "readme" in project else None
    if readme is not None:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _write_wheel(directory: Path, files: List[Tuple[str, bytes]]) -> str:
    project = read_project()
    dist = project["name"].replace("-", "_")
    dist_info = f"{dist}-{project['version']}.dist-info"
    entries = list(files) + [
        (f"{dist_info}/METADATA", _metadata(project).encode()),
        (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: offline_backend\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n".encode()),
        (f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{dist}-{project['version']}-{WHEEL_TAG}.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / name, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return name


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


if __name__ == "__main__":  # python _build/offline_backend.py [DIR]: build a wheel by hand
    import sys
    print(build_wheel(sys.argv[1] if len(sys.argv) > 1 else os.getcwd()))
