"""SIGUSR1 (Slurm's --signal=USR1@T) and SIGTERM (preemption) ask every rank to stop: the flag
travels with the gradients (DistributedOptimizer's exchange), so every rank sees the request at
the same step and checkpoints it (Checkpoint.step)."""
import signal
import threading

_state = {"requested": 0, "agreed": False, "watching": False, "exchanging": False}


def watch_signals():
    if _state["watching"] or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    _state["watching"] = True


def _on_signal(signum, frame):
    _state["requested"] = signum


def requested():
    return 1.0 if _state["requested"] else 0.0


def settle(any_rank_asked):
    """After an exchange: whether some rank was asked to stop (the same answer on every rank)."""
    _state["agreed"] = bool(any_rank_asked)


def agreed():
    # Without an exchange (no DistributedOptimizer) this process's own request decides.
    return _state["agreed"] or (_state["requested"] and not _state["exchanging"])


def exchanging():
    _state["exchanging"] = True


def signal_name():
    try:
        return signal.Signals(_state["requested"]).name if _state["requested"] else "from a peer"
    except ValueError:
        return str(_state["requested"])
