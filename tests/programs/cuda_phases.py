"""GPU check program for recipes (scripts/gpu-check): allocates known tensors in
marked phases and prints its own torch.cuda.max_memory_allocated per phase, so
the injected probe's per-phase peaks can be compared with the program's own."""
import torch

assert torch.cuda.is_available(), "this program needs CUDA"
torch.cuda.init()
sizes = {"weights": 1024, "data": 256, "run": 2048}  # MiB allocated in each phase
keep = []
for name, mib in sizes.items():
    print(f"TRIALBOT_PHASE {name}", flush=True)
    torch.cuda.synchronize()
    x = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    if name == "run":
        del x  # a transient peak inside the phase
    else:
        keep.append(x)
    torch.cuda.synchronize()
    print(f"SELF_PEAK {name} {torch.cuda.max_memory_allocated()}", flush=True)
