"""The two plots of ``bench.compare`` (matplotlib, PNG): a burst drained under a rate limit,
and the retry storm a dead endpoint gets from Hookline and from the naive task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
RATE_PLOT = RESULTS / "compare-rate-limit.png"
STORM_PLOT = RESULTS / "compare-retry-storm.png"


def _bins(times: list[float], width: float, end: float) -> tuple[list[float], list[int]]:
    count = max(1, int(end / width) + 1)
    bins = [0] * count
    for t in times:
        if 0 <= t < count * width:
            bins[int(t / width)] += 1
    return [n * width for n in range(count)], bins


def plot_rate(rate: dict[str, Any], title: str, path: Path = RATE_PLOT) -> Path:
    """Requests per 100 ms while ``rate['events']`` pushed at once drain, vs the budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = rate["request_times"]
    edges, counts = _bins(times, 0.1, max(times, default=1.0))
    per_100ms = rate["budget_per_second"] - rate["burst"]
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    ax.step(edges, counts, where="post", linewidth=0.9, label="requests per 100 ms (receiver)")
    ax.axhline(per_100ms / 10, color="tab:red", linestyle="--", linewidth=1,
               label=f"budget {rate['rate']} = {per_100ms / 10:g} per 100 ms")
    ax.axvline(rate["ideal_seconds"], color="grey", linestyle=":", linewidth=1,
               label=f"ideal drain {rate['ideal_seconds']:g} s")
    ax.set_xlabel("seconds since the burst was enqueued")
    ax.set_ylabel("requests / 100 ms")
    ax.set_title(f"{rate['events']:,} events at once, {rate['workers']} workers, limit "
                 f"{rate['rate']} (burst {rate['burst']}): drained in "
                 f"{rate['drain_seconds']:.1f} s, {rate['windows_over_budget']} "
                 f"1-s windows over budget\n{title}", fontsize=9)
    ax.set_ylim(0, max(max(counts, default=0), per_100ms / 10) * 1.3 + 1)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def check() -> str | None:
    """Why the plots cannot be drawn (matplotlib missing), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed: pip install matplotlib, or run with --no-plots"
    return None


def plot_storm(outages: dict[str, dict[str, Any]], title: str, path: Path = STORM_PLOT) -> Path:
    """Connection attempts per second at the endpoint that is down, Hookline vs naive."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = max(o["window_seconds"] for o in outages.values())
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    labels = {"hookline": "Hookline (circuit breaker, retry schedule)",
              "naive": "naive task (autoretry_for, retry_backoff=True, 3 retries)"}
    for name, outage in outages.items():
        edges, counts = _bins(outage["attempt_times"], 1.0, window)
        ax.step(edges, counts, where="post", linewidth=1.2,
                label=f"{labels.get(name, name)}: {outage['failing_attempts_window']:,} "
                      f"attempts in {window:g} s")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_xlim(0, window)
    ax.set_ylim(0, max(max(_bins(o["attempt_times"], 1.0, window)[1]) for o in outages.values())
                * 8 + 10)
    ax.set_xlabel("seconds since the events were enqueued")
    ax.set_ylabel("connection attempts / s")
    events = next(iter(outages.values()))["failing_events"]
    ax.set_title(f"Retry storm: {events:,} events to an endpoint that is down, interleaved with "
                 f"as many to a healthy one\n{title}", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
