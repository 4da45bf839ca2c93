"""Every option name means one type and one default across `dossier`'s commands, and help text shows as written.

The command tree is walked as click builds it (typer.main.get_command, typer's own click), so an option added to any
command, including `dossier run`'s options built from the agents' settings, is checked. A command
whose option truly needs its own default is listed in EXCEPTIONS with the reason; an entry that no
longer differs fails too, so the list stays true.
"""

import re
import typing
from enum import Enum

import pytest
import typer
from typer.core import TyperOption
from rich.text import Text
from typer.testing import CliRunner

from engine.cli import options
from engine.cli.main import app

# option name -> {command: why its type or default differs from the other commands'}
EXCEPTIONS = {
    "--kv-cache-gib": {
        "bench engine": "4 GiB: the 32 default sessions' histories stay cached, the reuse it measures",
        "bench serve": "1 GiB: the documented workload's, the same for every server",
    },
    "--threads": {
        "bench quant": "a fixed 2 for every engine, so their tok/s compare",
        "bench bm25": "the multi-thread figure's fixed 2",
    },
    "--device": {
        "bench quant": "cpu: the bound it reports is the CPU's copy bandwidth",
        "search": "where BM25 is scored, not a model's device: cpu is fastest one query at a time",
        "retrieval-eval": "where BM25 is scored, as in search",
    },
    "--dtype": {"bench maxsim": "the page vectors' storage, not a model's dtype"},
    "--quantization": {"bench engine": "none: the engine is compared with HF generate on the same weights (an int8 "
                                       "engine's tokens would differ from the peer's)"},
    "--deterministic": {"serve": "off: a server trades batch invariance for speed unless asked (docs/determinism.md)",
                        "bench engine": "off: the engine's speed figures are the default mode's; the mode is measured "
                                        "apart (benchmarks/bench_deterministic.py)",
                        "bench serve": "off, as `dossier serve`"},
    "--model": {"retrieval-eval": "optional: without it no model writes the first queries"},
    "--k": {"bench serve": "3 pages: the documented workload"},
    "--max-iterations": {"bench serve": "4 turns: the documented workload"},
    "--page-chars": {"bench serve": "500 characters: the documented workload"},
    "--max-tokens": {"train queries": "the longest training pair, not the tokens of a reply"},
    "--new-tokens": {"bench quant": "the continuation compared per prompt, not bench engine's tokens per turn"},
    "--image-max-pixels": {"bench engine": "smaller pages than an agent run's, as the benchmark's figures were "
                                           "measured"},
    "--heldout-share": {"train queries": "0.2 since the command was written; 0.3 would change which questions "
                                         "train a reproduced adapter"},
    "--repeats": {"bench maxsim": "p50 over 30 calls, where bench bm25 keeps the best of 5 repeats"},
    "--peers": {"bench serve": "HTTP servers, where bench engine's peers are HF generate loops"},
    "--mode": {
        "retrieval-eval": "bag: the questions are natural language, not the query language",
        "bench serve": "the turn format (text or tools), not a search mode",
    },
    "--port": {"studio": "another server than `dossier serve`: both can run at their defaults"},
    "--workers": {"ingest": "extraction processes (0: one per core), not Ray workers"},
    "--trajectories": {"eval score": "one trajectories file, where train takes several runs"},
    "--calibration": {"run": "--agent qguide's gate calibration, a run directory kept as text in run.json (its "
                             "setting is engine/agents/qguide/settings.py's), not the judge's calibration JSON"},
}

# Shared options defined once in engine/cli/options.py: the default every other command must give.
SHARED_DEFAULTS = {
    "--model": options.MODEL, "--device": options.DEVICE, "--dtype": options.DTYPE, "--threads": options.THREADS,
    "--kv-cache-gib": options.KV_CACHE_GIB, "--attention": options.ATTENTION,
    "--max-batched-tokens": options.MAX_BATCHED_TOKENS, "--quantization": options.QUANTIZATION, "--format": "human",
    "--corpus": None, "--limit": None, "--ocr": "auto",
}
SHARED_ALIASES = {
    "--model": options.ModelOpt, "--device": options.DeviceOpt, "--dtype": options.DtypeOpt,
    "--threads": options.ThreadsOpt, "--kv-cache-gib": options.KvCacheOpt, "--attention": options.AttentionOpt,
    "--max-batched-tokens": options.MaxBatchedTokensOpt, "--quantization": options.QuantizationOpt,
    "--format": options.FormatOpt, "--corpus": options.CorpusOpt, "--limit": options.LimitOpt,
    "--ocr": options.OcrOpt,
}


def _commands(command, path: tuple[str, ...] = ()):
    """(path, command) of every command and group under `command`, groups included (typer's own click classes)."""
    yield path, command
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, path + (name,))


def _leaf_options():
    """{option name (--long): {command path: option}} over every command that runs (not the groups)."""
    found: dict[str, dict[str, TyperOption]] = {}
    for path, command in _commands(typer.main.get_command(app)):
        if hasattr(command, "commands"):
            continue
        for param in command.params:
            if isinstance(param, TyperOption) and param.name != "help":
                for name in (o for o in param.opts if o.startswith("--")):  # every long name: an alias counts too
                    found.setdefault(name, {})[" ".join(path)] = param
    return found


def _signature(option: TyperOption) -> tuple:
    """What must agree: the value type (choices included), flag or value, repeatable, and the default."""
    name = type(option.type).__name__  # click's type of the value (a range of ints is an int), and its choices
    kind = ({"IntRange": "IntParamType", "FloatRange": "FloatParamType"}.get(name, name),
            tuple(getattr(option.type, "choices", None) or ()))
    default = option.default.value if isinstance(option.default, Enum) else option.default
    return kind, option.is_flag, option.multiple, default


def test_every_option_name_has_one_type_and_one_default_except_the_listed():
    problems = []
    found = _leaf_options()
    assert len(found["--format"]) >= 20, "the walk missed commands"  # the test must not pass on an empty tree
    for name, by_command in sorted(found.items()):
        excepted = EXCEPTIONS.get(name, {})
        for command in excepted:
            if command not in by_command:
                problems.append(f"EXCEPTIONS lists {name} of {command!r}, which has no such option")
        house = {command: _signature(opt) for command, opt in by_command.items() if command not in excepted}
        if len(set(house.values())) > 1:
            lines = "; ".join(f"{command}: {sig}" for command, sig in sorted(house.items()))
            problems.append(f"{name} differs across commands (type, flag, repeatable, default): {lines}")
            continue
        for command in excepted:
            if command in by_command and house and _signature(by_command[command]) in house.values():
                problems.append(f"EXCEPTIONS lists {name} of {command!r}, but it no longer differs: drop the entry")
    assert not problems, "\n".join(problems)


def test_the_shared_options_come_from_options_py_with_its_default():
    found = _leaf_options()
    problems = []
    for name, alias in SHARED_ALIASES.items():
        base_help = typing.get_args(alias)[1].help
        for command, option in found[name].items():
            if command in EXCEPTIONS.get(name, {}):
                continue
            if not (option.help or "").startswith(base_help):
                problems.append(f"{command} {name} is not engine/cli/options.py's (help {option.help!r})")
            default = option.default.value if isinstance(option.default, Enum) else option.default
            if default != SHARED_DEFAULTS[name]:
                problems.append(f"{command} {name} defaults to {default!r}, not {SHARED_DEFAULTS[name]!r}")
    assert not problems, "\n".join(problems)
    # the option this issue started from: one definition for the engine commands
    assert {"run", "serve", "chat", "bench engine", "bench serve", "bench quant"} <= set(found["--threads"])
    assert {"run", "serve", "chat", "bench engine", "bench serve"} <= set(found["--kv-cache-gib"])


def test_an_excepted_benchmark_says_why_in_its_help():
    found = _leaf_options()
    for name, command in (("--threads", "bench quant"), ("--kv-cache-gib", "bench serve"),
                          ("--kv-cache-gib", "bench engine"), ("--device", "bench quant"), ("--threads", "bench bm25")):
        help_text = found[name][command].help
        assert " here, not " in help_text, f"{command} {name}: the help does not say why its default differs"


def _help_texts():
    """(where, text) of every help string the CLI renders: commands, groups and their options and arguments."""
    for path, command in _commands(typer.main.get_command(app)):
        where = "dossier " + " ".join(path)
        for text in (command.help, command.epilog, getattr(command, "short_help", None)):
            if text:
                yield where, text
        for param in command.params:
            if getattr(param, "help", None):
                yield f"{where} {param.name}", param.help


def test_no_help_text_loses_characters_to_rich_markup():
    lost, texts = [], list(_help_texts())
    assert len(texts) > 200, "the walk missed help texts"
    for where, text in texts:
        shown = Text.from_markup(text).plain  # what typer's rich mode does with the text
        if shown != text.replace("\\[", "["):
            lost.append(f"{where}: {text!r} shows as {shown!r}")
    assert not lost, "escape these brackets (engine.cli.options.rich_escape or pip_extra):\n" + "\n".join(lost)


def _rendered_help(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    return " ".join(line.strip(" │╭╮╰╯─") for line in text.splitlines())  # one line: wrapped help rejoined


@pytest.mark.parametrize("args, shown", [
    (["bench", "serve"], "pip install 'dossier[bench-peers]'"),
    (["bench", "serve"], "'dossier[quant]'"),
    (["bench", "engine"], "'dossier[quant]'"),
    (["run"], "pip install 'dossier[ray]'"),
    (["run"], "'dossier[quant]'"),
    (["serve"], "pip install 'dossier[ray]'"),
    (["serve"], "'dossier[quant]'"),
    (["chat"], "'dossier[quant]'"),
    (["chat"], "[prefilled 37 · cached 0 · generated 8 · 1.5 s]"),
])
def test_help_shows_bracketed_text_as_written(args, shown):
    assert shown in _rendered_help(args)


@pytest.mark.parametrize("command", [["bench", "quant"], ["bench", "bm25"]])
def test_a_benchmark_that_pins_threads_refuses_auto_before_any_work(command):
    from tools.errors import DossierError

    result = CliRunner().invoke(app, [*command, "--threads", "auto"])
    assert isinstance(result.exception, DossierError), result.output
    assert f"{' '.join(command)} --threads needs a number, not 'auto'" in str(result.exception)
