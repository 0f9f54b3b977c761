"""The client installs with pip and no network: the in-tree build backend makes a valid wheel."""
import base64
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

from agent_process import REPO_ROOT

CLIENT_DIR = REPO_ROOT / "agent" / "client" / "python"


def load_backend():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("offline_backend", CLIENT_DIR / "_build" / "offline_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imports_from(directory: str) -> str:
    """Where a fresh interpreter with only ``directory`` added finds agentd_client."""
    code = f"import sys; sys.path.insert(0, {directory!r}); import agentd_client.client, agentd_client.keys; print(agentd_client.__file__)"
    return subprocess.run([sys.executable, "-c", code], cwd=directory, capture_output=True, text=True, check=True).stdout.strip()


class PackagingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="agentd-py-pkg-")
        self.addCleanup(self.tmp.cleanup)

    def test_the_wheel_holds_the_package_and_a_valid_record(self) -> None:
        backend = load_backend()
        project = backend.read_project()
        self.assertEqual((project["name"], project["requires-python"]), ("agentd-client", ">=3.9"))
        name = backend.build_wheel(self.tmp.name)
        self.assertEqual(name, f"agentd_client-{project['version']}-py3-none-any.whl")
        with zipfile.ZipFile(Path(self.tmp.name) / name) as wheel:
            names = set(wheel.namelist())
            sources = {p.relative_to(CLIENT_DIR).as_posix() for p in (CLIENT_DIR / "agentd_client").glob("*.py")}
            self.assertTrue(sources <= names, sources - names)
            dist_info = f"agentd_client-{project['version']}.dist-info"
            metadata = wheel.read(f"{dist_info}/METADATA").decode()
            self.assertIn(f"Version: {project['version']}\n", metadata)
            self.assertIn('Requires-Dist: torch>=2.1; extra == "torch"', metadata)
            for line in wheel.read(f"{dist_info}/RECORD").decode().splitlines():
                path, digest, size = line.split(",")
                if path.endswith("RECORD"):
                    continue
                data = wheel.read(path)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), (f"sha256={expected}", len(data)), path)
            wheel.extractall(Path(self.tmp.name) / "site")
        site = str(Path(self.tmp.name) / "site")
        self.assertTrue(imports_from(site).startswith(site))

    def test_pip_installs_it_without_an_index(self) -> None:
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            self.skipTest(f"pip is not available to {sys.executable}")
        target = str(Path(self.tmp.name) / "target")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                              "--disable-pip-version-check", "--target", target, str(CLIENT_DIR)],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(pip.returncode, 0, pip.stderr)
        self.assertTrue(imports_from(target).startswith(target))


if __name__ == "__main__":
    unittest.main()
