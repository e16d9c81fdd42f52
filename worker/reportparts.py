"""Parts of the trial report that the modules below worker/report.py fill in:
the torch allocator's figures (a phase's and the trial's), the intra-op threads
(`threads`), the machine and its software (`env`), Slurm's jobs (`slurm`), the
model built (`model`) and its full depth (`full_depth`). Part of
worker/report.py's one definition, kept apart so that a lower module can name
what it returns; the validator checks them alike.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from worker.limits import AMOUNT, BYTES, COUNT, MAX_ATTEMPTS, MAX_CORES, SECONDS, TIME
from worker.shape import REQUIRED, Most

Object = dict[str, Any]  # a JSON object whose keys the schema leaves open


class Peaks(TypedDict, total=False):
    """The torch allocator's figures (CUDA only; null where it cannot measure):
    in a phase, peaks reset at its start and the rest at its end."""
    peak_allocated: Annotated[int | None, BYTES]
    peak_reserved: Annotated[int | None, BYTES]
    allocated: Annotated[int | None, BYTES]
    reserved: Annotated[int | None, BYTES]


class Totals(Peaks, total=False):
    """The allocator's figures over the whole trial (worker/probes/allocator.py)."""
    num_alloc_retries: Annotated[int | None, COUNT]
    num_ooms: Annotated[int | None, COUNT]

class Threads(TypedDict, total=False):
    """The trial's intra-op threads (worker/threads.py)."""
    threads: Annotated[int, COUNT]
    cores: Annotated[list[int], Most(MAX_CORES)]
    pinned: bool
    free_cores: Annotated[list[int], Most(MAX_CORES)]
    usable_cores: Annotated[list[int], Most(MAX_CORES)]
    wait_policy: str
    chosen_by: Literal["worker", "user"]
    why: str
    torch_threads: Annotated[int | None, COUNT]  # what the child's torch ran with
    cores_seen: Annotated[list[int], Most(MAX_CORES)] | None
    torch_threads_method: str


class FullDepth(TypedDict, total=False):
    """Arithmetic, not measured: sizes may exceed what one machine holds."""
    preset: str            # llm-infer's preset= ...
    model: str             # ... or an hf-* trial's model=
    source: str
    layers: Annotated[int, COUNT, REQUIRED]
    trial_layers: Annotated[int, COUNT, REQUIRED]
    params: Annotated[int, AMOUNT, REQUIRED]
    dtype: Annotated[str, REQUIRED]
    weight_bytes: Annotated[float, AMOUNT, REQUIRED]
    kv_cache_bytes: Annotated[float, AMOUNT, REQUIRED]
    kv_formula: Annotated[str, REQUIRED]
    batch: Annotated[int | None, COUNT]
    published_params: Annotated[int | None, AMOUNT]
    published_text: str | None
    relative_error: float | None
    sizing: Object | None
    what: str


class Model(TypedDict, total=False):
    name: Annotated[str, REQUIRED]
    source: Annotated[str, REQUIRED]
    source_note: Object | None     # the same as a message, for the reader's language
    kind: str                      # preset, file, hub
    architecture: str | None       # the class transformers built
    model_type: str | None
    layers: Annotated[int, COUNT, REQUIRED]
    full_layers: Annotated[int, COUNT, REQUIRED]
    attn: str | None
    transformers: str | None       # its version
    weights: Annotated[str, REQUIRED]
    import_rss_bytes: Annotated[int | None, BYTES]
    import_what: str


class CodeVersion(TypedDict, total=False):
    """A recipe's code: git in its directory (worker/codeversion.py)."""
    code_commit: str | None
    code_dirty: bool | None
    code_version: str


class Built(TypedDict, total=False):
    """A recipe's own environment (worker/launcher/envbuild.py's marker)."""
    key: str
    built_at: Annotated[float | None, TIME]
    build_seconds: Annotated[float | None, SECONDS]
    builder: str | None
    python: str | None
    torch: str | None              # the worker's version linked in; null: the recipe's own
    torch_pins_not_used: list[str]
    packages: dict[str, str]       # name -> version, from pip list
    cached: bool


class Env(CodeVersion, total=False):
    device: str
    host: str | None               # null: Slurm did not name the node
    python: str | None             # null: a recipe's probe did not report it
    torch: str | None
    cuda: str | None
    cpu: str
    os: str
    executable: str
    gpu_name: str | None
    gpu_count: Annotated[int | None, COUNT]
    gpu_memory: Annotated[int | None, BYTES]
    driver: str | None
    recipe_cwd: str                # a recipe: where it ran ...
    recipe_repo: str | None        # ... and the repository and commit it was cloned from
    recipe_commit: str
    environment: Built | None


class SlurmJob(TypedDict, total=False):
    job_id: str
    state: str                     # Slurm's end state, COMPLETED, OUT_OF_MEMORY, ...
    node: str | None
    exit_code: str | None
    outcome: str | None            # the error class the state gives the try; null: none
    submit_s: Annotated[float | None, SECONDS]
    queue_wait_s: Annotated[float | None, SECONDS]
    run_s: Annotated[float | None, SECONDS]


class Slurm(TypedDict, total=False):
    partition: str
    account: str | None
    job_id: str | None             # the last submission's; null: sbatch refused it
    state: str                     # ... its state, or REFUSED
    node: str | None
    queue_wait_s: Annotated[float | None, SECONDS]
    run_s: Annotated[float | None, SECONDS]
    wall_s: Annotated[float | None, SECONDS]
    jobs: Annotated[list[SlurmJob], Most(MAX_ATTEMPTS)]
