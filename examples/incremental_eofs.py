"""EOFs updated a year at a time: FieldModel.partial_fit converges to the all-at-once fit.

A synthetic monthly "SST anomaly" on a 5° grid (18 x 36, 60°S-60°N, with two continents NaN)
holds three large-scale modes with prescribed patterns (an equatorial-Pacific mode, a North
Atlantic dipole and a Southern Ocean wave train), each driven by its own AR(1) series, plus
spatially smooth noise: 30 years, 1991-2020, 360 months. Nothing is downloaded.

The EOFs (:class:`dkpca.xarray.FieldModel` of ``dkpca.PCA(4)``, ``sqrt(cos(latitude))``
weights) are learnt as the data would arrive, a year at a time: each year's 12 fields go to
``partial_fit``, which adds their count, mean and scatter to the model's and solves the small
eigenproblem again; the first call fixes the land mask and the weights. After 20 years the
model is saved with :func:`dkpca.save`, loaded back, and updated with the remaining 10 years,
as a model kept on disk between months would be. The script prints, year by year:

- the angle between each of the three leading EOFs and the same EOF of one ``fit`` on all 360
  months, and the difference of their explained-variance ratios: both shrink as the months
  seen approach the whole record (the variances unevenly: the modes' series are persistent,
  so a few unusual years move them), and are zero, to rounding, at the end;
- the largest relative difference of the explained variances between the updated model and a
  ``fit`` on the months seen so far: ``partial_fit`` is exactly that fit (to about 1e-14), not
  an approximation of it.

The figure ``incremental-eofs.png`` shows EOF 1 after 1, 5 and 30 years; the angles and
variance differences against the months seen, beside the same differences from a ``fit`` on the
months seen so far (at the level of rounding throughout: the grey dotted lines); and PC 1 as the
updates produced it (each month scored by the model of its year, the ``scores_`` that
``partial_fit`` appends to) beside PC 1 of the all-at-once fit.

What it finds: a year of data gives an EOF 1 already shaped like the final one but 33° from it
(modes 2 and 3, 75° off, are not yet found); the angle falls to 10° after 10 years, 2.3° after
20 and 1.0° after 25. EOFs 2 and 3, whose variances are closer to each other, follow more
slowly (15° after 10 years, 2.7° after 25). The explained-variance ratios wander by up to 0.07
and settle only at the end: a few strong years of a persistent series carry much of the
record's variance. Every update equals a fit on the months seen so far, to 4e-15 in the
variances and 1e-13 degrees in the EOFs, the save and load included.

Run: ``.venv/bin/python examples/incremental_eofs.py [--out FOLDER]`` (default
``examples-output/``); it writes the figure and the saved model (``eofs.zarr``) there, in a
few seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from scipy.ndimage import gaussian_filter

import dkpca
from dkpca.xarray import FieldModel

YEARS = range(1991, 2021)
SAVED_AFTER = 20  # years: the model goes to disk and comes back
MODES = 3  # EOFs compared
SHOWN_AFTER = (1, 5, 30)  # years: EOF 1 maps


def make_field(seed: int = 0) -> xr.DataArray:
    """Build the monthly anomaly field ``(time, lat, lon)``, land NaN."""
    rng = np.random.default_rng(seed)
    time = pd.date_range(f"{YEARS[0]}-01-01", periods=12 * len(YEARS), freq="MS")
    lat, lon = np.arange(-57.5, 60, 5.0), np.arange(2.5, 360, 10.0)
    la, lo = np.meshgrid(lat, lon, indexing="ij")

    def bump(lat0: float, lon0: float, width_lat: float, width_lon: float) -> np.ndarray:
        dlon = (lo - lon0 + 180) % 360 - 180
        return np.exp(-((la - lat0) / width_lat) ** 2 - (dlon / width_lon) ** 2)

    patterns = [
        bump(0, 220, 12, 45) - 0.4 * bump(30, 190, 12, 40) - 0.4 * bump(-30, 190, 12, 40),
        bump(55, 330, 10, 35) - bump(35, 320, 10, 35),
        np.cos(np.deg2rad(3 * lo)) * bump(-45, 0, 10, 1e9),
    ]
    amplitudes = (1.2, 0.8, 0.6)  # K: the modes' standard deviations
    n = time.size
    series = np.zeros((3, n))
    shocks = rng.normal(size=(3, n)) * np.sqrt(1 - 0.7**2)
    for t in range(1, n):  # AR(1), lag-1 correlation 0.7 a month
        series[:, t] = 0.7 * series[:, t - 1] + shocks[:, t]
    signal = np.einsum("km,kij->mij", series * np.array(amplitudes)[:, None], patterns)
    noise = gaussian_filter(rng.normal(size=(n, lat.size, lon.size)), (0, 1.5, 1.5),
                            mode=("nearest", "nearest", "wrap"))
    field = signal + 0.25 * noise / noise.std()
    land = ((la > -30) & (la < 50) & (lo > 260) & (lo < 300)) | \
           ((la > 5) & (la < 50) & ((lo < 40) | (lo > 350)))
    field[:, land] = np.nan
    return xr.DataArray(
        field, dims=("time", "lat", "lon"), name="sst_anom",
        coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north"}),
                "lon": ("lon", lon, {"units": "degrees_east"})},
        attrs={"long_name": "sea surface temperature anomaly", "units": "K"})


def eof_model() -> FieldModel:
    """Return the model every fit here uses: four EOFs, coslat weights."""
    return FieldModel(dkpca.PCA(n_components=4), "time", weights="coslat")


def angles(a: FieldModel, b: FieldModel) -> np.ndarray:
    """Angle (degrees) between each leading EOF of ``a`` and of ``b``, sign ignored.

    ``2 arcsin(|u - v| / 2)`` with ``v`` turned to ``u``'s side: accurate for tiny angles,
    where ``arccos`` of a cosine near 1 is not.
    """
    out = []
    for mode in range(1, MODES + 1):
        u, v = (m.components().sel(mode=mode).values.ravel() for m in (a, b))
        ocean = np.isfinite(u)
        u, v = u[ocean] / np.linalg.norm(u[ocean]), v[ocean] / np.linalg.norm(v[ocean])
        v = v if u @ v >= 0 else -v
        out.append(np.degrees(2 * np.arcsin(min(1.0, np.linalg.norm(u - v) / 2))))
    return np.array(out)


def ratio_differences(a: FieldModel, b: FieldModel) -> np.ndarray:
    """``|ratio_a - ratio_b|`` of the leading modes' explained-variance ratios."""
    return np.abs(a.explained_variance_ratio().values[:MODES]
                  - b.explained_variance_ratio().values[:MODES])


def main() -> None:
    """Update year by year, print the table, write the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples-output"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)

    field = make_field()
    whole = eof_model().fit(field)
    print("all 360 months at once: explained variance ratio "
          + " ".join(f"{r:.4f}" for r in whole.explained_variance_ratio().values))
    print(f"\n{'year':>6} {'months':>6}   angle to the whole fit (°)   "
          f"|Δ variance ratio| (×1e-3)   vs fit on months seen")
    print(f"{'':>6} {'':>6}   {'EOF 1':>8} {'EOF 2':>8} {'EOF 3':>8}   "
          f"{'1':>7} {'2':>7} {'3':>7}   max rel. diff")
    model, record, maps = eof_model(), [], {}
    for count, year in enumerate(YEARS, start=1):
        if count == SAVED_AFTER + 1:  # kept on disk between updates
            dkpca.save(model, out / "eofs.zarr", overwrite=True)
            model = dkpca.load(out / "eofs.zarr")
            print(f"{'':>6} saved to eofs.zarr after {SAVED_AFTER} years and loaded back")
        model.partial_fit(field.sel(time=str(year)))
        seen = eof_model().fit(field.isel(time=slice(0, 12 * count)))
        exact = np.max(np.abs(model.model_.explained_variance_
                              / seen.model_.explained_variance_ - 1))
        record.append((12 * count, angles(model, whole), ratio_differences(model, whole),
                       angles(model, seen), ratio_differences(model, seen), exact))
        if count in SHOWN_AFTER:
            maps[count] = model.components().sel(mode=1)
        if count in (1, 2, 3, 5, 10, 15, 20, 25, 30):
            angle, ratio = record[-1][1:3]
            print(f"{year:>6} {12 * count:>6}   " + " ".join(f"{a:8.3f}" for a in angle)
                  + "   " + " ".join(f"{1e3 * r:7.3f}" for r in ratio) + f"   {exact:.1e}")
    assert model.n_samples_ == field.sizes["time"]
    worst = max(r[-1] for r in record)
    print(f"\npartial_fit against fit on the months seen: largest relative difference of the "
          f"explained variances over all {len(record)} updates {worst:.1e}")

    matplotlib.use("Agg")  # files only, no display
    fig = plt.figure(figsize=(16, 8), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(0.6, 1))
    axes = top.subplots(1, len(SHOWN_AFTER))
    sign = np.sign(float((maps[30] * whole.components().sel(mode=1)).sum()))
    vmax = max(float(np.nanmax(np.abs(m.values))) for m in maps.values())
    cmap = plt.get_cmap("RdBu_r").copy()
    cmap.set_bad("lightgrey")
    for ax, (years, eof1) in zip(axes, maps.items(), strict=True):
        flip = sign * np.sign(float((eof1 * maps[30]).sum()))  # EOF signs are arbitrary
        mesh = ax.pcolormesh(eof1["lon"], eof1["lat"], np.ma.masked_invalid(flip * eof1.values),
                             cmap=cmap, vmin=-vmax, vmax=vmax, shading="nearest")
        ax.set(title=f"EOF 1 after {years} year{'s' if years > 1 else ''} ({12 * years} "
               f"months, partial_fit)", xlabel="longitude (°E)", ylabel="latitude (°N)",
               aspect="equal")
    top.colorbar(mesh, ax=axes, shrink=0.8, label="EOF weight (weighted, unit norm)")

    months = np.array([r[0] for r in record])
    floor = 1e-16  # identical results (a difference of exactly 0) are drawn here
    ax_angle, ax_ratio, ax_pc = bottom.subplots(1, 3)
    for ax, whole_part, seen_part in ((ax_angle, 1, 3), (ax_ratio, 2, 4)):
        against_whole = np.array([r[whole_part] for r in record])
        against_seen = np.array([r[seen_part] for r in record]).max(axis=1)
        for k in range(MODES):
            ax.semilogy(months, np.maximum(against_whole[:, k], floor), marker=".",
                        label=f"mode {k + 1} against all 360 months")
        ax.semilogy(months, np.maximum(against_seen, floor), color="0.5", ls=":", marker=".",
                    label="largest, against fit on the months seen")
        ax.axvline(12 * SAVED_AFTER, color="0.6", lw=0.8, ls="--", label="saved and loaded")
        ax.set(xlabel="months seen", ylim=(floor / 3, None))
        ax.legend(loc="center left", fontsize=8)
    ax_angle.set(title="Angle between partial_fit's EOFs and a fit's", ylabel="angle (°)")
    ax_ratio.set(title="Difference of explained-variance ratios", ylabel="|Δ ratio|")
    flip = sign * np.sign(float((model.components().sel(mode=1)
                                 * whole.components().sel(mode=1)).sum()))
    pc_updates = model.scores_.sel(mode=1)
    ax_pc.plot(whole.scores_["time"], whole.scores_.sel(mode=1), color="0.3", lw=1.6,
               label="all-at-once fit")
    ax_pc.plot(pc_updates["time"], flip * pc_updates, color="C3", lw=0.9,
               label="as updated (scored by the model of its year)")
    ax_pc.set(title="PC 1", xlabel="time", ylabel="score")
    ax_pc.legend(loc="upper left", fontsize=9)
    path = out / "incremental-eofs.png"
    fig.savefig(path, dpi=90)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()
