"""The distribution: ``python -m build --sdist --wheel`` on a copy of the checkout (its files
that git tracks or would track, so nothing built or cached here leaks in), then:

- the wheel holds every file of ``hookline/`` (the Lua scripts, the console's templates and
  static files, the Django migrations, ``py.typed``), and nothing of the checkout's own entry
  points (``app``, ``tasks``, ``celeryconfig``), tests, examples or benchmarks;
- the sdist holds the source: every file of ``hookline/``, ``pyproject.toml``, the README and
  the licence;
- the wheel, installed with pip into a throwaway virtualenv, gives an importable ``hookline``
  (that one, not the checkout's) whose Lua scripts load, and a ``hookline`` command.

The build runs without isolation (``build`` and the build backend come with the dev extra), so
it needs no network. Marked slow (about 15 s): ``make test`` runs it, ``make test-fast`` does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME, VERSION = PROJECT["name"], PROJECT["version"]


def _source_files() -> list[str]:
    """The checkout's files, as git sees them: tracked, or new and not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the build is checked from one")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(wheel, sdist, the package's files in the copy built from)."""
    base = tmp_path_factory.mktemp("build")
    source, out = base / "source", base / "dist"
    files = _source_files()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation",
                             "--outdir", str(out)], cwd=source, capture_output=True, text=True,
                            timeout=240, check=False)
    assert result.returncode == 0, (
        f"the build failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    package = sorted(name for name in files if name.startswith("hookline/"))
    return wheels[0], sdists[0], package


def test_the_wheel_holds_the_package_and_its_data(built) -> None:
    wheel, _, package = built
    assert wheel.name == f"{NAME}-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [name for name in package if not name.endswith(".py")]
    # What the package needs besides its modules: each kind must be there to be checked.
    for needed in ("hookline/py.typed", "hookline/store/lua/settle.lua",
                   "hookline/transport/lua/consume.lua",
                   "hookline/console/templates/base.html", "hookline/console/static/console.js",
                   "hookline/console/static/console.css",
                   "hookline/contrib/django/migrations/0001_initial.py"):
        assert needed in package, f"{needed} is not in the checkout any more: update this test"
    assert len(data) > 40
    missing = [name for name in package if name not in names]
    assert missing == [], f"files of hookline/ the wheel leaves out (package-data?): {missing}"
    tops = {name.split("/")[0] for name in names}
    assert tops == {"hookline", f"{NAME}-{VERSION}.dist-info"}, tops
    metadata = zipfile.ZipFile(wheel).read(f"{NAME}-{VERSION}.dist-info/METADATA").decode()
    assert "Provides-Extra: demo" in metadata and "Provides-Extra: django" in metadata


def test_the_sdist_holds_the_source(built) -> None:
    _, sdist, package = built
    prefix = f"{NAME}-{VERSION}/"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(prefix) for name in archive.getnames()}
    missing = [name for name in [*package, "pyproject.toml", "README.md", "LICENSE"]
               if name not in names]
    assert missing == [], f"the sdist leaves out: {missing}"


def test_the_wheel_installs_into_a_fresh_virtualenv(built, tmp_path: Path) -> None:
    wheel, _, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                                "--no-deps", "--no-index", "--no-cache-dir", "--quiet",
                                str(wheel)], capture_output=True, text=True, timeout=120,
                               check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # Hookline's dependencies come from this virtualenv's site-packages, on PYTHONPATH (which
    # does not run its .pth files, so the checkout's editable install stays out); the package
    # itself must be the wheel's.
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    check = """
import sys
from importlib import resources
import hookline
from hookline.store.scripts import load_script
assert hookline.__file__.startswith(sys.prefix), hookline.__file__
scripts = []
for folder in ("hookline.store.lua", "hookline.transport.lua"):
    lua = resources.files(folder)
    names = sorted(p.name[:-4] for p in lua.iterdir() if p.name.endswith(".lua"))
    for name in names:
        assert load_script(name, folder).strip(), name
    scripts += names
assert "consume" in scripts and "settle" in scripts, scripts
templates = resources.files("hookline.console").joinpath("templates")
assert templates.joinpath("base.html").is_file()
assert resources.files("hookline").joinpath("py.typed").is_file()
print(len(scripts), "scripts", hookline.__file__)
"""
    ran = subprocess.run([str(python), "-c", check], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert str(venv) in ran.stdout
    command = subprocess.run([str(venv / "bin" / "hookline"), "--version"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=60, check=False)
    assert command.returncode == 0 and VERSION in command.stdout, command.stdout + command.stderr
