"""The pins resolved for a target (worker/compat/resolve.py) with uv's resolver,
against tiny wheels built here: no package index, no internet."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from worker import cli, environment
from worker import compat as reader
from worker.compat import report as r
from worker.compat import resolve, show

LINUX_312 = resolve.Target("3.12", "x86_64-manylinux_2_28")
UV = environment.uv_binary()


def wheel(folder: Path, name: str, version: str, tag: str) -> None:
    """A wheel is a zip with METADATA and WHEEL, its tags in its file name."""
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-{tag}.whl", "w") as z:
        z.writestr(f"{info}/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\n"
                                    f"Root-Is-Purelib: false\nTag: {tag}\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture()
def wheels(tmp_path: Path) -> tuple[str, ...]:
    found = tmp_path / "wheels"
    found.mkdir()
    wheel(found, "anywhere", "1.0", "py3-none-any")
    wheel(found, "oldpy", "1.0", "cp310-cp310-manylinux_2_17_x86_64")
    wheel(found, "maconly", "1.0", "cp312-cp312-macosx_11_0_arm64")
    return ("--no-index", "--find-links", str(found), "--cache-dir", str(tmp_path / "cache"))


def repo(tmp_path: Path, requirements: str) -> r.Report:
    (tmp_path / "repo").mkdir(parents=True)
    (tmp_path / "repo" / "requirements.txt").write_text(requirements)
    (tmp_path / "repo" / "a.py").write_text("import os\n")
    return reader.read(tmp_path / "repo")


def test_pins_that_resolve_are_counted(tmp_path, wheels):
    done = resolve.check(repo(tmp_path, "anywhere==1.0\n"), LINUX_312, UV, wheels)
    assert (done.status, done.files, done.resolved, done.problems) == \
        ("resolved", ("requirements.txt",), 1, ())


def test_each_pin_without_a_wheel_for_the_target_is_named_with_its_line(tmp_path, wheels):
    report = repo(tmp_path, "anywhere==1.0\noldpy==1.0\n# mac\nmaconly==1.0\n")
    done = resolve.check(report, LINUX_312, UV, wheels)
    assert done.status == "unresolved"
    named = {(p.name, p.spec, p.file, p.line, p.why) for p in done.problems}
    assert named == {("oldpy", "==1.0", "requirements.txt", 2, "python"),
                     ("maconly", "==1.0", "requirements.txt", 4, "platform")}
    old = next(p for p in done.problems if p.name == "oldpy")
    assert "cp312" in old.detail and "cp310" in old.detail  # uv's own words
    # The same pins on the platform and Python they were built for resolve.
    mac = resolve.check(repo(tmp_path / "mac", "maconly==1.0\n"),
                        resolve.Target("3.12", "aarch64-apple-darwin"), UV, wheels)
    assert mac.status == "resolved"


def test_an_index_that_cannot_be_reached_is_said_and_skipped(tmp_path):
    report = repo(tmp_path, "anywhere==1.0\n")
    refused = resolve.check(report, LINUX_312, UV, ("--index-url", "http://127.0.0.1:9/simple",
                                                "--cache-dir", str(tmp_path / "c1")))
    assert refused.status == "skipped" and "Connection refused" in refused.detail
    offline = resolve.check(report, LINUX_312, UV, ("--offline",
                                                    "--cache-dir", str(tmp_path / "c2")))
    assert offline.status == "skipped" and offline.problems == ()
    assert resolve.check(report, LINUX_312, None).status == "no_resolver"
    late = resolve.check(report, LINUX_312, UV, ("--offline",), timeout=0)
    assert (late.status, late.detail) == ("skipped", "timeout")
    # What needs no index (the repository's own requires-python) is still said.
    (tmp_path / "repo" / "pyproject.toml").write_text(
        "[project]\nname = 'x'\nrequires-python = '<3.11'\n")
    both = resolve.check(reader.read(tmp_path / "repo"), LINUX_312, UV,
                         ("--offline", "--cache-dir", str(tmp_path / "c3")))
    assert both.status == "skipped" and [p.why for p in both.problems] == ["requires_python"]
    assert "Python 3.12" in "\n".join(show.resolution(both)[1:])


def test_a_target_uv_does_not_know_is_named(tmp_path, wheels):
    report = repo(tmp_path, "anywhere==1.0\n")
    with pytest.raises(resolve.TargetError) as bad:
        resolve.check(report, resolve.Target("3.12", "amiga"), UV, wheels)
    assert (bad.value.what, bad.value.value) == ("platform", "amiga")
    with pytest.raises(resolve.TargetError):
        resolve.check(report, resolve.Target("twelve", "linux"), UV, wheels)


def test_what_uv_cannot_be_given_is_left_out_by_name(tmp_path, wheels):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "environment.yml").write_text(
        "dependencies:\n  - cudatoolkit=11.8\n  - pip:\n    - anywhere==1.0\n")
    (tmp_path / "repo" / "pyproject.toml").write_text(
        '[project]\nname = "x"\nrequires-python = ">=3.8,<3.11"\ndependencies = ["anywhere==1.0"]\n'
        '[project.optional-dependencies]\ndev = ["oldpy==1.0"]\n')
    done = resolve.check(reader.read(tmp_path / "repo"), LINUX_312, UV, wheels)
    assert done.status == "unresolved" and done.files == ("environment.yml", "pyproject.toml")
    assert done.problems == (r.Unresolved("python", ">=3.8,<3.11", "pyproject.toml", 0,
                                          "requires_python"),)
    assert [(u.name, u.file, u.line, u.why) for u in done.left_out] == [
        ("cudatoolkit", "environment.yml", 2, "conda"), ("oldpy", "pyproject.toml", 6, "extra")]


def test_the_resolution_round_trips_through_json(tmp_path, wheels):
    report = repo(tmp_path, "oldpy==1.0\n-e git+https://github.com/x/y.git#egg=y\n")
    report = r.Report(**{**report.__dict__,
                         "resolution": resolve.check(report, LINUX_312, UV, wheels)})
    assert r.from_json(report.as_json()) == report
    old = report.as_json()
    del old["resolution"]  # a report written before resolving is still read
    assert r.from_json(old).resolution is None


def test_check_resolves_for_the_target_it_is_given(tmp_path, wheels, capsys, monkeypatch):
    report = repo(tmp_path, "anywhere==1.0\noldpy==1.0\n-e git+https://x.org/y.git#egg=y\n")
    monkeypatch.setenv("UV_FIND_LINKS", wheels[2])
    (tmp_path / "index").mkdir()  # an empty index in place of PyPI (uv has no UV_NO_INDEX)
    monkeypatch.setenv("UV_DEFAULT_INDEX", (tmp_path / "index").as_uri())
    assert cli.main(["check", report.root, "--python", "3.12", "--platform",
                     "x86_64-manylinux_2_28"]) == 1
    out = capsys.readouterr().out
    assert "Pins that do not resolve for Python 3.12 on x86_64-manylinux_2_28" in out
    assert "oldpy==1.0 (requirements.txt:2): no wheel for Python 3.12" in out
    assert "not given to uv: y (requirements.txt:3): a direct reference: fetched and built" in out
    assert cli.main(["check", report.root, "--python", "3.10", "--platform",
                     "x86_64-manylinux_2_28", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resolution"]["resolved"] == 2
    assert cli.main(["check", report.root]) == 0  # not asked: nothing resolved
    assert "Pins" not in capsys.readouterr().out


def test_check_says_when_it_cannot_resolve(tmp_path, capsys, monkeypatch):
    report = repo(tmp_path, "anywhere==1.0\n")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["check", report.root, "--offline"]) == 1
    assert "the package index could not be reached" in capsys.readouterr().out
    assert cli.main(["check", report.root, "--platform", "amiga"]) == 2
    assert "`--platform amiga` is not a platform uv knows" in capsys.readouterr().err
    assert cli.main(["check", report.root, "--python", "three"]) == 2
    assert "`--python three` is not a version like `3.12`" in capsys.readouterr().err
    assert cli.main(["check", report.root, "--python"]) == 2
    assert "usage: `trialbot-worker check PATH" in capsys.readouterr().err


def test_a_pin_that_depends_on_one_without_a_wheel_is_named(tmp_path, wheels):
    # `needsold` has a wheel everywhere, but needs `oldpy`, which has none for 3.12:
    # the pin the repository wrote is named, and uv's sentence names the dependency.
    found = Path(wheels[2])
    info = "needsold-1.0.dist-info"
    with zipfile.ZipFile(found / "needsold-1.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: needsold\nVersion: 1.0\n"
                                       "Requires-Dist: oldpy==1.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                    "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    done = resolve.check(repo(tmp_path, "anywhere==1.0\nneedsold==1.0\n"), LINUX_312, UV, wheels)
    (problem,) = done.problems
    assert (problem.name, problem.line, problem.why) == ("needsold", 2, "python")
    assert "oldpy" in problem.detail


def test_an_error_uv_does_not_explain_is_passed_on_in_its_words(tmp_path):
    report = repo(tmp_path, "anywhere==1.0\n")
    done = resolve.check(report, LINUX_312, UV, ("--no-index", "--find-links",
                                                 str(tmp_path / "nowhere")))
    (problem,) = done.problems
    assert (done.status, problem.name, problem.why) == ("unresolved", "", "other")
    assert "Failed to read `--find-links` directory" in problem.detail
    assert "No such file or directory" in problem.detail
