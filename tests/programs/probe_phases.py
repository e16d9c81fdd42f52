"""Test program for the injected probe: three phases with the same name and
known allocator peaks, then an unmarked tail."""
import torch  # the fake one, first on PYTHONPATH in the test

for peak in (100, 5000, 300):
    print("TRIALBOT_PHASE batch", flush=True)
    torch.cuda.set(peak)
    torch.cuda.set(10)
