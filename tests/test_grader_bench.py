"""grader.bench's synthetic class: composition, distinct content, and hostile variants that are what they claim
(the timings themselves are printed by ``python -m grader.bench``, never asserted)."""

from __future__ import annotations

import ast
import json

import pytest

from grader import bench
from grader.staff import reference_available
from nkisim.check import check_kernel

needs_reference = pytest.mark.skipif(not reference_available(), reason="staff reference not shipped here")


def test_class_composition():
    kinds = bench.class_kinds(100)
    assert len(kinds) == 100
    assert (kinds.count("staff"), kinds.count("stub")) == (80, 15)  # the class
    hostile = [k for k in kinds if bench.is_hostile(k)]
    assert sorted(hostile) == sorted(bench.HOSTILE_ORDER[:5])
    assert bench.class_kinds(100) == kinds  # deterministic
    assert set(bench.class_kinds(10, 0.5, 0.5)) == {"staff", "stub"}
    with pytest.raises(ValueError):
        bench.class_kinds(10, 0.9, 0.5)
    for kind in bench.HOSTILE_ORDER:  # every hostile kind can be built
        assert kind in bench.VARIANT_KINDS or (bench.HOSTILE_DIR / kind.removeprefix(bench.FIXTURE)).is_dir()


def test_mix():
    assert bench.parse_mix("staff=2,syntax=1") == ["staff", "staff", "syntax"]
    assert bench.parse_mix("hostile:infinite_loop=1") == ["hostile:infinite_loop"]
    with pytest.raises(ValueError, match="unknown kind"):
        bench.parse_mix("staff=2,gremlin=1")
    with pytest.raises(ValueError, match="unknown kind"):
        bench.parse_mix("hostile:no_such_thing=1")


def test_prepend_to_function_keeps_the_rest():
    src = "import math\n\n\ndef f(x,\n      y):\n    '''doc'''\n    return x + y\n"
    out = bench._prepend_to_function(src, "f", ["if x:", "    pass"])
    assert out.splitlines()[5:7] == ["    if x:", "        pass"]
    ast.parse(out)


@needs_reference
def test_variants_are_what_they_claim(tmp_path):
    kinds = list(bench.GOOD_KINDS + bench.VARIANT_KINDS)
    roster = bench.write_class(tmp_path / "cls", kinds + ["hostile:infinite_loop"])
    fixture = next(s for s, k in roster.items() if k == "hostile:infinite_loop")
    assert (tmp_path / "cls" / fixture / "part1" / "kernels.py").read_text().startswith(
        (bench.HOSTILE_DIR / "infinite_loop" / "part1" / "kernels.py").read_text())
    roster = {s: k for s, k in roster.items() if k != "hostile:infinite_loop"}
    sources = {k: {rel: (tmp_path / "cls" / s / rel).read_text() for rel in bench.FILES} for s, k in roster.items()}
    # every submission is distinct (nothing reused by the batch's content-addressed results)
    assert len({tuple(v.values()) for v in sources.values()}) == len(kinds)
    assert json.loads((tmp_path / "cls.json").read_text())[fixture] == "hostile:infinite_loop"
    for kind, files in sources.items():
        conv = files[bench.CONV]
        if kind == "syntax":
            with pytest.raises(SyntaxError):
                ast.parse(conv)
            continue
        tree = ast.parse(conv)
        blocking = [v for v in check_kernel(conv, filename=bench.CONV) if v.blocking]
        assert not blocking, (kind, blocking)  # the hostile ones get past the screen: the runtime must cope
        top_loops = [n for n in tree.body if isinstance(n, ast.While)]
        assert bool(top_loops) == (kind == "import-hang"), kind
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fused_conv2d_maxpool")
        first = ast.unparse(fn.body[0])
        assert first.startswith("while True") == (kind == "kernel-hang"), (kind, first)
        assert first.startswith("raise") == (kind == "crash")
        assert first.startswith("hog = []") == (kind == "memory-bomb")
