"""Measurement trackers. In-process ones (`allocator`) run inside the trial's
child; sampling ones (`host`, `nvml`) run in the worker, outside the measured
process, and share one interface: `sample(pids)` at each tick, `result()`
for the byte fields, and `method` saying how each field was measured."""
