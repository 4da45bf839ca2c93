"""`dossier tools`: list the agent tools' specs, and call a page perception tool by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import CorpusOpt, FormatOpt, OcrChoice, OcrOpt, OutputFormat, emit_json

__all__ = ["register"]

tools_app = typer.Typer(help="The tools agents call: their specs, and the page perception tools by hand.",
                        no_args_is_help=True)


@tools_app.command("list")
def list_cmd(fmt: FormatOpt = OutputFormat.human) -> None:
    """List every tool an agent can call, with its description and JSON parameters.

    The search and answer tools of the BM25 agent, and Q-Guide's five page perception
    tools. `--format json` prints the specs in the function-calling shape chat templates use.

    Example:
        $ dossier tools list
        search              Search every page of the collection with BM25; ...
        answer              Give the final answer as a list of short strings ...
        text_recovery       Read the text of a page region in reading order ...
    """
    from engine.agents.protocol import answer_spec, search_spec
    from tools.perception import PERCEPTION_TOOLS
    from tools.schema import ToolRegistry

    registry = ToolRegistry([search_spec(), answer_spec(), *PERCEPTION_TOOLS])
    if fmt is OutputFormat.json:
        emit_json(registry.to_json())
        return
    for spec in registry:
        typer.echo(f"{spec.name:<19} {spec.description}")
        typer.echo(f"{'':<19} parameters: {', '.join(spec.parameters.get('properties', {}))}")


@tools_app.command("call")
def call_cmd(
    corpus: CorpusOpt,
    name: Annotated[str, typer.Argument(help="Tool name (see `dossier tools list`).")],
    arguments: Annotated[str, typer.Argument(help='Arguments as JSON, e.g. \'{"document": "memo", "page": 1}\'.')],
    save_images: Annotated[Path | None, typer.Option(help="Folder to save image content (visual_detail crops).")] = None,
    ocr: OcrOpt = OcrChoice.auto,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Call one page perception tool and print its grounded observation.

    Any failure (unknown document, page out of range, region off the page) comes back as an
    observation with `error` set, exactly as an agent would see it.

    Example:
        $ dossier tools call --corpus demo/corpus text_recovery '{"document": "harbor-cafe-menu", "page": 2, "region": [0, 0, 1, 0.3]}'
        {"tool": "text_recovery", "document": "harbor-cafe-menu", "page": 2, "region": [0.0, 0.0, 1.0, 0.3],
         "content": {"text": "Harbor Cafe - Drinks\\nEspresso $3.00 ...", ...}}
    """
    from tools.errors import DossierError
    from tools.perception import PerceptionToolkit

    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as err:
        raise DossierError(f"arguments are not valid JSON ({err.msg} at column {err.colno}): {arguments}") from None
    observation = PerceptionToolkit(corpus, ocr=None if ocr is OcrChoice.none else ocr.value).call(name, args)
    out = observation.to_json(images="placeholder")
    if save_images is not None and observation.images:
        save_images.mkdir(parents=True, exist_ok=True)
        out["saved_images"] = []
        for i, image in enumerate(observation.images, start=1):
            path = save_images / f"{name}-{i}.png"
            image.save(path)
            out["saved_images"].append(str(path))
    if fmt is OutputFormat.json:
        emit_json(out)
    else:
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
    if not observation.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")
