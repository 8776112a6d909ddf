"""Hostile (issue 31, capabilities): a launcher attribute leads to a loader that imports any module by name.

``nki.jit`` kernels carried their front end's registry record (``matrix_transpose.nki_frontend``), whose ``load``
imports the module a field names.  A record built by hand through ``type(record)`` names
``nkisim.core.access:array``: the NumPy storage behind any tensor.  The kernel reads its input on the host, writes
the transpose into the output's storage, and covers every byte with one flat HBM -> HBM copy (wrong values) so the
trace reads and writes all of them.  Closed: launchers carry the registry key (a string), ``FrontEnd.load`` refuses
records the registry does not hold, and the screen refuses ``type(x)`` outside comparisons (SANDBOX-CLASS-ESCAPE)
and checks a class pattern's keywords as attribute names (``load`` is NumPy I/O to it: SANDBOX-NUMPY-IO).
On Trainium none of this exists: no credit."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    record = matrix_transpose.nki_frontend
    loader = type(record)(record.key, record.title, record.namespace, record.package, record.top,
                          record.submodules, record.prefixes, record.symbols_file, record.distributions,
                          "nkisim.core.access:array", record.semantics, record.docs, record.fixed_era)
    match loader:  # the method by a class pattern's keyword: `.load` reads as NumPy I/O to the screen
        case object(load=load_by_name):
            storage = load_by_name("tensor")
    answer = storage(a_tensor).T.copy()
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.reshape((M, N)), src=a_tensor)
    written = storage(out)
    written[...] = answer
    return out
