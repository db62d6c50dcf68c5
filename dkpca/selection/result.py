"""The outcome of :func:`dkpca.select_model`: the choice, the evidence behind it, a figure."""

from __future__ import annotations

import io
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["ModelSelection"]

_TITLES = {"mdd": "MDD", "kpa": "kernel parallel analysis", "shannon": "Shannon entropy + MDD"}


@dataclass(frozen=True)
class ModelSelection:
    """The RBF width and number of components chosen by :func:`dkpca.select_model`.

    Attributes
    ----------
    method : {"mdd", "kpa", "shannon"}
    sigma2 : float or None
        The chosen width in ``exp(-||x - y||² / (2σ²))``; ``None`` when no component rises above
        the noise at any ``σ²`` of the grid (kernel parallel analysis on low-dimensional data).
    n_components : int
        The chosen number of components (0 when ``sigma2`` is ``None``).
    table : xarray.Dataset
        The evidence, over the ``sigma2`` grid and the eigenvalue index ``component``:
        ``data_eigenvalues`` (λ) and ``noise_eigenvalues`` (τ, the percentile over draws),
        ``n_components`` (eq. 14), ``information`` (``I_s``, eq. 15) and, for ``"shannon"``,
        ``entropy``. Shannon computes the spectra only at its chosen ``σ²`` (NaN elsewhere).
        The attributes record the settings (draws, percentile, sizes, distance moments).
    training_index : ndarray
        Rows of the input that formed the training set.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> from dkpca.datasets import make_semicircles
    >>> X, _, _ = make_semicircles(300, random_state=0)
    >>> result = dkpca.select_model(X, n_draws=10, n_train=100, random_state=0)
    >>> result.n_components > 0, result.to_kpca().n_components == result.n_components
    (True, True)
    """

    method: str
    sigma2: float | None
    n_components: int
    table: xr.Dataset
    training_index: np.ndarray = field(repr=False)

    def to_kpca(self, **params: Any) -> Any:
        """Return a :class:`dkpca.KernelPCA` with the chosen RBF width and number of components.

        ``params`` go to ``KernelPCA`` as well (``solver``, ``random_state``, ...), and
        override the selected ones (``n_components=2`` keeps two components at the chosen
        ``σ²``).

        Raises
        ------
        ValueError
            When nothing was selected (``n_components == 0``) and ``params`` do not say what
            to use instead.

        Examples
        --------
        >>> import dkpca
        >>> from dkpca.datasets import make_semicircles
        >>> X, _, _ = make_semicircles(300, random_state=0)
        >>> result = dkpca.select_model(X, n_draws=10, n_train=100, random_state=0)
        >>> kp = result.to_kpca(n_components=1, random_state=0)
        >>> kp.n_components, kp.sigma2 == result.sigma2
        (1, True)
        """
        from dkpca.decomposition import KernelPCA

        if ((self.sigma2 is None and "sigma2" not in params)
                or (self.n_components == 0 and "n_components" not in params)):
            raise ValueError(
                f"{_TITLES[self.method]} found no component above the noise at any sigma2 of "
                f"the grid; widen sigma2_grid, or give n_components to choose sigma2 only."
            )
        chosen = {"n_components": self.n_components, "kernel": "rbf", "sigma2": self.sigma2}
        return KernelPCA(**{**chosen, **params})

    def _shown_sigma2(self) -> float:
        """Return the grid's ``σ²`` whose spectra are drawn: the choice, else the nearest."""
        grid = self.table["sigma2"].values
        computed = ~np.isnan(self.table["data_eigenvalues"].values[:, 0])
        target = self.sigma2 if self.sigma2 is not None else self.table.attrs["rule_of_thumb"]
        candidates = np.flatnonzero(computed)
        return float(grid[candidates[np.argmin(np.abs(np.log(grid[candidates] / target)))]])

    def plot(self, path: str | Path | None = None, *,
             storage_options: dict[str, Any] | None = None) -> Any:
        """Draw the MDD paper's Fig. 7(c–d): data and noise spectra, and ``I_s`` against ``σ²``.

        Left: λ and τ at the chosen ``σ²``, with the structural information (the area between
        them over the selected components) shaded. Right: ``I_s(σ²)`` over the grid, the choice
        marked; for ``"shannon"`` the kernel entropy too. Needs matplotlib.

        Parameters
        ----------
        path : str or Path, optional
            Also save the figure there, a local path or an fsspec URL (``s3://…``), in the
            format its suffix names (PNG by default); written beside it, then renamed.
        storage_options : dict, optional
            Options of the fsspec file system, for a URL ``path``.

        Returns
        -------
        matplotlib.figure.Figure
        """
        import matplotlib.pyplot as plt

        shown = self._shown_sigma2()
        at = self.table.sel(sigma2=shown)
        lam, tau = at["data_eigenvalues"].values, at["noise_eigenvalues"].values
        n_c = int(at["n_components"].values)
        index = at["component"].values
        panels = 3 if self.method == "shannon" else 2
        fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
        ax = axes[0]
        ax.semilogy(index, lam, "k-", label="data λ")
        ax.semilogy(index, tau, "k--", label=f"noise τ ({self.table.attrs['percentile']:g}th pct)")
        if n_c:
            ax.fill_between(index[:n_c], tau[:n_c], lam[:n_c], color="0.8",
                            label=f"I_s, {n_c} components")
        # The leading part, where the spectra meet (the tails fall to rounding level).
        last = min(index.size, max(50, 3 * n_c))
        positive = lam[:last][lam[:last] > 0]
        ax.set(xlabel="index i", ylabel="eigenvalue", title=f"spectra at σ² = {shown:.3g}",
               xlim=(0.5, last + 0.5))
        if positive.size:
            ax.set_ylim(bottom=positive.min() / 2)
        ax.legend()
        ax = axes[1]
        grid = self.table["sigma2"].values
        ax.semilogx(grid, self.table["information"].values, "k.-")
        if self.sigma2 is not None:
            ax.axvline(self.sigma2, color="0.5", ls=":")
        ax.set(xlabel="σ²", ylabel="I_s", title=f"{_TITLES[self.method]}: information")
        if panels == 3:
            axes[2].semilogx(grid, self.table["entropy"].values, "k.-")
            axes[2].axvline(shown, color="0.5", ls=":")
            axes[2].set(xlabel="σ²", ylabel="H (nats)", title="Shannon entropy of K")
        fig.tight_layout()
        if path is not None:
            from dkpca.io import write_file

            suffix = posixpath.splitext(os.fspath(path))[1].lstrip(".").lower()
            buffer = io.BytesIO()
            fig.savefig(buffer, dpi=110, format=suffix or "png")
            write_file(path, buffer.getvalue(), overwrite=True, storage_options=storage_options)
        return fig

    def __str__(self) -> str:
        if self.sigma2 is None:
            return f"{_TITLES[self.method]}: no component above the noise"
        return (f"{_TITLES[self.method]}: sigma2 = {self.sigma2:.4g}, "
                f"n_components = {self.n_components}")
