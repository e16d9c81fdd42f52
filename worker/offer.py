"""What a worker offers beyond its machine, read once at its start: the
admin's recipe file (`--recipes FILE`) and the Hugging Face configs it may
build (`--models DIR`, `--hub`). `trialbot-worker` and the bot's embedded
worker (`trialbot console`, `trialbot serve --local-worker`) read them here
alike, so a bad file is refused in the same words and transformers is found
the same way (worker/models.py capabilities)."""
from __future__ import annotations

import os

from worker import models
from worker.i18n import _


class StartError(ValueError):
    """A --recipes or --models the worker refuses to start with; the message
    names the file or directory and what to change."""


def add_options(parser, recipes_help: str) -> None:
    """--recipes, --models and --hub, as every worker takes them."""
    parser.add_argument("--recipes", metavar="FILE", help=recipes_help)
    parser.add_argument("--models", action="append", default=[], metavar="DIR",
                        help=_("a directory of Hugging Face configs (NAME/config.json or "
                             "NAME.json) that hf-infer/hf-train may build as model=NAME "
                             "(repeatable); weights are random, never read"))
    parser.add_argument("--hub", action="store_true",
                        help=_("let hf-* trials fetch a model's config.json (config only) from "
                             "the Hugging Face hub by id: model=org/name"))


def recipes(path: str | None) -> dict:
    """The recipe file's recipes by name ({} without one); StartError names
    the line that is wrong."""
    if not path:
        return {}
    from worker import recipes as book
    try:
        return book.load(path)
    except book.RecipeError as exc:
        raise StartError(str(exc)) from None


def check_models(dirs: list[str]) -> None:
    bad = [d for d in dirs if not os.path.isdir(d)]
    if bad:
        raise StartError(_("--models {path} is not a directory; give a directory of "
                           "config.json files", path=repr(bad[0])))


def allow_models(dirs: list[str], hub: bool) -> None:
    """The trial's child reads these (worker/models.py): set once, inherited."""
    os.environ[models.ENV_DIRS] = os.pathsep.join(os.path.abspath(d) for d in dirs)
    os.environ[models.ENV_HUB] = "1" if hub else "0"


def hf() -> dict:
    """What the worker registers for hf-* routing, from what allow_models set
    (none: only the shipped presets, and the hub closed)."""
    return models.capabilities(models.allowed_dirs(), models.hub_allowed())
