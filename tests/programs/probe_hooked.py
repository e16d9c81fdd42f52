"""Test program for the probe's hook phases on the allocator: functions
wrapped the way trialbot_hooks wraps transformers' calls, with faketorch's
known peaks (no GPU, no transformers needed)."""
import sitecustomize  # the injected probe, first on PYTHONPATH
import torch  # the fake one
import trialbot_hooks

hooks = trialbot_hooks.Hooks(sitecustomize._probe)


def load():
    torch.cuda.set(1000)


def call(peak):
    torch.cuda.set(peak)
    torch.cuda.set(1000)


load = hooks.wrap("from_pretrained", load)
call = hooks.wrap("generate", call)
load()
call(3000)  # the warmup unit
for peak in (2000, 4000, 2500):
    call(peak)
torch.cuda.set(9000)  # after the last unit: not the run's
torch.cuda.set(1000)
