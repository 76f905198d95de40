"""The installed dependencies are past the releases with known advisories, and pyproject says so too.

pip-audit needs an advisory service this machine cannot reach, so the floors are pinned here:
each with the advisories it closes. Raise a floor here and in pyproject.toml together.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, which pyproject allows: tomli, a dependency there, is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]

# package: (first safe version, advisories fixed by then)
SAFE = {
    "jinja2": ("3.1.6", "CVE-2024-56201, CVE-2024-56326, CVE-2025-27516: sandbox escapes"),
    "pypdf": ("6.4.0", "CVE-2025-55197, CVE-2025-62707, CVE-2025-62708, CVE-2025-66019: bombs and loops"),
    "cryptography": ("44.0.1", "CVE-2024-12797 in its bundled OpenSSL"),
    "starlette": ("0.49.1", "CVE-2024-47874, CVE-2025-54121, CVE-2025-62727: multipart and Range DoS"),
    "h11": ("0.16.0", "CVE-2025-43859: request smuggling"),
    "python-multipart": ("0.0.18", "CVE-2024-53981: boundary DoS"),
    "urllib3": ("2.5.0", "CVE-2025-50181, CVE-2025-50182: redirects"),
    "requests": ("2.32.4", "CVE-2024-47081: .netrc credentials leak"),
    "pillow": ("11.3.0", "CVE-2025-48379: DDS write overflow"),
}


@pytest.mark.parametrize("package", sorted(SAFE))
def test_installed_version_is_past_its_advisories(package: str):
    floor, advisories = SAFE[package]
    try:
        installed = version(package)
    except PackageNotFoundError:
        pytest.skip(f"{package} is not installed")
    assert Version(installed) >= Version(floor), f"{package} {installed} has known advisories ({advisories}); " \
        f"upgrade to {floor} or later"


def test_pyproject_floors_exclude_the_advisories():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for requirement in declared:
        match = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement)
        if match:
            floors[match.group(1).lower()] = match.group(2)
    for package in ("jinja2", "pypdf", "cryptography", "starlette"):
        assert package in floors, f"pyproject.toml declares no floor for {package}"
        assert Version(floors[package]) >= Version(SAFE[package][0]), (package, floors[package])
