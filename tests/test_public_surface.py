"""The package's public names are pinned: adding or removing one is a deliberate change here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import context_summarizer
from context_summarizer.core import errors

# Each public name, under the module that defines it (or, for the stores, the package holding
# them): the pin covers where a name comes from as well as that it is public.
PUBLIC_BY_MODULE = {
    "context_summarizer.core.checkpoints": ["Checkpoint"],
    "context_summarizer.core.codecs.responses_compaction": ["BadCompactionItem"],
    "context_summarizer.core.config": ["CompactionConfig", "PinRule"],
    "context_summarizer.core.errors": [
        "BudgetExceeded",
        "ConfigurationError",
        "ConversionError",
        "InvalidConversation",
        "HistoryNotInRequest",
        "LeaseLost",
        "ReplyReserveTooLarge",
        "StoreUnavailable",
        "SummarizerError",
        "SummaryFailed",
        "TokenizerUnavailable",
        "UnknownModelError",
    ],
    "context_summarizer.core.results": [
        "CompactionEvent",
        "PrepareResult",
        "SummarizeCall",
        "SummaryOutcome",
        "TokenReport",
    ],
    "context_summarizer.core.rewards": ["Reward"],
    "context_summarizer.evaluation.runner": ["RunConfigMismatch"],
    "context_summarizer.library.manager": ["ContextManager"],
    "context_summarizer.library.wrapping": ["wrap"],
    "context_summarizer.rewards": ["SummaryReward", "reward"],
    "context_summarizer.stores": ["MemoryStore", "RedisStore", "SQLiteStore", "Store"],
}
PUBLIC = sorted(name for names in PUBLIC_BY_MODULE.values() for name in names)
HOME = {name: module for module, names in PUBLIC_BY_MODULE.items() for name in names}


def test_all_is_pinned() -> None:
    assert sorted(context_summarizer.__all__) == PUBLIC
    assert len(set(context_summarizer.__all__)) == len(context_summarizer.__all__)


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_is_the_object_its_module_defines(name: str) -> None:
    module = importlib.import_module(HOME[name])
    value = getattr(context_summarizer, name)
    assert value is getattr(module, name)
    # Defined there (the stores: in a submodule of the package), not merely imported there.
    assert value.__module__.startswith(module.__name__)


def test_exports_table_and_all_agree() -> None:
    assert sorted(context_summarizer._EXPORTS) == sorted(context_summarizer.__all__)


def test_dir_lists_every_public_name() -> None:
    assert set(PUBLIC) <= set(dir(context_summarizer))


def test_every_error_class_is_exported() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }
    assert defined
    assert defined <= set(context_summarizer.__all__)


def test_every_summarizer_error_anywhere_in_the_package_is_exported() -> None:
    # The error tree is public wherever a class of it is defined (the evaluator's own too).
    found = {}
    for info in pkgutil.walk_packages(context_summarizer.__path__, prefix="context_summarizer."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, errors.SummarizerError)
                and value.__module__ == module.__name__
            ):
                found[name] = value
    assert {"RunConfigMismatch", "BudgetExceeded"} <= set(found)
    assert set(found) <= set(context_summarizer.__all__)
    assert all(getattr(context_summarizer, name) is cls for name, cls in found.items())


def test_every_public_name_imports_in_a_fresh_interpreter() -> None:
    # ``from context_summarizer import *`` resolves each lazy name: one that does not import fails
    # here.
    code = (
        "from context_summarizer import *\nprint(sorted(n for n in dir() if not n.startswith('_')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(PUBLIC)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = context_summarizer.no_such_name  # type: ignore[attr-defined]
