"""Phases of unmodified Hugging Face code, found by hooks (loaded by the
injected probe, sitecustomize.py).

When the program itself imports them, these are wrapped, each right after its
module's own code ran (an import hook: nothing is imported here, so a program
that never uses transformers pays one dict lookup per import):

    PreTrainedModel.from_pretrained (so AutoModel*.from_pretrained)  -> weights
    PreTrainedTokenizerBase.from_pretrained and __call__,
    datasets.load_dataset                                           -> data
    GenerationMixin.generate, a PreTrainedModel's forward (its call) -> one run unit

Only the outermost hooked call counts: a forward inside generate or inside
another model's forward, a tokenizer call inside from_pretrained, is part of
the call around it. The first unit is `warmup`, the later ones `run`; the
probe (sitecustomize.py) decides the phases and keeps the units. Each unit
names the model object it ran on (its class and a number per instance, in
the order first used): a speculative decoder's draft and target forwards are
two distributions.
"""
import sys
import threading
import time
import weakref

PHASE_OF = {"from_pretrained": "weights", "tokenizer": "data", "load_dataset": "data"}


class Hooks:
    def __init__(self, probe):
        self.probe = probe
        self.local = threading.local()  # depth of hooked calls, per thread
        self.names = weakref.WeakKeyDictionary()  # model object -> "LlamaForCausalLM#1"
        self.counts = {}  # class name -> instances named so far

    def install(self):
        sys.meta_path.insert(0, _Finder(self))
        for name, patch in PATCHES.items():  # imported before us (a chained sitecustomize)
            if name in sys.modules:
                patch(self, sys.modules[name])

    def wrap(self, kind, fn):
        def hooked(*args, **kwargs):
            if getattr(self.local, "depth", 0):
                return fn(*args, **kwargs)  # inside another hooked call: part of it
            self.local.depth = 1
            try:
                if kind in PHASE_OF:
                    _quietly(self.probe.hook_phase, PHASE_OF[kind], "hook:" + kind)
                    return fn(*args, **kwargs)
                return self._unit(kind, fn, args, kwargs)
            finally:
                self.local.depth = 0
        hooked.__wrapped__ = fn
        hooked.__name__, hooked.__doc__ = getattr(fn, "__name__", kind), fn.__doc__
        hooked.__trialbot_hooked__ = True
        return hooked

    def _unit(self, kind, fn, args, kwargs):
        probe = self.probe
        _quietly(probe.hook_phase, "run" if probe.hooked else "warmup", "hook:" + kind)
        phase = probe.phase
        model = self._name(args[0]) if args else None
        probe.sync()  # queued GPU work before the unit is not the unit's
        t0, p0 = time.time(), time.perf_counter()
        out = fn(*args, **kwargs)
        probe.sync()  # the unit's own GPU work is
        _quietly(probe.unit, kind, phase, t0, time.perf_counter() - p0, model)
        return out

    def _name(self, model):
        """The model's name in the report, counted once per instance (outside
        the unit's time); None for an object that cannot be told apart."""
        try:
            name = self.names.get(model)
            if name is None:
                cls = type(model).__name__
                self.counts[cls] = self.counts.get(cls, 0) + 1
                name = self.names[model] = f"{cls}#{self.counts[cls]}"
                _quietly(self.probe.model, name, cls, _params(model))
            return name
        except TypeError:  # not weakly referable or not hashable
            return None


def _params(model):
    try:
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # noqa: BLE001 - a model without torch parameters: not counted
        return None


def _quietly(fn, *args):
    """The probe's bookkeeping (a file it writes): a failure there measures
    less, and must never fail the program's own call."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - see above
        pass


def _patch_models(hooks, module):
    cls = getattr(module, "PreTrainedModel", None)
    if cls is not None:
        _patch_classmethod(hooks, cls, "from_pretrained", "from_pretrained")
        # A model's call is nn.Module.__call__, which runs hooks and then forward:
        # wrapping the call (not forward) times what the program's `model(x)` costs.
        _patch_method(hooks, cls, "__call__", "forward")


def _patch_tokenizers(hooks, module):
    cls = getattr(module, "PreTrainedTokenizerBase", None)
    if cls is not None:
        _patch_classmethod(hooks, cls, "from_pretrained", "tokenizer")
        _patch_method(hooks, cls, "__call__", "tokenizer")


def _patch_generate(hooks, module):
    cls = getattr(module, "GenerationMixin", None)
    if cls is not None:
        _patch_method(hooks, cls, "generate", "generate")


def _patch_datasets(hooks, module):
    fn = getattr(module, "load_dataset", None)
    if fn is not None and not getattr(fn, "__trialbot_hooked__", False):
        module.load_dataset = hooks.wrap("load_dataset", fn)


def _patch_method(hooks, cls, name, kind):
    fn = getattr(cls, name, None)
    if fn is not None and not getattr(fn, "__trialbot_hooked__", False):
        setattr(cls, name, hooks.wrap(kind, fn))


def _patch_classmethod(hooks, cls, name, kind):
    raw = cls.__dict__.get(name)
    if isinstance(raw, classmethod) and not getattr(raw.__func__, "__trialbot_hooked__", False):
        setattr(cls, name, classmethod(hooks.wrap(kind, raw.__func__)))


PATCHES = {
    "transformers.modeling_utils": _patch_models,
    "transformers.tokenization_utils_base": _patch_tokenizers,
    "transformers.generation.utils": _patch_generate,
    "datasets.load": _patch_datasets,
}


class _Finder:
    """Finds nothing itself: for the modules in PATCHES it asks the finders
    after it and makes that module's own loader patch it once it has run. The
    loader stays the module's own (its get_source, its resources still work)."""

    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, name, path=None, target=None):
        patch = PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, hooks = loader.exec_module, self.hooks

        def exec_module(module):
            vars(loader).pop("exec_module", None)  # once: a loader may serve other modules
            run(module)
            if getattr(module, "__name__", None) == name:
                try:
                    patch(hooks, module)
                except Exception:  # noqa: BLE001 - an unknown version: measure less, never break it
                    pass
        try:
            loader.exec_module = exec_module  # this loader instance only
        except AttributeError:  # a loader without an instance dict: not hooked
            pass
        return spec
