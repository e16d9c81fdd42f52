"""For programs that would rather call than print: `import trialbot_probe;
trialbot_probe.phase("weights")` prints the same `TRIALBOT_PHASE weights` line
that the worker and the injected probe watch for. Works without trialbot too."""
import sys


def phase(name: str) -> None:
    print(f"TRIALBOT_PHASE {name}", flush=True)
    sys.stdout.flush()
