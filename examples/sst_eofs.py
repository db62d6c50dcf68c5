"""EOFs and nonlinear (kernel PCA) modes of Pacific winter SST anomalies, beside xeofs.

The data are the SST anomalies that ship with ``eofs`` (``sst_ndjfm_anom.nc``: November-March
means, 1963-2012, 50 winters on an 18 x 30 grid of the Pacific, 5°, land NaN); nothing is
downloaded. The script shows, through :class:`dkpca.xarray.FieldModel`:

1. EOFs with ``sqrt(cos(latitude))`` weights (``weights="coslat"``): the explained-variance
   ratios beside xeofs's ``EOF(use_coslat=True)`` (when xeofs is installed) and the known
   values 0.4899, 0.1292, 0.0713, 0.0639 (the ``eofs`` documentation's);
2. a figure of the three leading EOF maps (in the weighted space, orthonormal there, as xeofs
   draws them; land grey) and their principal-component time series, ``sst-eofs.png``;
3. RBF kernel PCA of the same weighted field, its width ``σ²`` and number of components chosen
   by MDD (:func:`dkpca.select_model`) on the land-free weighted matrix the model sees. With 50
   winters every one of them is a training point (``validation=None``); the default half would
   leave 25 points, 24 eigenvalues;
4. the first nonlinear pattern against the first EOF, ``sst-nonlinear.png``: the fields at -2
   and +2 standard deviations of the mode-1 scores, as departures from the mode's centre
   (position 0): for PCA ``± 2σ EOF1`` with the weights divided out, for kernel PCA the
   fixed-point pre-images, which follow the curved mode through the data; and their sum, zero
   for a linear mode, which maps where the two phases differ in more than sign. Then the
   reconstruction error (mean squared error over ocean points, data units) of
   ``inverse_transform(transform(sst))`` with the first k = 1..min(4, n_c) modes kept and the
   others set to 0 (for kernel PCA, pre-images), beside the mean field's.

What it finds: xeofs and the known ratios agree with dkpca to 4 decimals. MDD picks
σ² ≈ 73 (about 6 times the rule of thumb) and 8 components. Kernel mode 1 is ENSO again (its
score correlates at -0.91 with PC 1; the sign is flipped to match), but bounded: the RBF kernel
saturates for the two strongest El Niño winters, 1983 and 1998, which score little on it and
load on mode 2 instead. Its pre-images are correspondingly weaker than the EOF's (RMS 0.49 on
the cold side, 0.31 on the warm side, against 0.73) though nearly the same shape (pattern
correlations 0.96 and 0.99), and their asymmetry (+2σ) + (-2σ) is cold along the equator and
warm in the North Pacific: a fixed-point pre-image is a kernel-weighted mean of training
winters, so ±2σ in feature space is not ±2σ of SST, and the warm side, made of few far-apart
winters, is shrunk most. Kernel PCA's explained-variance ratios are of the feature-space
variance, not the SST's, so they are not comparable with the EOFs'; the reconstruction errors
are, and there PCA, the best rank-k fit of the weighted field, wins at every k, by 13-22 %.

Run: ``.venv/bin/python examples/sst_eofs.py [--out FOLDER] [--quick]`` (default
``sst-output/``). MDD uses 100 draws over 20 values of ``σ²`` by default, 20 draws over 10 with
``--quick``. MDD's matrices are only 50 x 50, so either way the script takes about 5 s on 2
cores, half of it imports.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import warnings
from pathlib import Path

import eofs.examples
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

import dkpca
from dkpca.selection import default_sigma2_grid, rule_of_thumb_sigma2
from dkpca.xarray import FieldModel

KNOWN_RATIOS = (0.4899, 0.1292, 0.0713, 0.0639)  # eofs's documentation, coslat-weighted EOFs
N_EOFS = 4
N_MAPS = 3  # EOF maps in the first figure
POSITIONS = (-2.0, 2.0)  # standard deviations of the mode-1 scores
SEED = 0


def load_sst() -> xr.DataArray:
    """Load the NDJFM SST anomalies shipped with eofs: ``(time, latitude, longitude)``, land NaN."""
    with xr.open_dataset(eofs.examples.example_data_path("sst_ndjfm_anom.nc")) as ds:
        return ds["sst"].load()


def xeofs_ratios(sst: xr.DataArray) -> np.ndarray | None:
    """Return xeofs's coslat-weighted explained-variance ratios (``None`` without xeofs)."""
    if importlib.util.find_spec("xeofs") is None:
        return None
    import xeofs

    with warnings.catch_warnings():  # xeofs 3.0 on recent xarray: a MultiIndex deprecation
        warnings.simplefilter("ignore", FutureWarning)
        model = xeofs.single.EOF(n_modes=N_EOFS, use_coslat=True).fit(sst, dim="time")
    return model.explained_variance_ratio().values


def weighted_matrix(fitted: FieldModel, sst: xr.DataArray) -> np.ndarray:
    """Return the land-free, coslat-weighted ``(time, ocean point)`` matrix the models see."""
    layout = fitted.layout_
    return np.asarray(layout.matrix(sst))[:, layout.kept] * layout.scale


def reconstruction_mse(model: FieldModel, sst: xr.DataArray, ocean: xr.DataArray,
                       k: int) -> float:
    """Mean squared error over ocean points of the field rebuilt from its first ``k`` modes."""
    scores = model.transform(sst)
    kept = scores.where(scores["mode"] <= k, 0.0)
    rebuilt = model.inverse_transform(kept)
    return float(((rebuilt - sst) ** 2).where(ocean).mean())


def grey_land_cmap(name: str = "RdBu_r") -> matplotlib.colors.Colormap:
    """Return a copy of the colormap that draws NaN (land) in light grey."""
    cmap = plt.get_cmap(name).copy()
    cmap.set_bad("lightgrey")
    return cmap


def draw_map(ax: plt.Axes, field: xr.DataArray, vmax: float,
             title: str) -> matplotlib.cm.ScalarMappable:
    """Draw a lat-lon map of ``field`` on a symmetric colour scale, land grey."""
    mesh = ax.pcolormesh(field["longitude"], field["latitude"],
                         np.ma.masked_invalid(field.transpose("latitude", "longitude").values),
                         cmap=grey_land_cmap(), vmin=-vmax, vmax=vmax, shading="nearest")
    ax.set(title=title, xlabel="longitude (°E)", ylabel="latitude (°N)", aspect="equal")
    return mesh


def plot_eofs(eof: FieldModel, path: Path) -> None:
    """Draw the leading EOF maps (weighted space) over their principal-component series."""
    maps = eof.components().isel(mode=slice(0, N_MAPS))
    ratios = eof.explained_variance_ratio().values
    vmax = float(np.nanmax(np.abs(maps.values)))
    fig, axes = plt.subplots(2, N_MAPS, figsize=(5.2 * N_MAPS, 6.8), layout="constrained",
                             height_ratios=(1.6, 1))
    for i in range(N_MAPS):
        mesh = draw_map(axes[0, i], maps.isel(mode=i), vmax,
                        f"EOF {i + 1} ({ratios[i]:.1%} of the variance)")
        pc = eof.scores_.isel(mode=i)
        axes[1, i].axhline(0, color="0.6", lw=0.8)
        axes[1, i].plot(pc["time"].values, pc.values, marker=".", color=f"C{i}")
        axes[1, i].set(title=f"PC {i + 1}", xlabel="winter (NDJFM)", ylabel="score")
    fig.colorbar(mesh, ax=axes[0, :], shrink=0.8,
                 label="EOF weight (coslat-weighted, unit norm, as xeofs)")
    fig.suptitle("Coslat-weighted EOFs of NDJFM Pacific SST anomalies, 1963-2012 (land grey)")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def mode1_patterns(eof: FieldModel, kpca: FieldModel) -> tuple[dict[str, xr.DataArray], int]:
    """Mode 1 at -2σ and +2σ about its centre (position 0), for the EOF and kernel PCA.

    Kernel PCA fixes its signs by its largest training score, PCA by its largest component
    entry; the kernel mode is flipped where its scores run against PC 1, so that the columns
    match. Returns the deviations over ``position`` (-2, 2) and the sign applied.
    """
    sign = int(np.sign(np.corrcoef(kpca.scores_.sel(mode=1), eof.scores_.sel(mode=1))[0, 1]))
    out = {}
    for name, model, flip in (("EOF", eof, 1), ("kernel PCA", kpca, sign)):
        fields = model.patterns((-2.0, 0.0, 2.0)).sel(mode=1)
        fields = fields.compute() if hasattr(fields.data, "compute") else fields
        deviations = fields.sel(position=[-2.0 * flip, 2.0 * flip]) - fields.sel(position=0.0)
        out[name] = deviations.assign_coords(position=list(POSITIONS))
    return out, sign


def pattern_stats(patterns: dict[str, xr.DataArray], ocean: xr.DataArray) -> None:
    """Print the RMS of each pattern, the kernel's correlation with EOF 1 and its asymmetry."""
    def rms(field: xr.DataArray) -> float:
        return float(np.sqrt((field**2).where(ocean).mean()))

    lin, kern = patterns["EOF"], patterns["kernel PCA"]
    print(f"  {'position':>8}  {'RMS EOF':>8}  {'RMS kernel':>10}  {'correlation':>11}")
    for position in POSITIONS:
        a, b = lin.sel(position=position), kern.sel(position=position)
        r = xr.corr(a.where(ocean), b.where(ocean))
        print(f"  {position:>+7g}σ  {rms(a):8.3f}  {rms(b):10.3f}  {float(r):11.3f}")
    for name, p in patterns.items():
        print(f"  {name}: RMS of (+2σ) + (-2σ) = {rms(p.sum('position', skipna=False)):.3f}")


def plot_nonlinear(patterns: dict[str, xr.DataArray], sigma2: float, sign: int,
                   path: Path) -> None:
    """Mode 1 at -2σ and +2σ and their sum: the first EOF (top) and kernel PCA (bottom)."""
    titles = {"EOF": "EOF 1 (mean ± 2σ EOF1)",
              "kernel PCA": f"RBF kernel PCA mode 1 (pre-images, σ² = {sigma2:.3g})"}
    notes = {"EOF": "zero: a linear mode is symmetric",
             "kernel PCA": "where the two phases differ in more than sign"}
    vmax = max(float(np.nanmax(np.abs(p.values))) for p in patterns.values())
    sums = {name: p.sum("position", skipna=False) for name, p in patterns.items()}
    vmax_sum = max(float(np.nanmax(np.abs(s.values))) for s in sums.values())
    fig, axes = plt.subplots(2, 3, figsize=(17, 7.6), layout="constrained")
    for ax_row, (name, pattern) in zip(axes, patterns.items(), strict=True):
        for ax, position in zip(ax_row[:2], POSITIONS, strict=True):
            mesh = draw_map(ax, pattern.sel(position=position), vmax,
                            f"{titles[name]}\nat {position:+g}σ minus the centre (0σ)")
        mesh_sum = draw_map(ax_row[2], sums[name], vmax_sum,
                            f"{name}: (+2σ) + (-2σ)\n{notes[name]}")
    fig.colorbar(mesh, ax=axes[:, :2], shrink=0.7, label="SST anomaly (data units)")
    fig.colorbar(mesh_sum, ax=axes[:, 2], shrink=0.7, label="sum (data units)")
    flipped = "; kernel PCA's sign flipped to match PC 1" if sign < 0 else ""
    fig.suptitle("First mode of NDJFM Pacific SST anomalies, as departures from its centre: "
                 f"linear EOF against RBF kernel PCA (land grey{flipped})")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    """Fit, print the tables, write the two figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sst-output"))
    parser.add_argument("--quick", action="store_true",
                        help="MDD with 20 draws over 10 values of sigma2 (default 100 over 20)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    matplotlib.use("Agg")  # files only, no display
    n_draws, n_grid = (20, 10) if args.quick else (100, 20)
    timings: dict[str, float] = {}
    start = time.perf_counter()

    sst = load_sst()
    ocean = sst.notnull().all("time")
    print(f"SST anomalies ({sst.attrs.get('long_name', 'sst')}): {sst.sizes['time']} winters "
          f"{sst['time'].dt.year.values[0]}-{sst['time'].dt.year.values[-1]}, "
          f"{sst.sizes['latitude']} x {sst.sizes['longitude']} grid, "
          f"{int(ocean.sum())} ocean points")

    # 1. EOFs, beside xeofs and the known values.
    t0 = time.perf_counter()
    eof = FieldModel(dkpca.PCA(n_components=N_EOFS), "time", weights="coslat").fit(sst)
    timings["PCA"] = time.perf_counter() - t0
    ours = eof.explained_variance_ratio().values
    theirs = xeofs_ratios(sst)
    print("\n1. Explained-variance ratio, coslat-weighted EOFs")
    print(f"  {'mode':>4}  {'dkpca':>7}" + (f"  {'xeofs':>7}" if theirs is not None else "")
          + f"  {'known':>7}")
    for i in range(N_EOFS):
        print(f"  {i + 1:>4}  {ours[i]:7.4f}" + (f"  {theirs[i]:7.4f}" if theirs is not None
                                                   else "") + f"  {KNOWN_RATIOS[i]:7.4f}")
    if theirs is None:
        print("  (xeofs is not installed: its column is left out)")

    # 2. The EOF figure.
    plot_eofs(eof, args.out / "sst-eofs.png")
    print(f"\n2. figure: {args.out / 'sst-eofs.png'}")

    # 3. σ² and the number of components by MDD, on the matrix the models see.
    X = weighted_matrix(eof, sst)
    rule = rule_of_thumb_sigma2(X)
    grid = default_sigma2_grid(rule, n_grid)
    t0 = time.perf_counter()
    choice = dkpca.select_model(X, sigma2_grid=grid, n_draws=n_draws, validation=None,
                                random_state=SEED)
    timings["MDD"] = time.perf_counter() - t0
    print(f"\n3. MDD on the weighted {X.shape[0]} x {X.shape[1]} matrix: {n_draws} draws, "
          f"{n_grid} values of σ² from {grid[0]:.3g} to {grid[-1]:.3g} (rule of thumb "
          f"{rule:.3g})")
    if choice.n_components == 0:
        raise SystemExit("  MDD found no component above the noise; nothing to compare")
    s2, n_kpca = choice.sigma2, choice.n_components
    print(f"  chosen: σ² = {s2:.3g} ({s2 / rule:.2g} x the rule of thumb), "
          f"{n_kpca} components")
    t0 = time.perf_counter()
    kpca = FieldModel(dkpca.KernelPCA(n_components=n_kpca, kernel="rbf", sigma2=s2),
                      "time", weights="coslat").fit(sst)
    timings["kernel PCA"] = time.perf_counter() - t0
    kratios = kpca.explained_variance_ratio().values
    print("  kernel PCA explained-variance ratio (feature space): "
          + " ".join(f"{r:.3f}" for r in kratios))
    scores = kpca.scores_.sel(mode=1).values
    pc1 = eof.scores_.sel(mode=1).values
    print(f"  correlation of kernel PCA score 1 with PC 1: {np.corrcoef(scores, pc1)[0, 1]:+.3f}")
    years = sst["time"].dt.year.values
    print("  the winters of largest |PC 1|, with their kernel PCA scores (as fitted) on modes 1 and 2:")
    for i in np.argsort(np.abs(pc1))[::-1][:4]:
        kernel = kpca.scores_.isel(time=i).values
        print(f"    {years[i]}: PC 1 {pc1[i]:+6.1f}, kernel {kernel[0]:+.3f} {kernel[1]:+.3f}")

    # 4. The first nonlinear pattern against EOF 1, and the reconstruction errors.
    t0 = time.perf_counter()
    patterns, sign = mode1_patterns(eof, kpca)
    timings["patterns"] = time.perf_counter() - t0
    plot_nonlinear(patterns, s2, sign, args.out / "sst-nonlinear.png")
    print(f"\n4. figure: {args.out / 'sst-nonlinear.png'}")
    print("  mode 1 at ±2σ minus its centre" + (" (kernel sign flipped to match PC 1)"
                                                 if sign < 0 else "") + ", over ocean points:")
    pattern_stats(patterns, ocean)
    ks = range(1, min(N_EOFS, n_kpca) + 1)
    t0 = time.perf_counter()
    errors = {name: [reconstruction_mse(model, sst, ocean, k) for k in ks]
              for name, model in (("PCA", eof), ("kernel PCA", kpca))}
    timings["reconstructions"] = time.perf_counter() - t0
    baseline = float(((sst - sst.mean("time")) ** 2).where(ocean).mean())
    print("  reconstruction MSE over ocean points (data units²), first k modes kept")
    print(f"  {'k':>3}  {'PCA':>8}  {'kernel PCA':>10}  {'ratio':>6}")
    print(f"  {0:>3}  {baseline:8.4f}  {baseline:10.4f}  {'':>6}  (the mean field)")
    for i, k in enumerate(ks):
        lin, kern = errors["PCA"][i], errors["kernel PCA"][i]
        print(f"  {k:>3}  {lin:8.4f}  {kern:10.4f}  {kern / lin:6.2f}")

    # Summary.
    print("\nSummary")
    print(f"  {'model':<24} {'k':>2}  {'σ²':>7}  {'ratio 1':>7}  {'MSE k=1..' + str(ks[-1]):<30}"
          f"{'fit':>7}")
    for name, k, sigma2, ratio1, key in (("PCA (EOFs), coslat", N_EOFS, "-", ours[0], "PCA"),
                                         ("RBF kernel PCA, MDD", n_kpca, f"{s2:.3g}", kratios[0],
                                          "kernel PCA")):
        mse = " ".join(f"{e:.4f}" for e in errors[key])
        print(f"  {name:<24} {k:>2}  {sigma2:>7}  {ratio1:7.4f}  {mse:<30}"
              f"{timings[key]:6.2f}s")
    print("  times: " + ", ".join(f"{name} {t:.2f} s" for name, t in timings.items())
          + f"; total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
