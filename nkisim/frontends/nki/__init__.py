"""The current NKI API (``import nki``: NKI 0.6, Neuron SDK 2.32) as nkisim serves it.

``nki.py`` is the ``nki`` module itself (jit, simulate), ``language.py`` / ``isa.py`` / ``typing.py`` /
``collectives.py`` its submodules, ``tensor.py`` the ``NkiTensor`` class and ``semantics.py`` what operators and
assignment mean on it.  Every module is a thin adapter over ``nkisim.core``; ``symbols.txt`` lists the documented
API (``python -m nkisim.apicoverage``).
"""
