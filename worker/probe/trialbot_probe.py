"""For programs that would rather call than print: `import trialbot_probe;
trialbot_probe.phase("weights")` prints the same `TRIALBOT_PHASE weights` line
that the worker and the injected probe watch for, and `trialbot_probe.unit(
"prompt")` the `TRIALBOT_UNIT prompt` line that begins one run of a recipe
whose `unit = "mark:prompt"`:

    for prompt in prompts:
        with trialbot_probe.unit("prompt"):   # ends with TRIALBOT_UNIT_END
            answer(prompt)

Works without trialbot too."""
import sys


def phase(name: str) -> None:
    print(f"TRIALBOT_PHASE {name}", flush=True)
    sys.stdout.flush()


class unit:  # noqa: N801 - reads as a call: unit("prompt") or with unit("prompt"):
    """Begins a marked unit; as a context manager, ends it too. Without the
    `with`, it runs to the next unit, the next phase mark or the exit."""

    def __init__(self, name: str):
        print(f"TRIALBOT_UNIT {name}", flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        unit_end()
        return False


def unit_end() -> None:
    print("TRIALBOT_UNIT_END", flush=True)
