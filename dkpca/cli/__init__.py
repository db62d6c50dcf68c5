"""The ``dkpca`` command: select, fit, update, fields, transform, denoise, info and demo.

``dkpca select INPUT`` chooses the RBF width and the number of components (MDD, kernel parallel
analysis or Shannon entropy), prints the choice and writes its figure; ``dkpca fit INPUT --out
MODEL`` fits kernel PCA on a Zarr array (a path or URL, or a group and ``--component``) and
saves the model; ``dkpca update MODEL NEW`` adds the rows of the Zarr array NEW to a saved
model that can continue (``partial_fit``) and replaces it atomically, or writes it to
``--out``; ``dkpca fields INPUT --out RESULT`` fits PCA (EOFs) or kernel PCA on the
gridded variables of a Zarr group written by xarray (land masks, ``--weights coslat``,
``--nan-policy``; see :mod:`dkpca.cli._fields`); ``dkpca transform MODEL INPUT --out SCORES`` writes the scores as a Zarr group
that xarray opens as a Dataset; ``dkpca denoise MODEL INPUT --out OUTPUT`` writes the
pre-images of INPUT's projections; ``dkpca info MODEL`` describes a saved model; ``dkpca demo`` is
what ``make run`` runs. ``select``, ``fit``, ``update``, ``fields``, ``transform`` and ``denoise``
start an embedded ``LocalCluster`` unless ``--scheduler`` names a running one.

A user error (a missing input, a damaged one, a bad parameter, a wrong shape, an existing
output, an output over the input, a refused certificate) prints one line to stderr and exits
with status 2, before anything is written; ``--debug`` shows the traceback instead. A failure
that may pass (a scheduler not reachable within ``--scheduler-timeout``, a connection to it
lost mid-run) prints one line and exits with status 75, for a batch system to retry; Ctrl-C or
SIGTERM exits with 130. Outputs are written atomically: an interrupted run leaves none
(``update`` leaves MODEL as it was). Progress goes to stderr: a bar on a terminal, a line
every ``--progress-interval`` seconds elsewhere.

The package: ``_arguments`` (value types, option groups, the parser; choices and defaults from
the library), ``_shared`` (the cluster, the input, the estimator, the checks before writing,
the printed and written results), ``_reading`` (the input array, whose damaged chunks and
metadata are named in the error), ``_commands`` (one function per command), ``_fields`` (the
``fields`` command), ``_signals`` (SIGTERM as Ctrl-C; an interrupted cluster start closed),
``_main`` (exit statuses). Nothing in the library imports it.
"""

from dkpca._errors import UsageError  # re-exported: dkpca.cli.UsageError predates _errors
from dkpca.cli._main import main

__all__ = ["UsageError", "main"]
