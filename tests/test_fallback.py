"""Import fallback: `import neuronxcc.nki...` resolves to nkisim only when no real neuronx-cc is installed.

Every scenario runs in a fresh interpreter (cwd: an empty temp dir) so that sys.meta_path, sys.modules and
the environment are the scenario's own.  The hook is installed explicitly with ``nkisim._hook.install()``;
only the last test relies on the .pth file that ``make setup`` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nkisim import _hook, fallback

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fallback"
FAKE_API = FIXTURES / "fake_api"
FAKE_REAL = FIXTURES / "fake_real"
PLACEHOLDER = FIXTURES / "placeholder"


def run_python(code: str, tmp_path: Path, *paths: Path, env: dict[str, str] | None = None, args=()) -> str:
    """Run ``code`` (or ``-m ...`` when args are given) in a fresh interpreter; returns stdout."""
    environ = {k: v for k, v in os.environ.items() if k not in (_hook.DISABLE_ENV, "PYTHONPATH")}
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*paths, REPO))
    environ.update(env or {})
    command = [sys.executable, *args] if args else [sys.executable, "-c", textwrap.dedent(code)]
    result = subprocess.run(command, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_fake_api_is_served_under_neuronxcc_names(tmp_path: Path) -> None:
    run_python(
        """
        import importlib, sys
        import nkisim._hook as h
        h.uninstall()  # the .pth hook of `make setup` may have installed the real one already
        finder = h.install(target_package="fakeapi")
        assert sys.meta_path[-1] is finder
        assert "numpy" not in sys.modules  # the hook runs at every interpreter start: it must stay light

        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.compiler as ncc
        from neuronxcc.nki import baremetal, benchmark
        from neuronxcc import nki as nki2
        import neuronxcc

        assert neuronxcc.__nkisim_fallback__ is True
        assert nki is importlib.import_module("fakeapi.nki") and nki2 is nki
        assert nl is importlib.import_module("fakeapi.language")
        assert nisa is importlib.import_module("fakeapi.isa")
        assert ncc is importlib.import_module("fakeapi.compiler")
        assert baremetal is nki.baremetal and benchmark is nki.benchmark
        assert neuronxcc.nki is nki and neuronxcc.nki.language is nl  # attribute access on the parents
        assert sys.modules["neuronxcc.nki.isa"] is nisa
        # The shared module objects keep their own identity.
        assert nl.__name__ == "fakeapi.language" and nl.__spec__.name == "fakeapi.language"
        assert nki.__spec__.name == "fakeapi.nki"
        print("ok")
        """,
        tmp_path,
        FAKE_API,
    )


@pytest.mark.parametrize(
    "name",
    ["neuronxcc.nki.langauge", "neuronxcc.nki._private", "neuronxcc.nki.nki", "neuronxcc.starfish"],
)
def test_unknown_submodules_are_module_not_found(tmp_path: Path, name: str) -> None:
    out = run_python(
        f"""
        import importlib
        import nkisim._hook as h
        h.uninstall()  # the .pth hook of `make setup` may have installed the real one already
        h.install(target_package="fakeapi")
        try:
            importlib.import_module({name!r})
        except ModuleNotFoundError as exc:
            print("MNF", exc.name)
        else:
            print("imported")
        """,
        tmp_path,
        FAKE_API,
    )
    assert out.split() == ["MNF", name]


def test_real_package_is_never_shadowed(tmp_path: Path) -> None:
    out = run_python(
        """
        import importlib, json
        import nkisim._hook as h
        h.uninstall()  # the .pth hook of `make setup` may have installed the real one already
        h.install(target_package="fakeapi")
        import neuronxcc, neuronxcc.nki as nki, neuronxcc.nki.language as nl
        from nkisim.fallback import backend_info
        assert not getattr(neuronxcc, "__nkisim_fallback__", False)
        try:
            import neuronxcc.nki.isa  # absent from the real (fake) package: must not come from nkisim
        except ModuleNotFoundError:
            isa = "missing"
        else:
            isa = "served"
        print(json.dumps([nki.FAKE_REAL_MARKER, nl.FAKE_REAL_MARKER, isa, backend_info()]))
        """,
        tmp_path,
        FAKE_REAL,
        FAKE_API,
    )
    nki_marker, nl_marker, isa, info = json.loads(out)
    assert (nki_marker, nl_marker, isa) == ("real neuronxcc.nki", "real neuronxcc.nki.language", "missing")
    assert info["backend"] == "neuron"
    assert info["version"] == "2.21.0.fake"
    assert info["location"].startswith(str(FAKE_REAL))
    assert fallback.backend_label(info) == "Trainium (neuronx-cc 2.21.0.fake)"


def test_placeholder_package_is_reported_with_the_fix(tmp_path: Path) -> None:
    out = run_python(
        """
        import json
        import nkisim._hook as h
        h.uninstall()  # the .pth hook of `make setup` may have installed the real one already
        h.install(target_package="fakeapi")
        from nkisim.fallback import backend_info
        try:
            import neuronxcc.nki
        except ImportError as exc:
            error = str(exc)
        print(json.dumps([error, backend_info()]))
        """,
        tmp_path,
        PLACEHOLDER,
        FAKE_API,
    )
    error, info = json.loads(out)
    assert "placeholder" in error
    assert info["backend"] == "none"
    assert "pip uninstall neuronx-cc" in info["reason"] and "shadows" in info["reason"]


def test_install_is_idempotent_and_uninstall_removes_it(tmp_path: Path) -> None:
    run_python(
        """
        import importlib, sys
        import nkisim._hook as h
        h.uninstall()
        first = h.install()
        assert h.install() is first
        importlib.reload(h)  # a reloaded module has a new class: the marker still finds the old finder
        assert h.install() is first
        assert sum(getattr(f, "nkisim_fallback", False) for f in sys.meta_path) == 1
        h.uninstall()
        assert h.installed_finder() is None
        """,
        tmp_path,
    )


def test_disable_env_var_turns_the_hook_off(tmp_path: Path) -> None:
    out = run_python(
        """
        import json
        import nkisim._hook as h
        assert h.install(target_package="fakeapi") is None
        from nkisim.fallback import backend_info
        try:
            import neuronxcc.nki
        except ModuleNotFoundError:
            print(json.dumps(backend_info()))
        """,
        tmp_path,
        FAKE_API,
        env={"NKISIM_DISABLE_FALLBACK": "1"},
    )
    info = json.loads(out)
    assert info["backend"] == "none" and not info["hook_installed"]
    assert "NKISIM_DISABLE_FALLBACK" in info["reason"]


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_disable_env_var_false_values_keep_the_hook(tmp_path: Path, value: str) -> None:
    run_python(
        "import nkisim._hook as h\nh.uninstall()\nassert h.install() is not None\n",
        tmp_path,
        env={"NKISIM_DISABLE_FALLBACK": value},
    )


def test_backend_info_with_the_fallback_active(tmp_path: Path) -> None:
    out = run_python(
        """
        import json
        import nkisim._hook as h
        h.uninstall()  # the .pth hook of `make setup` may have installed the real one already
        h.install(target_package="fakeapi")
        from nkisim.fallback import backend_info
        print(json.dumps(backend_info()))
        """,
        tmp_path,
        FAKE_API,
        env={"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"},
    )
    info = json.loads(out)
    assert info["backend"] == "nkisim" and info["hook_installed"] is True
    assert info["reason"] == "fallback: neuronxcc not installed"
    assert info["target"] == "trn1"
    assert fallback.backend_label(info) == "nkisim estimate, trn1"


def test_backend_info_without_the_hook(tmp_path: Path) -> None:
    if fallback.pth_path().is_file():
        pytest.skip("the .pth hook is installed in this environment; covered by test_installed_pth_hook")
    out = run_python("", tmp_path, args=("-m", "nkisim", "info"))
    assert "fallback hook is not installed: run `make setup`" in out


def test_legacy_frontend_modules_are_the_aliases(tmp_path: Path) -> None:
    """With the real legacy front end (nkisim/frontends/legacy): identity of every alias the course code uses."""
    run_python(
        """
        import importlib
        import nkisim._hook as h
        h.install()
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.compiler as ncc
        from neuronxcc.nki import baremetal, benchmark
        assert nki is importlib.import_module("nkisim.frontends.legacy.nki")
        assert nl is importlib.import_module("nkisim.frontends.legacy.language")
        assert nisa is importlib.import_module("nkisim.frontends.legacy.isa")
        assert ncc is importlib.import_module("nkisim.frontends.legacy.compiler")
        assert baremetal is nki.baremetal and benchmark is nki.benchmark
        assert nki.language is nl and nki.isa is nisa and nki.compiler is ncc
        """,
        tmp_path,
    )


def test_install_fallback_cli_writes_and_removes_the_pth(tmp_path: Path) -> None:
    site_dir = tmp_path / "site"
    out = run_python("", tmp_path, args=("-m", "nkisim", "install-fallback", "--site-dir", str(site_dir)))
    pth = site_dir / fallback.PTH_NAME
    assert str(pth) in out
    text = pth.read_text()
    assert text.count("\n") == 1 and text.startswith("import ")  # site.py executes lines starting with "import"
    run_python("", tmp_path, args=("-m", "nkisim", "install-fallback", "--site-dir", str(site_dir)))
    assert pth.read_text() == text and sorted(p.name for p in site_dir.iterdir()) == [fallback.PTH_NAME]

    # site.py processing the .pth activates the hook ...
    check = f"import site\nsite.addsitedir({str(site_dir)!r})\nimport nkisim._hook as h\n"
    check += "print(h.installed_finder())"
    assert "NkisimFallbackFinder" in run_python(check, tmp_path)
    # ... and is silent when nkisim cannot be imported (a leftover .pth after uninstalling the package):
    # -I -S keeps this environment's site-packages (where nkisim may be installed) off sys.path.
    quiet = (
        f"import site, sys\nsite.addsitedir({str(site_dir)!r})\n"
        "print(any(getattr(f, 'nkisim_fallback', 0) for f in sys.meta_path))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", quiet], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "False" and result.stderr == "", result

    out = run_python(
        "", tmp_path, args=("-m", "nkisim", "install-fallback", "--uninstall", "--site-dir", str(site_dir))
    )
    assert not pth.exists() and "removed" in out


def test_info_cli(tmp_path: Path) -> None:
    text = run_python(
        "import nkisim._hook as h\nh.uninstall()\nh.install(target_package='fakeapi')\n"
        "from nkisim.__main__ import main\nmain(['info'])\n",
        tmp_path,
        FAKE_API,
        env={"NKI_PRECISE_FP": "1"},
    )
    assert "backend:        nkisim 0." in text and "(fallback: neuronxcc not installed)" in text
    assert (
        "target:         trn2" in text
        and "NKI_PRECISE_FP:  1" in text
        and "default" not in text.split("NKI_PRECISE_FP")[1].splitlines()[0]
    )
    assert "numpy:" in text and "python:" in text
    as_json = json.loads(run_python("", tmp_path, args=("-m", "nkisim", "info", "--json")))
    assert set(as_json) >= {"backend", "reason", "version", "target", "hook_installed"}


def test_cli_without_arguments_prints_help(tmp_path: Path) -> None:
    out = run_python("", tmp_path, args=("-m", "nkisim"))
    assert "install-fallback" in out and "check" in out and "info" in out


def test_installed_pth_hook(tmp_path: Path) -> None:
    """After `make setup`: a plain interpreter of this environment has the hook active."""
    if not fallback.pth_path().is_file():
        pytest.skip("nkisim_fallback.pth is not installed in this environment (run `make setup`)")
    env = {k: v for k, v in os.environ.items() if k != _hook.DISABLE_ENV}
    env["PYTHONPATH"] = str(REPO)  # as an editable install would
    code = "import sys\nprint(any(getattr(f, 'nkisim_fallback', False) for f in sys.meta_path))"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "True", result


# ---- the current `nki` namespace -------------------------------------------------------------------------------
NKI_PLACEHOLDER = FIXTURES / "nki_placeholder"
NKI_REAL = FIXTURES / "nki_real"


def test_nki_is_served_by_nkisim_when_absent(tmp_path: Path) -> None:
    out = run_python(
        """
        import importlib, json
        import nkisim._hook as h
        h.uninstall()
        h.install()
        import nki, nki.language as nl, nki.isa as nisa, nki.typing, nki.collectives
        assert nki is importlib.import_module("nkisim.frontends.nki.nki") and nki.__nkisim_fallback__
        assert nl is importlib.import_module("nkisim.frontends.nki.language") and nki.language is nl
        assert nisa is importlib.import_module("nkisim.frontends.nki.isa")
        try:
            import nki.nki
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("nki.nki must not exist")
        from nkisim.fallback import backend_info
        print(json.dumps(backend_info()["namespaces"]["nki"]))
        """,
        tmp_path,
    )
    info = json.loads(out)
    assert info["backend"] == "nkisim" and info["reason"] == "fallback: nki not installed"


def test_pypi_placeholder_nki_is_bypassed_not_touched(tmp_path: Path) -> None:
    """PyPI's nki 0.0.1 raises ImportError("WRONG PACKAGE ...") on import: nkisim serves nki instead (the files stay
    as they are), and `info` says why."""
    before = (NKI_PLACEHOLDER / "nki" / "__init__.py").read_bytes()
    out = run_python(
        """
        import json
        import nkisim._hook as h
        h.uninstall()
        h.install()
        import nki, nki.isa
        assert nki.__nkisim_fallback__ and nki.isa.nc_matmul
        from nkisim.fallback import backend_info, describe
        info = backend_info()
        print(json.dumps([info["namespaces"]["nki"], describe(info)]))
        """,
        tmp_path,
        NKI_PLACEHOLDER,
    )
    info, text = json.loads(out)
    assert info["backend"] == "nkisim"
    assert "placeholder" in info["reason"] and "WRONG PACKAGE" in info["reason"] and "bypassed" in info["reason"]
    assert "\n  nki " in text and "\n  neuronxcc.nki " in text
    assert (NKI_PLACEHOLDER / "nki" / "__init__.py").read_bytes() == before


def test_real_nki_is_never_shadowed(tmp_path: Path) -> None:
    out = run_python(
        """
        import json
        import nkisim._hook as h
        h.uninstall()
        h.install()
        import nki, nki.language as nl
        try:
            import nki.isa  # absent from the real (fake) package: must not come from nkisim
        except ModuleNotFoundError:
            isa = "missing"
        else:
            isa = "served"
        from nkisim.fallback import backend_info
        print(json.dumps([nki.FAKE_REAL_MARKER, nl.FAKE_REAL_MARKER, isa, backend_info()["namespaces"]["nki"]]))
        """,
        tmp_path,
        NKI_REAL,
    )
    marker, nl_marker, isa, info = json.loads(out)
    assert (marker, nl_marker, isa) == ("real nki", "real nki.language", "missing")
    assert info["backend"] == "neuron" and info["location"].startswith(str(NKI_REAL))


def test_info_reports_both_namespaces(tmp_path: Path) -> None:
    text = run_python("", tmp_path, args=("-m", "nkisim", "info"))
    assert "namespaces:\n  neuronxcc.nki   " in text and "\n  nki             " in text
