"""PNG plots of test forecasts and loss curves, each written to a file object (RunOutputs writes them
atomically, on the main rank only)."""
import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def plot_forecast(out, history, truth, forecast, panels: list, title: str, bands: dict | None = None) -> None:
    """One window: for each (name, channel) panel (name: its y-axis label), the input history, then truth and
    forecast after it; bands: central interval percent -> (low, high) of a probabilistic forecast, shaded around its
    median or mean."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.8 * len(panels)), squeeze=False)
    past = range(-len(history) + 1, 1)
    future = range(1, len(truth) + 1)
    for ax, (name, channel) in zip(axes[:, 0], panels):
        ax.plot(past, history[:, channel], color="0.4", lw=1, label="history")
        ax.plot(future, truth[:, channel], color="C0", lw=1.2, label="truth")
        for percent, (low, high) in sorted((bands or {}).items(), reverse=True):  # widest first, lightest
            ax.fill_between(future, low[:, channel], high[:, channel], color="C3", alpha=0.5 - 0.0035 * percent, lw=0,
                            label=f"{percent}% interval")
        ax.plot(future, forecast[:, channel], color="C3", lw=1.2, label="forecast")
        ax.axvline(0.5, color="0.7", lw=0.8, ls="--")
        ax.set_ylabel(name)
        ax.legend(loc="upper left", fontsize=8)
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("time step relative to the forecast origin")
    _save(fig, out)


def plot_losses(out, rows: list) -> None:
    epochs = [r["epoch"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("train_loss", "train"), ("vali_loss", "validation"), ("test_loss", "test")):
        ax.plot(epochs, [r[key] for r in rows], marker="o", label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("MSE")
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, out)


def _save(fig, out) -> None:
    try:
        fig.tight_layout()
        fig.savefig(out, format="png", dpi=110)
    finally:
        plt.close(fig)  # also when the write fails: a long sweep must not pile up open figures
